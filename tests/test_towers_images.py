"""--image-tokens N and --train-vision on a Qwen3-VL config: the images' inputs, the frozen tower (nothing saved) and
the trainable one (its blocks' saved tensors, its weights trained), against steps measured on real CPU tensors
(Qwen3-VL reads its image grids as Python ints, which fake tensors cannot give) and a hand count of the tower's
saved tensors."""
from __future__ import annotations

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.presets import spec_from_config
from symvram.scenario import Scenario

from test_towers import QWEN_VISION, TEXT, TINY

# a tiny vocabulary: the image and video token ids inside it (the defaults, 151655 and 151656, are not)
IDS = {"image_token_id": 900, "video_token_id": 901}
QWEN3_VL = {**TINY["qwen3_vl"], **IDS}
QWEN3_VL_MOE = {**TINY["qwen3_vl_moe"], **IDS, "vision_config": {**QWEN_VISION, "deepstack_visual_indexes": [1]}}
LORA = dict(method="lora", rank=8, adapter_dtype="fp32", state_dtype="fp32")


def _scenario(cfg=QWEN3_VL, **kw):
    kw = {"stack": "torch", "batch": 4, "seq": 128, "device": "cpu", "image_tokens": 64, **kw}
    return Scenario.create(spec_from_config(cfg, "tiny", "config", "test"), **kw)


MEASURED = [  # (id, config, settings); b4 s128, 64 image tokens per sample (256 patches) unless given
    ("frozen-full", QWEN3_VL, dict(method="full")),
    ("frozen-full-b2s32", QWEN3_VL, dict(method="full", batch=2, seq=32, image_tokens=8)),
    ("frozen-lora-all-linear", QWEN3_VL, dict(**LORA, targets="all-linear")),
    ("frozen-lora-autocast", QWEN3_VL, dict(**LORA, targets="q_proj,v_proj", autocast="bf16")),
    ("frozen-full-checkpointing", QWEN3_VL, dict(method="full", grad_checkpointing=True)),
    ("frozen-lora-checkpointing", QWEN3_VL, dict(**LORA, targets="all-linear", grad_checkpointing=True)),
    ("frozen-full-eager", QWEN3_VL, dict(method="full", attention="eager")),
    ("train-vision-full", QWEN3_VL, dict(method="full", train_vision=True)),
    ("train-vision-full-fp32", QWEN3_VL, dict(method="full", dtype="fp32", train_vision=True)),
    ("train-vision-lora-all-linear", QWEN3_VL, dict(**LORA, targets="all-linear", train_vision=True)),
    ("train-vision-lora-bf16-adapters", QWEN3_VL, dict(method="lora", rank=8, adapter_dtype="bf16", state_dtype="bf16",
                                                       targets="all-linear", train_vision=True)),
    ("moe-frozen-full", QWEN3_VL_MOE, dict(method="full")),
    ("moe-train-vision-full", QWEN3_VL_MOE, dict(method="full", train_vision=True)),
]


@pytest.mark.parametrize("cfg, settings", [m[1:] for m in MEASURED], ids=[m[0] for m in MEASURED])
def test_estimate_equals_the_measured_peak(cfg, settings):
    pytest.importorskip("peft")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    sc = _scenario(cfg, **settings)
    measured = measure({**from_scenario(sc), "steps": 2})
    # within 8 bytes: the 0-d fp32 loss and its gradient seed are not ledger terms (as tests/test_families.py)
    assert 0 <= measured["peak_bytes"] - evaluate(sc).peak <= 8


def test_the_trainable_tower_saves_what_its_blocks_keep():
    """The tiny Qwen3-VL tower's saved tensors for 2 × 8 image tokens (64 patches, 16 merged tokens), counted by
    hand from modeling_qwen3_vl.py (and listed by symvram.validate.explain_peak at the backward's peak, CPU: the
    LayerNorm statistics in bf16), and the pixel_values the patch embedding casts to bf16."""
    sc = _scenario(method="full", batch=2, seq=32, image_tokens=8, train_vision=True)
    P, Q, hv, fv, lv, heads, dh, m2, D, b = 64, 16, 48, 80, 2, 4, 12, 4, 2, 2
    block = b * (2 * P * hv + 2 * P * hv + P * 3 * hv + 2 * P * hv + P * hv + P * hv + 2 * P * fv)  # sums, norms,
    block += 4 * heads * P + b * 2 * 2 * P                     # qkv, q k, SDPA out, cat, MLP; logsumexp; LN stats
    once = (b * 2 * P * hv + b * 2 * P + 4 * 2 * P * dh + 8 * 4 * P + 4 * 4 * P   # embedded patches, merger norm;
            + b * (1 + D) * 2 * Q * hv * m2 + b * D * Q * hv * m2 + b * D * 2 * Q)   # rotary; interpolation; mergers
    pixels = b * P * 3 * 2 * 14 * 14
    assert evaluate(sc).terms["act_tower"] == lv * block + once + pixels


