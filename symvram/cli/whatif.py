"""``symvram whatif``: change any symbol and see both ledgers, term by term, with the change."""
from __future__ import annotations

import argparse
import json

from ..api import whatif
from ..present.tables import terminal
from ..present.reports import whatif_json, whatif_text
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


def run(args) -> int:
    sc = scenario_from_args(args, overrides=None)   # --set is the change, not part of the "before"
    w = whatif(sc, dict(args.set))
    text = json.dumps({**whatif_json(w), **provenance_dict(args, sc)}, indent=2) if args.format == "json" else whatif_text(w, args.units, args.format)
    write_output(terminal(text) if args.format == "table" else text, args.output, args.force)
    return 0
