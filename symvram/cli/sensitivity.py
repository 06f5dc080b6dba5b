"""``symvram sensitivity``: ∂peak/∂x for each knob, its value, the elasticity, ranked — and why."""
from __future__ import annotations

import argparse
import json

from ..stacks import summary as stack_summary
from ..analysis.sensitivity import Comparison, SensitivityResult, compare, sensitivity
from ..errors import UserError
from ..present.tables import render_rows
from ..present.units import UNITS, fmt_bytes
from ..symbols import SYMBOLS, text
from .common import add_model_argument, add_output_arguments, add_scenario_arguments, provenance_dict, scenario_from_args, write_output

HELP = """\
Differentiates the peak — the active moment of the step, derived quantities expanded — with respect
to each knob that applies to the method (seq, batch, rank, layers, hidden, vocab, bytes per element …),
evaluates the derivative at the point, and ranks the knobs by elasticity x/peak · ∂peak/∂x: the percent
change of the peak per percent change of the knob, so tokens, ranks and bytes compare. Two knobs are
compared (default seq and rank when both apply, else the top two): why one moves memory more, and what
halving each saves, re-estimated.

examples:
  symvram sensitivity 7b --method lora --rank 64 --seq 2048 --batch 4
  symvram sensitivity llama-3-8b --method qlora --knobs seq,batch,rank,quant_bits --format json
  symvram sensitivity 7b --method full --compare batch,layers
"""


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected a comma list of symbol names, got {text!r}")
    return names


def register(sub) -> None:
    p = sub.add_parser("sensitivity", help="which knob moves the peak most, from the symbolic derivative",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p)
    add_scenario_arguments(p)
    p.add_argument("--knobs", type=_names, help="comma list of symbols to differentiate by (default: the usual "
                                                "knobs that apply to the method)")
    p.add_argument("--compare", type=_names, metavar="A,B", help="the two knobs to compare (default seq,rank)")
    p.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    add_output_arguments(p)
    p.set_defaults(func=run)


def amount(n: float, units: str) -> str:
    """Bytes in the card unit, or in its mega unit when under one of those (derivatives are small)."""
    small = {"GiB": "MiB", "GB": "MB"}.get(units, units)
    return fmt_bytes(n, units if abs(n) >= UNITS[units] else small)


def pair(res: SensitivityResult, wanted: list[str] | None) -> tuple[str, str] | None:
    knobs = [r.knob for r in res.rows]
    if wanted is not None:
        if len(wanted) != 2:
            raise UserError(f"--compare takes two knobs, A,B; got {','.join(wanted)}")
        for k in wanted:
            if k not in knobs:
                raise UserError(f"--compare {k}: not among the knobs differentiated here ({', '.join(knobs)})")
        return wanted[0], wanted[1]
    if "seq" in knobs and "rank" in knobs:
        return "seq", "rank"
    return (knobs[0], knobs[1]) if len(knobs) >= 2 else None


def explain(res: SensitivityResult, c: Comparison, units: str) -> list[str]:
    """Why knob a moves the peak more than knob b, and by how much: every number from the expressions."""
    lines = [f"why {c.a.knob} moves the peak {c.ratio:.1f}× as much as {c.b.knob} (per percent):"]
    for row in (c.a, c.b):
        tops = ", ".join(f"{s.key} {amount(s.bytes, units)}" for s in row.shares[:3])
        lines.append(f"  {row.knob}·∂peak/∂{row.knob} = {amount(row.proportional_bytes, units)} "
                     f"({100 * row.elasticity:.1f} % of the {fmt_bytes(res.peak, units)} peak) moves with "
                     f"{row.knob}: {tops}")
    linear = [r.knob for r in (c.a, c.b) if r.knob not in {str(x) for x in r.derivative.free_symbols}]
    if linear:
        lines.append(f"  the peak is linear in {' and in '.join(linear)} (∂peak/∂x does not contain x), so each "
                     "elasticity is exactly the share of the peak that is proportional to the knob")
    lines.append(f"  so 1 % less {c.a.knob} saves {amount(c.a.proportional_bytes / 100, units)}, 1 % less "
                 f"{c.b.knob} {amount(c.b.proportional_bytes / 100, units)}")
    (va, sa), (vb, sb) = c.halved[c.a.knob], c.halved[c.b.knob]
    lines.append(f"  re-estimated: {c.a.knob} {c.a.at:g} → {va:g} saves {fmt_bytes(sa, units)}; "
                 f"{c.b.knob} {c.b.at:g} → {vb:g} saves {fmt_bytes(sb, units)}"
                 + (f" ({sa / sb:.1f}× as much)" if sb > 0 else ""))
    return lines


