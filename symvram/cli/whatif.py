"""``symvram whatif``: change any symbol and see both ledgers, term by term, with the change."""
from __future__ import annotations

import argparse
import json

from ..stacks import summary as stack_summary
from ..analysis.whatif import WhatIf, whatif
from ..ledger.terms import BLOCKS
from ..present.tables import BLOCK_TITLES, render_rows, to_json
from ..present.units import fmt_bytes, fmt_flops
from ..symbols import latex
from .common import add_model_argument, add_output_arguments, add_scenario_arguments, provenance_dict, scenario_from_args, write_output

HELP = """\
The scenario described by the other options is the "before"; each --set SYMBOL=VALUE is the change.
rank, batch and seq change the run; any other registry symbol (hidden, layers, vocab, intermediate,
bytes_state, bytes_act, quant_bits …) is overridden in the formulas. Both ledgers are shown term by
term with the difference, then per block, per moment of the step, and the peak.

examples:
  symvram whatif llama-3-8b --method lora --set seq=4096 --set rank=16
  symvram whatif 7b --method full --set bytes_state=1            # 8-bit optimizer states
  symvram whatif 7b --method lora --set layers=40 --set hidden=5120 --format json
"""


def register(sub) -> None:
    p = sub.add_parser("whatif", help="both ledgers and the change when symbols take other values",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p)
    add_scenario_arguments(p)
    p.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    add_output_arguments(p)
    p.set_defaults(func=run)


def _signed(n: int, units: str) -> str:
    return ("+" if n > 0 else "") + fmt_bytes(n, units).split()[0]


def _value(table: dict[str, int], key: str, units: str) -> str:
    """A term's or moment's bytes, or a dash where that ledger has no such term."""
    return fmt_bytes(table[key], units).split()[0] if key in table else "—"


def _number(v: int | float) -> str:
    return f"{v:,}" if isinstance(v, int) or float(v).is_integer() else f"{v:g}"


def render(w: WhatIf, units: str, fmt: str) -> str:
    md = fmt == "markdown"
    code = (lambda s: f"`{s}`") if md else (lambda s: s)
    b, a = w.before, w.after
    sc = b.scenario
    change = ", ".join(f"{n} {_number(x)} → {_number(y)}" for n, x, y in w.symbol_values())
    lines = [("## " if md else "") + f"{sc.model.name} · {sc.method}: what if {change}", stack_summary(sc), ""]
    rows = [["block", "term", "formula", f"before ({units})", f"after ({units})", f"Δ ({units})"]]
    terms = w.terms()
    for block in dict.fromkeys(t.block for t in terms):
        for t in (t for t in terms if t.block == block):
            rows.append([block, t.key, code(latex(t.expr)), _value(b.terms, t.key, units), _value(a.terms, t.key, units),
                         _signed(w.term_delta(t.key), units)])
    lines += [render_rows(rows, "lllrrr", fmt), ""]
    rows = [["block", f"before ({units})", f"after ({units})", f"Δ ({units})"]]
    for block in BLOCKS:
        rows.append([BLOCK_TITLES[block], fmt_bytes(b.blocks[block], units).split()[0],
                     fmt_bytes(a.blocks[block], units).split()[0], _signed(w.block_delta(block), units)])
    rows.append(["ledger total", fmt_bytes(b.ledger_total, units).split()[0], fmt_bytes(a.ledger_total, units).split()[0],
                 _signed(a.ledger_total - b.ledger_total, units)])
    lines += [render_rows(rows, "lrrr", fmt), ""]
    rows = [["moment of the step", f"before ({units})", f"after ({units})", f"Δ ({units})"]]
    for m in w.moments():
        mark = "".join((" ← peak before" if m.key == b.peak_moment else "", " ← peak after" if m.key == a.peak_moment else ""))
        rows.append([m.label + mark, _value(b.moments, m.key, units), _value(a.moments, m.key, units),
                     _signed(w.moment_delta(m.key), units)])
    lines += [render_rows(rows, "lrrr", fmt), ""]
    labels = {m.key: m.label for m in w.moments()}
    lines.append(f"peak: {fmt_bytes(b.peak, units)} ({labels[b.peak_moment]}) → {fmt_bytes(a.peak, units)} "
                 f"({labels[a.peak_moment]}): {_signed(w.peak_delta, units)} {units} "
                 f"({100 * w.peak_delta / b.peak:+.1f} %)")
    t = w.time()
    lines.append(f"time: {fmt_flops(t['before']['flops_per_step'])} → {fmt_flops(t['after']['flops_per_step'])} matmul "
                 f"FLOPs per step, {t['flops_per_token_change_percent']:+.1f} % per token (step times: estimate --gpu)")
    return "\n".join(lines)


def to_json_whatif(w: WhatIf) -> dict:
    return {
        "changes": {n: {"before": x, "after": y} for n, x, y in w.symbol_values()},
        "before": to_json(w.before), "after": to_json(w.after),
        "delta": {"terms": {t.key: w.term_delta(t.key) for t in w.terms()},
                  "blocks": {blk: w.block_delta(blk) for blk in BLOCKS},
                  "moments": {m.key: w.moment_delta(m.key) for m in w.moments()},
                  "peak": w.peak_delta},
        "time": w.time(),
    }


def run(args) -> int:
    sc = scenario_from_args(args, overrides=None)   # --set is the change, not part of the "before"
    w = whatif(sc, dict(args.set))
    text = json.dumps({**to_json_whatif(w), **provenance_dict(args, sc)}, indent=2) if args.format == "json" else render(w, args.units, args.format)
    write_output(text, args.output, args.force)
    return 0
