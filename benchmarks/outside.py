"""The outside set: third parties' published real-GPU figures, kept apart from everything the engine is checked or
built against (no test reads benchmarks/outside.jsonl; nothing is tuned to it).

    python benchmarks/outside.py [--json benchmarks/results/outside.json]

Each line of benchmarks/outside.jsonl is one published figure with its source URL, the quoted words, the setup as
the source gives it and what the source leaves open (and what this check takes for it). Kinds:

* ``oom_seq``: the longest sequence a card trains (a published "max context length" table); symvram's answer is
  ``fit --solve seq`` on that card: the caching allocator replayed over the ledger's schedule (modelled, not
  measured) with the card's memory less its CUDA context. A published OOM (no length trains) matches when fit
  finds nothing that fits.

Prints one row per figure and the summary the issue asks for: the median of |error| and the fraction of figures
within 10 % (an OOM row counts as within when both say OOM, as 100 % off otherwise).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from symvram.analysis.fit import fit  # noqa: E402
from symvram.presets import load_card  # noqa: E402
from symvram.scenario import Scenario  # noqa: E402

SETTINGS = ("method", "rank", "targets", "batch", "grad_checkpointing", "attention", "stack")


def predicted(row: dict) -> int | None:
    """symvram's figure for one published row (None: nothing fits)."""
    if row["kind"] != "oom_seq":
        raise ValueError(f"{row['name']}: unknown kind {row['kind']!r}")
    sc = Scenario.create(row["model"], seq=1024, **{k: row[k] for k in SETTINGS if k in row})
    r = fit(sc, load_card(row["card"]), solve="seq")
    return None if r.status == "none" else r.value


def error(published: int | None, mine: int | None) -> float:
    """Relative error of ``mine`` against ``published``; an OOM on either side alone is 100 % off."""
    if published is None or mine is None:
        return 0.0 if published == mine else 1.0
    return mine / published - 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the rows and the summary here")
    args = ap.parse_args(argv)
    rows = [json.loads(line) for line in (ROOT / "benchmarks/outside.jsonl").read_text().splitlines() if line.strip()]
    out = []
    for row in rows:
        mine = predicted(row)
        e = error(row["published"], mine)
        out.append({"name": row["name"], "published": row["published"], "symvram": mine, "error": e,
                    "source": row["source"]})
        print(f"{row['name']:<44} published {row['published'] or 'OOM'!s:>7}  symvram {mine or 'OOM'!s:>7}  "
              f"{e:+7.1%}")
    errors = [abs(r["error"]) for r in out]
    summary = {"figures": len(out), "median_abs_error": statistics.median(errors),
               "within_10pct": sum(e <= 0.10 for e in errors) / len(errors)}
    print(f"{summary['figures']} figures: median |error| {summary['median_abs_error']:.1%}, "
          f"{summary['within_10pct']:.0%} within 10 % (modelled, not measured: the caching allocator's replay)")
    if args.json:
        args.json.write_text(json.dumps({"rows": out, "summary": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
