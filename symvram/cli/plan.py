"""``symvram plan``: the fewest GPUs for every strategy × method, per-GPU and host memory."""
from __future__ import annotations

import argparse
import json

from ..api import plan
from ..errors import UserError
from ..present.tables import terminal
from ..present.reports import plan_json, plan_text
from .common import add_model_argument, add_output_arguments, add_scenario_arguments, positive_int, provenance_dict, scenario_from_args, scenario_kwargs, time_flags, write_output
from .fit import add_card_arguments, card_of

HELP = """\
For each strategy (DDP, ZeRO-1, ZeRO-2, ZeRO-3/FSDP, TP, ZeRO-3 with optimizer or parameter offload)
and each method (full, LoRA, QLoRA unless --method): the fewest GPUs whose per-GPU peak fits the
card's usable memory less --headroom, solved from the ledger's expressions in N; the per-GPU peak
there, the host memory offload needs, and why the strategies rank as they do in communication cost.
With --allocator default|expandable a count fits only once one rank's allocation schedule also replays two
steps through the caching allocator on the card (modelled, not measured; a replay per row: seconds).
"GPUs for params" is the count the interview arithmetic gives (weights + trainable triple, no activations).
The setups that fit are ranked by predicted tokens/s per GPU (symvram.timing: the FLOPs ledger at the card's
dense bf16 peak × --mfu, memory-bound work over HBM, the communication ledger over --interconnect or the
card's link, no overlap), with tokens/s in all beside it and why the fastest wins; GPUs stays a column.

examples:
  symvram plan 70b --gpu a100-80g
  symvram plan 70b --gpu a100-80g --grad-checkpointing
  symvram plan llama-3-70b --method lora --gpu h100-80g --max-gpus 64 --seq 4096 --batch 4
"""


def register(sub) -> None:
    p = sub.add_parser("plan", help="fewest GPUs per strategy (ZeRO, FSDP, TP, offload) and method",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p)
    add_scenario_arguments(p)
    add_card_arguments(p)
    p.add_argument("--max-gpus", type=positive_int, default=64, help="most GPUs to consider (default 64)")
    p.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    add_output_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    chosen = [f"--{k.replace('_', '-')}" for k in ("gpus", "zero", "offload", "tp", "sequence_parallel")
              if getattr(args, k, None) is not None]
    if chosen:
        raise UserError(f"plan searches {', '.join(chosen)} itself; use estimate to price one setup")
    sc = scenario_from_args(args)
    methods = (sc.method,) if "method" in scenario_kwargs(args) else None
    mfu, link = time_flags(args)
    result = plan(sc, card_of(args), max_gpus=args.max_gpus, headroom=args.headroom, methods=methods,
                  mfu=mfu, interconnect=link, allocator=args.allocator)
    text = json.dumps({**plan_json(result), **provenance_dict(args, sc)}, indent=2) if args.format == "json" else plan_text(result, sc, args.units, args.format)
    write_output(terminal(text) if args.format == "table" else text, args.output, args.force)
    return 0