def test_train_vision_trains_the_tower_weights():
    frozen, trained = evaluate(_scenario(method="full")), evaluate(_scenario(method="full", train_vision=True))
    tower = spec_from_config(QWEN3_VL, "tiny", "config", "test").tower.params
    assert trained.derived["P_train"] == frozen.derived["P_train"] + tower
    assert trained.terms["grads"] - frozen.terms["grads"] == 2 * tower


def test_image_tokens_are_counted_within_seq():
    """The decoder's sequence stays --seq: the image tokens replace placeholders in it."""
    text, images = evaluate(_scenario(method="full", image_tokens=0)), evaluate(_scenario(method="full"))
    assert text.terms["act_mlp"] == images.terms["act_mlp"]


@pytest.mark.parametrize("cfg, settings, message", [
    (QWEN3_VL, dict(method="full", image_tokens=0, train_vision=True), "takes gradients only from images"),
    (QWEN3_VL, dict(method="full", image_tokens=200), "exceeds --seq 128"),
    (QWEN3_VL, dict(**LORA, targets="attention", train_vision=True), "modelled for all-linear"),
    (QWEN3_VL, dict(**LORA, lora_dropout=0.1, train_vision=True), "--lora-dropout is not modelled"),
    (QWEN3_VL, dict(method="full", train_vision=True, grad_checkpointing=True), "--grad-checkpointing is not"),
    (QWEN3_VL, dict(method="full", gpus=2, zero=3), "--gpus/--zero/--tp is not modelled"),
    (QWEN3_VL, dict(method="qlora", rank=8), "--method qlora is not modelled"),
    (TINY["gemma3"], dict(method="full"), "only Qwen3-VL's image forward is modelled"),
    (TINY["qwen3_vl_moe"], dict(method="full"), "that merger never runs"),
    ({"model_type": "qwen3", **TEXT}, dict(method="full"), "loads no vision tower"),
    (TINY["qwen3_5"], dict(method="full"), "loads no vision tower"),   # Qwen3_5ForCausalLM: text only
])
def test_what_is_not_modelled_is_refused(cfg, settings, message):
    with pytest.raises(UserError, match=message):
        _scenario(cfg, **settings)


