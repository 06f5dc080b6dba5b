"""``symvram fit``: the longest sequence (largest batch, rank) that trains on a card under the caching allocator's
reserved line."""
from __future__ import annotations

import argparse
import json
from dataclasses import replace

from ..api import DEFAULT_HEADROOM, DEFAULT_MFU, KNOBS, fit, interconnects
from ..errors import UserError
from ..presets import GPUSpec, gpu_presets, load_card
from ..present.tables import terminal
from ..present.reports import fit_json, fit_text
from .common import add_model_argument, add_output_arguments, add_scenario_arguments, positive_int, provenance_dict, scenario_from_args, write_output

HELP = f"""\
Finds the largest integer seq, batch or LoRA rank whose two training steps the caching allocator runs on
the card: the reserved line (max_memory_reserved, the allocator replayed over the ledger's allocation
schedule; modelled, not measured), not the allocated one. The ledger's moments, solved, bound it first;
then the replay decides, and the answer and answer + 1 are shown.

--gpu: a named card (a100-40g, a100-80g, h100-80g, h200, l4, a10g, t4, rtx-3090, rtx-4090, l40s,
mi300x …) or a size such as 24GiB; either is the physical memory, and the same CUDA context (and NCCL's
buffers on several GPUs) is taken off before the allocator's share.
--headroom: a margin of your own on top (default {DEFAULT_HEADROOM}; a size such as 2GiB, a percentage
such as 5%, or 0). --allocator: default | expandable (PYTORCH_CUDA_ALLOC_CONF when not given).

examples:
  symvram fit llama-3-8b --method lora --gpu rtx-4090 --solve seq
  symvram fit 7b --method qlora --gpu 24GiB --solve batch --seq 4096
  symvram fit 7b --method lora --gpu a100-80g --solve rank --headroom 5% --format json
"""


def add_card_arguments(p: argparse.ArgumentParser, required: bool = True, time: bool = True) -> None:
    """--gpu and --headroom, shared by the commands that compare a peak with a card."""
    p.add_argument("--gpu", required=required, help="a named card (rtx-4090, a100-80g …) or a size (24GiB)")
    p.add_argument("--headroom", default=DEFAULT_HEADROOM,
                   help="a margin of your own kept free beyond the reserved memory and the device block: a size "
                        f"or a %% of the card (default {DEFAULT_HEADROOM})")
    p.add_argument("--allocator", help="the caching allocator the answer follows: default | expandable "
                                       "(expandable_segments:True); default: what PYTORCH_CUDA_ALLOC_CONF says")
    if time:
        add_time_arguments(p)


def add_time_arguments(p: argparse.ArgumentParser) -> None:
    """--mfu and --interconnect: the step-time roofline's stated assumptions (symvram.timing)."""
    p.add_argument("--mfu", help=f"model FLOPs utilization in (0, 1] for step times (default {DEFAULT_MFU}: "
                                 "the matmul share of a tuned step)")
    p.add_argument("--interconnect", help=f"GPU-to-GPU link for step times (default: the card's; "
                                          f"{', '.join(interconnects())})")
    p.add_argument("--tflops", type=float, help="a card given as a size: its dense bf16/fp16 tensor TFLOP/s, for a "
                                                "step time (with --hbm-gbps; the link is PCIe Gen4 unless --interconnect)")
    p.add_argument("--hbm-gbps", type=float, help="a card given as a size: its memory bandwidth in GB/s")


def card_of(args) -> GPUSpec:
    """--gpu as a card; a size takes --tflops and --hbm-gbps for its step time (a named card has its own)."""
    card = load_card(args.gpu)
    tflops, hbm = getattr(args, "tflops", None), getattr(args, "hbm_gbps", None)
    if tflops is None and hbm is None:
        return card
    if card.key in gpu_presets():
        raise UserError(f"--tflops / --hbm-gbps describe a card given as a size; {card.name} has its datasheet "
                        "figures (symvram cards)")
    for flag, value in (("--tflops", tflops), ("--hbm-gbps", hbm)):
        if value is None or not 0 < value < 1e6:
            raise UserError(f"{flag}: a card given as a size needs both --tflops and --hbm-gbps, positive; "
                            f"got {value!r}")
    return replace(card, tflops=tflops, hbm_gbps=hbm)


def register(sub) -> None:
    p = sub.add_parser("fit", help="largest seq / batch / rank that fits a card",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p)
    add_scenario_arguments(p)
    add_card_arguments(p, time=False)
    p.add_argument("--solve", choices=KNOBS, default="seq", help="the knob to solve for (default seq)")
    p.add_argument("--limit", type=positive_int,
                   help="largest value to consider (default: max_position_embeddings for seq, "
                        "min(d_in, d_out) for rank)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    add_output_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    sc = scenario_from_args(args)
    result = fit(sc, card_of(args), solve=args.solve, headroom=args.headroom, limit=args.limit,
                 allocator=args.allocator)
    text = json.dumps({**fit_json(result), **provenance_dict(args, sc)}, indent=2) if args.format == "json" else fit_text(result, args.units)
    write_output(terminal(text) if args.format == "table" else text, args.output, args.force)
    return 0
