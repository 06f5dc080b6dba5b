"""Bad input, a third look (issue 29): config fields of the wrong type, files that are not files, YAML
that expands, numbers that are not numbers, a file that mixes two tools, a stdout that cannot encode
the tool's characters. Every input is built here; the contract is test_bad_inputs.assert_contract's
(exit 2, one line naming the bad value and what is expected) or a correct answer.
"""
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from symvram.cli import main
from symvram.evaluate import evaluate
from symvram.presets import load_model
from symvram.scenario import MAX_SEQ, Scenario

from test_bad_inputs import LLAMA, assert_contract

ROOT = Path(__file__).resolve().parents[1]
GEMMA3 = {"model_type": "gemma3_text", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 12,
          "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64, "vocab_size": 1000}
SHORT = 600   # no error line is longer (values are quoted as excerpts), and none is cut by the net under them


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv("SYMVRAM_DEBUG", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _run(argv, capsys):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _refused(argv, capsys, fragment):
    rc, out, err = _run(argv, capsys)
    assert_contract(rc, out, err, fragment)
    assert len(err) < SHORT and "(message cut)" not in err, err
    return err


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text if isinstance(text, str) else json.dumps(text))
    return path


# ---------------------------------------------------------------- config.json fields of the wrong type
@pytest.mark.parametrize("base,changes,fragment", [
    (LLAMA, {"model_type": ["llama"]}, "field 'model_type' must be a string"),
    (LLAMA, {"model_type": {"name": "llama"}}, "field 'model_type' must be a string"),
    (LLAMA, {"model_type": 7}, "field 'model_type' must be a string"),
    (GEMMA3, {"layer_types": [["sliding_attention"]] * 12}, "field 'layer_types' item 0"),
    (GEMMA3, {"layer_types": [{"kind": "full"}] * 12}, "field 'layer_types' item 0"),
    (GEMMA3, {"layer_types": ["full_attention"] * 11 + ["chunked_attention"]}, "item 11 must be full_attention"),
    (GEMMA3, {"layer_types": "sliding_attention"}, "field 'layer_types' must be a list"),
    (GEMMA3, {"layer_types": ["full_attention"] * 3}, "one attention kind per layer (12)"),
    (GEMMA3, {"sliding_window_pattern": "six"}, "field 'sliding_window_pattern' must be a positive integer"),
    (GEMMA3, {"sliding_window_pattern": 0}, "field 'sliding_window_pattern' must be a positive integer"),
    (GEMMA3, {"sliding_window_pattern": True}, "field 'sliding_window_pattern' must be a positive integer"),
    (LLAMA, {"text_config": ["x"], "model_type": "llava"}, "field 'text_config' must be an object"),
    (LLAMA, {"_name_or_path": ["org/name"]}, "field '_name_or_path' must be a string"),
    (LLAMA, {"attention_bias": "yes"}, "field 'attention_bias' must be true or false"),
    (LLAMA, {"hidden_size": [4096]}, "field 'hidden_size' must be a positive integer"),
    (LLAMA, {"num_attention_heads": {"n": 32}}, "field 'num_attention_heads' must be a positive integer"),
    (LLAMA, {"model_type": "x" * 100_000}, "is not supported"),
])
def test_config_fields_of_the_wrong_type(base, changes, fragment, tmp_path, capsys):
    path = _write(tmp_path, "config.json", {**base, **changes})
    _refused(["estimate", path], capsys, fragment)


def test_layer_kinds_are_counted_from_the_list_or_the_pattern(tmp_path):
    """12 layers with every 3rd full (transformers' Gemma3TextConfig: sliding unless (i + 1) % pattern == 0):
    8 slide, 2 kinds of rotary base; the same from an explicit list."""
    by_pattern = load_model(str(_write(tmp_path, "a.json", {**GEMMA3, "sliding_window_pattern": 3})))
    kinds = ["sliding_attention", "sliding_attention", "full_attention"] * 4
    by_list = load_model(str(_write(tmp_path, "b.json", {**GEMMA3, "layer_types": kinds})))
    assert dict(by_pattern.extra)["sliding_layers"] == dict(by_list.extra)["sliding_layers"] == 8
    assert dict(by_list.extra)["rope_bases"] == 2
    all_full = load_model(str(_write(tmp_path, "c.json", {**GEMMA3, "layer_types": ["full_attention"] * 12})))
    assert (dict(all_full.extra)["sliding_layers"], dict(all_full.extra)["rope_bases"]) == (0, 1)


# ---------------------------------------------------------------- files that are not regular files
def _cli(args, timeout=60, **env):
    return subprocess.run([sys.executable, "-m", "symvram", *map(str, args)], capture_output=True,
                          encoding=env.get("PYTHONIOENCODING", "utf-8"), timeout=timeout, cwd=ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **env})


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_is_refused_not_read_forever(tmp_path):
    pipe = tmp_path / "run.yml"
    os.mkfifo(pipe)
    for argv in (["estimate", "--from", pipe, "7b"], ["estimate", pipe]):
        r = _cli(argv, timeout=60)     # before: open() waited for a writer, forever
        assert r.returncode == 2 and r.stdout == "", r.stderr
        assert r.stderr.strip().endswith("is a named pipe, not a regular file")


