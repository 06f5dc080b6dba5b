"""Mamba-2 hybrids: Nemotron-H (symvram/data/families/nemotron_h.toml), one block per layer by hybrid_override_pattern
— a Mamba-2 mixer, attention without RoPE, or a ReLU² MLP — against the meta model transformers builds, the published
totals, and steps measured under FakeTensorMode on the torch path (mamba2_chunk_scan, the fallback transformers runs
without mamba_ssm and causal_conv1d)."""
from __future__ import annotations

import re

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.presets import load_model, spec_from_config
from symvram.scenario import Scenario
from test_hybrids import assert_tiny_step_measured  # two tiny steps measured, the estimate within 8 B

TINY = {"model_type": "nemotron_h", "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000, "hybrid_override_pattern": "M-M*",
        "mamba_num_heads": 8, "mamba_head_dim": 12, "n_groups": 2, "ssm_state_size": 10, "conv_kernel": 4,
        "chunk_size": 16, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
ONE_GROUP = {**TINY, "hybrid_override_pattern": "M-*M", "mamba_num_heads": 4, "n_groups": 1, "chunk_size": 8}


@pytest.mark.parametrize("preset, published_billions", [
    ("nemotron-nano-9b-v2", 9),     # "NVIDIA-Nemotron-Nano-9B-v2"
    ("nemotron-nano-12b-v2", 12),   # "Nemotron-Nano-12B-v2-Base"
    ("nemotron-h-8b", 8),           # "Nemotron-H-8B-Base-8K"
])
def test_the_presets_count_as_transformers_builds_them(preset, published_billions):
    """Each preset at full size on the meta device, from the config it writes back (the pattern in its own order): P
    per layer kind (a Mamba layer 0, an MLP layer 1, the first attention layer) and in all, and the published size."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from symvram.ledger.architecture import family
    from symvram.symbols import sym

    spec = load_model(preset)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**spec.config()))
    assert model.config.hybrid_override_pattern == spec.layer_pattern
    P = evaluate(Scenario.create(spec, method="full")).derived["P"]
    assert P == sum(p.numel() for p in model.parameters()) and round(P / 1e9) == published_billions
    fam, vals = family(spec.family), {sym(n): v for n, v in spec.dims.items()}
    for i, kind in ((0, "mamba"), (1, ""), (spec.layer_pattern.index("*"), "attention")):
        layer = sum(p.numel() for n, p in model.named_parameters() if f".layers.{i}." in n)
        assert int(fam.kind(kind).params_per_layer(spec.options).xreplace(vals)) == layer, (i, kind)


def test_the_pattern_orders_the_layers():
    """LoRA on q_proj, v_proj only: the layers before the first attention layer (M, -, M in M-M*) hold no adapter and
    read the frozen embedding's output: they save nothing (the measured case below checks the bytes). The order is
    the config's own, not the counts'."""
    sc = Scenario.create(spec_from_config(TINY, "t", "config", "test"), method="lora", rank=8, targets="qv")
    assert sc.structure.lead_kinds == ("mamba", "", "mamba") and sc.structure.first_kind == "attention"
    listed = {**{k: v for k, v in TINY.items() if k != "hybrid_override_pattern"},
              "layers_block_type": ["linear_attention", "mlp", "linear_attention", "full_attention"]}
    assert spec_from_config(listed, "t", "config", "test").layer_pattern == "M-M*"


@pytest.mark.parametrize("cfg, why", [
    ({**TINY, "hybrid_override_pattern": "ME*"}, "field 'hybrid_override_pattern' has E layers (the routed-expert block"),
    ({**TINY, "hybrid_override_pattern": "MX*"}, "field 'hybrid_override_pattern' must be a string of M, *, -"),
    ({**TINY, "hybrid_override_pattern": ""}, "field 'hybrid_override_pattern' must be a string of M, *, -"),
    ({**TINY, "use_conv_bias": False}, "use_conv_bias = False is not modelled"),
    ({**{k: v for k, v in TINY.items() if k != "hybrid_override_pattern"}, "layers_block_type": ["mamba", 3]},
     "field 'layers_block_type' must be a list of linear_attention, full_attention, mlp, moe"),
])
def test_a_pattern_no_kind_models_is_refused_by_name(cfg, why):
    with pytest.raises(UserError, match=re.escape(why)):
        spec_from_config(cfg, "t", "config", "c.json")


def test_peft_refuses_out_proj_so_symvram_does():
    """PEFT 0.21 raises on LoRA over a Mamba model's out_proj (tuners_utils.py:145-163), and its all-linear reaches it:
    both are refused by name; without --targets the family's every-accepted-linear group is the default."""
    spec = spec_from_config(TINY, "t", "config", "test")
    for targets in ("all-linear", "out_proj", "in_proj,out_proj"):
        with pytest.raises(UserError, match="out_proj of nemotron_h cannot be a LoRA target"):
            Scenario.create(spec, method="lora", targets=targets)
    assert "out_proj" not in Scenario.create(spec, method="lora", rank=8).targets


MEASURED = [  # (config, settings, seq): padded chunks and not, the leading layers, autocast, full fine-tuning
    (TINY, dict(method="lora", targets="linear"), 40),
    (TINY, dict(method="full"), 32),
    (TINY, dict(method="lora", targets="qv"), 40),
    (ONE_GROUP, dict(method="lora", targets="mamba"), 40),
    (TINY, dict(method="lora", targets="linear", autocast="bf16"), 50),   # the scan's products on 16-bit casts
    (ONE_GROUP, dict(method="full", autocast="bf16"), 40),
]


@pytest.mark.parametrize("cfg, settings, seq", MEASURED,
                         ids=[f"{c['hybrid_override_pattern']}-{s['method']}-{n}" for n, (c, s, _) in enumerate(MEASURED)])
def test_estimate_equals_the_measured_peak(cfg, settings, seq):
    assert_tiny_step_measured(cfg, settings, seq)


def test_the_mamba_terms_have_their_own_names():
    """The Mamba mixer's saved tensors are their own terms (not attention's), and the header says the torch path."""
    from symvram.ledger.build import build_ledger

    sc = Scenario.create(load_model("nemotron-nano-9b-v2"), method="lora")
    keys = {t.key for t in build_ledger(sc.structure).terms}
    assert {"act_mamba_conv", "act_mamba_gates", "act_mamba_scan", "act_mamba_norm"} <= keys
    assert "act_rope" not in keys
    from symvram.stacks import summary

    assert "mamba2_chunk_scan" in summary(sc)


# ------------------------------------------------------------------ Granite 4.0 H (granitemoehybrid), dense sizes
GRANITE = {"model_type": "granitemoehybrid", "hidden_size": 64, "shared_intermediate_size": 96, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 1000, "layer_types": ["mamba", "attention", "mamba", "mamba"],
           "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_n_groups": 2, "mamba_d_state": 10, "mamba_d_conv": 4,
           "mamba_chunk_size": 16, "num_local_experts": 0, "position_embedding_type": "nope",
           "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.0156,
           "logits_scaling": 4.0, "tie_word_embeddings": True, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


def test_granite_h_micro_counts_as_transformers_builds_it():
    """granite-4.0-h-micro on the meta device from the config its preset writes back (the list layer_types, its
    length as num_hidden_layers, no experts): P per kind and in all, and the published 3B."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from symvram.ledger.architecture import family
    from symvram.symbols import sym

    spec = load_model("granite-4.0-h-micro")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**spec.config()))
    assert [layer.mamba is not None for layer in model.model.layers] == [c == "M" for c in spec.layer_pattern]
    P = evaluate(Scenario.create(spec, method="full")).derived["P"]
    assert P == sum(p.numel() for p in model.parameters()) == 3_191_396_096 and round(P / 1e9) == 3
    fam, vals = family(spec.family), {sym(n): v for n, v in spec.dims.items()}
    for i, kind in ((0, "mamba"), (spec.layer_pattern.index("*"), "")):
        layer = sum(p.numel() for n, p in model.named_parameters() if f".layers.{i}." in n)
        assert int(fam.kind(kind).params_per_layer(spec.options).xreplace(vals)) == layer, (i, kind)


@pytest.mark.parametrize("cfg, why", [
    ({**GRANITE, "position_embedding_type": "alibi"}, "position_embedding_type = 'alibi' is not modelled"),
    ({**GRANITE, "layer_types": ["mamba", "moe"]}, "field 'layer_types' must be a list of mamba, attention"),
])
def test_granite_settings_not_modelled_are_refused_by_name(cfg, why):
    with pytest.raises(UserError, match=re.escape(why)):
        spec_from_config(cfg, "t", "config", "c.json")


GRANITE_MEASURED = [  # the multipliers are Python floats: the scaled embedding, residuals and logits save nothing
    (dict(method="lora", targets="all-linear"), 40),
    (dict(method="full"), 32),
    (dict(method="lora", targets="qv"), 40),     # the Mamba layer before the first attention one saves nothing
    (dict(method="lora", targets="all-linear", autocast="bf16"), 50),
]


@pytest.mark.parametrize("settings, seq", GRANITE_MEASURED, ids=[f"{s['method']}-{n}" for n, (s, _) in enumerate(GRANITE_MEASURED)])
def test_granite_estimate_equals_the_measured_peak(settings, seq):
    assert_tiny_step_measured(GRANITE, settings, seq)


GRANITE_ROPE = {**GRANITE, "position_embedding_type": "rope", "layer_types": ["attention", "mamba", "attention"]}


def test_granite_with_rope_is_its_variant_entry():
    """position_embedding_type "rope" (granite-4.0-micro) selects granitemoehybrid_rope: RoPE's cos/sin and buffers;
    granite-4.0-micro's P is the meta model's (3.4B, published "3B")."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from symvram.ledger.build import build_ledger

    sc = Scenario.create(spec_from_config(GRANITE_ROPE, "t", "config", "test"), method="lora", rank=8)
    assert sc.model.family == "granitemoehybrid_rope" and "act_rope" in {t.key for t in build_ledger(sc.structure).terms}
    spec = load_model("granite-4.0-micro")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**spec.config()))
    assert model.model.rotary_emb is not None
    P = evaluate(Scenario.create(spec, method="full")).derived["P"]
    assert P == sum(p.numel() for p in model.parameters()) == 3_402_836_480 and round(P / 1e9) == 3


