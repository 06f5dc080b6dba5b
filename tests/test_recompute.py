"""Checkpointed LoRA on down_proj: the last layer's recompute peaks inside down_proj's LoRA forward (its input, the
input's cast to the adapters' fp32, the base result, the MLP's input and the backward's hidden-sized gradients
beside the rebuilt saved tensors) — higher than the MLP backward once the vocabulary no longer hides it (a fused
loss, TRL's preference objectives, a small vocabulary). By hand, and measured on tiny models under FakeTensorMode."""
from __future__ import annotations

import pytest

from symvram.evaluate import evaluate
from symvram.presets import spec_from_config
from symvram.scenario import Scenario
from symvram.validate.spec import from_scenario

ARCH = {"model_type": "qwen2", "hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 64,
        "tie_word_embeddings": True}


def _scenario(arch=None, **kw):
    spec = spec_from_config({**ARCH, **(arch or {})}, "tiny", "config", "test")
    return Scenario.create(spec, **{"method": "lora", "rank": 8, "targets": "all-linear", "grad_checkpointing": True,
                                    "batch": 2, "seq": 256, "stack": "hf", "device": "cpu", **kw})


def test_the_moment_by_hand():
    """At the recompute of down_proj's LoRA forward, beyond the rebuilt layer (T = b·s tokens, bf16 weights and
    activations, fp32 adapters): the input cast to fp32 (4·T·d_ff), the input (2·T·d_ff), the base result (2·T·h),
    the MLP's input (2·T·h) and three hidden-sized gradients of the backward above (3 · 2·T·h)."""
    bd = evaluate(_scenario())
    T, h, f = 2 * 256, 128, 512
    assert bd.terms["recompute_lora_output"] == 4 * T * f + 2 * T * f + 2 * T * h + 2 * T * h + 3 * 2 * T * h
    assert bd.peak_moment == "recompute_lora_output"
    # the MLP backward's moment shares everything but the transient: 3 d_ff-wide gradients and the incoming one,
    # down_proj's fp32 LoRA gradients (r·(d_ff + h)) made and what only it saved freed (under the hf stack's bf16
    # autocast: lora_A's bf16 cast of its input, 2·T·d_ff, and lora_B's r-wide bf16 input)
    mlp_backward = 3 * 2 * T * f + 2 * T * h + 4 * 8 * (f + h) - (2 * T * f + 2 * T * 8)
    assert (bd.moments["recompute_lora_output"] - bd.moments["recompute"]
            == bd.terms["recompute_lora_output"] - mlp_backward)
    assert "recompute_lora_output" not in evaluate(_scenario(targets="q_proj,v_proj")).terms
    assert "recompute_lora_output" not in evaluate(_scenario(dora=True)).terms   # DoRA's forward has its own moments


@pytest.mark.parametrize("settings", [
    {"seq": 512},                                                   # d_ff = 4h: the tiny Qwen2
    {"arch": {"intermediate_size": 352}, "batch": 1, "seq": 384},   # another d_ff / h ratio
    {"targets": "gate_proj,up_proj,down_proj", "seq": 512},
    {"adapter_dtype": "bf16"},   # the MLP backward binds: down_proj's input is freed by then (_output_projection_done)
    {"method": "full"},          # the first layer's MLP backward: its checkpointed input still alive
], ids=["qwen2", "dff-352", "mlp-only", "bf16-adapters-mlp-backward", "full-first-layer"])
def test_estimate_equals_the_measured_peak(settings):
    pytest.importorskip("peft")
    from symvram.validate.measure import measure

    settings = dict(settings)
    sc = _scenario(settings.pop("arch", None), **settings)
    measured = measure({**from_scenario(sc), "steps": 2, "device": "fake"})
    assert abs(measured["peak_bytes"] - evaluate(sc).peak) <= 8, (measured["peak_phase"], evaluate(sc).peak_moment)
