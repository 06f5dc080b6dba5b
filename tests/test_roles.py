"""The role table (symvram.ledger.terms.ROLES): every role has a row, every term a role, and what the table
says is what the ledger does — checked against hand-written expectations, not against the table itself."""
from __future__ import annotations

import pytest

from symvram.analysis.diagnose import PARTS
from symvram.ledger.build import build_ledger
from symvram.ledger.comm import build_comm
from symvram.ledger.flops import build_flops
from symvram.ledger.structure import Structure
from symvram.ledger.terms import MOMENTS, ROLES, Phase, Place, Role
from symvram.validate.compare import CATEGORIES, category
from symvram.validate.measure import BREAKDOWN_KEYS

STRUCTURES = [
    Structure(),
    Structure(method="full", master=True, zero=2, optimizer_impl="forloop"),
    Structure(method="full", tied=True, zero=3, offload="optimizer+params"),
    Structure(method="lora", targets=("q_proj", "v_proj"), grad_checkpointing=True, dora=True),
    Structure(method="lora", targets=("q_proj", "down_proj"), dora=True, modules_to_save=("lm_head",)),
    Structure(method="qlora", targets=("q_proj",), optimizer="paged-adamw8bit", zero=3, zero_impl="deepspeed"),
    Structure(method="full", zero=1, zero_impl="deepspeed", offload="optimizer", loss_impl="liger"),
    Structure(method="full", tensor_parallel=True, sequence_parallel=True, loss_impl="chunked"),
    Structure(method="lora", targets=("q_proj",), family="gemma3_text", grad_checkpointing=True, zero=3),
]


def test_every_role_has_a_row():
    assert set(ROLES) == set(Role)
    for role, info in ROLES.items():
        assert info.unit in ("B", "FLOP"), role
        assert info.tp in ("parameters", "activations", "replicated", None), role
        assert info.offload in ("optimizer", "params", "dropped", None), role
        assert info.triage in (*PARTS, None), role
        assert info.measured in (*BREAKDOWN_KEYS, None), role
        assert info.zero_stage in (1, 2, 3, None), role
        assert list(info.lifetime) == sorted(info.lifetime), role   # phase-ordered


@pytest.mark.parametrize("s", STRUCTURES, ids=range(len(STRUCTURES)))
def test_every_term_has_a_role(s):
    led = build_ledger(s)
    for term in led.terms:
        assert isinstance(term.role, Role) and isinstance(term.place, Place), term.key
        assert ROLES[term.role].unit == "B" and term.info.triage in PARTS, term.key
        assert all(isinstance(p, Phase) for p in term.phases), term.key
        assert category(term) in (*CATEGORIES, None), term.key
    assert all(ROLES[t.role].unit == "FLOP" for t in build_flops(s).terms)
    assert all(ROLES[t.role].unit == "B" for t in build_comm(s).terms)


def test_moments_are_the_terms_alive_in_their_phase():
    """Every moment, on one GPU or under any layout, holds exactly the device terms alive in its phase (a layer end:
    of the layer ends, its own), and only moments of MOMENTS."""
    specs = {spec.key: spec for spec in MOMENTS}
    for s in STRUCTURES:
        led = build_ledger(s)
        for m in led.moments:
            assert set(m.terms) == {t.key for t in led.terms if specs[m.key].holds(t)}, (s, m.key)


def test_fsdp2_moments_by_hand():
    """FSDP2's ZeRO-3 moments, written out: the first layer's all-gather and four layer ends appear, the layer ends
    count no saved activation, no gradient and no recomputed layer (their layer-end term holds them), and the end of
    backward is the root's reduce-scatter, not the single GPU's embedding gradient."""
    led = build_ledger(Structure(method="full", zero=3, grad_checkpointing=True))
    keys = [m.key for m in led.moments]
    assert keys[0] == "first_layer_forward"
    assert keys[keys.index("first_layer_backward") - 4:keys.index("first_layer_backward")] == [
        "last_layer_end", "next_layer_end", "second_layer_end", "first_layer_end"]
    moment = {m.key: set(m.terms) for m in led.moments}
    roles = {t.key: t.role for t in led.terms}
    for which in ("last", "next", "second", "first"):
        assert {roles[k] for k in moment[f"{which}_layer_end"]}.isdisjoint(
            {Role.SAVED_ACTIVATION, Role.GRADIENT, Role.GRADIENTS_SO_FAR, Role.RECOMPUTED_ACTIVATION})
        assert [k for k in moment[f"{which}_layer_end"] if roles[k] is Role.LAYER_END] == [f"{which}_layer_end"]
    assert "backward_tail" in build_ledger(Structure(method="full", grad_checkpointing=True)).moments[-2].terms
    assert moment["backward_end"] - {k for k in moment["optimizer_step"]} == {"root_reduce"}
    assert "grads_before_first_layer" not in moment["first_layer_backward"] and "first_layer_end" in moment["first_layer_backward"]


