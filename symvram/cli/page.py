"""``symvram page``: the interactive calculator as one offline HTML file."""
from __future__ import annotations

import argparse

from ..present.page import render_page
from .common import add_model_argument, add_output_arguments, add_scenario_arguments, scenario_from_args, write_output

HELP = """\
One self-contained HTML file (no network, no CDN) with controls for method, rank, targets, batch,
sequence length, checkpointing, attention, the precision recipe, the AdamW implementation, the
number of GPUs and the ZeRO stage, and the GPU card; other settings stay as given here. The three blocks, every term (formula and value) and the predicted peak update as the
controls move; the arithmetic is the ledger's SymPy expressions printed as JavaScript.

examples:
  symvram page llama-3-8b --method lora -o plan.html
  symvram page ./config.json --method qlora --rank 16 --gpu l4 -o plan.html
"""


def register(sub) -> None:
    p = sub.add_parser("page", help="interactive offline calculator page (HTML) generated from the ledger",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p)
    add_scenario_arguments(p)
    p.add_argument("--gpu", help="card to check the peak against (data/gpus.toml: a100-80g, h100, l4, 4090 …)")
    add_output_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    html = render_page(scenario_from_args(args), gpu=args.gpu, units=args.units)
    write_output(html, args.output, args.force)
    return 0
