"""``symvram estimate``: the comparison table, or one detailed ledger; with --gpu, the verdict."""
from __future__ import annotations

import argparse
import json

from ..api import check_allocator, compare, compare_report, estimate_report
from ..errors import UserError
from ..present.reports import compare_json, compare_text, estimate_json, estimate_text
from ..present.tables import terminal
from .common import (add_model_argument, add_output_arguments, add_scenario_arguments, announce, check_context,
                     model_of, provenance_dict, provenance_text, reading, scenario_from_args, scenario_kwargs,
                     time_flags, traced, write_output)
from .fit import add_card_arguments, card_of

HELP = """\
Without --method: the reference answer's table — full fine-tuning without and with an fp32 master copy
(12 and 16 bytes/param with the default recipe), LoRA and QLoRA — each split into base / trainable /
activations, with the predicted peak. Rows the engine refuses for your settings say why.
With --method (or a --from file that sets the method): every term of the ledger with its formula and
value, the moments of the step, the peak. With --from, the scenario read comes first: each setting,
its value and where it came from. With --gpu, the verdict; when it does not fit, the remedies
(written as edits to the --from files).
Every answer ends with its time: the step's matmul FLOPs (forward, backward, recompute) from the FLOPs
ledger; with --gpu also seconds per step and tokens/s from a stated roofline (--mfu, default 0.4;
--interconnect, default the card's link), the assumptions printed beside it. JSON: the "time" block.

examples:
  symvram estimate 7b
  symvram estimate llama-3-8b --method lora --rank 64 --targets all-linear --batch 4 --seq 2048 --format json
  symvram estimate ./config.json --method full --master fp32
  symvram estimate meta-llama/Llama-3.1-8B --method lora       # a Hub id: preset, HF cache or config.json
  symvram estimate --from axolotl.yml --gpu a100-80g --gpus 8
  symvram estimate --from trainer_args.json --from ds_zero3.json llama-3-8b
"""


def register(sub) -> None:
    p = sub.add_parser("estimate", help="memory of one fine-tuning setup, term by term",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p)
    add_scenario_arguments(p)
    add_card_arguments(p, required=False)
    p.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    add_output_arguments(p)
    p.set_defaults(func=run, shows_provenance=True)


def run(args) -> int:
    kw = scenario_kwargs(args)
    if "method" not in kw:
        time_flags(args)
        check_allocator(args.allocator)   # the reference table replays no allocator, but a typo is still an error
        try:
            table = compare(model_of(args), **kw)
        except UserError as e:
            raise traced(e, args) from None
        announce(args)
        sc = check_context(table.rows[0][1].scenario, args)
        report = compare_report(table, card_of(args) if args.gpu else None, args.headroom)
        if args.format == "json":
            text = json.dumps({**compare_json(report), **provenance_dict(args, sc)}, indent=2)
        else:
            text = provenance_text(args, sc) + compare_text(report, args.units, args.format)
    else:
        sc = scenario_from_args(args)
        mfu, link = time_flags(args)
        report = estimate_report(sc, card_of(args) if args.gpu else None, headroom=args.headroom,
                                 allocator=args.allocator, mfu=mfu, interconnect=link)
        if args.format == "json":
            out = estimate_json(report, args.units, reading(args))
            verdict = {"verdict": out.pop("verdict")} if "verdict" in out else {}
            text = json.dumps({**out, **provenance_dict(args, sc), **verdict}, indent=2)
        else:
            text = provenance_text(args, sc) + estimate_text(report, args.units, args.format, reading(args))
    write_output(terminal(text) if args.format == "table" else text, args.output, args.force)
    return 0