def test_the_table_by_hand():
    """What ZeRO, offload and the moments do to a full fine-tune with an fp32 master, written out by hand."""
    s = Structure(method="full", master=True, optimizer_impl="foreach")
    led = build_ledger(s)
    role = {t.key: t.role for t in led.terms}
    assert role["weights"] is Role.WEIGHT and role["grads"] is Role.GRADIENT and role["master"] is Role.MASTER
    # ZeRO-1 divides the master, the states and the step's temporaries; -2 the gradients too; -3 the weights
    for stage, divided in {1: {"master", "optimizer_states", "optimizer_temp"},
                           2: {"master", "optimizer_states", "optimizer_temp", "grads", "grads_before_first_layer"}}.items():
        per_gpu = build_ledger(Structure(method="full", master=True, zero=stage)).by_key
        assert {k for k in per_gpu if per_gpu[k].label.endswith("/N")} == divided
    # offload of the optimizer: the gradients, master, states and step temporaries to the host; the view dropped
    off = build_ledger(Structure(method="full", master=True, zero=2, offload="optimizer"))
    assert {t.key for t in off.terms if t.block == "host"} == {"grads", "master", "optimizer_states",
                                                                "optimizer_steps", "optimizer_temp"}
    assert "grads_before_first_layer" not in off.by_key
    # the gradients exist from the end of backward: in its two last moments, not before
    with_grads = [m.key for m in led.moments if "grads" in m.terms]
    assert with_grads == ["backward_end", "optimizer_step"]
    # the loss's saved fp32 log-softmax is freed once the loss backward has run
    assert [m.key for m in led.moments if "act_logsoftmax" in m.terms] == ["forward_loss", "loss_backward"]


def test_final_norm_backward_peak_is_measured():
    """A narrow MLP and a tiny vocabulary make the final norm's backward the peak (its five fp32 hidden-sized
    gradients beat the last layer's MLP backward): the estimate equals the measured peak within 0.1 %, so the
    norm's temporary (5·4·T·h = 160 KiB here, 2.8 % of the peak per tensor) is pinned by a measurement."""
    pytest.importorskip("peft")
    from test_families import tiny_config
    from symvram.evaluate import evaluate
    from symvram.presets import spec_from_config
    from symvram.scenario import Scenario
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    cfg = {**tiny_config("llama"), "num_hidden_layers": 2, "intermediate_size": 64, "vocab_size": 32}
    sc = Scenario.create(spec_from_config(cfg, "tiny", "config", "test"), method="lora", rank=8, batch=2, seq=64,
                         device="cpu")
    bd = evaluate(sc)
    assert bd.peak_moment == "final_norm_backward"
    measured = measure({**from_scenario(sc), "steps": 2})["peak_bytes"]
    assert abs(measured - bd.peak) <= 1e-3 * measured


def test_a_term_in_the_wrong_unit_is_refused_when_made():
    """Memory and traffic terms are in bytes, FLOPs terms counts of operations: checked by Term itself."""
    from symvram.ledger.dimensions import DimensionError
    from symvram.ledger.terms import Term
    from symvram.symbols import sym

    P, b_g, T, h, V = sym("P_train"), sym("bytes_grad"), sym("batch") * sym("seq"), sym("hidden"), sym("vocab")
    assert Term("grads", Role.GRADIENT, P * b_g, "G", "gradients").block == "trainable"
    with pytest.raises(DimensionError, match="not B"):
        Term("grads", Role.GRADIENT, P, "G", "a count of gradients, not their bytes")
    with pytest.raises(DimensionError, match="not FLOP"):
        Term("fwd", Role.FORWARD_FLOPS, 2 * T * h * V * b_g, "F", "FLOPs times bytes")
    with pytest.raises(DimensionError, match="different dimensions"):
        Term("mixed", Role.BACKWARD_TEMPORARY, b_g * T * h + 12 * V, "M", "bytes plus a bare count")
