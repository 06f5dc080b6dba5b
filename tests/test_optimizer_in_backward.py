"""--optimizer-in-backward: one optimizer per parameter, stepped and zeroed by its post-accumulate-grad hook (torch's
``register_post_accumulate_grad_hook`` recipe, torchtune's ``optimizer_in_bwd``): no two gradients exist at once.
By hand and measured on tiny models under FakeTensorMode (``symvram.validate.measure.InBackward``)."""
from __future__ import annotations

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.scenario import Scenario
from symvram.validate.spec import from_scenario
from test_modules_to_save import tiny  # the tiny Llama of the LoRA tests


def test_by_hand():
    """Full fine-tuning, torch stack (bf16 weights, foreach AdamW, bf16 states), V·h = 64,000: without it the step
    holds every gradient and a state-sized sqrt(v) of all parameters; with it the peak is lm_head's step right after
    the loss backward: its bf16 gradient and its own sqrt(v), 2 · 2 · V·h, beside every saved activation."""
    kw = dict(stack="torch", method="full", batch=1, seq=16)
    before = evaluate(Scenario.create(tiny(), **kw))
    after = evaluate(Scenario.create(tiny(), optimizer_in_backward=True, **kw))
    assert before.peak_moment == "optimizer_step" and after.peak_moment == "head_step"
    assert after.terms["grads"] == after.terms["optimizer_temp"] == 2 * 64 * 1000
    step = next(m for m in after.ledger.moments if m.key == "optimizer_step")
    assert "grads" not in step.terms and "optimizer_temp" not in step.terms   # stepped in backward already
    assert before.peak - after.peak == 2206196 - 1679412   # measured: 2,205,172 → 1,679,420


def test_refusals():
    for kw, what in ((dict(optimizer="adamw8bit"), "--optimizer adamw8bit"), (dict(zero=2, gpus=2), "several GPUs"),
                     (dict(method="lora", modules_to_save="lm_head"), "trainable head modules")):
        with pytest.raises(UserError, match=what):
            Scenario.create(tiny(), **{"method": "full", "optimizer_in_backward": True, **kw})
    with pytest.raises(UserError, match="tied embeddings"):
        Scenario.create(tiny(tie_word_embeddings=True), method="full", optimizer_in_backward=True)
    sc = Scenario.create(tiny(), method="full", optimizer_in_backward=True)
    assert from_scenario(sc)["optimizer_in_backward"] is True
    assert "optimizer_in_backward" not in from_scenario(Scenario.create(tiny(), method="full"))   # same hash


MEASURED = [
    dict(stack="torch", method="full", batch=1, seq=16),
    dict(stack="torch", method="full", batch=1, seq=16, optimizer_impl="forloop"),
    dict(stack="torch", method="full", batch=1, seq=16, arch=dict(vocab_size=32000)),
    dict(stack="hf", method="full", batch=1, seq=16),
    dict(stack="torch", method="full", grad_checkpointing=True, batch=1, seq=16, optimizer="sgd-momentum"),
    dict(stack="torch", method="lora", rank=8, batch=1, seq=16),
    dict(stack="hf", method="lora", rank=8, grad_checkpointing=True, optimizer_impl="forloop"),
]


@pytest.mark.parametrize("settings", MEASURED, ids=[str(i) for i in range(len(MEASURED))])
def test_estimate_equals_the_measured_peak(settings):
    pytest.importorskip("peft")
    from symvram.validate.measure import measure

    kw = dict(batch=2, seq=64, device="cpu", optimizer_in_backward=True)
    kw.update(settings)
    sc = Scenario.create(tiny(**kw.pop("arch", {})), **kw)
    measured = measure({**from_scenario(sc), "steps": 2})
    assert abs(measured["peak_bytes"] - evaluate(sc).peak) <= 8   # the loss scalar


def test_diagnose_offers_it_with_its_price():
    """Full fine-tuning whose optimizer step is the peak: the remedy is priced by the ledger, with what it costs."""
    from symvram.analysis.diagnose import triage_steps

    est = evaluate(Scenario.create("llama-3.1-8b", method="full", stack="torch", seq=512))
    remedies, _ = triage_steps(est, 24 * 2**30, None)
    first = next(r for r in remedies if r.key == "in_backward")   # after the 8-bit states (the precision tier)
    assert first.tier == "method" and first.after.peak_moment == "head_step"
    t = first.after.terms   # lm_head's step: the parameter side, every saved activation, one gradient, one sqrt(v)
    held = t["weights"] + t["buffers"] + t["optimizer_states"] + t["optimizer_steps"] + t["grads"]   # fused: no sqrt(v)
    assert first.after.peak == held + first.after.blocks["activations"] - t["act_logsoftmax"]
    assert t["grads"] == 2 * 128256 * 4096   # V·h in bf16, where every gradient was 2·P
    assert "no gradient accumulation" in first.cost
