"""``symvram estimate``: the comparison table, or one detailed ledger."""
from __future__ import annotations

import argparse
import json

from ..evaluate import evaluate
from ..present.tables import comparison, detail, to_json
from .common import add_model_argument, add_scenario_arguments, scenario_from_args, write_output

HELP = """\
Without --method: the reference answer's table — full fine-tuning at 12 and 16 bytes/param, LoRA and
QLoRA — each split into base / trainable / activations, with the predicted peak.
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
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    p.set_defaults(func=run)


def comparison_rows(args) -> list[tuple[str, object]]:
    """Full (no master / fp32 master), LoRA and QLoRA for the same model and activations settings."""
    return [
        ("full (12 B/param)", evaluate(scenario_from_args(args, method="full", master="none"))),
        ("full + fp32 master (16 B/param)", evaluate(scenario_from_args(args, method="full", master="fp32"))),
        ("LoRA", evaluate(scenario_from_args(args, method="lora", master=None))),
        ("QLoRA", evaluate(scenario_from_args(args, method="qlora", master=None))),
    ]


def run(args) -> int:
    if args.method is None:
        rows = comparison_rows(args)
        if args.format == "json":
            text = json.dumps({name: to_json(bd) for name, bd in rows}, indent=2)
        else:
            sc = rows[2][1].scenario
            head = (f"{sc.model.name}: P = {rows[0][1].derived['P']:,} parameters; LoRA r={sc.rank} on "
                    f"{','.join(sc.targets)} = {rows[2][1].derived['P_train']:,} trainable; "
                    f"batch {sc.batch}, seq {sc.seq}" + (", checkpointing" if sc.grad_checkpointing else ""))
            text = head + "\n\n" + comparison(rows, args.units, args.format)
    else:
        bd = evaluate(scenario_from_args(args))
        text = json.dumps(to_json(bd), indent=2) if args.format == "json" else detail(bd, args.units, args.format)
    write_output(text, args.output, args.force)
    return 0
