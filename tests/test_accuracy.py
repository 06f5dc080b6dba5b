"""Every stored measurement against today's estimate: a change to any term shows up as a named case.

Reads whatever rows exist in benchmarks/results/measurements.jsonl and in the shared calibration set
(../shared/measurements/calibration.jsonl beside the clone, SYMVRAM_CALIBRATION to point elsewhere).
Each case must stay within the accuracy goal (|error| ≤ 2 %) and, where benchmarks/results/accuracy.json
recorded it, within its recorded |error| + 0.05 percentage points; the whole set within median ≤ 0.5 %.
An improvement is not a failure; to tighten the recorded errors, rerun ``python benchmarks/accuracy.py``
and commit accuracy.md/json with the change that explains the difference.
"""
from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest

from symvram.evaluate import evaluate
from symvram.validate.spec import to_scenario

ROOT = Path(__file__).resolve().parents[1]
MEASUREMENTS = ROOT / "benchmarks/results/measurements.jsonl"
CALIBRATION = Path(os.environ.get("SYMVRAM_CALIBRATION", ROOT.parent / "shared/measurements/calibration.jsonl"))
RECORDED = ROOT / "benchmarks/results/accuracy.json"
GOAL_MAX, GOAL_MEDIAN, MARGIN = 0.02, 0.005, 0.0005


def _rows(path: Path, source: str) -> list[tuple[str, dict]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            if "error" not in row and "peak_bytes" in row:
                rows.append((f"{source}:{row.get('name') or row.get('spec', {}).get('name')}", row))
    return rows


CASES = _rows(MEASUREMENTS, "measurements") + _rows(CALIBRATION, "calibration")
# (name, measured bytes) → recorded relative error; names alone repeat across the two sets
RECORDED_ERRORS = {(r["name"], r["measured"]): r["error"] for r in json.loads(RECORDED.read_text())} \
    if RECORDED.exists() else {}


def _error(row: dict) -> float:
    return (evaluate(to_scenario(row.get("spec") or row)).peak - row["peak_bytes"]) / row["peak_bytes"]


def test_the_stored_measurements_are_there():
    assert _rows(MEASUREMENTS, "measurements"), f"no rows in {MEASUREMENTS}"
    if not CALIBRATION.exists():
        pytest.skip(f"the shared calibration set is not at {CALIBRATION} (set SYMVRAM_CALIBRATION)")
    assert len(_rows(CALIBRATION, "calibration")) >= 32


@pytest.mark.parametrize("case", CASES, ids=[name for name, _ in CASES])
def test_each_measurement_within_its_recorded_error(case):
    name, row = case
    err = _error(row)
    recorded = RECORDED_ERRORS.get((row.get("name"), row["peak_bytes"]))
    where = f"{name}: estimate {100 * err:+.4f} % of the measured {row['peak_bytes']:,} B"
    assert abs(err) <= GOAL_MAX, f"{where}, beyond the ±{100 * GOAL_MAX:g} % goal"
    if recorded is not None:
        assert abs(err) <= abs(recorded) + MARGIN, (
            f"{where}; accuracy.json recorded {100 * recorded:+.4f} % (a term changed: which one moved this case?)")


def test_median_error_meets_the_goal():
    errors = [abs(_error(row)) for _, row in CASES]
    assert statistics.median(errors) <= GOAL_MEDIAN, f"median |error| {100 * statistics.median(errors):.3f} %"


@pytest.mark.parametrize("module", ["symvram.validate", "symvram.validate.spec", "symvram.validate.compare"])
def test_validate_doctests(module):
    """The validate package's doctests (pytest's --doctest-modules skips symvram/validate: its measuring
    modules import torch); these modules are torch-free."""
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0, f"{module}: {result}"
