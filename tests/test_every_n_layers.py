"""--selective-checkpointing every:K: transformers' ``every_n_layers`` (modeling_utils.py:3246, from the Trainer's
``gradient_checkpointing_kwargs``) checkpoints layers 0, K, 2K … — ⌈L/K⌉ layers keep only their input, the others
keep their activations; the recompute reruns ⌈L/K⌉ layers. By hand, and measured (bytes and FLOPs) on tiny models."""
from __future__ import annotations

import math

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.scenario import Scenario
from symvram.timing import flops
from symvram.validate.spec import from_scenario
from test_modules_to_save import tiny as tiny_llama  # the tiny Llama of the LoRA tests


def tiny(**changes):
    return tiny_llama(**{"num_hidden_layers": 4, **changes})


@pytest.mark.parametrize("layers, k", [(4, 2), (3, 2), (7, 3)])
def test_by_hand(layers, k):
    """⌈L/k⌉ checkpointed layers keep their bf16 input (and the int64 position ids, once); the L − ⌈L/k⌉ others keep
    what a layer keeps without checkpointing; the recompute reruns ⌈L/k⌉ of the L layers' forward."""
    kw = dict(stack="torch", method="lora", rank=8, batch=2, seq=64)
    every, full = (evaluate(Scenario.create(tiny(num_hidden_layers=layers), grad_checkpointing=True,
                                            checkpoint_every=n, **kw)) for n in (k, 1))
    plain = evaluate(Scenario.create(tiny(num_hidden_layers=layers), **kw))
    n_c, T, h, s = math.ceil(layers / k), 128, 64, 64
    assert every.terms["act_checkpoints"] == n_c * 2 * T * h + 8 * s
    for key in ("act_norms", "act_attention", "act_attention_lse", "act_mlp", "act_lora_inputs", "act_lora_hidden"):
        if key in plain.terms:   # L layers' worth without checkpointing
            assert every.terms[key] * layers == plain.terms[key] * (layers - n_c), key
    assert flops(every.scenario).by_phase["recompute"] * layers == flops(full.scenario).by_phase["recompute"] * n_c
    last_recomputed = (layers - 1) % k == 0
    assert (every.terms["last_layer_recomputed"] != 0) == last_recomputed


def test_refusals_and_reading(tmp_path):
    with pytest.raises(UserError, match="not modelled"):
        Scenario.create(tiny(), method="lora", rank=8, checkpoint_every=2, dora=True)
    with pytest.raises(UserError, match="reentrant"):
        Scenario.create(tiny(), method="lora", rank=8, checkpoint_every=2, checkpoint_impl="reentrant")
    assert Scenario.create(tiny(), method="lora", rank=8, checkpoint_every=2).grad_checkpointing   # implied
    from symvram.readers.read import read_files

    f = tmp_path / "args.json"
    f.write_text('{"model_name_or_path": "llama-3.1-8b", "output_dir": "out", "gradient_checkpointing": true, '
                 '"gradient_checkpointing_kwargs": {"use_reentrant": false, "every_n_layers": 4}}')
    assert read_files([str(f)]).settings["checkpoint_every"].value == 4


MEASURED = [
    dict(stack="torch", method="lora", rank=8, checkpoint_every=2),
    dict(stack="torch", method="lora", rank=8, checkpoint_every=2, arch=dict(num_hidden_layers=3)),
    dict(stack="hf", method="lora", rank=8, checkpoint_every=3, arch=dict(num_hidden_layers=5)),
    dict(stack="torch", method="full", checkpoint_every=2, arch=dict(num_hidden_layers=3)),
]


def traced_step(model, **settings):
    """A step of ``model`` (batch 2, seq 64, CPU) traced with FLOPs and estimated; the FLOPs of the forward and of
    the backward with its recompute must agree. Returns (the trace, the Breakdown)."""
    from symvram.validate.measure import measure

    sc = Scenario.create(model, **{"batch": 2, "seq": 64, "device": "cpu", **settings})
    measured = measure({**from_scenario(sc), "steps": 2}, flops=True)
    f = flops(sc)
    assert (f.by_phase["forward"], f.by_phase["backward"] + f.by_phase["recompute"]) == (
        measured["flops"]["forward"], measured["flops"]["backward"])
    return measured, evaluate(sc)


@pytest.mark.parametrize("settings", MEASURED, ids=[str(i) for i in range(len(MEASURED))])
def test_estimate_equals_the_measured_step(settings):
    """Bytes (where the loss backward is the peak; the recompute moments' own gap is full checkpointing's too) and
    the FLOPs of forward, backward and the recompute of ⌈L/k⌉ layers."""
    pytest.importorskip("peft")
    measured, est = traced_step(tiny(**settings.get("arch", {})),
                                **{k: v for k, v in settings.items() if k != "arch"})
    if est.peak_moment == "loss_backward":
        assert abs(measured["peak_bytes"] - est.peak) <= 8