@pytest.mark.parametrize("where", ["--from", "model"])
def test_a_loop_of_symbolic_links_is_refused(where, tmp_path, capsys):
    a, b = tmp_path / "a.yml", tmp_path / "b.yml"
    a.symlink_to(b)
    b.symlink_to(a)
    argv = ["estimate", "--from", a, "7b"] if where == "--from" else ["estimate", a.with_name("a.json")]
    if where == "model":
        a.with_name("a.json").symlink_to(b.with_name("b.json"))
        b.with_name("b.json").symlink_to(a.with_name("a.json"))
    _refused(argv, capsys, "a loop of symbolic links")


@pytest.mark.parametrize("target,fragment", [("dir", "is a directory"), ("/dev/null", "is a character device")])
def test_other_things_that_are_not_files(target, fragment, tmp_path, capsys):
    if target == "/dev/null" and not os.path.exists(target):
        pytest.skip("no /dev/null here")
    path = tmp_path if target == "dir" else target
    _refused(["estimate", "--from", path, "7b"], capsys, fragment)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_output_to_a_named_pipe_is_refused_not_blocked(tmp_path, capsys):
    pipe = tmp_path / "out.txt"
    os.mkfifo(pipe)
    _refused(["estimate", "7b", "-o", pipe, "--force"], capsys, "is a named pipe, not a file")


def test_a_byte_order_mark_is_not_content(tmp_path, capsys):
    """Windows editors start UTF-8 files with U+FEFF: a config.json and a training YAML read as without it."""
    cfg = tmp_path / "config.json"
    cfg.write_bytes(b"\xef\xbb\xbf" + json.dumps(LLAMA).encode())
    run = tmp_path / "run.json"
    run.write_bytes(b"\xef\xbb\xbf" + json.dumps({"output_dir": "o", "per_device_train_batch_size": 3}).encode())
    rc, out, err = _run(["estimate", "--from", run, cfg, "--method", "full", "--format", "json"], capsys)
    assert rc == 0, err
    assert json.loads(out)["inputs"]["batch"] == 3 and load_model(str(cfg)).hidden == 4096


@pytest.mark.parametrize("argv", [["estimate", "a\x00b.json"], ["estimate", "--from", "a\x00b.yml", "7b"],
                                  ["estimate", "7b", "-o", "a\x00b"]])
def test_a_file_name_holding_a_nul_character(argv, capsys):
    """No process gets a NUL in its arguments, but the API and main() can: refused as a name, not a crash."""
    _refused(argv, capsys, "a file name cannot hold a NUL character")


def test_a_named_deepspeed_file_that_is_a_directory(tmp_path, capsys):
    (tmp_path / "ds").mkdir()
    path = _write(tmp_path, "run.yml", "base_model: llama-3-8b\ndeepspeed: ds\n")
    _refused(["estimate", "--from", path], capsys, "is a directory")


