"""Regenerate the README's pasted outputs and its plots from the real tool.

    python scripts/readme_assets.py           # splice the outputs into README.md, draw docs/tour/*.png
    python scripts/readme_assets.py --check   # exit 1 when README.md is out of date (CI runs this)

Each output goes into README.md between the markers ``<!-- BEGIN name -->`` and ``<!-- END name -->``;
nothing between the markers is written by hand. The docs site pastes its outputs at build time
(scripts/docs_hooks.py uses the functions here), so no output is committed twice. The plots go to
``docs/tour/<name>.png`` (``--check`` does not compare images: they vary with matplotlib).
"""
from __future__ import annotations

import argparse
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TOUR = ROOT / "docs" / "tour"
WIDTH = "100"   # argparse wraps help to $COLUMNS

# name -> the symvram command line whose output the README shows
COMMANDS = {
    "estimate": ["estimate", "7b"],
    "fit": ["fit", "llama-3-8b", "--method", "lora", "--gpu", "rtx-4090", "--solve", "seq"],
    "diagnose": ["diagnose", "llama-3-8b", "--method", "lora", "--batch", "4", "--seq", "4096", "--gpu", "rtx-4090",
                 "--p95-seq", "1500"],
}
PLOTS = {   # name -> the command that draws docs/tour/<name>.png
    "breakdown": ["plot", "7b", "--kind", "breakdown", "--gpu", "rtx-4090", "--gpu", "a100-80g"],
    "seq_curve": ["plot", "7b", "--kind", "seq-curve", "--method", "lora", "--ranks", "8,64,256"],
}
EXPLAIN = ["explain", "7b", "--method", "lora"]


def symvram(args: list[str]) -> str:
    env = {**os.environ, "COLUMNS": WIDTH}
    run = subprocess.run([sys.executable, "-m", "symvram", *args], capture_output=True, text=True, env=env, cwd=ROOT)
    if run.returncode != 0:
        raise SystemExit(f"symvram {' '.join(args)} failed ({run.returncode}): {run.stderr.strip()}")
    return run.stdout.rstrip("\n")


def fenced(args: list[str], output: str) -> str:
    return f"```text\n$ symvram {' '.join(args)}\n{output}\n```"


def explain_section(markdown: str, number: int) -> str:
    """Section ``number`` ("## 1. …") of the worked answer, as written; headings demoted one level."""
    sections = re.split(r"(?m)^(?=## )", markdown)
    section = next(s for s in sections if s.startswith(f"## {number}."))
    return "#" + section.strip()


def accuracy_summary() -> str:
    """The headline table of benchmarks/results/accuracy.md (written by benchmarks/accuracy.py) and the
    headline of the real-GPU check, benchmarks/results/accuracy_cuda.md (benchmarks/accuracy_cuda.py)."""
    text = (ROOT / "benchmarks" / "results" / "accuracy.md").read_text(encoding="utf-8")
    section = re.search(r"(?m)^## (All .*)\n\n((?:\|.*\n)+)", text)
    gpu = (ROOT / "benchmarks" / "results" / "accuracy_cuda.md").read_text(encoding="utf-8")
    device = re.search(r"real tensors on one (.+?) \(", gpu).group(1)
    headline = re.search(r"(?m)^\*\*(.*)\*\*$", gpu).group(1)
    return (f"{section.group(1)}:\n\n{section.group(2).rstrip()}\n\nOn a real GPU ({device}, "
            f"`torch.cuda.max_memory_allocated()` less the cuBLAS workspaces): {headline}")


def cli_reference() -> str:
    """``symvram COMMAND --help`` for every command, each folded in a <details> block."""
    os.environ["COLUMNS"] = WIDTH
    from symvram.cli import COMMANDS as NAMES, build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in sub._choices_actions}
    blocks = [fenced(["--help"], parser.format_help().rstrip())]
    for name in NAMES:
        text = sub.choices[name].format_help().rstrip()
        blocks.append(f"<details><summary><code>symvram {name}</code>: {helps[name]}</summary>\n\n"
                      f"```text\n{text}\n```\n</details>")
    return "\n\n".join(blocks)


CONSOLE = [   # Python expressions whose console repr the README shows
    'symvram.estimate("7b", method="lora")',
    'symvram.whatif("7b", {"seq": 4096, "rank": 16}, method="lora")',
    'symvram.sensitivity("7b", method="lora", batch=4)',
    'symvram.plan("70b", "a100-80g")',
    'symvram.estimate("7b", method="full").ledger.by_key["grads"]',
]


def console() -> str:
    """A console session: each expression of CONSOLE and its repr."""
    import symvram

    lines = [">>> import symvram"]
    for expr in CONSOLE:
        lines += [f">>> {expr}", repr(eval(expr, {"symvram": symvram}))]
    return "```pycon\n" + "\n".join(lines) + "\n```"


def api_reference() -> str:
    """Each function of ``symvram.__all__``: its parameters and the first paragraph of its docstring."""
    import symvram

    lines = []
    for name in symvram.__all__:
        obj = getattr(symvram, name)
        if inspect.isfunction(obj):
            summary = inspect.getdoc(obj).split("\n\n")[0].replace("\n", " ")
            sig = inspect.signature(obj)
            bare = sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                               return_annotation=sig.empty)
            lines.append(f"- `symvram.{name}{bare}`  \n  {summary}")
    return "\n".join(lines)


def blocks() -> dict[str, str]:
    """Every generated README block."""
    out = {name: fenced(args, symvram(args)) for name, args in COMMANDS.items()}
    out["accuracy"] = accuracy_summary()
    return out


def splice(readme: str, generated: dict[str, str]) -> str:
    for name, text in generated.items():
        pattern = re.compile(rf"(<!-- BEGIN {re.escape(name)} -->\n)(?:.*?\n)?(<!-- END {re.escape(name)} -->)", re.S)
        if not pattern.search(readme):
            raise SystemExit(f"README.md has no <!-- BEGIN {name} --> … <!-- END {name} --> block")
        readme = pattern.sub(lambda m: m.group(1) + text + "\n" + m.group(2), readme)
    return readme


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report whether anything is out of date")
    args = parser.parse_args(argv)
    generated = blocks()
    readme = splice(README.read_text(encoding="utf-8"), generated)
    stale = README.read_text(encoding="utf-8") != readme
    if args.check:
        if stale:
            print("out of date: README.md (run python scripts/readme_assets.py)")
        return 1 if stale else 0
    README.write_text(readme, encoding="utf-8")
    TOUR.mkdir(parents=True, exist_ok=True)
    for name, command in PLOTS.items():
        symvram([*command, "-o", str(TOUR / f"{name}.png"), "--force"])
    print(f"wrote README.md and {len(PLOTS)} plots to {TOUR.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
