"""``symvram check``: the pre-flight check of a training config as a dry run — the verdict, the triage, and an
exit status a launcher can use (0 fits, 1 does not fit, 2 bad input)."""
from __future__ import annotations

import argparse
import json

from ..api import diagnose
from ..present.reports import diagnosis_json, diagnosis_text
from ..present.tables import terminal
from ..presets import load_card
from ..units import UNITS, fmt_bytes
from .common import positive_int, provenance_dict, provenance_text, reading, scenario_from_args, write_output
from .fit import add_card_arguments

HELP = """\
Reads the run from its training config, as --from does (axolotl or LLaMA-Factory YAML, TRL SFTConfig or
TrainingArguments JSON, a torchtune recipe or LitGPT finetune YAML, and the DeepSpeed / accelerate files they
name or that follow), predicts its peak per GPU and sets it against the card: the verdict, and when it does
not fit, the triage — what is over and the cheapest fixes as edits to the file. The exit status gates a launcher:

  0  the predicted peak fits the card (less --headroom)
  1  it does not fit
  2  bad input (a file that is not a training config, an unknown card or model …)

The model is the file's (base_model, model_name_or_path …) or --model where the file names none. The same
check runs inside the job, before step 1, with symvram.integrations.transformers.MemoryCheckCallback.

examples:
  symvram check axolotl.yml --gpu h100 && accelerate launch -m axolotl.cli.train axolotl.yml
  symvram check sft.json --model llama-3-8b --gpu rtx-4090
  symvram check llamafactory.yaml ds_z3.json --gpu a100-80g --gpus 8 --format json
"""


def register(sub) -> None:
    p = sub.add_parser("check", help="pre-flight check of a training config: exit 0 fits, 1 does not, 2 bad input",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", metavar="FILE", help="the training config (and any DeepSpeed/accelerate file)")
    p.add_argument("--model", help="the base model where the file names none (a preset, a config.json, a Hub id)")
    add_card_arguments(p, time=False)
    p.add_argument("--gpus", type=positive_int, help="data-parallel GPUs (default: the files', else 1)")
    p.add_argument("--units", choices=tuple(UNITS), default="GiB", help="GiB (2^30, default; card sizes) or GB (10^9)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=run, shows_provenance=True)


def run(args) -> int:
    args.from_files, args.verbose = args.files, False
    sc = scenario_from_args(args)
    d = diagnose(sc, load_card(args.gpu), headroom=args.headroom)
    fits = d.cause == "fits"   # the caching allocator's replay on the card (symvram.card_memory)
    r = reading(args)
    if args.format == "json":
        text = json.dumps({"fits": fits, "exit_status": 0 if fits else 1, **diagnosis_json(d, r),
                           **provenance_dict(args, sc)}, indent=2)
    else:
        fb = (lambda n: fmt_bytes(n, args.units))
        m = d.memory
        head = (f"check: {'FITS' if fits else 'DOES NOT FIT'} — predicted peak {fb(d.estimate.peak)} allocated, "
                f"{fb(m.reserved_peak)} reserved ({m.allocator} allocator, modelled) per GPU on {d.card.name}, "
                f"which leaves the allocator {fb(m.capacity)}")
        text = terminal(f"{head}\n\n{provenance_text(args, sc)}{diagnosis_text(d, args.units, r)}")
    write_output(text, None, False)
    return 0 if fits else 1
