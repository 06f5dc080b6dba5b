"""``symvram explain``: the worked answer — derivation, numbers and follow-ups — as a document."""
from __future__ import annotations

import argparse

from ..present.documents import FORMATS, LANGS, render
from ..present.tex import compile_pdf
from .common import add_model_argument, add_output_arguments, add_scenario_arguments, scenario_from_args, write_output

HELP = """\
Writes the full answer to "how much GPU memory does fine-tuning this model take, and why?": the headline
in GB and GiB (7B full: 84 GB at 12 B/param, 112 GB at 16), the ledger's three blocks with the step's
temporaries and the moment timeline that reconciles ledger total and peak, bytes per parameter (12 vs 16,
bf16 vs fp16), the LoRA count r·(d_in + d_out), activations, checkpointing and SDPA vs eager, full / LoRA /
QLoRA side by side, the same at another scale (7B <-> 70B) with plan's fewest cards, and the follow-up
questions (rank, levers ranked by what they save at the peak, diagnose's OOM triage). Every number and
formula comes from the ledger.

Templates: Jinja2 files in symvram's templates/ (explain.<lang>.j2 for the content, layout.<format>.j2
around it; delimiters << value >>, <% statement %>, <# comment #>). --template-dir DIR is searched first.

examples:
  symvram explain 7b
  symvram explain 70b --lang zh --format html -o answer.html
  symvram explain llama-3-8b --method lora --rank 16 --seq 4096 --format tex -o answer.tex
  symvram explain 7b --lang zh --format pdf -o answer.pdf        # needs pdflatex
"""


def register(sub) -> None:
    p = sub.add_parser("explain", help="the worked answer as a Markdown, HTML, TeX or PDF document",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p)
    add_scenario_arguments(p)
    p.add_argument("--format", choices=(*FORMATS, "pdf"), default="markdown", help="default markdown")
    p.add_argument("--lang", choices=LANGS, default="en", help="en (default) or zh")
    p.add_argument("--gpu", default="a100-80g", help="the card to count with (default a100-80g; a name or a size)")
    p.add_argument("--other", help="the model to re-derive at (default: 70b for a model below 30B, else 7b)")
    p.add_argument("--template-dir", help="a folder of your own templates, searched before the shipped ones")
    add_output_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    sc = scenario_from_args(args)
    fmt = "tex" if args.format == "pdf" else args.format
    text = render(sc, fmt=fmt, lang=args.lang, gpu=args.gpu, other=args.other, units=args.units,
                  template_dir=args.template_dir)
    write_output(compile_pdf(text) if args.format == "pdf" else text, args.output, args.force)
    return 0