@pytest.mark.parametrize("settings, seq", GRANITE_MEASURED[:3], ids=["lora", "full", "qv"])
def test_granite_with_rope_estimate_equals_the_measured_peak(settings, seq):
    assert_tiny_step_measured(GRANITE_ROPE, settings, seq)


GRANITE_MOE = {**GRANITE, "num_local_experts": 6, "num_experts_per_tok": 2, "intermediate_size": 40}


def test_granite_h_small_counts_as_transformers_builds_it():
    """num_local_experts > 0 selects granitemoehybrid_moe; granite-4.0-h-small's P is the meta model's and the
    published 32.2B."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    assert spec_from_config(GRANITE_MOE, "t", "config", "test").family == "granitemoehybrid_moe"
    spec = load_model("granite-4.0-h-small")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**spec.config()))
    assert all(layer.block_sparse_moe is not None for layer in model.model.layers)
    P = evaluate(Scenario.create(spec, method="full")).derived["P"]
    assert P == sum(p.numel() for p in model.parameters()) == 32_207_337_984 and round(P / 1e8) == 322


@pytest.mark.parametrize("settings, seq", GRANITE_MEASURED, ids=[f"{s['method']}-{n}" for n, (s, _) in enumerate(GRANITE_MEASURED)])
def test_granite_moe_estimate_equals_the_measured_peak(settings, seq):
    """The router's fp32 top-k softmax and indices, the grouped_mm experts, the shared MLP beside them."""
    assert_tiny_step_measured(GRANITE_MOE, settings, seq)


