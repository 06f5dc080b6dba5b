"""mkdocs hooks: the docs site's generated parts are made at build time, from the tool itself, and never
committed (mkdocs.yml: ``hooks: [scripts/docs_hooks.py]``).

Placeholders a page may hold, each replaced before the Markdown is rendered:

- ``<!-- symvram ARGS -->``: ``$ symvram ARGS`` and its output, as a text block;
- ``<!-- symvram-markdown ARGS -->``: the Markdown output of ``symvram ARGS`` (``--format markdown``),
  its headings demoted below the page's own;
- ``<!-- explain-section N -->``: section N of ``symvram explain 7b --method lora``;
- ``<!-- cli-reference -->``: ``symvram --help`` and every command's ``--help``, from the parser;
- ``<!-- api-reference -->``: every function of ``symvram.__all__`` with its whole (doctested) docstring;
- ``<!-- console -->``: a console session showing each result's one-line repr;
- ``<!-- accuracy-summary -->``: the headline table of benchmarks/results/accuracy.md.
"""
from __future__ import annotations

import inspect
import re
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import readme_assets as assets  # noqa: E402


def _demote(markdown: str, levels: int = 2) -> str:
    """Headings of pasted output below the page's own (a pasted "## …" must not become a section)."""
    return re.sub(r"(?m)^(#{1,6}) ", lambda m: "#" * min(6, len(m.group(1)) + levels) + " ", markdown)


def api_reference() -> str:
    import symvram

    out = []
    for name in symvram.__all__:
        obj = getattr(symvram, name)
        if inspect.isfunction(obj):
            sig = inspect.signature(obj)
            bare = sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                               return_annotation=sig.empty)
            doc = inspect.getdoc(obj) or ""
            summary, _, rest = doc.partition("\n\n")
            out.append(f"## `symvram.{name}`\n\n```python\nsymvram.{name}{bare}\n```\n\n{summary}\n\n"
                       + (f"```pycon\n{rest}\n```\n" if rest.strip() else ""))
    return "\n".join(out)


def cli_reference() -> str:
    """``symvram --help``, then each command's ``--help``, from the parser this build imports."""
    import argparse
    import os

    os.environ["COLUMNS"] = assets.WIDTH
    from symvram.cli import COMMANDS, build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in sub._choices_actions}
    out = [assets.fenced(["--help"], parser.format_help().rstrip())]
    for name in COMMANDS:
        out.append(f"## symvram {name}\n\n{helps[name]}\n\n```text\n{sub.choices[name].format_help().rstrip()}\n```")
    return "\n\n".join(out)


def expand(markdown: str) -> str:
    markdown = re.sub(r"<!-- symvram-markdown (.+?) -->",
                      lambda m: _demote(assets.symvram(shlex.split(m.group(1)))), markdown)
    markdown = re.sub(r"<!-- symvram (.+?) -->",
                      lambda m: assets.fenced(shlex.split(m.group(1)), assets.symvram(shlex.split(m.group(1)))),
                      markdown)
    markdown = re.sub(r"<!-- explain-section (\d+) -->",
                      lambda m: _demote(assets.explain_section(assets.symvram(assets.EXPLAIN), int(m.group(1))), 0),
                      markdown)
    for name, make in (("cli-reference", cli_reference), ("api-reference", api_reference),
                       ("console", assets.console), ("accuracy-summary", assets.accuracy_summary)):
        if f"<!-- {name} -->" in markdown:
            markdown = markdown.replace(f"<!-- {name} -->", make())
    return markdown


def on_page_markdown(markdown: str, page=None, config=None, files=None) -> str:
    return expand(markdown)
