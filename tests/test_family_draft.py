"""``symvram family-draft``: any model's parameter layout read from transformers' model on the meta device, written
as a family entry whose ledger parameter side equals what transformers and PEFT build (the independent sources),
with the activation block refused by the module classes no rule models. Granite and StarCoder2 have no entry."""
from __future__ import annotations

import json

import pytest

from symvram.errors import UserError
from symvram.ledger import architecture

pytest.importorskip("transformers")
pytest.importorskip("peft")

GRANITE = {"model_type": "granite", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 3,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "head_dim": 24}
STARCODER2 = {"model_type": "starcoder2", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "bos_token_id": 0,
              "eos_token_id": 0}


@pytest.fixture
def forget_drafts():
    """The drafts registered in a test leave the process's families as they were."""
    yield
    architecture._REGISTERED.clear()
    for cached in (architecture._read, architecture.family, architecture.family_names,
                   architecture.families_by_model_type):
        cached.cache_clear()


@pytest.mark.usefixtures("forget_drafts")
def test_the_draft_counts_what_transformers_and_peft_build():
    from symvram.validate.layout import draft_entry, parameter_side, read_layout

    layout = read_layout(GRANITE)
    text = draft_entry(GRANITE, layout)
    assert 'unmodelled = ["GraniteAttention", "GraniteDecoderLayer", "GraniteMLP", "GraniteRMSNorm"]' in text
    _, n = parameter_side(GRANITE, text, rank=8, gpus=4)
    assert n["params"] == n["meta_params"] == layout.total_params
    assert n["lora_trainable"] == n["peft_lora_params"]
    # by hand: h 64, 4 heads × 24, 2 kv heads, d_ff 176, V 1000, 3 layers, untied
    per_layer = 64 * 96 * 2 + 64 * 48 * 2 + 3 * 64 * 176 + 2 * 64
    assert n["params"] == 2 * 1000 * 64 + 3 * per_layer + 64
    full = n["terms"]["full"]
    assert full["weights"][0] == 2 * n["params"] and full["grads"][0] == 2 * n["params"]   # bf16
    assert full["optimizer_states"][0] == 2 * 2 * n["params"]     # torch AdamW: m, v in the bf16 weights' dtype
    assert full["optimizer_states"][1] * 4 == full["optimizer_states"][0]                 # ZeRO-3 over 4 GPUs


@pytest.mark.usefixtures("forget_drafts")
def test_the_estimate_refuses_the_activations_by_class_and_the_entry_is_a_family():
    from symvram import api
    from symvram.validate.layout import draft_entry

    architecture.register_family("granite", draft_entry(GRANITE))
    with pytest.raises(UserError, match="activations of granite are not modelled: transformers' GraniteAttention"):
        api.estimate(_spec(GRANITE), method="full")


def _spec(cfg):
    from symvram.presets import spec_from_config

    return spec_from_config(cfg, "tiny", "config", "test")


@pytest.mark.usefixtures("forget_drafts")
def test_biases_and_layer_norms_are_read_and_what_an_entry_cannot_hold_is_named():
    """StarCoder2: use_bias on every linear (a config switch, on by default), LayerNorm with a bias (torch's, not
    modelled), and a final norm's bias (outside what an entry describes: named, and the count is short by it)."""
    from symvram.validate.layout import draft_entry, parameter_side, read_layout

    layout = read_layout(STARCODER2)
    text = draft_entry(STARCODER2, layout)
    assert "use_bias = true\n" in text and '"LayerNorm"' in text
    assert "not described by this entry (outside the layers): model.norm.bias [64]" in text
    _, n = parameter_side(STARCODER2, text)
    assert n["meta_params"] - n["params"] == 64
    assert n["lora_trainable"] == n["peft_lora_params"]


@pytest.mark.usefixtures("forget_drafts")
def test_the_cli_writes_the_draft_and_a_folder_of_drafts_is_read(tmp_path, monkeypatch, capsys):
    from symvram.cli import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(GRANITE))
    out = tmp_path / "fams" / "granite.toml"
    out.parent.mkdir()
    assert main(["family-draft", str(cfg), "-o", str(out)]) == 0
    assert "# parameters: 285,120 from this entry; 285,120 in transformers' model" in out.read_text()
    assert main(["family-draft", str(cfg), "-o", str(out)]) == 2          # never over a file without --force
    assert "exists; pass --force" in capsys.readouterr().err
    monkeypatch.setenv(architecture.FAMILIES_ENV, str(out.parent))
    architecture.family_names.cache_clear()
    architecture.families_by_model_type.cache_clear()
    assert main(["estimate", str(cfg), "--method", "lora", "--rank", "8"]) == 2
    assert "GraniteMLP" in capsys.readouterr().err


@pytest.mark.usefixtures("forget_drafts")
def test_a_hub_id_is_drafted_from_its_cached_config(tmp_path, monkeypatch, capsys):
    """A Hub id whose model_type has no entry: its config.json from the local cache (nothing downloaded)."""
    from symvram.cli import main

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snap = tmp_path / "hub" / "models--ibm--tiny-granite" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(GRANITE))
    assert main(["family-draft", "ibm/tiny-granite"]) == 0
    assert 'model_types = ["granite"]' in capsys.readouterr().out


@pytest.mark.usefixtures("forget_drafts")
def test_gpt2_conv1d_layers_shared_names_and_position_embeddings():
    """GPT-2: Conv1D projections (weight (in, out)) read as linears, the two c_proj named by their path (as PEFT
    matches them), n_embd read as hidden_size, and the position embeddings named as what an entry cannot hold."""
    from symvram.validate.layout import draft_entry, parameter_side, read_layout

    cfg = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, "bos_token_id": 0,
           "eos_token_id": 0}
    layout = read_layout(cfg)
    text = draft_entry(cfg, layout)
    assert 'c_attn = {d_in = "hidden", d_out = "3*hidden"' in text and '"mlp.c_proj" = {d_in = "4*hidden"' in text
    assert 'hidden = ["n_embd", "required"]' in text
    assert "transformer.wpe.weight [1024, 64], transformer.ln_f.bias [64]" in text
    _, n = parameter_side(cfg, text)
    assert n["meta_params"] - n["params"] == 1024 * 64 + 64
    assert n["lora_trainable"] == n["peft_lora_params"]


@pytest.mark.parametrize("cfg, message", [
    ({"model_type": "t5", "d_model": 64, "num_layers": 2, "vocab_size": 100}, "cannot build model_type 't5' as a causal LM"),
    ({"model_type": "qwen3"}, "has a family entry already"),
    ({"model_type": "granite", "hidden_size": -4}, "negative dimension"),
])
def test_what_cannot_be_drafted_is_refused_in_one_line(cfg, message, tmp_path, capsys):
    from symvram.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert main(["family-draft", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