# ---------------------------------------------------------------- YAML that expands
def _bomb(levels: int, width: int = 9) -> str:
    """The billion laughs: each anchor a list of ``width`` aliases of the one before (width**levels leaves)."""
    lines = ["l0: &l0 [lol]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def _bounded(argv, capsys, fragment, seconds=10, megabytes=64):
    tracemalloc.start()
    start = time.perf_counter()
    try:
        err = _refused(argv, capsys, fragment)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert time.perf_counter() - start < seconds
    assert peak < megabytes << 20, peak
    return err


@pytest.mark.parametrize("key", ["lora_target_modules", "datasets", "my_own_key"])   # read, harmless, unknown
def test_an_alias_bomb_is_refused_while_loading(key, tmp_path, capsys):
    """9 levels of 9 aliases: 387 million values once expanded; refused from the node graph's size."""
    text = _bomb(9).replace("l9: &l9", f"{key}:") + "base_model: llama-3-8b\nadapter: lora\n"
    path = _write(tmp_path, "run.yml", text)
    _bounded(["estimate", "--from", path], capsys, "expands to over 100000 values")


def test_a_small_bomb_gives_a_short_message(tmp_path, capsys):
    """Under the bound (4 levels: 6,561 names), a bad value is still quoted as an excerpt, not 47 kB."""
    text = _bomb(4).replace("l4: &l4", "lora_target_modules:") + "base_model: llama-3-8b\nadapter: lora\n"
    err = _bounded(["estimate", "--from", _write(tmp_path, "run.yml", text)], capsys, "lora_target_modules")
    assert "expected a list of module names" in err or "unknown lora target" in err.lower()


def test_a_merge_key_bomb_is_refused(tmp_path, capsys):
    """Merge keys (<<) copy the merged pairs while building: measured before anything is built."""
    lines = ["m0: &m0 {a: 1}"] + [f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 9)}]}}" for i in range(1, 10)]
    path = _write(tmp_path, "run.yml", "\n".join(lines) + "\nbase_model: llama-3-8b\n")
    _bounded(["estimate", "--from", path], capsys, "expands to over 100000 values")


def test_a_control_character_in_yaml(tmp_path, capsys):
    _refused(["estimate", "--from", _write(tmp_path, "run.yml", "base_model: llama\x00\n")], capsys,
             "not valid YAML (unacceptable character #x0000")


@pytest.mark.parametrize("text", ["a: &a [*a]\nbase_model: x\n", "a: &a {b: *a}\nbase_model: x\n"])
def test_an_alias_inside_its_own_anchor(text, tmp_path, capsys):
    _refused(["estimate", "--from", _write(tmp_path, "run.yml", text)], capsys, "a value that contains itself")


def test_keys_that_repeat_a_long_path_are_bounded(tmp_path, capsys):
    """A deep tree of long keys over many leaves (300 kB of keys, 2,000 leaves under them: 600 MB of dotted
    keys written out): refused past a bound before they are all built."""
    tree = {f"v{j}": 1 for j in range(2000)}
    for i in range(60):
        tree = {"k" * 5000 + str(i): tree}
    path = _write(tmp_path, "run.json", {"output_dir": "o", "x": tree})
    _bounded(["estimate", "--from", path, "7b"], capsys, "over 4194304 characters")


# ---------------------------------------------------------------- numbers that are not numbers
DIGITS = "9" * 5000     # past Python's 4300-digit limit for int(str)


@pytest.mark.parametrize("name,text,fragment", [
    ("a.yml", f"base_model: llama-3-8b\nmicro_batch_size: {DIGITS}\n", "an integer of more than 4300 digits"),
    ("a.json", '{"output_dir": "o", "per_device_train_batch_size": ' + DIGITS + "}", "more than 4300 digits"),
    ("a.yml", "base_model: llama-3-8b\nadapter: lora\nlora_dropout: .nan\n", "expected a finite number, got nan"),
    ("a.yml", "base_model: llama-3-8b\nadapter: lora\nlora_alpha: .inf\n", "expected a finite number, got inf"),
    ("a.json", '{"output_dir": "o", "per_device_train_batch_size": NaN}', "expected a positive integer, got nan"),
    ("a.yml", f"base_model: llama-3-8b\nmicro_batch_size: {'9' * 4000}\n", "up to 2^63 - 1, got an integer of"),
    ("a.yml", "base_model: llama-3-8b\nsequence_len: 1.0e+400\n", "expected a positive integer, got inf"),
])
def test_numbers_in_files(name, text, fragment, tmp_path, capsys):
    _refused(["estimate", "--from", _write(tmp_path, name, text), "7b"], capsys, fragment)


