"""``symvram estimate``: the comparison table, or one detailed ledger."""
from __future__ import annotations

import argparse
import json

from ..evaluate import evaluate
from ..api import compare
from ..present.tables import detail, to_json
from .common import add_model_argument, add_output_arguments, add_scenario_arguments, scenario_from_args, scenario_kwargs, write_output

HELP = """\
Without --method: the reference answer's table — full fine-tuning without and with an fp32 master copy
(12 and 16 bytes/param with the default recipe), LoRA and QLoRA — each split into base / trainable /
activations, with the predicted peak. Rows the engine refuses for your settings say why.
With --method: every term of the ledger with its formula and value, the moments of the step, the peak.

examples:
  symvram estimate 7b
  symvram estimate llama-3-8b --method lora --rank 64 --targets all-linear --batch 4 --seq 2048 --format json
  symvram estimate ./config.json --method full --master fp32
"""


def register(sub) -> None:
    p = sub.add_parser("estimate", help="memory of one fine-tuning setup, term by term",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p)
    add_scenario_arguments(p)
    p.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    add_output_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    if args.method is None:
        table = compare(args.model, **scenario_kwargs(args))
        if args.format == "json":
            text = json.dumps({**{name: to_json(bd) for name, bd in table.rows},
                               **{name: {"error": reason} for name, reason in table.skipped}}, indent=2)
        else:
            first = table.rows[0][1]
            sc = first.scenario
            head = f"{sc.model.name}: P = {first.derived['P']:,} parameters; "
            lora = dict(table.rows).get("LoRA")
            if lora:
                head += (f"LoRA r={lora.scenario.rank} on {','.join(lora.scenario.targets)} = "
                         f"{lora.derived['P_train']:,} trainable; ")
            head += f"batch {sc.batch}, seq {sc.seq}" + (", checkpointing" if sc.grad_checkpointing else "")
            text = head + "\n\n" + table.table(args.units, args.format)
    else:
        bd = evaluate(scenario_from_args(args))
        text = json.dumps(to_json(bd), indent=2) if args.format == "json" else detail(bd, args.units, args.format)
    write_output(text, args.output, args.force)
    return 0
