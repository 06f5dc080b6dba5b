"""--routing worst: the step priced with every token of the micro-batch routed to the same k experts.

The independent source is a measurement with the router forced so (``validate.measure.force_worst_routing``: real
CPU tensors, every experts module's top-k indices overwritten to 0 … k−1): on transformers' grouped_mm experts the
peak equals the balanced estimate to the byte, as integrations/moe.py:436-537 runs every tensor T·k rows long. The
per-expert loop (``experts_implementation="eager"``), which the ledger does not model, shows the instrument sees
routing where the sizes do depend on it.
"""
from __future__ import annotations

import pytest

from symvram.cli import main
from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.presets import spec_from_config
from symvram.scenario import Scenario
from test_families import tiny_config

FORCED = [
    ("qwen3_moe", dict(method="full")),
    ("mixtral", dict(method="lora", rank=8, targets="all-linear")),      # LoRA on the fused experts
    ("gpt_oss", dict(method="lora", rank=8, attention="eager")),          # expert biases: the sorted ids' gather
    ("deepseek_v3", dict(method="full")),                                 # grouped routing, a shared expert
]


def _tiny(model_type: str, **settings) -> Scenario:
    cfg = {**tiny_config(model_type), "num_hidden_layers": 2}
    if "no_rope_layers" in cfg:   # Llama 4's per-layer flags follow the layer count
        cfg["no_rope_layers"] = cfg["no_rope_layers"][:2]
    trainable = "fp32" if settings.get("method") == "lora" else "bf16"
    return Scenario.create(spec_from_config(cfg, "tiny", "config", "test"), stack="torch", batch=2, seq=64,
                           device="cpu", adapter_dtype=trainable if settings["method"] == "lora" else None,
                           state_dtype=trainable, **settings)


@pytest.mark.parametrize("model_type, settings", FORCED, ids=[m for m, _ in FORCED])
def test_the_worst_routing_measured_equals_the_estimate(model_type, settings):
    pytest.importorskip("peft")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    worst = _tiny(model_type, routing="worst", **settings)
    assert from_scenario(worst)["routing"] == "worst"
    measured = measure({**from_scenario(worst), "steps": 2})
    assert measured["device"] == "fake" and measured["spec"]["routing"] == "worst"
    # within 8 bytes: the 0-d fp32 loss and its gradient seed are not ledger terms
    assert 0 <= measured["peak_bytes"] - evaluate(worst).peak <= 8
    assert evaluate(worst).peak == evaluate(_tiny(model_type, **settings)).peak   # worst = balanced there


def _real_peak(spec: dict, forced: bool, experts: str) -> int:
    """One real CPU step's peak (MemTracker), experts run by ``experts`` (transformers' experts interface)."""
    from symvram.validate import measure as M
    from symvram.validate.spec import normalize_spec

    spec = normalize_spec(spec)
    model, optimizer, ids, labels, *_ = M.prepare(spec, None, "cpu")
    model.set_experts_implementation(experts)
    if forced:
        M.force_worst_routing(model)
    tracker = M.PeakTracker(optimizer)
    tracker.track_external(model, optimizer, ids, labels)
    with tracker:
        M._train_steps(spec, model, optimizer, ids, labels, tracker, tracker.set_phase)
    return tracker.peak_bytes


def test_the_forced_router_changes_the_per_expert_loop_not_grouped_mm():
    """The per-expert loop (models/qwen3_moe/modeling_qwen3_moe.py:229-245) allocates per hit expert — under full
    fine-tuning each ``gate_up_proj[expert_idx]`` slice's backward makes a whole (E, 2·d_E, h) gradient to accumulate
    — so forcing every token onto k experts changes its peak; grouped_mm's does not move by a byte."""
    pytest.importorskip("peft")
    from symvram.validate.spec import from_scenario

    spec = {**from_scenario(_tiny("qwen3_moe", method="full")), "steps": 2}
    spec["arch"] = {**spec["arch"], "vocab_size": 128, "moe_intermediate_size": 256}   # the MoE block sets the peak
    assert _real_peak(spec, True, "grouped_mm") == _real_peak(spec, False, "grouped_mm")
    assert _real_peak(spec, True, "eager") != _real_peak(spec, False, "eager")


def test_the_header_says_worst_is_balanced(capsys):
    assert main(["estimate", "qwen3-30b-a3b", "--method", "lora", "--routing", "worst"]) == 0
    out = capsys.readouterr().out
    assert "routing worst (every token on the same k experts) = balanced" in " ".join(out.split())
    assert main(["estimate", "llama-4-scout", "--method", "lora"]) == 0
    assert "E·T rows" in " ".join(capsys.readouterr().out.split())


def test_a_dense_model_refuses_worst_routing(capsys):
    assert main(["estimate", "7b", "--routing", "worst"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--routing worst: 7b (llama) has no routed experts" in err
    assert main(["fit", "7b", "--gpu", "h100-80g", "--routing", "sideways"]) == 2


def test_llama4_has_nothing_to_force():
    pytest.importorskip("peft")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    sc = _tiny("llama4_text", method="full", routing="worst")
    with pytest.raises(UserError, match="all E experts"):
        measure(from_scenario(sc))
