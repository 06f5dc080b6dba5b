"""What ``symvram cards`` and ``symvram models`` share: a parser with ``--format`` and ``-o``, and one writer of
a list of rows as a table, Markdown or JSON."""
from __future__ import annotations

import argparse
import json

from ..present.tables import render_rows, terminal
from .common import add_output_arguments, write_output


def add_listing_parser(sub, name: str, help: str, description: str, run) -> None:  # noqa: A002 - argparse's name
    p = sub.add_parser(name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    add_output_arguments(p)
    p.set_defaults(func=run)


def write_listing(args, rows: list[dict], table: list[list[str]], align: str, footnote: str = "",
                  text: str | None = None) -> int:
    """``rows`` as JSON, or ``table`` (header first) as text or Markdown (``text``: the text table already
    rendered); ``footnote`` under the text table."""
    if args.format == "json":
        text = json.dumps(rows, indent=2)
    else:
        text = (text or render_rows(table, align, args.format)) + (footnote if args.format == "table" else "")
    write_output(terminal(text) if args.format == "table" else text, args.output, args.force)
    return 0
