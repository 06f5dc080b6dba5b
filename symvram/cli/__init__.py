"""Command line: argument parsing and error reporting only; each command parses its arguments, calls the
Python API (``symvram.api``) and prints what the render layer (``symvram.present``) returns.

Each command lives in its own module with ``register(subparsers)``; add its name to COMMANDS. Only the
named command's module is imported (``symvram --help`` imports them all), so a command pays for its
own libraries alone.
"""
from __future__ import annotations

import argparse
import codecs
import gc
import importlib
import os
import sys
from contextlib import contextmanager

from ..errors import UserError, one_line

COMMANDS = ["estimate", "fit", "whatif", "sensitivity", "explain", "validate", "plan", "plot", "diagnose", "check", "page",
            "cards", "models", "family-draft"]

DESCRIPTION = """\
symvram derives the GPU memory of a fine-tuning step from one symbolic ledger:
  base weights | trainable (gradients, optimizer states, fp32 master, adapters) | activations
and predicts the peak that torch.cuda.max_memory_allocated() reports.

examples:
  symvram estimate 7b                                   # full (with and without fp32 master), LoRA, QLoRA
  symvram estimate llama-3-8b --method lora --rank 64 --batch 4 --seq 2048
  symvram estimate ./config.json --method full --master fp32 --format json
"""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # `--gpu` must not silently mean `--gpus`
        super().__init__(*args, **kwargs)

    def error(self, message):  # one line, exit 2, as every other input error
        raise UserError(message if self.prog == "symvram" else f"{self.prog.removeprefix('symvram ')}: {message}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (``only``) one command's: a command's module, and the libraries it needs,
    are imported only when that command runs or ``symvram --help`` lists them all."""
    parser = _Parser(prog="symvram", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show tracebacks (also SYMVRAM_DEBUG=1)")
    parser.add_argument("--wide", action="store_true",
                        help="keep every table row and formula on one line (default: output fits 100 columns)")
    parser.add_argument("--version", action="version", version="symvram " + __import__("symvram").__version__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in [only] if only in COMMANDS else COMMANDS:
        importlib.import_module(f".{name.replace('-', '_')}", __name__).register(sub)
    return parser


_ONE_SHOT = False   # set by entry(): this process runs one command, then exits


def entry() -> int:
    """``symvram`` and ``python -m symvram``: ``main`` in a process that runs one command and exits, its
    imports made through ``imports_frozen``. ``main`` itself (tests, scripts) leaves the collector alone."""
    global _ONE_SHOT
    _ONE_SHOT = True
    return main()


@contextmanager
def imports_frozen():
    """Around a one-shot command's imports (its module and SymPy when the parser is built, matplotlib when
    ``plot`` draws): the cyclic garbage collector paused (SymPy's import alone makes it run about 130
    times, once over every object), then the imported objects, which live until the process ends, frozen
    (``gc.freeze``): no later collection traverses them again, the one at interpreter exit included.
    Collection resumes for the command's own work. Outside ``entry``: nothing."""
    if not _ONE_SHOT:
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    encodable_streams()
    debug = "--debug" in argv or os.environ.get("SYMVRAM_DEBUG") == "1"
    wide = "--wide" in argv
    argv = [a for a in argv if a not in ("--debug", "--wide")]  # accepted before or after the command
    try:
        if wide:
            from ..present import tables

            tables.WIDTH, width_before = 0, tables.WIDTH
        with imports_frozen():
            parser = build_parser(_command_of(argv))
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            raise UserError(f"no command given; choose one of {', '.join(COMMANDS)} (symvram --help explains each)")
        return args.func(args) or 0
    except UserError as e:
        if debug:
            raise
        print(f"symvram: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("symvram: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug: say so in one line unless debugging
        if debug:
            raise
        print(f"symvram: internal error: {type(e).__name__}: {_one_line(e)} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return 1
    finally:
        if wide:
            tables.WIDTH = width_before


def _command_of(argv: list[str]) -> str | None:
    """The command named in ``argv`` (the first word not an option), or None.

    >>> _command_of(["estimate", "7b"]), _command_of(["--version"]), _command_of(["nosuch"])
    ('estimate', None, None)
    """
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def _one_line(e: Exception) -> str:
    """The message on one line, whatever a file name or a quoted input held (``errors.one_line``).

    >>> _one_line(ValueError("bad\\nname"))
    'bad name'
    """
    return one_line(str(e))


# What a stream that cannot encode the tool's characters (PYTHONIOENCODING=cp1252, a Windows redirect) shows
ASCII = {"≈": "~", "→": "->", "←": "<-", "≤": "<=", "≥": ">=", "·": "*", "×": "x", "—": "-", "–": "-", "…": "...",
         "²": "^2", "³": "^3", "√": "sqrt", "Σ": "sum", "∑": "sum", "−": "-", "≠": "!=", "∞": "inf", "±": "+/-",
         "µ": "u", "‖": "||", "⌈": "ceil(", "⌉": ")", "⌊": "floor(", "⌋": ")", "✓": "ok", "✗": "x", "█": "#",
         "Δ": "d", "δ": "d", "∂": "d", "⁻": "^-", "α": "alpha", "β": "beta", "λ": "lambda", "ε": "eps",
         "η": "eta", "θ": "theta", "σ": "sigma", "π": "pi", "▏": "|", "│": "|", "─": "-", "┼": "+", "├": "+", "┤": "+", "└": "+", "┌": "+", "┐": "+", "┘": "+"}


def _ascii_fallback(err: UnicodeEncodeError) -> tuple[str, int]:
    """A codec error handler: each character the stream's encoding lacks as ASCII (``ASCII``, else its
    decomposition without accents, else "?").

    >>> "≈ 9.5 GiB → fits, naïve".encode("ascii", errors="symvram-ascii")
    b'~ 9.5 GiB -> fits, naive'
    """
    import unicodedata

    def one(ch: str) -> str:
        if ch in ASCII:
            return ASCII[ch]
        plain = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()
        return plain or "?"

    return "".join(one(ch) for ch in err.object[err.start:err.end]), err.end


codecs.register_error("symvram-ascii", _ascii_fallback)


def encodable_streams() -> None:
    """stdout and stderr write what their encoding lacks through ``_ascii_fallback`` instead of raising
    (only a stream whose encoding is not a Unicode one is changed)."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if not encoding or not hasattr(stream, "reconfigure"):
            continue
        try:
            if codecs.lookup(encoding).name.startswith("utf"):
                continue
            stream.reconfigure(errors="symvram-ascii")
        except (LookupError, ValueError, OSError):  # an unknown codec name; a closed or detached stream
            continue
