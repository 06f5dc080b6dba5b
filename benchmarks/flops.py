"""Predicted vs counted FLOPs of every measured case (benchmarks/cases.jsonl), at a small seq.

    python benchmarks/flops.py                 # every case at seq 128 (needs the validate extra)
    python benchmarks/flops.py --seq 256 --limit 10

For each case the spec is run for one training step under FakeTensorMode with
``torch.utils.flop_counter.FlopCounterMode`` (symvram.validate.measure; the CPU SDPA kernels and
grouped_mm registered with the counter's own formulas) and set beside the FLOPs ledger
(symvram.timing.flops): forward, backward (the checkpointed recompute inside it) and their total.
Requirement: within 0.5 % for every case. What the counter does not count, and neither does the
ledger: elementwise work (norms, activations, softmax, the loss, the optimizer's update) and causal
masking (attention is the full s×s score matrix, as the counter's formulas have it).
Writes benchmarks/results/flops.md and flops.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from symvram.timing import flops  # noqa: E402
from symvram.validate.spec import normalize_spec, to_scenario  # noqa: E402

TOLERANCE = 0.005


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--limit", type=int, default=0, help="first N cases only")
    ap.add_argument("--every", type=int, default=1, help="every K-th case only (a spread over the models)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "flops"))
    a = ap.parse_args(argv)
    from symvram.validate.measure import count_flops

    cases = [json.loads(line) for line in (ROOT / "benchmarks" / "cases.jsonl").read_text().splitlines() if line.strip()]
    cases = cases[::max(1, a.every)]
    if a.limit:
        cases = cases[:a.limit]
    rows, worst = [], 0.0
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for case in cases:
        spec = {**normalize_spec(case), "seq": a.seq, "steps": 1}
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            counted = count_flops(spec)
        f = flops(to_scenario(spec))
        pred = {"forward": f.by_phase["forward"], "backward": f.by_phase["backward"] + f.by_phase["recompute"],
                "total": f.per_step}
        err = {k: (pred[k] - counted[k]) / counted[k] for k in pred}
        worst = max(worst, *(abs(e) for e in err.values()))
        rows.append({"name": case.get("name"), "predicted": pred, "counted": {k: counted[k] for k in pred},
                     "error": err, "seconds": round(time.perf_counter() - t0, 1)})
        write(out, a.seq, rows, worst, len(cases))   # after every case: an interrupted run keeps its results
        print(f"{case.get('name')}: total predicted {pred['total']:,} counted {counted['total']:,} "
              f"error {100 * err['total']:+.4f} %", file=sys.stderr, flush=True)
    print(write(out, a.seq, rows, worst, len(cases)))
    return 0 if worst <= TOLERANCE else 1


def write(out: Path, seq: int, rows: list, worst: float, total: int) -> str:
    Path(str(out) + ".json").write_text(json.dumps({"seq": seq, "cases": rows, "worst_error": worst}, indent=1))
    lines = [f"# FLOPs: the ledger against FlopCounterMode (every case at seq {seq}, one step; {len(rows)} of {total} cases)", "",
             "| case | predicted | counted | forward error | backward error | total error |", "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['predicted']['total']:,} | {r['counted']['total']:,} | "
                     + " | ".join(f"{100 * r['error'][k]:+.4f} %" for k in ("forward", "backward", "total")) + " |")
    lines += ["", f"worst |error|: {100 * worst:.4f} % (requirement: within {100 * TOLERANCE:g} %). Matmul-class ops only; "
              "causal masking not discounted; elementwise work and the optimizer's update not counted."]
    text = "\n".join(lines) + "\n"
    Path(str(out) + ".md").write_text(text)
    return text


if __name__ == "__main__":
    sys.exit(main())
