"""Hybrid decoders: Qwen3.5's Gated DeltaNet layers beside gated full attention (symvram/data/families/qwen3_5_text.toml),
with a routed-expert block and a gated shared expert in every layer (qwen3_5_moe_text.toml, qwen3_next.toml), against
the meta model transformers builds and steps measured under FakeTensorMode on the torch path
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
MOE = {**{k: v for k, v in TINY.items() if k != "intermediate_size"}, "model_type": "qwen3_5_moe_text", "num_experts": 8,
       "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48}
WIDE_MOE = {**MOE, **{k: WIDE[k] for k in ("num_hidden_layers", "linear_num_key_heads", "linear_conv_kernel_dim")}}
NEXT = {**MOE, "model_type": "qwen3_next", "intermediate_size": 176}   # fused in_proj_qkvz, in_proj_ba
OLMO = {**{k: v for k, v in TINY.items() if k != "head_dim"}, "model_type": "olmo_hybrid"}   # separate q, k, v, g, a, b


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


@pytest.mark.parametrize("preset, published_billions", [
    ("qwen3.5-35b-a3b", 35),      # "35B in total and 3B activated" (with the vision tower and the MTP layer)
    ("qwen3-next-80b-a3b", 80),   # "80B in total and 3B activated"
    ("olmo-hybrid-7b", 7),        # OlmoHybridConfig's defaults (configuration_olmo_hybrid.py:29): no MoE block
])
def test_the_moe_presets_count_as_transformers_builds_them(preset, published_billions):
    """Qwen3.5-35B-A3B's language model and Qwen3-Next-80B-A3B at full size on the meta device: P per layer kind (a
    DeltaNet layer 0, a full-attention last layer, each with its MoE block) and in all, and the published total."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from symvram.ledger.architecture import family
    from symvram.symbols import sym

    spec = load_model(preset)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**spec.config()))
    P = evaluate(Scenario.create(spec, method="full")).derived["P"]
    assert P == sum(p.numel() for p in model.parameters()) and round(P / 1e9) == published_billions
    fam, vals = family(spec.family), {sym(n): v for n, v in spec.dims.items()}
    for i, kind in ((0, "linear"), (spec.layers - 1, "")):
        layer = sum(p.numel() for n, p in model.named_parameters() if f".layers.{i}." in n)
        assert int(fam.kind(kind).params_per_layer(spec.options).xreplace(vals)) == layer, (i, kind)


def test_olmo_hybrid_without_rope_is_refused():
    """OLMo Hybrid with rope_theta null (top level, as OLMo-core's converter writes it, or in rope_parameters) builds
    no rotary embedding (modeling_olmo_hybrid.py:895-901): NoPE attention is not modelled, so the config is refused."""
    from symvram.errors import UserError

    for cfg in ({**OLMO, "rope_theta": None}, {**OLMO, "rope_parameters": {"rope_type": "default", "rope_theta": None}}):
        with pytest.raises(UserError, match="NoPE"):
            spec_from_config(cfg, "t", "config", "test")


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
    (MOE, dict(method="lora", targets="all-linear"), 96),     # DeltaNet + MoE: the shared expert's LoRA, the router
    (MOE, dict(method="full"), 64),                           # the experts' weights train
    (MOE, dict(method="lora", targets="qv"), 130),            # the leading DeltaNet + MoE layers save nothing
    (WIDE_MOE, dict(method="lora", targets="mlp", autocast="bf16"), 200),   # layer 0's routed block saves nothing
    (NEXT, dict(method="lora", targets="all-linear"), 96),    # the router and the experts through target_parameters
    (NEXT, dict(method="full"), 64),
    (NEXT, dict(method="lora", targets="linear-attention", autocast="bf16"), 130),   # the fused projections' LoRA
    (OLMO, dict(method="lora", targets="all-linear"), 96),    # OLMo's post-norm attention beside the DeltaNet
    (OLMO, dict(method="full"), 64),
    (OLMO, dict(method="lora", targets="mlp"), 130),          # layer 0 (a DeltaNet) reads the frozen embedding
    (OLMO, dict(method="lora", targets="all-linear", autocast="bf16"), 200),
]


@pytest.mark.parametrize("cfg, settings, seq", MEASURED, ids=[f"{c['model_type']}-{s['method']}-{n}" for n, (c, s, _) in enumerate(MEASURED)])
def test_estimate_equals_the_measured_peak(cfg, settings, seq):
    assert_tiny_step_measured(cfg, settings, seq)


def assert_tiny_step_measured(cfg: dict, settings: dict, seq: int) -> None:
    """Two steps of a tiny config on the torch stack (fp32 adapters under LoRA, bf16 states under full), measured
    under FakeTensorMode: the estimate within 8 bytes (the 0-d fp32 loss and its gradient seed are not ledger
    terms, as tests/test_families.py)."""
    pytest.importorskip("peft")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    lora = settings["method"] == "lora"
    trainable = "fp32" if lora else "bf16"
    sc = Scenario.create(spec_from_config(cfg, "tiny", "config", "test"), stack="torch", batch=2, seq=seq, device="cpu",
                         rank=8 if lora else None, adapter_dtype=trainable if lora else None, state_dtype=trainable,
                         **settings)
    measured = measure({**from_scenario(sc), "steps": 2})
    assert 0 <= measured["peak_bytes"] - evaluate(sc).peak <= 8


@pytest.mark.parametrize("targets", ["qv", "a_proj,b_proj,g_proj"])
def test_olmo_hybrid_layer_0_with_some_mixer_inputs_frozen_is_an_upper_bound(targets):
    """OLMo Hybrid's layer 0 (a DeltaNet reading the frozen embedding) with LoRA on q_proj, v_proj only (β and g need
    no gradient there) or on a_proj, b_proj, g_proj only (q, k, v need none) saves less than the mixer's whole set,
    which the estimate counts: above the measured peak, never below (olmo_hybrid.toml's header)."""
    pytest.importorskip("peft")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    sc = Scenario.create(spec_from_config(OLMO, "tiny", "config", "test"), stack="torch", batch=2, seq=96, device="cpu",
                         method="lora", rank=8, targets=targets, adapter_dtype="fp32", state_dtype="fp32")
    measured = measure({**from_scenario(sc), "steps": 2})["peak_bytes"]
    assert measured <= evaluate(sc).peak <= 1.1 * measured


def test_a_multimodal_qwen3_5_moe_config_is_read_through_its_text_config():
    """Qwen3.5-35B-A3B ships model_type qwen3_5_moe with the language model under text_config; AutoModelForCausalLM
    builds Qwen3_5MoeForCausalLM from it (transformers models/auto/modeling_auto.py:942, "VLM compatibility"): the
    decoder alone, no vision tower, as the preset counts it (whose P the meta-model test above checks)."""
    preset = load_model("qwen3.5-35b-a3b")
    outer = {"model_type": "qwen3_5_moe", "vision_config": {"depth": 27},
             "text_config": {**preset.config(), "model_type": "qwen3_5_moe_text"}}
    spec = spec_from_config(outer, "Qwen3.5-35B-A3B", "config", "config.json")
    assert spec.family == "qwen3_5_moe_text" and spec.tower is None and spec.dims == preset.dims
    assert evaluate(Scenario.create(spec, method="full")).derived["P"] == 34_660_610_688   # the meta model's count
