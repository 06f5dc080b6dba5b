"""``symvram plot``: a figure of the ledger written to PNG, SVG or PDF (by the file's suffix)."""
from __future__ import annotations

import argparse
import io
from pathlib import Path

from ..api import DEFAULT_HEADROOM, DEFAULT_PLOT_CARDS as DEFAULT_CARDS, PLOT_KINDS as KINDS, plot
from ..errors import UserError, excerpt
from .common import (add_model_argument, add_output_arguments, add_scenario_arguments, announce, model_of,
                     positive_int, scenario_kwargs, write_output)

FORMATS = ("png", "svg", "pdf")

HELP = f"""\
  breakdown   stacked base / trainable / activations bars for full (without and with an fp32 master), LoRA and QLoRA,
              each peak marked, the --method's bars emphasised, the usable memory of --gpu cards as lines
  seq-curve   the peak against the sequence length for several LoRA ranks (--ranks), with the usable
              memory of cards (--gpu, repeatable; default {', '.join(DEFAULT_CARDS)}) as horizontal lines;
              where a line leaves a card it is labelled "r = RANK: SEQ", the longest sequence `symvram fit`
              gives under the same --headroom (default {DEFAULT_HEADROOM})
  tornado     the elasticity of the peak to each knob (see symvram sensitivity)
  fit-map     which micro-batch × sequence pairs fit --gpu, less --headroom (default {DEFAULT_HEADROOM})

The method defaults to full, as in every command (seq-curve draws one line per --ranks value only for
--method lora or qlora). --theme dark draws for a dark notebook background.

examples:
  symvram plot 7b --kind breakdown --gpu rtx-4090 --gpu a100-80g -o breakdown.png
  symvram plot 7b --kind seq-curve --method lora --ranks 8,64,256 --gpu rtx-4090 --gpu h100 -o seq.svg
  symvram plot 7b --kind tornado --method lora --rank 64 --seq 2048 --batch 4 -o tornado.pdf
  symvram plot llama-3-8b --kind fit-map --gpu a100-80g --theme dark -o fits.png
"""


def _ranks(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ranks takes a comma list of integers, got {excerpt(text)}") from None


def register(sub) -> None:
    p = sub.add_parser("plot", help="figures: breakdown, seq-curve, tornado, fit-map (png, svg, pdf)",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p)
    add_scenario_arguments(p)
    p.add_argument("--kind", choices=KINDS, required=True)
    p.add_argument("--gpu", action="append", help="a named card or a size (24GiB); repeatable for breakdown and seq-curve")
    p.add_argument("--headroom", default=DEFAULT_HEADROOM,
                   help=f"fit-map and seq-curve crossings: memory kept free, as fit takes it (default {DEFAULT_HEADROOM})")
    p.add_argument("--ranks", type=_ranks, help="seq-curve: LoRA ranks, one line each (default 8,16,64,256)")
    p.add_argument("--top", type=positive_int, help="tornado: only the N largest elasticities")
    p.add_argument("--seq-max", type=positive_int, help="seq-curve, fit-map: the longest sequence drawn (default: "
                                                        "4 × --seq, at least 8192, within the model's context)")
    p.add_argument("--theme", choices=("light", "dark"), default="light")
    add_output_arguments(p, required=True, help="the figure file: .png, .svg or .pdf")
    p.set_defaults(func=run)


def figure(args):
    """The figure through the Python API (one dispatch for both doors)."""
    return plot(model_of(args), args.kind, gpu=args.gpu, ranks=args.ranks, top=args.top, headroom=args.headroom,
                units=args.units, theme=args.theme, seq_max=args.seq_max, **scenario_kwargs(args))


def run(args) -> int:
    suffix = Path(args.output).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise UserError(f"-o {args.output}: the suffix chooses the format; use .png, .svg or .pdf")
    from . import imports_frozen

    with imports_frozen():
        import matplotlib

        matplotlib.use("Agg")  # the CLI draws to files only; a library import never chooses the backend
        from ..present import plots  # noqa: F401  (matplotlib's figure, imported here rather than in api.plot)
    fig = figure(args)
    announce(args)
    buf = io.BytesIO()
    fig.savefig(buf, format=suffix, dpi=150)
    write_output(buf.getvalue(), args.output, args.force)
    return 0
