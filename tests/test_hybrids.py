"""Hybrid decoders: Qwen3.5's Gated DeltaNet layers beside gated full attention (symvram/data/families/qwen3_5_text.toml),
against the meta model transformers builds and steps measured under FakeTensorMode on the torch path
(torch_chunk_gated_delta_rule, the fallback transformers runs without flash-linear-attention)."""
from __future__ import annotations

import pytest

from symvram.evaluate import evaluate
from symvram.presets import load_model, spec_from_config
from symvram.scenario import Scenario

TINY = {"model_type": "qwen3_5_text", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24, "vocab_size": 1000,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 12, "linear_value_head_dim": 20,
        "linear_conv_kernel_dim": 3, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
WIDE = {**TINY, "num_hidden_layers": 8, "linear_num_key_heads": 4, "linear_conv_kernel_dim": 4,   # n_k = n_v, K = 4
        "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"]}


def test_the_preset_counts_as_transformers_builds_it():
    """Qwen3.5-27B at full size on the meta device: P per layer kind and in all."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    spec = load_model("qwen3.5-27b")
    assert spec.dims["linear_layers"] == 48 and spec.dims["rotary_dim"] == 64
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**spec.config()))
    assert [t for t in model.config.layer_types[:4]] == ["linear_attention"] * 3 + ["full_attention"]
    assert evaluate(Scenario.create(spec, method="full")).derived["P"] == sum(p.numel() for p in model.parameters())


def test_layers_before_the_first_target_save_nothing():
    """LoRA on q_proj, v_proj only: the three DeltaNet layers before the first full-attention layer hold no adapter
    and read the frozen embedding's output, so they save nothing (the measured case below checks the bytes)."""
    sc = Scenario.create(spec_from_config(TINY, "t", "config", "test"), method="lora", rank=8, targets="qv")
    assert sc.structure.lead_kinds == ("linear",) * 3 and sc.structure.first_kind == ""


MEASURED = [  # (config, settings, seq): one chunk of 64 and several (padded), the leading layers, autocast
    (TINY, dict(method="lora", targets="all-linear"), 96),
    (TINY, dict(method="full"), 64),
    (TINY, dict(method="lora", targets="qv"), 130),
    (WIDE, dict(method="lora", targets="linear-attention"), 80),
    (WIDE, dict(method="lora", targets="all-linear", autocast="bf16"), 200),   # the products on 16-bit casts
]


@pytest.mark.parametrize("cfg, settings, seq", MEASURED, ids=[f"{s['method']}-{n}" for n, (_, s, _) in enumerate(MEASURED)])
def test_estimate_equals_the_measured_peak(cfg, settings, seq):
    pytest.importorskip("peft")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    lora = settings["method"] == "lora"
    trainable = "fp32" if lora else "bf16"
    sc = Scenario.create(spec_from_config(cfg, "tiny", "config", "test"), stack="torch", batch=2, seq=seq, device="cpu",
                         rank=8 if lora else None, adapter_dtype=trainable if lora else None, state_dtype=trainable,
                         **settings)
    measured = measure({**from_scenario(sc), "steps": 2})
    # within 8 bytes: the 0-d fp32 loss and its gradient seed are not ledger terms (as tests/test_families.py)
    assert 0 <= measured["peak_bytes"] - evaluate(sc).peak <= 8