def test_the_flags_reach_the_scenario(tmp_path, capsys):
    import json

    from symvram.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3_VL))
    assert main(["estimate", str(path), "--method", "full", "--stack", "torch", "--seq", "128", "--image-tokens", "64",
                 "--train-vision", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["inputs"]["image_tokens"] == 64 and out["inputs"]["train_vision"] is True


@pytest.mark.parametrize("lines, expected", [
    ("freeze_vision_tower: false\nfreeze_multi_modal_projector: false\n", True),
    ("", None),   # LLaMA-Factory's defaults: both frozen
    ("freeze_vision_tower: false\n", "trained apart are not modelled"),   # the projector frozen by default
    ("freeze_multi_modal_projector: false\n", "trained apart are not modelled"),
    ("freeze_language_model: true\n", None),   # warned of: not modelled, left out
])
def test_llamafactory_freeze_vision_tower_is_train_vision(tmp_path, lines, expected):
    """LLaMA-Factory 0.9.5 (hparams/finetuning_args.py:527-538): freeze_vision_tower and freeze_multi_modal_projector
    both false train Qwen3-VL's whole tower (model_utils/visual.py:392-406), which --train-vision models."""
    from symvram.readers.read import read_files

    path = tmp_path / "lf.yaml"
    path.write_text("model_name_or_path: llama-3-8b\nstage: sft\nfinetuning_type: full\n" + lines)
    if isinstance(expected, str):
        with pytest.raises(UserError, match=expected):
            read_files([str(path)])
        return
    reading = read_files([str(path)])
    assert reading.kwargs().get("train_vision") == expected
    if "freeze_language_model" in lines:
        assert any("a frozen language model" in w for w in reading.warnings)


LOADED = [("qwen3_5", dict(method="full")), ("qwen3_5", dict(**LORA, targets="all-linear")),
          ("qwen3_5_moe", dict(method="full"))]


@pytest.mark.parametrize("model_type, settings", LOADED, ids=[f"{m}-{s['method']}" for m, s in LOADED])
def test_image_text_to_text_loads_the_tower_too(model_type, settings):
    """--loader image-text-to-text: Qwen3.5's ForConditionalGeneration (modeling_auto.py), the tower on the card beside
    the decoder (AutoModelForCausalLM builds the text-only Qwen3_5ForCausalLM); a text-only step measured under
    FakeTensorMode on the class the spec names. (Llama 4's cannot train in transformers 5.24: refused.)"""
    pytest.importorskip("peft")
    from symvram.validate.measure import build_model, measure
    from symvram.validate.spec import from_scenario, normalize_spec

    spec = spec_from_config(TINY[model_type], "tiny", "config", "test")
    kw = dict(stack="torch", batch=2, seq=32, device="cpu", **settings)
    text_only, loaded = Scenario.create(spec, **kw), Scenario.create(spec, loader="image-text-to-text", **kw)
    assert text_only.model.tower is None and loaded.model.tower.params > 0
    model = build_model(normalize_spec(from_scenario(loaded)))
    assert type(getattr(model, "get_base_model", lambda: model)()).__name__ == loaded.model.tower.loader
    measured = measure({**from_scenario(loaded), "steps": 2})
    assert 0 <= measured["peak_bytes"] - evaluate(loaded).peak <= 8
    assert evaluate(loaded).terms["weights_tower"] == 2 * loaded.model.tower.params


def test_a_loader_a_text_model_has_not_is_refused():
    with pytest.raises(UserError, match="cannot train; load it as causal-lm"):
        Scenario.create(spec_from_config(TINY["llama4"], "t", "config", "test"), loader="image-text-to-text")
    with pytest.raises(UserError, match="is not a multimodal config"):
        Scenario.create(spec_from_config({"model_type": "qwen3", **TEXT}, "t", "config", "test"),
                        loader="image-text-to-text")
    with pytest.raises(UserError, match="--loader must be one of"):
        Scenario.create(spec_from_config(TINY["qwen3_5"], "t", "config", "test"), loader="seq2seq")


def test_peft_adapts_the_tower_linears_under_all_linear_only():
    """PEFT 0.21.2 on the meta model of the tiny Qwen3-VL: the decoder's target names (q_proj … down_proj) match no
    module of the tower (qkv, proj, linear_fc1, linear_fc2), so --train-vision under LoRA asks for all-linear; all-linear
    adapts every tower linear, r·Σ copies·(d_in + d_out), which a trained tower's adapters count in P_train."""
    peft = pytest.importorskip("peft")
    from test_towers import _meta_model

    r, names = 4, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    tower = spec_from_config(QWEN3_VL, "tiny", "config", "test").tower
    for targets, width in ((names, 0), ("all-linear", tower.lora_width((), all_linear=True))):
        model = peft.get_peft_model(_meta_model(QWEN3_VL, "AutoModelForImageTextToText"),
                                    peft.LoraConfig(r=r, target_modules=targets))
        assert sum(p.numel() for n, p in model.named_parameters() if "lora_" in n and ".visual." in n) == r * width
    assert tower.lora_width(tuple(names), all_linear=False) == 0
    lora = evaluate(_scenario(**{**LORA, "rank": r}, targets="all-linear", train_vision=True))
    assert lora.derived["P_train"] == lora.derived["P_lora"] + r * tower.lora_width((), all_linear=True)


FLOPS = [dict(method="full"), dict(method="full", train_vision=True), dict(**LORA, targets="all-linear"),
         dict(**LORA, targets="all-linear", train_vision=True)]


@pytest.mark.parametrize("settings", FLOPS, ids=["frozen-full", "train-full", "frozen-lora", "train-lora"])
def test_the_step_flops_equal_the_counter(settings):
    """The tower's matmuls (towers.toml [images]: forward always, backward when it trains) beside the decoder's,
    against torch.utils.flop_counter on the step (real CPU tensors)."""
    pytest.importorskip("peft")
    from symvram.ledger.flops import build_flops
    from symvram.symbols import SYMBOLS, sym
    from symvram.validate.measure import count_flops
    from symvram.validate.spec import from_scenario

    sc = _scenario(batch=2, seq=32, image_tokens=8, **settings)
    counted = count_flops(from_scenario(sc))
    values = {sym(k): v for k, v in sc.values().items() if k in SYMBOLS}
    fl = build_flops(sc.structure)
    assert {p: fl.phase_expr(p).xreplace(values) for p in ("forward", "backward")} == \
        {p: counted[p] for p in ("forward", "backward")}


def test_a_shorter_sequence_keeps_the_image_tokens_share():
    """A probe or curve at a shorter seq (diagnose, explain) keeps the image tokens' share of it, as the prompt's."""
    sc = _scenario(method="full", seq=128, image_tokens=64)
    assert sc.with_changes(seq=32).image_tokens == 16 and sc.with_changes(seq=64).image_tokens == 64


def test_explain_refuses_a_trained_tower_and_explains_a_frozen_one():
    from symvram.analysis.explain import explain_context

    with pytest.raises(UserError, match="explain --train-vision"):
        explain_context(_scenario(method="full", train_vision=True))
    from test_towers import REAL_SIZES

    real = Scenario.create(spec_from_config(REAL_SIZES["qwen3-vl-8b"], "qwen3-vl-8b", "config", "test"), method="full",
                           stack="torch", seq=4096, image_tokens=1024)
    ctx = explain_context(real)   # re-derived at a text preset without the images (same_settings)
    assert ctx["other"]["model"].tower is None and "act_images" in evaluate(real).terms


def test_set_image_tokens_is_the_flag():
    """--set image_tokens=N is --image-tokens N (a symbol that is also a setting: checked, and in the structure)."""
    sc = _scenario(method="full", image_tokens=0, overrides={"image_tokens": 64})
    assert sc.image_tokens == 64 and sc.structure.images and evaluate(sc).peak == evaluate(_scenario(method="full")).peak
