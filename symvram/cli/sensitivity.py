"""``symvram sensitivity``: ∂peak/∂x for each knob, its value, the elasticity, ranked — and why."""
from __future__ import annotations

import argparse
import json

from ..api import SensitivityResult, compare_knobs, sensitivity
from ..errors import UserError
from ..present.tables import terminal
from ..present.reports import sensitivity_json, sensitivity_text
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


def run(args) -> int:
    sc = scenario_from_args(args)
    res = sensitivity(sc, args.knobs)
    chosen = pair(res, args.compare)
    c = compare_knobs(res, *chosen) if chosen else None
    text = (json.dumps({**sensitivity_json(res, c, args.units), **provenance_dict(args, sc)}, indent=2) if args.format == "json"
            else sensitivity_text(res, c, args.units, args.format))
    write_output(terminal(text) if args.format == "table" else text, args.output, args.force)
    return 0
