"""What the traces of other training programs' own model code share (benchmarks/torchtune_trace.py,
benchmarks/litgpt_trace.py): symvram's estimate of a stored row, and the loop that traces the cases and writes
the rows with their versions to benchmarks/results/NAME.json.

    run_cases("torchtune_trace", CASES, sys.argv[1:], config=config, scenario=scenario, trace=trace,
              versions=versions, notes=OPEN)
"""
from __future__ import annotations

import json
from pathlib import Path


def estimate(row: dict, source: str) -> int | None:
    """``symvram estimate``'s peak for a stored row (None where the stack refuses it)."""
    from symvram.errors import UserError
    from symvram.evaluate import evaluate
    from symvram.presets import spec_from_config
    from symvram.scenario import Scenario

    try:
        return evaluate(Scenario.create(spec_from_config(row["config"], row["case"], "config", source),
                                        **row["scenario"])).peak
    except UserError:
        return None


def run_cases(name: str, cases, argv: list[str], *, config, scenario, trace, versions, notes: dict | None = None):
    """Trace the cases named in ``argv`` (every case without one, then written to benchmarks/results/NAME.json),
    each row printed as it finishes: its settings, the trace, the versions, the estimate and any open note."""
    names = set(argv) or {case for case, _, _ in cases}
    rows = []
    for case, arch, run in cases:
        if case in names:
            row = {"case": case, "arch": arch, "run": run, "config": config(arch), "scenario": scenario(run),
                   **trace(arch, run), "versions": versions()}
            row["estimate"] = estimate(row, name)
            if case in (notes or {}):
                row["open"] = notes[case]
            print(json.dumps(row), flush=True)
            rows.append(row)
    if not argv:
        (Path(__file__).parent / "results" / f"{name}.json").write_text(json.dumps(rows, indent=1) + "\n",
                                                                          encoding="utf-8")
