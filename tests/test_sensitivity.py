"""sensitivity: symbolic derivatives checked by hand and against finite differences of evaluate()."""
import json

import pytest

from symvram.analysis.sensitivity import compare, sensitivity
from symvram.cli import main
from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.scenario import Scenario
from symvram.symbols import sym

REFERENCE = dict(method="lora", rank=64, seq=2048, batch=4)


def reference():
    return Scenario.create("7b", **REFERENCE)


@pytest.mark.parametrize("knob", ["seq", "batch", "rank"])
def test_derivative_equals_finite_difference(knob):
    # with SDPA the moments are linear in s, b and r: one step of the knob moves the active moment by
    # exactly ∂/∂x (each term is rounded up to whole bytes, so allow a byte per term)
    sc = reference()
    res = sensitivity(sc)
    bd = evaluate(sc)
    up = evaluate(sc.with_changes(**{knob: getattr(sc, knob) + 1}))
    step = up.moments[res.moment] - bd.moments[res.moment]
    assert res.row(knob).value == pytest.approx(step, abs=len(bd.terms))


def test_bytes_weight_derivative_is_P_by_hand():
    res = sensitivity(Scenario.create("7b", method="full"), knobs=["bytes_weight"])
    row = res.row("bytes_weight")
    assert row.derivative == sym("P")          # the weights term P·β_w is the only one with β_w
    assert row.value == 7e9
    assert row.elasticity == pytest.approx(14e9 / evaluate(Scenario.create("7b", method="full")).peak)


def test_vocab_derivative_by_hand():
    # LoRA on the nominal 7b (P given): V enters the loss backward only through log_softmax kept in fp32
    # (b·s·V·4) and the two fp32 vocabulary-sized gradients (2·b·s·V·4)
    row = sensitivity(reference(), knobs=["vocab"]).row("vocab")
    b, s, four = sym("batch"), sym("seq"), sym("bytes_fp32")
    assert row.derivative - 3 * b * four * s == 0
    assert row.value == 3 * 4 * 4 * 2048


def test_elasticity_definition_and_ranking():
    res = sensitivity(reference())
    for r in res.rows:
        assert r.elasticity == pytest.approx(r.value * r.at / res.peak)
    assert [abs(r.elasticity) for r in res.rows] == sorted((abs(r.elasticity) for r in res.rows), reverse=True)
    assert "rank" in [r.knob for r in res.rows] and "quant_bits" not in [r.knob for r in res.rows]


def test_full_has_no_rank_knob():
    assert "rank" not in [r.knob for r in sensitivity(Scenario.create("7b", method="full")).rows]
    with pytest.raises(UserError, match="does not apply to --method full"):
        sensitivity(Scenario.create("7b", method="full"), knobs=["rank"])


def test_reference_seq_beats_rank():
    sc = reference()
    c = compare(sensitivity(sc), "seq", "rank")
    assert c.ratio > 10
    # the halvings are re-estimates, checked here by two independent evaluations each
    peak = evaluate(sc).peak
    assert c.halved["seq"] == (1024, peak - evaluate(sc.with_changes(seq=1024)).peak)
    assert c.halved["rank"] == (32, peak - evaluate(sc.with_changes(rank=32)).peak)
    assert c.halved["seq"][1] > 10 * c.halved["rank"][1]


def test_cli_json_contract(capsys):
    assert main(["sensitivity", "7b", "--method", "lora", "--rank", "64", "--seq", "2048", "--batch", "4",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    res = sensitivity(reference())
    assert [k["knob"] for k in data["knobs"]] == [r.knob for r in res.rows]
    first = data["knobs"][0]
    assert {"derivative_latex", "value", "elasticity"} <= set(first)
    assert first["elasticity"] == res.rows[0].elasticity
    assert data["comparison"]["a"] == "seq" and data["comparison"]["b"] == "rank"
    assert f"{res.row('seq').elasticity / res.row('rank').elasticity:.1f}×" in data["comparison"]["explanation"][0]


def test_cli_table_says_why(capsys):
    assert main(["sensitivity", "7b", "--method", "lora", "--rank", "64", "--seq", "2048", "--batch", "4"]) == 0
    out = capsys.readouterr().out
    assert "why seq moves the peak" in out and "rank 64 → 32 saves" in out and "seq 2048 → 1024 saves" in out


@pytest.mark.parametrize("argv,needle", [
    (["--knobs", "rank"], "does not apply to --method full"),
    (["--knobs", "foo"], "unknown symbol 'foo'"),
    (["--method", "lora", "--compare", "seq"], "--compare takes two knobs"),
    (["--method", "lora", "--knobs", "seq,rank", "--compare", "seq,batch"], "--compare batch"),
])
def test_cli_errors_are_one_line_exit_2(capsys, argv, needle):
    assert main(["sensitivity", "7b", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
