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
    with pytest.raises(UserError, match="QLoRA is not modelled yet"):
        Scenario.create(TINY, method="qlora", dora=True)


@pytest.mark.parametrize("settings", [dict(stack="torch"), dict(stack="torch", dtype="fp32"), dict(stack="hf")])
def test_estimate_equals_the_measured_peak(settings):
    pytest.importorskip("peft")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    sc = Scenario.create(TINY, method="lora", rank=8, batch=2, seq=64, device="cpu", dora=True, **settings)
    measured = measure({**from_scenario(sc), "steps": 2})
    assert 0 <= measured["peak_bytes"] - evaluate(sc).peak <= 8  # the 0-d loss and its gradient seed