@pytest.mark.parametrize("argv,fragment", [
    (["estimate", "7b", "--set", "rank=nan"], "--set rank: value must be a positive number; got nan"),
    (["estimate", "7b", "--set", "rank=inf"], "--set rank: value must be a positive number; got inf"),
    (["estimate", "7b", "--method", "full", "--set", "rank=-3"], "--set rank: value must be a positive number"),
    (["estimate", "7b", "--set", "seq=nan"], "--set seq: value must be a positive number; got nan"),
    (["estimate", "7b", "--set", f"hidden={DIGITS}"], "is too large to be a number here"),
    (["estimate", "7b", "--set", "hidden=1e400"], "'1e400' is too large to be a number here"),
    (["estimate", "7b", "--batch", DIGITS], "--batch: expected a positive integer, got '99999"),
    (["fit", "7b", "--gpu", "1e400GiB"], "'1e400GiB' is larger than any accelerator"),
    (["fit", "7b", "--gpu", "80GiB", "--headroom", "1e400GiB"], "larger than any accelerator"),
    (["fit", "7b", "--gpu", "80GiB", "--headroom", DIGITS + "%"], "leaves nothing of the card's"),
    (["estimate", "7b", "--gpu", "a100-80g", "--mfu", "1e-400"], "--mfu must be in (0, 1]"),   # 0.0 as a float
    (["estimate", "7b", "--gpu", "a100-80g", "--interconnect", "warp"], "--interconnect: unknown link 'warp'"),
    (["fit", "7b", "--gpu", "80GiB", "--limit", str(10 * MAX_SEQ)],
     f"--limit {10 * MAX_SEQ} is beyond symvram's sequence limit ({MAX_SEQ})"),
    (["fit", "7b", "--gpu", "80GiB", "--solve", "batch", "--limit", "10000000000"], "beyond symvram's batch limit"),
])
def test_numbers_on_the_command_line(argv, fragment, capsys):
    _refused(argv, capsys, fragment)


def test_a_context_beyond_the_tools_sequence_limit(tmp_path, capsys):
    """fit --solve seq on a model whose context exceeds MAX_SEQ: the message names the context and the
    remedy, not a --seq the user never gave; with --limit the search answers."""
    small = {**LLAMA, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 4, "vocab_size": 100, "max_position_embeddings": 10**12}
    path = _write(tmp_path, "config.json", small)
    err = _refused(["fit", path, "--gpu", "80GiB"], capsys, f"max_position_embeddings {10**12}) is beyond")
    assert "--seq" not in err and "--limit" in err
    rc, out, err = _run(["fit", path, "--gpu", "80GiB", "--limit", "4096", "--format", "json"], capsys)
    assert rc == 0 and json.loads(out)["value"] == 4096      # a 2-layer, 64-wide model fits 4096 tokens easily


def test_rank_nan_never_reaches_the_json(capsys):
    """--set rank=8 under full fine-tuning is accepted (rank is every JSON's field) and the JSON is strict."""
    rc, out, err = _run(["estimate", "7b", "--method", "full", "--set", "rank=8", "--format", "json"], capsys)
    assert rc == 0
    data = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert data["inputs"]["rank"] == 8


# ---------------------------------------------------------------- a file that mixes two tools
AXOLOTL_RUN = ("base_model: llama-3-8b\nadapter: lora\nlora_r: 32\nlora_target_linear: true\nsequence_len: 4096\n"
               "micro_batch_size: 2\ngradient_checkpointing: true\n")