# ------------------------------------------------------------- Falcon-H1 (falcon_h1): attention and Mamba-2 in parallel
FALCON = {"model_type": "falcon_h1", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24, "vocab_size": 1000, "mamba_n_heads": 6,
          "mamba_d_head": 16, "mamba_d_ssm": 96, "mamba_n_groups": 2, "mamba_d_state": 10, "mamba_d_conv": 4,
          "mamba_chunk_size": 16, "mamba_rms_norm": False, "mamba_norm_before_gate": False,
          "embedding_multiplier": 0.11, "lm_head_multiplier": 0.078, "key_multiplier": 0.5,
          "attention_in_multiplier": 1.5, "attention_out_multiplier": 0.7, "ssm_in_multiplier": 1.2,
          "ssm_out_multiplier": 0.8, "mlp_multipliers": [0.9, 1.1], "ssm_multipliers": [1.1, 1.2, 1.3, 1.4, 1.5],
          "tie_word_embeddings": True, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


@pytest.mark.parametrize("preset, published", [
    ("falcon-h1-7b", 7_585_513_568),      # "Falcon-H1-7B": 7.59B
    ("falcon-h1-tiny-90m", 91_131_072),   # "Falcon-H1-Tiny-90M"
])
def test_falcon_h1_presets_count_as_transformers_builds_them(preset, published):
    """Each preset on the meta device from the config it writes back (mamba_d_ssm = n_M·d_M written): P per layer and
    in all (the mup_vector is a buffer, not a parameter), and the published size."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from symvram.ledger.architecture import family
    from symvram.symbols import sym

    spec = load_model(preset)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**spec.config()))
    P = evaluate(Scenario.create(spec, method="full")).derived["P"]
    assert P == sum(p.numel() for p in model.parameters()) == published
    vals = {sym(n): v for n, v in spec.dims.items()}
    layer = sum(p.numel() for n, p in model.named_parameters() if ".layers.0." in n)
    assert int(family("falcon_h1").params_per_layer(spec.options).xreplace(vals)) == layer


@pytest.mark.parametrize("cfg, why", [
    ({**FALCON, "mamba_rms_norm": True}, "mamba_rms_norm = True is not modelled"),
    ({**FALCON, "mamba_d_ssm": 128}, "mamba_d_ssm = 128 must equal mamba_heads*mamba_head_dim = 96"),
])
def test_falcon_h1_settings_not_modelled_are_refused_by_name(cfg, why):
    with pytest.raises(UserError, match=re.escape(why)):
        spec_from_config(cfg, "t", "config", "c.json")


def test_peft_refuses_falcon_h1_out_proj_so_symvram_does():
    spec = spec_from_config(FALCON, "t", "config", "test")
    with pytest.raises(UserError, match="out_proj of falcon_h1 cannot be a LoRA target"):
        Scenario.create(spec, method="lora", targets="all-linear")
    assert "out_proj" not in Scenario.create(spec, method="lora", rank=8).targets


FALCON_MEASURED = [  # the two scaled copies of the norm's output (attention's, the mixer's), the gate without a norm
    (dict(method="lora", targets="linear"), 40),
    (dict(method="full"), 32),
    (dict(method="lora", targets="qv"), 40),      # the mixer's branch saves nothing in the first layer
    (dict(method="lora", targets="mamba"), 40),   # nor attention's
    (dict(method="lora", targets="linear", autocast="bf16"), 50),
    (dict(method="full", autocast="bf16"), 40),
]


@pytest.mark.parametrize("settings, seq", FALCON_MEASURED, ids=[f"{s['method']}-{n}" for n, (s, _) in enumerate(FALCON_MEASURED)])
def test_falcon_h1_estimate_equals_the_measured_peak(settings, seq):
    assert_tiny_step_measured(FALCON, settings, seq)


@pytest.mark.parametrize("preset", ["falcon-h1-7b", "granite-4.0-h-micro"])
def test_the_new_blocks_have_their_own_names(preset):
    """Falcon-H1's layer keeps attention's terms and the Mamba mixer's (its gate without a norm its own label);
    Granite's Mamba layers the mixer's; each header says the torch path."""
    from symvram.ledger.build import build_ledger
    from symvram.stacks import summary

    sc = Scenario.create(load_model(preset), method="lora")
    terms = {t.key: t for t in build_ledger(sc.structure).terms}
    assert {"act_mamba_conv", "act_mamba_gates", "act_mamba_scan", "act_mamba_norm", "act_attention"} <= set(terms)
    assert ("without a norm" in terms["act_mamba_norm"].why) == (preset == "falcon-h1-7b")
    assert "mamba2_chunk_scan" in summary(sc)


@pytest.mark.parametrize("cfg", [TINY, FALCON, GRANITE, GRANITE_ROPE, GRANITE_MOE],
                         ids=["nemotron_h", "falcon_h1", "granite", "granite-rope", "granite-moe"])
@pytest.mark.parametrize("settings", [dict(method="full"), dict(method="lora", rank=8, grad_checkpointing=True),
                                      dict(method="full", grad_checkpointing=True)], ids=["full", "lora-ckpt", "full-ckpt"])
def test_the_hybrids_flops_equal_the_counted_step(cfg, settings):
    """Nemotron-H's scan einsums and conv1d (its weight gradient as the counter prices it), no attention in the Mamba
    and MLP blocks, the recompute stopping before each block's last projection; Falcon-H1's two mixers per layer, Granite's mixer then MLP (the MoE variant's shared MLP last: the recompute
    stops before its output_linear): FlopCounterMode's count of the step."""
    pytest.importorskip("peft")
    from symvram.timing import flops
    from symvram.validate.measure import count_flops
    from symvram.validate.spec import from_scenario

    sc = Scenario.create(spec_from_config(cfg, "tiny", "config", "test"), stack="torch", batch=2, seq=40,
                         device="cpu", **settings)
    counted, f = count_flops(from_scenario(sc)), flops(sc)
    assert f.by_phase["forward"] == counted["forward"]
    assert f.by_phase["backward"] + f.by_phase["recompute"] == counted["backward"]
