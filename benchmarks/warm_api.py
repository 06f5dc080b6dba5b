"""Warm Python API timings (issue 16 goals: estimate ≤ 0.2 ms, plan over all methods ≤ 20 ms,
sensitivity ≤ 5 ms), each the median of repeated calls after one warm-up call.

    python benchmarks/warm_api.py [--repeat 20] [--json benchmarks/results/warm_api.json]

Each is timed twice: the same call repeated, and with a new ``seq`` on every call (the same structure,
new numbers: what a sweep or a notebook slider does).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from symvram.analysis.plan import plan  # noqa: E402
from symvram.analysis.sensitivity import sensitivity  # noqa: E402
from symvram.api import estimate  # noqa: E402
from symvram.presets import load_card  # noqa: E402
from symvram.scenario import Scenario  # noqa: E402

GOALS_MS = {"estimate 7b --method lora": 0.2, "estimate 7b --method lora, a new seq each call": 0.2,
            "plan 70b on a100-80g (all methods)": 20.0, "plan, a new seq each call": 20.0,
            "sensitivity 7b --method lora": 5.0, "sensitivity, a new seq each call": 5.0}


def median_ms(fn, repeat: int) -> float:
    fn(0)
    times = []
    for i in range(1, repeat + 1):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    card = load_card("a100-80g")
    big = Scenario.create("70b")
    small = Scenario.create("7b", method="lora")
    runs = {
        "estimate 7b --method lora": lambda i: estimate("7b", method="lora"),
        "estimate 7b --method lora, a new seq each call": lambda i: estimate("7b", method="lora", seq=2048 + i),
        "plan 70b on a100-80g (all methods)": lambda i: plan(big, card),
        "plan, a new seq each call": lambda i: plan(big.with_changes(seq=2048 + i), card),
        "sensitivity 7b --method lora": lambda i: sensitivity(small),
        "sensitivity, a new seq each call": lambda i: sensitivity(small.with_changes(seq=2048 + i)),
    }
    results = {}
    for name, fn in runs.items():
        ms = median_ms(fn, max(3, args.repeat // (10 if "plan" in name else 1)))
        results[name] = {"ms": round(ms, 3), "goal_ms": GOALS_MS[name]}
        print(f"{name:48s} {ms:8.2f} ms   (goal ≤ {GOALS_MS[name]} ms){'   over the goal' if ms > GOALS_MS[name] else ''}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
