"""Evaluations per second of the lambdified peak over a numpy grid (goal: at least 1e6 per second).

The peak — a SymPy Max over the moments of the step — is lambdified once (``evaluate.grid_function``)
with seq, batch and rank free, then evaluated on a seq × batch × rank grid of numpy arrays. A few grid
points are checked against the exact ``evaluate`` first, so the speed is that of right answers.

    python3 benchmarks/grid_eval.py                 # 7b LoRA, 1,000,000 configurations
    python3 benchmarks/grid_eval.py --model llama-3-8b --method qlora --points 100
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from symvram.evaluate import evaluate, grid_function, peak_expr  # noqa: E402
from symvram.ledger import build_ledger  # noqa: E402
from symvram.scenario import Scenario  # noqa: E402

GOAL = 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="7b")
    ap.add_argument("--method", default="lora", choices=("lora", "qlora"))
    ap.add_argument("--points", type=int, default=100, help="grid points per axis (default 100: 1e6 in all)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs; the best is reported")
    args = ap.parse_args()

    sc = Scenario.create(args.model, method=args.method)
    t0 = time.perf_counter()
    led = build_ledger(sc.structure)
    fn = grid_function(led, peak_expr(led), ("seq", "batch", "rank"), sc.values())
    setup = time.perf_counter() - t0

    seq = np.linspace(128, 8192, args.points).round()
    batch = np.linspace(1, 64, args.points).round()
    rank = np.linspace(1, 256, args.points).round()
    S, B, R = np.meshgrid(seq, batch, rank, indexing="ij", sparse=True)
    n = S.size * B.size * R.size

    peaks = np.broadcast_to(fn(S, B, R), (len(seq), len(batch), len(rank)))
    for i, j, k in ((0, 0, 0), (len(seq) // 2, len(batch) // 3, len(rank) - 1), (-1, -1, -1)):
        exact = evaluate(sc.with_changes(seq=int(seq[i]), batch=int(batch[j]), rank=int(rank[k]))).peak
        assert abs(peaks[i, j, k] - exact) <= len(led.terms), (peaks[i, j, k], exact)

    best = float("inf")
    for _ in range(args.repeat):
        t = time.perf_counter()
        fn(S, B, R)
        best = min(best, time.perf_counter() - t)
    rate = n / best
    print(f"{sc.model.name} {sc.method}: peak lambdified in {setup:.2f} s; {n:,} configurations "
          f"(seq × batch × rank) in {best * 1e3:.1f} ms = {rate:,.0f} evaluations/s "
          f"({'meets' if rate >= GOAL else 'below'} the goal of {GOAL:,.0f}/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