def test_an_axolotl_file_with_one_llamafactory_key_is_read_as_axolotl(tmp_path, capsys):
    """Read as LLaMA-Factory once (its marker came first): rank 8, seq 512, batch 8 by its defaults — a wrong
    number, exit 0. By the weight of evidence it is axolotl's; the stray key is named and counted."""
    path = _write(tmp_path, "run.yml", AXOLOTL_RUN + "cutoff_len: 1024\n")
    rc, out, err = _run(["estimate", "--from", path, "--format", "json"], capsys)
    assert rc == 0, err
    data = json.loads(out)
    read = data["scenario_read"]
    assert read["files"] == [{"path": str(path), "format": "axolotl"}]
    assert any("cutoff_len is LLaMA-Factory 0.9.5's, not read" in w for w in read["warnings"])
    assert read["not_read"] == [f"{path}:cutoff_len"]
    # the axolotl file by hand: LoRA r=32 on every linear layer, seq 4096, batch 2, checkpointing, axolotl's hf stack
    by_hand = Scenario.create("llama-3-8b", **{k: data["inputs"][k] for k in (
        "stack", "dtype", "autocast", "adapter_dtype", "master", "state_dtype", "optimizer", "optimizer_impl")},
        method="lora", rank=32, targets="all-linear", seq=4096, batch=2, grad_checkpointing=True)
    assert (data["inputs"]["rank"], data["inputs"]["seq"], data["inputs"]["batch"]) == (32, 4096, 2)
    assert data["bytes"]["peak"] == evaluate(by_hand).peak


def test_a_real_mix_of_two_tools_is_refused(tmp_path, capsys):
    path = _write(tmp_path, "run.yml", AXOLOTL_RUN + "cutoff_len: 1024\nlora_rank: 8\nfinetuning_type: lora\n"
                                                     "per_device_train_batch_size: 8\nstage: sft\n")
    err = _refused(["estimate", "--from", path], capsys, "mixes two tools")
    assert "axolotl 0.19 (" in err and "LLaMA-Factory 0.9.5 (" in err


def test_the_keys_not_read_are_always_counted(tmp_path, capsys):
    path = _write(tmp_path, "run.yml", AXOLOTL_RUN + "my_own_key: 1\nanother: {a: 1, b: 2}\nlearning_rate: 0.001\n")
    rc, out, err = _run(["estimate", "--from", path], capsys)
    assert rc == 0 and err == ""
    assert "3 keys of the files not read (not known to change memory; --verbose lists them)" in out
    rc, out, err = _run(["estimate", "--from", path, "--verbose"], capsys)
    assert "run.yml:my_own_key, " in err and "run.yml:another.a" in err and "learning_rate" not in err
    clean = _write(tmp_path, "clean.yml", AXOLOTL_RUN)
    rc, out, err = _run(["estimate", "--from", clean], capsys)
    assert "every key of the files read" in out
    rc, out, err = _run(["fit", "--from", path, "--gpu", "80GiB"], capsys)   # the table on stderr: the count too
    assert rc == 0 and "3 keys of the files not read" in err


# ---------------------------------------------------------------- a stdout that cannot encode the tool's characters
@pytest.mark.parametrize("encoding", ["cp1252", "ascii"])
def test_a_narrow_stdout_gets_an_ascii_rendering(encoding):
    """The worked answer writes Δw, 2⁻⁸, ≈ and →: on a cp1252 or ASCII stdout they become dw, 2^-8, ~ and ->."""
    r = _cli(["explain", "7b", "--method", "lora"], PYTHONIOENCODING=encoding)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "(w + dw rounds back to w)" in r.stdout and "below about 2^-8 of a weight" in r.stdout
    bad = _cli(["estimate", "7b", "--set", "hidden≈=1"], PYTHONIOENCODING=encoding)   # an error line too
    assert bad.returncode == 2 and bad.stderr == "symvram: error: --set: unknown symbol 'hidden~' (did you mean hidden?)\n"


# ---------------------------------------------------------------- a refused value names where it came from
def test_a_refused_value_names_its_file_key_and_never_a_file_the_command_line_overrode(tmp_path, capsys):
    ds = _write(tmp_path, "ds.json", {"zero_optimization": {"stage": 2, "sub_group_size": 0},
                                      "train_micro_batch_size_per_gpu": 1})
    err = _refused(["estimate", "--from", ds, "7b"], capsys, "value must be a positive number; got 0")
    assert f"from {ds}:zero_optimization.sub_group_size" in err     # the comparison table's path too
    run = _write(tmp_path, "run.yml", AXOLOTL_RUN)
    err = _refused(["estimate", "--from", run, "--method", "lora", "--seq", "99999999999"], capsys, "--seq = 99999999999")
    assert "sequence_len" not in err and "run.yml" not in err        # the value is the command line's
    err = _refused(["estimate", "--from", run, "--method", "lora", "--rank", "5000"], capsys, "--rank 5000")
    assert "run.yml" not in err
