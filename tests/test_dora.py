"""DoRA (PEFT use_dora): the magnitude vector and what its forward saves, measured on tiny models."""
from __future__ import annotations

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.presets import spec_from_config
from symvram.scenario import Scenario

ARCH = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000,
        "tie_word_embeddings": False}
TINY = spec_from_config(ARCH, "tiny", "config", "test")


def test_dora_by_hand():
    """Per target: m (d_out, fp32) trains; saved: the fp32 LoRA result and the bf16 base result (T·d_out each),
    the fp32 weight norm and m/‖W′‖ (d_out each), and m/‖W′‖ − 1 where the input needs a gradient."""
    T, L, sum_out, first_qkv = 128, 2, 64 + 32 + 32 + 64 + 176 + 176 + 64, 64 + 32 + 32
    kw = dict(stack="torch", method="lora", rank=8, batch=2, seq=64)
    lora, dora = evaluate(Scenario.create(TINY, **kw)), evaluate(Scenario.create(TINY, dora=True, **kw))
    assert dora.derived["P_lora"] - lora.derived["P_lora"] == L * sum_out
    assert dora.blocks["activations"] - lora.blocks["activations"] == \
        L * (T * sum_out * (4 + 2) + 8 * sum_out) + 4 * (L * sum_out - first_qkv) == 947_968  # the research's count


def test_dora_refusals():
    with pytest.raises(UserError, match="LoRA variant"):
        Scenario.create(TINY, method="full", dora=True)


WIDE = spec_from_config({**ARCH, "intermediate_size": 1024, "vocab_size": 256}, "wide", "config", "test")


def test_weight_norm_by_hand():
    """down_proj (d_in = 1024, d_out = 64, r = 8), fp32 adapters on a bf16 base, no autocast: eye (lora_A keeps it
    for its gradient), lora_A(eye), ΔW, W in fp32, s·ΔW, W + s·ΔW — the forward peak; under the hf stack's autocast
    lora_A keeps eye's bf16 cast instead, eye is freed once ΔW exists, and the peak is eye + its cast + A(eye) + ΔW
    (bf16). A 4-bit base adds the dequantized bf16 weight and its absmax (QLoRA, from PEFT's source)."""
    from symvram.ledger.activations import dora_weight_norm

    d, n, r = 1024, 1024 * 64, 8
    torch_ = Scenario.create(WIDE, stack="torch", method="lora", rank=8, dora=True)
    bd = evaluate(torch_)
    assert bd.values["rank"] == r
    from symvram.symbols import sym

    def value(sc):
        return int(dora_weight_norm(sc.structure, "down_proj").subs({sym(k): v for k, v in sc.values().items()}))
    assert value(torch_) == 4 * (d * d + r * d + n) + 4 * n + 2 * 4 * n == 5_275_648
    hf = Scenario.create(WIDE, stack="hf", method="lora", rank=8, dora=True)
    assert value(hf) == 4 * d * d + 2 * (d * d + r * d + n)
    qlora = Scenario.create(WIDE, stack="torch", method="qlora", rank=8, dora=True, grad_checkpointing=False)
    assert value(qlora) == 4 * (d * d + r * d + n) + 4 * n + 2 * n + 4 * (n // 64) + 2 * 4 * n
    assert "dora_forward" in bd.moments and "dora_recompute" not in bd.moments
    # FSDP2's MixedPrecisionPolicy gathers the fp32 adapters in bf16: eye (lora_A.weight's dtype), lora_A(eye),
    # ΔW and the weight-sized copies are bf16 (dora.py builds eye in lora_A.weight.dtype; PEFT casts x to it)
    policy = Scenario.create(WIDE, stack="fsdp", method="lora", rank=8, dora=True, zero=3, gpus=2)
    assert policy.structure.fsdp_mixed_precision and policy.values()["bytes_adapter"] == 4
    assert value(policy) == 2 * (d * d + r * d + n) + 2 * 2 * n


def test_qlora_dora_is_refused_by_validate():
    pytest.importorskip("peft")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    sc = Scenario.create(TINY, stack="torch", method="qlora", rank=8, batch=2, seq=64, device="cpu", dora=True)
    with pytest.raises(UserError, match="deepcopy"):
        measure({**from_scenario(sc), "steps": 1})


WEIGHT_NORM_PEAK = [  # the DoRA weight norm is the peak: wide MLP, small vocabulary (relative tolerance)
    (dict(stack="torch"), 0), (dict(stack="hf"), 3e-4),
    # checkpointed: the first-layer recompute moment is over (docs/accuracy.md, "Over after the fix": DoRA)
    (dict(stack="torch", grad_checkpointing=True), 4e-3), (dict(stack="hf", grad_checkpointing=True), 4e-3),
]


@pytest.mark.parametrize("settings,tolerance", WEIGHT_NORM_PEAK, ids=[str(i) for i in range(len(WEIGHT_NORM_PEAK))])
def test_weight_norm_peak_is_measured(settings, tolerance):
    pytest.importorskip("peft")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    sc = Scenario.create(WIDE, method="lora", rank=8, batch=2, seq=64, device="cpu", dora=True, **settings)
    measured = measure({**from_scenario(sc), "steps": 2})
    assert evaluate(sc).peak_moment.startswith("dora_")
    assert abs(measured["peak_bytes"] - evaluate(sc).peak) <= max(8, tolerance * measured["peak_bytes"])


@pytest.mark.parametrize("settings", [dict(stack="torch"), dict(stack="torch", dtype="fp32"), dict(stack="hf")])
def test_estimate_equals_the_measured_peak(settings):
    pytest.importorskip("peft")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    sc = Scenario.create(TINY, method="lora", rank=8, batch=2, seq=64, device="cpu", dora=True, **settings)
    measured = measure({**from_scenario(sc), "steps": 2})
    assert 0 <= measured["peak_bytes"] - evaluate(sc).peak <= 8  # the 0-d loss and its gradient seed
