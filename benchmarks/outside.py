"""The outside set: third parties' published real-GPU figures, kept apart from everything the engine is checked or
built against (no test reads benchmarks/outside.jsonl; nothing is tuned to it).

    python benchmarks/outside.py [--json benchmarks/results/outside.json]

Each line of benchmarks/outside.jsonl is one published figure with its source URL, the quoted words, the setup as
the source gives it and what the source leaves open (and what this check takes for it). Kinds:

* ``oom_seq``: the longest sequence a card trains (a published "max context length" table); symvram's answer is
  ``fit --solve seq`` on that card (searched up to the model's context, or to the row's ``limit`` where the source
  trained beyond it): the caching allocator replayed over the ledger's schedule (modelled, not
  measured) with the card's memory less its CUDA context. A published OOM (no length trains) matches when fit
  finds nothing that fits.
* ``peak``: a published peak for one stated setup on one card, of the quantity ``measured`` names:
  ``allocated`` (``torch.cuda.max_memory_allocated()``: the ledger's peak), ``reserved``
  (``max_memory_reserved()``: the replay's reserved peak with the default allocator, on the card) or ``nvidia-smi``
  (the device level: reserved + the CUDA context + NCCL). ``published`` is in bytes.

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
from symvram.card_memory import card_memory  # noqa: E402
from symvram.presets import load_card  # noqa: E402
from symvram.scenario import Scenario  # noqa: E402

SETTINGS = ("method", "rank", "targets", "lora_dropout", "dtype", "autocast", "optimizer_impl", "batch", "seq",
            "grad_checkpointing", "attention", "stack", "versions")


def predicted(row: dict) -> int | None:
    """symvram's figure for one published row (None: nothing fits, or the card runs out)."""
    settings = {"seq": 1024, **{k: row[k] for k in SETTINGS if k in row}}
    sc = Scenario.create(row["model"], **settings)
    card = load_card(row["card"])
    if row["kind"] == "oom_seq":
        r = fit(sc, card, solve="seq", limit=row.get("limit"))
        return None if r.status == "none" else r.value
    if row["kind"] == "peak":
        cm = card_memory(sc, card, allocator="default")
        level = {"allocated": cm.allocated, "reserved": cm.reserved_peak, "nvidia-smi": cm.device_peak}
        if row["measured"] not in level:
            raise ValueError(f"{row['name']}: measured {row['measured']!r}, expected one of {', '.join(level)}")
        return level[row["measured"]] if cm.fits else None
    raise ValueError(f"{row['name']}: unknown kind {row['kind']!r}")


def error(published: int | None, mine: int | None) -> float:
    """Relative error of ``mine`` against ``published``; an OOM on either side alone is 100 % off."""
    if published is None or mine is None:
        return 0.0 if published == mine else 1.0
    return mine / published - 1


def _shown(row: dict, value: int | None) -> str:
    """A sequence length as it is, bytes in GiB; None as OOM."""
    if value is None:
        return "OOM"
    return f"{value / 2**30:.2f} GiB" if row["kind"] == "peak" else str(value)


def _summary(out: list[dict]) -> dict:
    errors = [abs(r["error"]) for r in out]
    return {"figures": len(out), "median_abs_error": statistics.median(errors),
            "within_10pct": sum(e <= 0.10 for e in errors) / len(errors)}


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
        print(f"{row['name']:<52} published {_shown(row, row['published']):>9}  symvram {_shown(row, mine):>9}  "
              f"{e:+7.1%}")
    summary = _summary(out)
    for kind in sorted({row["kind"] for row in rows}):
        summary[kind] = _summary([r for r, row in zip(out, rows) if row["kind"] == kind])
    sources = len({row["source"].split("/blob/")[0] for row in rows})
    for label, s in ((f"all ({sources} sources)", summary), *((k, summary[k]) for k in sorted(summary) if k in
                                                                  {row["kind"] for row in rows})):
        print(f"{label}: {s['figures']} figures, median |error| {s['median_abs_error']:.1%}, "
              f"{s['within_10pct']:.0%} within 10 %")
    print("(modelled, not measured: the caching allocator's replay and the CUDA context)")
    if args.json:
        args.json.write_text(json.dumps({"rows": out, "summary": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
