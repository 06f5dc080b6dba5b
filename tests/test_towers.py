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
TINY = {  # distinct widths; Gemma 3's image token id (262144) lies outside the tiny vocabulary: input_ids are copied
    "gemma3": {"model_type": "gemma3", "mm_tokens_per_image": 4, "text_config": {"model_type": "gemma3_text", **TEXT},
               "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 48, "intermediate_size": 80,
                                 "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 56, "patch_size": 14,
                                 "vision_use_head": False}},
    "mistral3": {"model_type": "mistral3", "text_config": {"model_type": "mistral", **TEXT},
                 "vision_config": {"model_type": "pixtral", "hidden_size": 48, "intermediate_size": 80,
                                   "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 12, "image_size": 56,
                                   "patch_size": 14}, "multimodal_projector_bias": True},
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


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_tower_and_decoder_match_the_meta_model(model_type):
    pytest.importorskip("transformers")
    from symvram.validate.measure import build_model

    cfg = TINY[model_type]
    spec = spec_from_config(cfg, "tiny", "config", "test")
    model = build_model({"arch": spec.config(), "method": "full", "dtype": "bf16", "attention": "sdpa",
                         "grad_checkpointing": False})
    assert type(model).__name__ == spec.tower.loader
    params = dict(model.named_parameters())
    language = sum(p.numel() for n, p in params.items() if ".language_model." in n or n.startswith("lm_head"))
    assert spec.tower.params == sum(p.numel() for p in params.values()) - language
    assert evaluate(Scenario.create(spec, method="full")).derived["P"] == language


@pytest.mark.parametrize("cfg, published", PUBLISHED, ids=["gemma-3-4b", "gemma-3-27b", "mistral-small-3.1-24b"])
def test_published_totals_count_the_tower(cfg, published):
    spec = spec_from_config(cfg, "m", "config", "test")
    assert evaluate(Scenario.create(spec, method="full")).derived["P"] + spec.tower.params == published


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


MEASURED = [("gemma3", dict(method="full")), ("gemma3", dict(method="lora", targets="q_proj,v_proj")),
            ("mistral3", dict(method="lora", targets="all-linear")), ("mistral3", dict(method="qlora"))]


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
