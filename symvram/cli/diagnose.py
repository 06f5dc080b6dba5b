"""``symvram diagnose``: OOM triage — which side is over, the probe, the remedies in order."""
from __future__ import annotations

import argparse
import json

from ..api import PROBE_SEQ, diagnose
from ..errors import UserError
from ..present.reports import diagnosis_json, diagnosis_text
from ..present.tables import terminal
from ..units import parse_size
from .common import (add_model_argument, add_output_arguments, add_scenario_arguments, positive_int, provenance_dict,
                     provenance_text, reading, scenario_from_args, time_flags, write_output)
from .fit import add_card_arguments, card_of

HELP = f"""\
A job that "should fit" ran out of memory. diagnose names the moment of the peak and splits its bytes
into what lives there: the parameter side (weights, gradients, optimizer states, master, adapters),
the optimizer step's temporaries, the loss's vocabulary-sized tensors, the saved activations and the
backward temporaries. It prescribes the probe that splits parameters from the rest on the real job
(batch 1, seq {PROBE_SEQ}), then the remedies for that moment, cheapest first, each with its predicted
saving and price, stopping at the first that fits: free ones (fused AdamW, a chunked cross-entropy,
SDPA, max_seq_len from the data's P95), gradient checkpointing, batch 1 + gradient accumulation,
optimizer precision, LoRA/QLoRA, and only then more cards (tensor parallelism only over NVLink).
With --measured-peak it fits the unknown overhead.

examples:
  symvram diagnose llama-3-8b --method lora --gpu 24GiB --batch 4 --seq 4096
  symvram diagnose llama-3-8b --method lora --gpu 24GiB --batch 4 --seq 4096 --p95-seq 1800
  symvram diagnose llama-3-8b --method lora --gpu 24GiB --batch 4 --seq 4096 \\
      --measured-peak 23.5GiB --measured-at batch=1,seq=512
  symvram diagnose --from axolotl.yml --gpu rtx-4090      # the remedies as edits to axolotl.yml
"""
MEASURED_KEYS = ("batch", "seq", "rank")


def parse_measured_at(text: str) -> dict:
    """``batch=1,seq=512`` → {"batch": 1, "seq": 512}.

    >>> parse_measured_at("batch=1, seq=512")
    {'batch': 1, 'seq': 512}
    """
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in MEASURED_KEYS:
            raise UserError(f"--measured-at takes {'/'.join(MEASURED_KEYS)}=N pairs, e.g. batch=1,seq=512; got {part!r}")
        try:
            out[key] = positive_int(value.strip())
        except argparse.ArgumentTypeError as e:
            raise UserError(f"--measured-at {key}: {e}") from None
    return out


def register(sub) -> None:
    p = sub.add_parser("diagnose", help="OOM triage: which side is over and the remedies in order",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p)
    add_scenario_arguments(p)
    add_card_arguments(p)
    p.add_argument("--p95-seq", type=positive_int, help="95th percentile of the data's tokenized lengths")
    p.add_argument("--measured-peak", help="the peak the job reached (torch.cuda.max_memory_allocated), e.g. 23.5GiB")
    p.add_argument("--measured-at", help="settings of that measurement, e.g. batch=1,seq=512 (default: the job's)")
    p.add_argument("--max-gpus", type=positive_int, default=64, help="most GPUs to consider for more cards (default 64)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    add_output_arguments(p)
    p.set_defaults(func=run, shows_provenance=True)


def run(args) -> int:
    sc = scenario_from_args(args)
    measured = parse_size(args.measured_peak) if args.measured_peak else None
    if args.measured_at and measured is None:
        raise UserError("--measured-at describes a measurement: give --measured-peak too")
    at = parse_measured_at(args.measured_at) if args.measured_at else None
    mfu, link = time_flags(args)
    d = diagnose(sc, card_of(args), headroom=args.headroom, p95_seq=args.p95_seq, measured_peak=measured,
                 measured_at=at, max_gpus=args.max_gpus, mfu=mfu, interconnect=link, allocator=args.allocator)
    r = reading(args)
    text = (json.dumps({**diagnosis_json(d, r), **provenance_dict(args, sc)}, indent=2) if args.format == "json"
            else provenance_text(args, sc) + diagnosis_text(d, args.units, r))
    write_output(terminal(text) if args.format == "table" else text, args.output, args.force)
    return 0