def render(res: SensitivityResult, c: Comparison | None, units: str, fmt: str) -> str:
    md = fmt == "markdown"
    sc = res.breakdown.scenario
    label = next(m.label for m in res.breakdown.ledger.moments if m.key == res.moment)
    lines = [("## " if md else "") + f"{sc.model.name} · {sc.method}" + (f" r={sc.rank}" if sc.lora else "") +
             f" · batch {sc.batch} · seq {sc.seq}: peak {fmt_bytes(res.peak, units)} at {label} "
             "(the active moment: its derivative is the peak's)", stack_summary(sc), ""]
    rows = [["#", "knob", "meaning", "at", "unit", "∂peak/∂x (per unit)", "elasticity", f"x·∂peak/∂x ({units})",
             "time elasticity"]]
    for n, r in enumerate(res.rows, 1):
        d = SYMBOLS[r.knob]
        rows.append([str(n), r.knob, d.meaning, f"{r.at:,g}", d.unit, amount(r.value, units),
                     f"{r.elasticity:.4f}", fmt_bytes(r.proportional_bytes, units).split()[0], f"{r.time_elasticity:.4f}"])
    lines += [render_rows(rows, "rllrlrrrr", fmt),
              "time elasticity: x/F · ∂F/∂x of the step's matmul FLOPs F (symvram.ledger.flops): the % more "
              "compute per % more x", "", "derivatives of the active moment:"]
    for r in res.rows:
        formula = f"$\\frac{{\\partial\\,\\mathrm{{peak}}}}{{\\partial {SYMBOLS[r.knob].latex}}} = {r.derivative_latex}$" if md \
            else f"∂peak/∂{r.knob} = {text(r.derivative)}"
        lines.append(("- " if md else "  ") + formula)
    if c is not None:
        lines += [""] + explain(res, c, units)
    return "\n".join(lines)


def to_json(res: SensitivityResult, c: Comparison | None, units: str) -> dict:
    out = {
        "peak_bytes": res.peak, "active_moment": res.moment, "inputs": res.breakdown.scenario.inputs(),
        "knobs": [{"knob": r.knob, "meaning": SYMBOLS[r.knob].meaning, "unit": SYMBOLS[r.knob].unit, "at": r.at,
                   "derivative_latex": r.derivative_latex, "value": r.value, "elasticity": r.elasticity,
                   "proportional_bytes": r.proportional_bytes, "time_elasticity": r.time_elasticity,
                   "terms": [{"key": s.key, "bytes": s.bytes} for s in r.shares]} for r in res.rows],
    }
    if c is not None:
        out["comparison"] = {"a": c.a.knob, "b": c.b.knob, "elasticity_ratio": c.ratio,
                             "halved": {k: {"value": v, "saves_bytes": saved} for k, (v, saved) in c.halved.items()},
                             "explanation": explain(res, c, units)}
    return out


def run(args) -> int:
    sc = scenario_from_args(args)
    res = sensitivity(sc, args.knobs)
    chosen = pair(res, args.compare)
    c = compare(res, *chosen) if chosen else None
    text = (json.dumps({**to_json(res, c, args.units), **provenance_dict(args, sc)}, indent=2) if args.format == "json"
            else render(res, c, args.units, args.format))
    write_output(text, args.output, args.force)
    return 0
