"""--loss-impl: torchtune's chunked cross-entropy measured on tiny models; Liger's fused linear cross-entropy and
Cut Cross-Entropy modelled from their source (GPU kernels only) and checked against hand arithmetic."""
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


def test_chunked_loss_keeps_one_chunk_of_fp32_logits_and_gradients():
    T, V, c = 2 * 64, 1000, 8
    torch_ = evaluate(Scenario.create(TINY, stack="torch", method="lora", rank=8, batch=2, seq=64))
    chunked = evaluate(Scenario.create(TINY, stack="torch", method="lora", rank=8, batch=2, seq=64,
                                       loss_impl="chunked"))
    assert chunked.terms["logits_fp32"] == 4 * T * V // c and chunked.terms["loss_backward_temp"] == 8 * T * V // c
    assert chunked.terms["act_logsoftmax"] == torch_.terms["act_logsoftmax"] == 4 * T * V
    assert chunked.peak_moment == "forward_loss"  # the research's measurement: the peak moves to the forward


def test_liger_and_cce_have_no_vocabulary_sized_logits():
    sc = Scenario.create("llama-3.1-8b", method="lora", rank=16, seq=8192, grad_checkpointing=True)
    T, V, h = 8192, 128256, 4096
    liger = evaluate(sc.with_changes(loss_impl="liger"))
    assert liger.terms["logits"] == 2 * 256 * V  # chunk = next_pow2(⌈T / ⌈V/h⌉⌉) = 256 rows of bf16 logits
    assert liger.terms["act_logsoftmax"] == 2 * T * h + 4 * T and liger.terms["loss_backward_temp"] == 0
    cce = evaluate(sc.with_changes(loss_impl="cce"))
    assert cce.terms["act_logsoftmax"] == 4 * T + 4 * V
    assert cce.terms["loss_backward_temp"] == 2 * T * h + 12 * V
    assert evaluate(sc).peak > liger.peak and evaluate(sc).peak > cce.peak


def test_cce_refuses_fp32_hidden_states():
    with pytest.raises(UserError, match="Cut Cross-Entropy asserts 16-bit hidden states"):
        Scenario.create("llama-3-8b", method="qlora", loss_impl="cce")


@pytest.mark.parametrize("settings", [dict(method="lora", rank=8), dict(method="full"),
                                      dict(method="lora", rank=8, grad_checkpointing=True)])
def test_chunked_estimate_against_the_measured_peak(settings):
    pytest.importorskip("peft")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    sc = Scenario.create(TINY, stack="torch", batch=2, seq=64, device="cpu", loss_impl="chunked", **settings)
    measured = measure({**from_scenario(sc), "steps": 2})
    assert measured["peak_phase"] == "step2:forward"
    # within 1,072 bytes (0.04 %): the loss loop's scalars, not in the ledger
    assert 0 <= measured["peak_bytes"] - evaluate(sc).peak <= 1072
