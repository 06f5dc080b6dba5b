"""Reserved-peak agreement: the ledger's allocation schedule against the traced run's, each replayed through the
caching-allocator model (symvram/allocator.py), per allocator setting (default, expandable segments).

The traced side is the stored replay of each measured row (``allocator`` in benchmarks/results/measurements.jsonl,
written by ``symvram validate``); the ledger side is ``card_memory.schedule_peaks`` of the row's spec. No re-trace.

    python benchmarks/reserved_agreement.py [--rows N] [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from symvram.card_memory import schedule_peaks  # noqa: E402
from symvram.validate.spec import to_scenario  # noqa: E402

MEASUREMENTS = ROOT / "benchmarks" / "results" / "measurements.jsonl"
SETTINGS = ("default", "expandable")


def traced_rows(path: Path = MEASUREMENTS) -> list[dict]:
    """The stored rows that keep a traced reserved replay."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if "error" not in r and r.get("allocator")]


def assess(row: dict) -> dict:
    """Ledger-schedule vs traced reserved peak for one row, per allocator setting."""
    ledger = schedule_peaks(to_scenario(row["spec"]))
    out = {"name": row["name"]}
    for s in SETTINGS:
        est, got = ledger[s]["reserved_peak"], row["allocator"][s]["reserved_peak"]
        out[s] = {"ledger": est, "traced": got, "error": (est - got) / got if got else 0.0}
    return out


def summary(results: list[dict], setting: str) -> str:
    errs = [r[setting]["error"] for r in results if setting in r]
    if not errs:
        return f"{setting}: no rows"
    worst = max(results, key=lambda r: abs(r[setting]["error"]) if setting in r else -1)
    within = sum(abs(e) <= 0.01 for e in errs)
    return (f"{setting}: within 1 % on {within}/{len(errs)}, median |err| "
            f"{100 * statistics.median(abs(e) for e in errs):.2f} %, worst {100 * worst[setting]['error']:+.1f} % "
            f"({worst['name']})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=None, help="only the first N rows")
    ap.add_argument("--json", action="store_true", help="print the per-row results as JSON lines")
    a = ap.parse_args(argv)
    results = []
    for row in traced_rows()[: a.rows]:
        try:
            results.append(assess(row))
        except Exception as e:  # a family the ledger refuses: listed, not counted
            print(f"{row['name']}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:80]})")
            continue
        r = results[-1]
        print(json.dumps(r) if a.json else f"{r['name']:70s} " + "  ".join(
            f"{s} {r[s]['ledger'] / 1e9:8.3f} vs {r[s]['traced'] / 1e9:8.3f} GB {100 * r[s]['error']:+6.2f} %"
            for s in SETTINGS))
    for s in SETTINGS:
        print(summary(results, s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
