"""`symvram validate`: the estimate against PyTorch's own allocation of the same step (tiny models)."""
import json

import pytest

from symvram.cli import main
from symvram import validate

TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512}
TINY_QWEN = {**TINY, "model_type": "qwen2", "tie_word_embeddings": True, "vocab_size": 1200}

needs_torch = pytest.mark.skipif(not validate.is_available(), reason="optional extra 'validate' not installed")


def _config(tmp_path, cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


@needs_torch
@pytest.mark.parametrize("cfg, args", [
    (TINY, ["--method", "lora", "--rank", "8", "--adapter-dtype", "fp32", "--state-dtype", "fp32",
            "--batch", "3", "--seq", "40"]),
    (TINY, ["--method", "lora", "--rank", "8", "--adapter-dtype", "bf16", "--state-dtype", "bf16",
            "--batch", "2", "--seq", "48", "--grad-checkpointing"]),
    (TINY_QWEN, ["--method", "full", "--state-dtype", "bf16", "--batch", "2", "--seq", "32",
                 "--attention", "eager"]),
])
def test_validate_measures_what_it_estimates(tmp_path, capsys, cfg, args):
    assert main(["validate", _config(tmp_path, cfg), *args, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    peak = out["rows"]["peak"]
    # the measurement is PyTorch's own count of live tensor bytes: the estimate must be within 1 %
    assert abs(peak["error"]) < 0.01, out
    assert out["rows"]["params"]["estimate"] == out["rows"]["params"]["measured"]
    # FlopCounterMode in a run of its own: the FLOPs ledger within 0.5 % per phase (it is exact on these)
    assert all(abs(row["error"]) < 0.005 for row in out["flops"].values()), out["flops"]
    # the ledger's allocation schedule and the traced one through the caching-allocator replay: the same
    # reserved peak (tiny tensors: whole 2 MiB small-pool segments on both sides)
    assert all(abs(row["error"]) < 0.01 for row in out["allocator"].values()), out["allocator"]


@pytest.mark.parametrize("args, needle", [
    (["--method", "full", "--optimizer", "lion"], "not measured here"),
    (["--method", "full", "--gpus", "2", "--zero", "2"], "one device"),
    (["--method", "full", "--state-dtype", "fp32"], "parameter's dtype"),
])
def test_validate_refuses_what_it_cannot_measure(tmp_path, capsys, args, needle):
    assert main(["validate", _config(tmp_path, TINY), *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


@needs_torch
def test_validate_prints_its_versions_beside_the_ledgers(tmp_path, capsys, monkeypatch):
    """The versions it ran with and the ledger's, side by side; a warning line per difference."""
    from symvram.validate import LEDGER_VERSIONS, measure

    args = ["validate", _config(tmp_path, TINY), "--method", "lora", "--rank", "4", "--seq", "16"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "; the ledger follows torch 2.13.0, transformers 5.24.0, peft 0.21.2" in out
    monkeypatch.setattr(measure, "_versions", lambda: {"torch": "2.13.0", "transformers": "5.99.0", "peft": "0.21.2"})
    assert main([*args, "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["ledger_versions"] == LEDGER_VERSIONS
    assert err == ("symvram: warning: measured with transformers 5.99.0; the ledger follows 5.24.0: a difference "
                   "from the estimate may come from the library\n")


def test_validate_accepts_newer_libraries():
    """The validate extra takes the ledger's versions as a minimum, so it installs into a training environment."""
    import tomllib
    from pathlib import Path

    extra = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["validate"]
    assert extra == [f"{k}>={v}" for k, v in validate.LEDGER_VERSIONS.items()]


@needs_torch
def test_validate_measures_bitsandbytes_8bit_adamw(tmp_path, capsys):
    pytest.importorskip("bitsandbytes")
    args = ["validate", _config(tmp_path, TINY), "--method", "full", "--optimizer", "adamw8bit", "--batch", "2",
            "--seq", "32", "--format", "json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows"]["optimizer_state"]["error"] == 0 and abs(out["rows"]["peak"]["error"]) < 1e-4, out
    assert out["versions"]["bitsandbytes"] == "0.50.2"


@needs_torch
def test_validate_measures_qlora_as_run(tmp_path, capsys):
    """bitsandbytes NF4 + prepare_model_for_kbit_training + PEFT's reentrant checkpointing (the torch stack)."""
    pytest.importorskip("bitsandbytes")
    args = ["validate", _config(tmp_path, TINY), "--method", "qlora", "--rank", "8", "--stack", "torch", "--batch",
            "2", "--seq", "32", "--format", "json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["spec"]["method"] == "qlora" and out["spec"]["grad_checkpointing"] is True
    assert out["spec"]["checkpoint_impl"] == "reentrant"
    assert out["rows"]["params"]["error"] == 0 and abs(out["rows"]["peak"]["error"]) < 1e-4, out
