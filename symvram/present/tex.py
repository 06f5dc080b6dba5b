"""The TeX toolchain of the documents: formulas broken into rows that fit a page, and pdflatex.

``derivation_rows`` cuts a derivation's long lines at top-level ``+`` (outside braces and parentheses) and long
fractions into a numerator over its denominator; ``compile_tex`` runs pdflatex and returns the PDF and its log
(``overfull_boxes`` reads what did not fit).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import UserError

_MULTI_SUB = re.compile(r"_\{([A-Za-z]{2,})\}")


def upright_subscripts(tex: str) -> str:
    """A multi-letter subscript is a name, not a product: ``d_{head}`` → ``d_{\\mathrm{head}}``.

    >>> print(upright_subscripts("d_{head} + n_{h}"))
    d_{\\mathrm{head}} + n_{h}
    """
    return _MULTI_SUB.sub(r"_{\\mathrm{\1}}", tex)


def visible_width(tex: str) -> int:
    """Rough printed width of a LaTeX formula in characters (commands such as \\cdot count as one)."""
    s = re.sub(r"\\[,;! ]", "", tex)
    s = re.sub(r"\\(cdot|approx|times|beta|partial|quad|le|ge)\b", "x", s)
    s = re.sub(r"\\(mathrm|frac|left|right|displaystyle|text)\b", "", s)
    s = re.sub(r"\\[A-Za-z]+", "x", s)
    return len(re.sub(r"[{}^_ ]", "", s)) + s.count(" + ") * 2


def split_terms(expr: str, width: int = 58) -> list[str]:
    """``expr`` cut at top-level `` + `` (outside braces and parentheses) into rows of at most ``width``
    visible characters; rows after the first begin with ``+``."""
    depth, cuts = 0, []
    i = 0
    while i < len(expr):
        c = expr[i]
        if c in "{(":
            depth += 1
        elif c in "})":
            depth -= 1
        elif depth == 0 and expr.startswith(" + ", i):
            cuts.append(i)
        i += 1
    pieces, start = [], 0
    for cut in cuts:
        pieces.append(expr[start:cut])
        start = cut + 1          # keep "+ …" on the next piece
    pieces.append(expr[start:])
    rows, current = [], ""
    for piece in pieces:
        candidate = current + (" " if current else "") + piece.strip() if current else piece.strip()
        if current and visible_width(candidate) > width:
            rows.append(current)
            current = piece.strip()
        else:
            current = candidate
    rows.append(current)
    out = []
    for row in rows:   # one long product a · (x + y + …) · c: cut inside its outer parentheses
        inner = _outer_parentheses(row)
        if visible_width(row) > width and inner is not None:
            prefix, body, suffix = inner
            parts = split_terms(body, width - 4)
            if len(parts) > 1:
                out += [f"{prefix}\\bigl({parts[0]}"] + parts[1:-1] + [f"{parts[-1]}\\bigr){suffix}"]
                continue
        out.append(row)
    return out


def _outer_parentheses(expr: str) -> tuple[str, str, str] | None:
    """``prefix \\left( body \\right) suffix`` → (prefix, body, suffix) for the first parentheses, when what
    follows them is a short factor with no sum of its own (an 8-bit state's `` · [n ≥ n_8]``).

    >>> _outer_parentheses(r"2 \\cdot \\left(a + b\\right) \\cdot [x]")
    ('2 \\\\cdot ', 'a + b', ' \\\\cdot [x]')
    """
    start = expr.find(r"\left(")
    if start < 0:
        return None
    depth, i = 0, start
    while i < len(expr):
        if expr.startswith(r"\left(", i):
            depth, i = depth + 1, i + 6
            continue
        if expr.startswith(r"\right)", i):
            depth -= 1
            if depth == 0:
                suffix = expr[i + 7:].rstrip()
                if " + " in suffix or visible_width(suffix) > 24:
                    return None
                return expr[:start], expr[start + 6:i].strip(), suffix
            i += 7
            continue
        i += 1
    return None


def derivation_rows(lines: tuple[str, ...], width: int = 58) -> list[tuple[str, str]]:
    """(left, right) cells of an aligned derivation: the label left of the first '=', each line's right-hand
    side starting with '=' (or '+' on a continuation row), long lines cut at top-level sums."""
    rows = []
    for line in lines:
        head, eq, tail = line.partition("=")
        if not eq:
            rows.append(("", line))
            continue
        parts = split_terms(tail.strip(), width)
        rows.append((head.strip(), "= " + parts[0]))
        rows += [("", r"\quad " + part) for part in parts[1:]]
    return rows


def _breakable(tex: str) -> str:
    r"""Plain parentheses instead of ``\left( … \right)`` (one unbreakable box), and a long fraction's numerator
    in parentheses over its denominator (a ``\frac`` is one box too), so long lines can wrap.

    >>> wrapped = _breakable(r"\frac{a + b}{N} + \left(c\right) \cdot \frac{" + "x + " * 40 + r"y}{N}")
    >>> wrapped[:27], wrapped[-10:]
    ('\\frac{a + b}{N} + (c) \\cdot', 'x + y) / N')
    """
    tex = tex.replace(r"\left(", "(").replace(r"\right)", ")")
    out, start = [], 0
    for m in re.finditer(r"\\frac\{", tex):
        if m.start() < start:
            continue
        numerator_end = _closing_brace(tex, m.end())
        denominator_end = _closing_brace(tex, numerator_end + 2)
        numerator, denominator = tex[m.end():numerator_end], tex[numerator_end + 2:denominator_end]
        if len(numerator) > _LONG_NUMERATOR and tex[numerator_end + 1] == "{":
            out += [tex[start:m.start()], f"({numerator}) / {denominator}"]
            start = denominator_end + 1
    return "".join(out) + tex[start:]


_LONG_NUMERATOR = 120   # characters of LaTeX: longer numerators (FSDP2's sharded sums) wrap as (…) / denominator


def _closing_brace(tex: str, i: int) -> int:
    """The index of the brace that closes the group opened just before ``i``."""
    depth = 1
    while depth:
        depth += {"{": 1, "}": -1}.get(tex[i], 0)
        i += 1
    return i - 1


def _print_width(text: str) -> int:
    """Width in Latin characters: a CJK character prints about twice as wide."""
    return sum(2 if ord(c) > 0x2E80 else 1 for c in text)


def compile_pdf(tex: str, timeout: int = 120) -> bytes:
    """Run pdflatex on a document from ``render(..., fmt="tex")`` and return the PDF's bytes."""
    return compile_tex(tex, timeout)[0]


def overfull_boxes(log: str) -> list[float]:
    """Every ``Overfull \\hbox (… pt too wide)`` of a pdflatex log, in points."""
    return [float(x) for x in re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide\)", log)]


def compile_tex(tex: str, timeout: int = 120) -> tuple[bytes, str]:
    """Run pdflatex on a document; the PDF's bytes and pdflatex's log (for overfull boxes)."""
    engine = shutil.which("pdflatex")
    if engine is None:
        raise UserError("--format pdf needs pdflatex, which is not installed; write the TeX with --format tex, "
                        "or install TeX Live (Debian: apt-get install texlive-latex-base latex-cjk-chinese "
                        "latex-cjk-chinese-arphic-gbsn00lp)")
    with tempfile.TemporaryDirectory(prefix="symvram-") as folder:
        Path(folder, "explain.tex").write_text(tex, encoding="utf-8")
        try:
            run = subprocess.run([engine, "-interaction=nonstopmode", "-halt-on-error", "explain.tex"], cwd=folder,
                                 stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise UserError(f"pdflatex did not finish within {timeout} s") from None
        pdf = Path(folder, "explain.pdf")
        if run.returncode != 0 or not pdf.exists():
            log = run.stdout.decode("utf-8", "replace")
            error = next((line for line in log.splitlines() if line.startswith("!")), "no PDF was written")
            raise UserError(f"pdflatex failed: {error.lstrip('! ')}")
        log = Path(folder, "explain.log").read_text(encoding="utf-8", errors="replace")
        return pdf.read_bytes(), log
