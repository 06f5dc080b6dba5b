"""mkdocs hooks: the docs site's generated parts are made at build time, from the tool itself, and never
committed (mkdocs.yml: ``hooks: [scripts/docs_hooks.py]``).

A placeholder is a fenced block whose info string is ``generated``: its first line says what goes there, the
rest is a note for whoever reads the page raw (on GitHub it shows as a code block naming the command, not
as nothing). Each is replaced before the Markdown is rendered::

    ```generated
    symvram estimate 7b
    (its output, made when the docs site builds)
    ```

- ``symvram ARGS``: ``$ symvram ARGS`` and its output, as a text block;
- ``symvram-markdown ARGS``: the Markdown output of ``symvram ARGS`` (``--format markdown``),
  its headings demoted below the page's own;
- ``explain-section N``: section N of ``symvram explain 7b --method lora``;
- ``cli-reference``: ``symvram --help`` and every command's ``--help``, from the parser;
- ``api-reference``: every function of ``symvram.__all__`` with its whole (doctested) docstring;
- ``console``: a console session showing each result's one-line repr;
- ``accuracy-summary``: the headline table of benchmarks/results/accuracy.md.
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


PLACEHOLDER = re.compile(r"^```generated\n([^\n]+)\n(?:(?!```)[^\n]*\n)*```$", re.M)
WHOLE = {"cli-reference": cli_reference, "api-reference": api_reference, "console": assets.console,
         "accuracy-summary": assets.accuracy_summary}


def generated(directive: str) -> str:
    """What one placeholder's first line asks for (see the module's docstring)."""
    word, _, rest = directive.strip().partition(" ")
    if word == "symvram-markdown":
        return _demote(assets.symvram(shlex.split(rest)))
    if word == "symvram":
        return assets.fenced(shlex.split(rest), assets.symvram(shlex.split(rest)))
    if word == "explain-section":
        return _demote(assets.explain_section(assets.symvram(assets.EXPLAIN), int(rest)), 0)
    if word in WHOLE:
        return WHOLE[word]()
    raise ValueError(f"unknown docs placeholder {directive!r}")


def expand(markdown: str) -> str:
    return PLACEHOLDER.sub(lambda m: generated(m.group(1)), markdown)


def on_page_markdown(markdown: str, page=None, config=None, files=None) -> str:
    return expand(markdown)
