"""Every stored FSDP2 measurement (benchmarks/results/fsdp.json, written by benchmarks/fsdp.py) against
today's estimate: the per-GPU peak within the goal, case by case and as a median. Needs no torch."""
import json
import statistics
from pathlib import Path

import pytest

from symvram.evaluate import evaluate
from symvram.scenario import Scenario

STORED = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "fsdp.json").read_text())


def _error(case: dict) -> float:
    bd = evaluate(Scenario.create(case["case"]["model"], **case["scenario"]))
    return (bd.peak - case["peak"]["measured"]) / case["peak"]["measured"]


@pytest.mark.parametrize("case", STORED["cases"], ids=lambda c: "-".join(str(v) for v in c["case"].values()))
def test_each_measured_peak_within_two_percent(case):
    assert abs(_error(case)) <= STORED["summary"]["goal"]["max"]


def test_median_peak_error_within_half_a_percent():
    errors = [abs(_error(c)) for c in STORED["cases"]]
    assert len(errors) >= 20 and statistics.median(errors) <= STORED["summary"]["goal"]["median"]
    models = {c["case"]["model"] for c in STORED["cases"]}
    assert len(models) >= 2 and {c["case"]["dtype"] for c in STORED["cases"]} == {"fp32", "bf16"}
