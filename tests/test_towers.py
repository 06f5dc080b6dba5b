"""Multimodal configs: the vision tower transformers loads beside the decoder (symvram/data/towers.toml), against
the meta model transformers builds, the published totals of real checkpoints, and steps measured under
FakeTensorMode."""
from __future__ import annotations

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.presets import spec_from_config
from symvram.scenario import Scenario

TEXT = {"hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 24, "vocab_size": 1000}
QWEN_VISION = {"hidden_size": 48, "intermediate_size": 80, "depth": 2, "num_heads": 4, "patch_size": 14,
               "out_hidden_size": 64, "num_position_embeddings": 16}
DELTANET = {"num_hidden_layers": 4, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 12,
            "linear_value_head_dim": 20, "linear_conv_kernel_dim": 3}
TINY = {  # distinct widths; Gemma 3's image token id (262144) lies outside the tiny vocabulary: input_ids are copied
    "gemma3": {"model_type": "gemma3", "mm_tokens_per_image": 4, "text_config": {"model_type": "gemma3_text", **TEXT},
               "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 48, "intermediate_size": 80,
                                 "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 56, "patch_size": 14,
                                 "vision_use_head": False}},
    "mistral3": {"model_type": "mistral3", "text_config": {"model_type": "mistral", **TEXT},
                 "vision_config": {"model_type": "pixtral", "hidden_size": 48, "intermediate_size": 80,
                                   "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 12, "image_size": 56,
                                   "patch_size": 14}, "multimodal_projector_bias": True},
    "qwen3_vl": {"model_type": "qwen3_vl", "text_config": {"model_type": "qwen3_vl_text", **TEXT},   # two DeepStack
                 "vision_config": {**QWEN_VISION, "deepstack_visual_indexes": [0, 1]}},                # mergers
    "qwen3_vl_moe": {"model_type": "qwen3_vl_moe", "vision_config": QWEN_VISION, "text_config": {
        "model_type": "qwen3_vl_moe_text", **TEXT, "num_experts": 6, "num_experts_per_tok": 3, "moe_intermediate_size": 40}},
    "qwen3_5": {"model_type": "qwen3_5", "vision_config": QWEN_VISION, "text_config": {   # 3 DeltaNet + 1 full
        "model_type": "qwen3_5_text", **TEXT, **DELTANET}},
    "qwen3_5_moe": {"model_type": "qwen3_5_moe", "vision_config": QWEN_VISION, "text_config": {
        "model_type": "qwen3_5_moe_text", **TEXT, **DELTANET, "num_experts": 6, "num_experts_per_tok": 3,
        "moe_intermediate_size": 40, "shared_expert_intermediate_size": 56}},
    "llama4": {"model_type": "llama4", "text_config": {   # a dense and a MoE layer, each with and without RoPE
        "model_type": "llama4_text", **TEXT, "num_hidden_layers": 4, "no_rope_layers": [1, 1, 0, 0],
        "interleave_moe_layer_step": 2, "intermediate_size_mlp": 176, "num_local_experts": 5, "num_experts_per_tok": 1,
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
        "vision_config": {"hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2, "num_attention_heads": 4,
                          "image_size": 56, "patch_size": 14, "vision_output_dim": 72, "projector_input_dim": 72,
                          "projector_output_dim": 56}},
}
SIGLIP = {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16,
          "image_size": 896, "patch_size": 14, "vision_use_head": False}
PUBLISHED = [  # (config.json, the checkpoint's safetensors total: decoder + tower)
    ({"model_type": "gemma3", "vision_config": SIGLIP, "text_config": {
        "model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208}}, 4_300_079_472),
    ({"model_type": "gemma3", "vision_config": SIGLIP, "text_config": {
        "model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 62,
        "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "vocab_size": 262208}}, 27_432_406_640),
    ({"model_type": "mistral3", "tie_word_embeddings": False, "spatial_merge_size": 2, "vision_feature_layer": -1,
      "multimodal_projector_bias": False, "text_config": {
          "model_type": "mistral", "hidden_size": 5120, "intermediate_size": 32768, "num_hidden_layers": 40,
          "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072},
      "vision_config": {"model_type": "pixtral", "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                        "num_attention_heads": 16, "head_dim": 64, "patch_size": 14, "image_size": 1540}},
     24_011_361_280),   # Mistral-Small-3.1-24B
]


QWEN3_VL_VISION = {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "patch_size": 16,
                   "deepstack_visual_indexes": [8, 16, 24], "num_position_embeddings": 2304}
REAL_SIZES = {   # real-size config.json fields (Qwen3-VL-8B-Instruct's, Qwen3-VL-30B-A3B-Instruct's, as transcribed)
    "qwen3-vl-8b": {"model_type": "qwen3_vl", "vision_config": {**QWEN3_VL_VISION, "out_hidden_size": 4096},
                    "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 4096, "intermediate_size": 12288,
                                    "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
                                    "head_dim": 128, "vocab_size": 151936}},
    "qwen3-vl-30b-a3b": {"model_type": "qwen3_vl_moe", "vision_config": {**QWEN3_VL_VISION, "out_hidden_size": 2048},
                         "text_config": {"model_type": "qwen3_vl_moe_text", "hidden_size": 2048,
                                         "intermediate_size": 6144, "num_hidden_layers": 48, "num_attention_heads": 32,
                                         "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
                                         "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                                         "decoder_sparse_step": 1, "mlp_only_layers": []}},
}


def _meta_model(cfg: dict, auto: str):
    import torch
    import transformers

    from symvram.validate.measure import _config

    with torch.device("meta"):
        return getattr(transformers, auto).from_config(_config(cfg, "sdpa"))


def _language_params(model) -> int:
    """The language model's parameters (and the lm_head): Llama 4 holds a whole Llama4ForCausalLM as language_model."""
    return sum(p.numel() for n, p in model.named_parameters()
               if n.startswith(("model.language_model.", "language_model.", "lm_head.")))


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_tower_and_decoder_match_the_meta_model(model_type):
    """The tower AutoModelForImageTextToText builds (parameters, float and index buffers) and the decoder beside it;
    AutoModelForCausalLM builds the same class (spec.tower) or, for Qwen3.5 and Llama 4, a text-only class from the
    text_config: no tower, the decoder alone."""
    pytest.importorskip("transformers")
    from symvram.ledger.towers import read_tower
    from symvram.validate.measure import build_model

    cfg = TINY[model_type]
    spec = spec_from_config(cfg, "tiny", "config", "test")
    tower, model = read_tower(cfg, "tiny", "image-text-to-text"), _meta_model(cfg, "AutoModelForImageTextToText")
    assert type(model).__name__ == tower.loader
    language = _language_params(model)
    assert tower.params == sum(p.numel() for p in model.parameters()) - language
    buffers = [(b.is_floating_point() or b.is_complex(), b.numel()) for n, b in model.named_buffers()
               if "language_model." not in n]   # Llama 4's freqs_ci is complex64
    assert (tower.float_buffers, tower.index_buffers) == (sum(n for f, n in buffers if f), sum(n for f, n in buffers if not f))
    assert evaluate(Scenario.create(spec, method="full")).derived["P"] == language
    if spec.tower is None:
        causal = _meta_model(cfg, "AutoModelForCausalLM")
        assert type(causal).__name__.endswith("ForCausalLM") and sum(p.numel() for p in causal.parameters()) == language
    else:
        assert spec.tower == tower
        built = build_model({"arch": spec.config(), "method": "full", "dtype": "bf16", "attention": "sdpa",
                             "grad_checkpointing": False})
        assert type(built).__name__ == spec.tower.loader


@pytest.mark.parametrize("model_type", ["gemma3", "mistral3", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe",
                                        "llama4"])
def test_the_default_towers_equal_the_config_classes(model_type):
    """A config.json that leaves the vision_config's fields out gets its config class's defaults (the sizes
    transformers' docstrings name: Qwen3-VL-4B's encoder for Qwen3-VL; not every published checkpoint's), and
    towers.toml's defaults are the same. The decoder is cut to one layer (the tower reads none of its depth)."""
    pytest.importorskip("transformers")
    from symvram.ledger.towers import read_tower

    cfg = {"model_type": model_type, "vision_config": {}, "text_config": {"num_hidden_layers": 1}}
    tower, model = read_tower(cfg, "defaults", "image-text-to-text"), _meta_model(cfg, "AutoModelForImageTextToText")
    assert tower.params == sum(p.numel() for p in model.parameters()) - _language_params(model)


@pytest.mark.parametrize("cfg, published", PUBLISHED + [(REAL_SIZES["qwen3-vl-8b"], 8_767_123_696)],
                         ids=["gemma-3-4b", "gemma-3-27b", "mistral-small-3.1-24b", "qwen3-vl-8b"])
def test_published_totals_count_the_tower(cfg, published):
    spec = spec_from_config(cfg, "m", "config", "test")
    assert evaluate(Scenario.create(spec, method="full")).derived["P"] + spec.tower.params == published


@pytest.mark.parametrize("name", sorted(REAL_SIZES))
def test_real_sizes_equal_the_meta_model(name):
    """A real-size Qwen3-VL config: the decoder read as its family (qwen3, qwen3_moe) and the tower, each equal to
    the meta model's parameters."""
    pytest.importorskip("transformers")
    cfg = REAL_SIZES[name]
    spec, model = spec_from_config(cfg, name, "config", "test"), _meta_model(cfg, "AutoModelForImageTextToText")
    language = _language_params(model)
    assert (evaluate(Scenario.create(spec, method="full")).derived["P"], spec.tower.params) == (
        language, sum(p.numel() for p in model.parameters()) - language)


def test_lora_adapts_the_tower_linears_its_names_match():
    """PEFT matches target names by their last part: q_proj, v_proj also adapt SigLIP's; all-linear takes every
    nn.Linear of the tower (out_proj, fc1, fc2 too). The tower's adapters train nothing on text-only steps."""
    spec = spec_from_config(PUBLISHED[0][0], "m", "config", "test")
    hv, fv, lv, r = 1152, 4304, 27, 16
    qv = evaluate(Scenario.create(spec, method="lora", rank=r, targets="q_proj,v_proj"))
    assert qv.derived["P_lora_tower"] == r * lv * 2 * (hv + hv)
    every = evaluate(Scenario.create(spec, method="lora", rank=r, targets="all-linear"))
    assert every.derived["P_lora_tower"] == r * lv * (4 * (hv + hv) + 2 * (hv + fv))
    assert every.terms["adapters_tower"] == 4 * every.derived["P_lora_tower"]   # fp32 adapters, no gradient
    assert every.derived["P_train"] == every.derived["P_lora"]


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_all_linear_adapts_the_tower_linears_peft_finds(model_type):
    """PEFT's all-linear on AutoModelForImageTextToText's meta model: its adapters outside the language model are the
    tower's linears (r·Σ copies·(d_in + d_out)), each named by the module PEFT wraps; where AutoModelForCausalLM
    loads the tower too, the estimate's tower adapters are those."""
    peft = pytest.importorskip("peft")
    from symvram.ledger.towers import read_tower

    cfg, r = TINY[model_type], 4
    tower = read_tower(cfg, "tiny", "image-text-to-text")
    model = peft.get_peft_model(_meta_model(cfg, "AutoModelForImageTextToText"),
                                peft.LoraConfig(r=r, target_modules="all-linear"))
    adapted = {n: p.numel() for n, p in model.named_parameters() if "lora_" in n and "language_model." not in n}
    assert sum(adapted.values()) == r * tower.lora_width((), all_linear=True)
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in adapted} == {name for name, *_ in tower.linears}
    spec = spec_from_config(cfg, "tiny", "config", "test")
    if spec.tower is not None:   # loaded as AutoModelForCausalLM builds it: the tower's adapters are a term
        every = evaluate(Scenario.create(spec, method="lora", rank=r, targets="all-linear"))
        assert every.derived["P_lora_tower"] == sum(adapted.values()) and every.terms["adapters_tower"] > 0


MEASURED = [("gemma3", dict(method="full")), ("gemma3", dict(method="lora", targets="q_proj,v_proj")),
            ("mistral3", dict(method="lora", targets="all-linear")), ("mistral3", dict(method="qlora")),
            ("qwen3_vl", dict(method="full")), ("qwen3_vl", dict(method="lora", targets="all-linear")),
            ("qwen3_vl_moe", dict(method="full")), ("qwen3_vl_moe", dict(method="lora", targets="attention"))]


@pytest.mark.parametrize("model_type, settings", MEASURED, ids=[f"{m}-{s['method']}" for m, s in MEASURED])
def test_estimate_equals_the_measured_peak(model_type, settings):
    pytest.importorskip("peft")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    trainable = "fp32" if settings["method"] != "full" else "bf16"
    sc = Scenario.create(spec_from_config(TINY[model_type], "tiny", "config", "test"), stack="torch", batch=2, seq=32,
                         device="cpu", rank=8 if settings["method"] != "full" else None,
                         adapter_dtype=trainable if settings["method"] != "full" else None, state_dtype=trainable,
                         **settings)
    measured = measure({**from_scenario(sc), "steps": 2})
    # within 8 bytes: the 0-d fp32 loss and its gradient seed are not ledger terms (as tests/test_families.py)
    assert 0 <= measured["peak_bytes"] - evaluate(sc).peak <= 8


def test_a_bad_tower_field_is_refused_by_name():
    cfg = {**TINY["gemma3"], "vision_config": {**TINY["gemma3"]["vision_config"], "patch_size": "14"}}
    with pytest.raises(UserError, match="'vision.patch_size' must be an integer"):
        spec_from_config(cfg, "m", "config", "test")
