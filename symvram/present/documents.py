"""Worked-solution documents: the engine's numbers and formulas, rendered through Jinja2 templates.

``analysis.explain.explain_context`` gathers every number and formula from the engine (nothing is typed in a
template); one content template per language (``templates/explain.<lang>.j2``) writes the prose with
the helpers of a format (Markdown, HTML, TeX); the format's layout template wraps it. Templates use
delimiters that clash neither with TeX braces nor with Markdown: ``<< value >>``, ``<% statement %>``,
``<# comment #>``.

>>> from symvram.scenario import Scenario
>>> text = render(Scenario.create("7b"), fmt="markdown", lang="en")
>>> "= 12" in text and "$$" in text
True
"""
from __future__ import annotations

import base64
import io
import math
import re
from functools import lru_cache
from html import escape as html_escape
from importlib import resources
from pathlib import Path

import jinja2
from markupsafe import Markup

from ..analysis.explain import Derivation, explain_context, group_digits
from ..errors import UserError
from ..ledger.terms import Term
from ..scenario import Scenario
from ..symbols import latex
from ..units import fmt_bytes
from .tex import _breakable, _print_width, derivation_rows, upright_subscripts

FORMATS = ("markdown", "html", "tex")
LANGS = ("en", "zh")


_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                "<": r"\textless{}", ">": r"\textgreater{}"}
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>#|$])")


class MarkdownFormat:
    """Markup helpers a content template calls as ``m.<helper>``; each returns finished markup."""

    name, suffix = "markdown", "md"

    def escape(self, text) -> str:
        return _MD_SPECIAL.sub(r"\\\1", str(text))

    def _text(self, text) -> str:
        return str(text) if isinstance(text, Markup) else self.escape(text)

    def h(self, level: int, text) -> Markup:
        return Markup("#" * level + " " + self._text(text))

    def b(self, text) -> Markup:
        return Markup(f"**{self._text(text)}**")

    def code(self, text) -> Markup:
        """Inline code; a run of backticks inside is fenced by a longer run (CommonMark)."""
        text = str(text)
        fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
        pad = " " if text.startswith("`") or text.endswith("`") else ""
        return Markup(f"{fence}{pad}{text}{pad}{fence}")

    def m(self, tex: str) -> Markup:
        return Markup(f"${tex}$")

    def eq(self, *lines: str) -> Markup:
        if len(lines) == 1:
            return Markup(f"$${lines[0]}$$")
        body = r" \\ ".join(_align(line) for line in lines)
        return Markup(f"$$\\begin{{aligned}} {body} \\end{{aligned}}$$")

    def derivation(self, d: Derivation) -> Markup:
        return self.eq(*d.lines)

    def table(self, head, rows, align: str) -> Markup:
        cells = [[self._text(c) for c in head]] + [[self._text(c) for c in row] for row in rows]
        sep = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
        lines = ["| " + " | ".join(cells[0]) + " |", sep] + ["| " + " | ".join(r) + " |" for r in cells[1:]]
        return Markup("\n".join(lines))

    def figure(self, make, alt: str) -> Markup:
        """A plot, drawn only by formats that embed one (HTML)."""
        return Markup("")

    def finish(self, body: str) -> str:
        return re.sub(r"\n{3,}", "\n\n", body)


def _align(line: str) -> str:
    """Put the alignment mark before the first '=' of a derivation line."""
    head, eq, tail = line.partition("=")
    return f"{head}&={tail}" if eq else line


class HTMLFormat(MarkdownFormat):
    name, suffix = "html", "html"

    def escape(self, text) -> str:
        return html_escape(str(text), quote=True)

    def h(self, level: int, text) -> Markup:
        return Markup(f"<h{level}>{self._text(text)}</h{level}>")

    def b(self, text) -> Markup:
        return Markup(f"<strong>{self._text(text)}</strong>")

    def code(self, text) -> Markup:
        return Markup(f"<code>{self.escape(text)}</code>")

    def m(self, tex: str) -> Markup:
        return Markup(mathml(upright_subscripts(tex), "inline"))

    def eq(self, *lines: str) -> Markup:
        """One block ``<math>`` per derivation: an ``<mtable>`` aligned on '=' (label right, the rest left)."""
        cells = []
        for left, right in derivation_rows(lines, width=80):
            cells.append("<mtr>" + "".join(f'<mtd columnalign="{a}" class="{a[0]}" style="text-align: {a}">'
                                           f'{_mathml_inner(upright_subscripts(x))}</mtd>'
                                           for x, a in ((left, "right"), (right, "left"))) + "</mtr>")
        return Markup('<div class="eq"><math xmlns="http://www.w3.org/1998/Math/MathML" display="block">'
                      '<mtable columnalign="right left" columnspacing="0.3em" rowspacing="0.4em">'
                      + "".join(cells) + "</mtable></math></div>")

    def table(self, head, rows, align: str) -> Markup:
        style = [' class="num"' if a == "r" else '' for a in align]
        th = "".join(f"<th{s}>{self._text(c)}</th>" for c, s in zip(head, style))
        body = "".join("<tr>" + "".join(f"<td{s}>{self._text(c)}</td>" for c, s in zip(row, style)) + "</tr>"
                       for row in rows)
        return Markup(f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>")

    def figure(self, make, alt: str) -> Markup:
        """``make()`` → a matplotlib Figure, embedded as a base64 SVG (the file stays self-contained)."""
        buffer = io.BytesIO()
        make().savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
        uri = "data:image/svg+xml;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
        return Markup(f'<figure><img alt="{self.escape(alt)}" src="{uri}"></figure>')

    def finish(self, body: str) -> str:
        """Blank-line separated chunks: '- ' lines become a list, '1. ' lines an ordered list,
        markup chunks stay, the rest are paragraphs."""
        out = []
        for chunk in re.split(r"\n\s*\n", body.strip()):
            lines = chunk.strip().splitlines()
            if not lines:
                continue
            if all(line.startswith("- ") for line in lines):
                out.append("<ul>" + "".join(f"<li>{line[2:]}</li>" for line in lines) + "</ul>")
            elif all(re.match(r"\d+\. ", line) for line in lines):
                out.append("<ol>" + "".join(f"<li>{line.split('. ', 1)[1]}</li>" for line in lines) + "</ol>")
            elif re.match(r"<(h\d|table|div|ul|ol|p|figure)\b", chunk.lstrip()):
                out.append(chunk.strip())
            else:
                out.append(f"<p>{chunk.strip()}</p>")
        return "\n".join(out)


_UNIT_CELL = re.compile(r"^(\\textbf\{)?(-?[\d,]+\.\d+) (GiB|GB|MiB|MB)(\})?$")


class TexFormat(MarkdownFormat):
    name, suffix = "tex", "tex"

    def escape(self, text) -> str:
        """TeX specials escaped; a straight quote prints as itself (not as a closing curly quote) and ``--``
        stays two hyphens (``--master``, not an en dash)."""
        out = "".join(_TEX_SPECIAL.get(c, c) for c in str(text))
        # identifiers such as _foreach_sqrt(exp_avg_sq) may break after an underscore in a narrow column
        return out.replace('"', r"\symvramquote{}").replace("--", "-{}-").replace(r"\_", r"\_\allowbreak{}")

    def h(self, level: int, text) -> Markup:
        command = {1: "section*", 2: "subsection*", 3: "subsubsection*", 4: "paragraph"}[level]
        return Markup(f"\\{command}{{{self._text(text)}}}")

    def b(self, text) -> Markup:
        return Markup(f"\\textbf{{{self._text(text)}}}")

    def code(self, text) -> Markup:
        return Markup(f"\\texttt{{{self.escape(text)}}}")

    def m(self, tex: str) -> Markup:
        return Markup(f"${upright_subscripts(_breakable(tex))}$")

    def eq(self, *lines: str) -> Markup:
        """An ``align*`` aligned on '=': the label, then each line's right-hand side, long sums cut into rows."""
        rows = [f"{upright_subscripts(left)} &{upright_subscripts(right)}" for left, right in derivation_rows(lines)]
        return Markup("\\begin{align*}\n" + " \\\\\n".join(rows) + "\n\\end{align*}")

    def table(self, head, rows, align: str) -> Markup:
        """A ``longtable`` (it breaks across pages) in footnote size. Numeric columns whose cells share a unit
        print the unit once, in the header; ``p`` (formula) and ``t`` (prose) columns wrap and share the width
        the others leave."""
        head, rows = list(head), [list(r) for r in rows]
        for j, a in enumerate(align):
            if a != "r":
                continue
            matches = [_UNIT_CELL.match(str(r[j])) for r in rows if str(r[j]).strip()]
            units = {mt.group(3) for mt in matches if mt}
            if matches and all(matches) and len(units) == 1:
                for r in rows:
                    mt = _UNIT_CELL.match(str(r[j]))
                    if mt:
                        r[j] = Markup(f"\\textbf{{{mt.group(2)}}}") if mt.group(1) else mt.group(2)
                unit = units.pop()
                head[j] = head[j] if str(head[j]) == unit else Markup(f"{self._text(head[j])} ({unit})")
        def width(cell) -> int:
            text = str(self._text(cell))
            return round(_print_width(re.sub(r"\\[A-Za-z]+|[{}$^_]", "", text)) * (1.4 if "$" in text else 1))

        em = 0.0105   # one footnote-size character (and a little), as a fraction of the line
        fixed = {}
        for j, a in enumerate(align):
            cells = [width(r[j]) for r in rows] or [0]
            words = [_print_width(w) for w in re.split(r"[ /]", re.sub(r"\\[A-Za-z]+|[{}$]", "", str(self._text(head[j]))))]
            if a == "r":
                fixed[j] = em * max(max(cells), min(max(words), 12), 4)
            elif a == "l":
                fixed[j] = em * min(max(max(cells), max(words)), 28)
        n_wrap = sum(a in "pt" for a in align)
        free = max(0.99 - sum(fixed.values()) - 0.0125 * len(align), 0.12 * n_wrap)
        weight = {"p": 1.15, "t": 0.85}
        total = sum(weight[a] for a in align if a in weight) or 1
        share = {a: free * weight[a] / total for a in "pt"}
        cols = []
        for j, a in enumerate(align):
            w = fixed.get(j) or share[a]
            if a == "l":   # short labels: natural width, never wrapped
                cols.append("l")
                continue
            ragged = "raggedleft" if a == "r" else "raggedright"
            cols.append(f">{{\\{ragged}\\arraybackslash}}p{{{w:.3f}\\linewidth}}")
        spec = "".join(cols)

        def header(cell, a):
            return self._text(cell)

        lines = [" & ".join(header(c, a) for c, a in zip(head, align)) + r" \\ \hline \endhead"]
        lines += [" & ".join(self._text(c) for c in row) + r" \\" for row in rows]
        return Markup("{\\footnotesize\\setlength{\\tabcolsep}{3pt}\n\\begin{longtable}{@{}" + spec + "@{}}\n"
                      + "\n".join(lines) + "\n\\end{longtable}}")

    def finish(self, body: str) -> str:
        out = []
        for chunk in re.split(r"\n\s*\n", body.strip()):
            lines = chunk.strip().splitlines()
            if not lines:
                continue
            if all(line.startswith("- ") for line in lines):
                out.append("\\begin{itemize}\n" + "\n".join(f"\\item {line[2:]}" for line in lines) + "\n\\end{itemize}")
            elif all(re.match(r"\d+\. ", line) for line in lines):
                out.append("\\begin{enumerate}\n" + "\n".join(f"\\item {line.split('. ', 1)[1]}" for line in lines)
                           + "\n\\end{enumerate}")
            else:
                out.append(chunk.strip())
        # straight quotes typed in a template's prose become TeX's opening and closing quotes; Chinese
        # enumeration commas and commas may break the line after them even next to Latin words (CJKutf8 does
        # not break between a Latin identifier and full-width punctuation on its own)
        text = re.sub(r'"([^"\n]*)"', r"``\1''", "\n\n".join(out))
        return re.sub(r"([、，；：])", r"\1\\allowbreak{}", text)


MARKUP = {"markdown": MarkdownFormat(), "html": HTMLFormat(), "tex": TexFormat()}


def _upright_units(tex: str) -> str:
    """``\\mathrm{B}`` as text: latex2mathml turns a one-letter ``\\mathrm`` into an italic ``<mi>``."""
    return re.sub(r"\\mathrm\{([A-Za-z])\}", r"\\text{\1}", tex)


def _mathml_inner(tex: str) -> str:
    """The MathML of ``tex`` without its ``<math>`` wrapper (a cell of a larger table)."""
    if not tex.strip():
        return ""
    out = mathml(tex, "inline")
    return out[out.index(">") + 1:out.rindex("</math>")]


def mathml(tex: str, display: str = "inline") -> str:
    """LaTeX → MathML (latex2mathml), so an HTML document renders its formulas offline.

    >>> mathml("P \\\\cdot \\\\beta_{w}")[:45]
    '<math xmlns="http://www.w3.org/1998/Math/Math'
    """
    from latex2mathml.converter import convert

    return convert(_upright_units(tex), display=display)


# ---------------------------------------------------------------- the Jinja2 environment and its filters

def _filter_bytes(ctx, n) -> str:
    return fmt_bytes(n, ctx["units"])


def _filter_count(n) -> str:
    """Parameters with thousands separators: 159,907,840."""
    return group_digits(int(n))


def _filter_sig(x, digits: int = 3) -> str:
    """``x`` to ``digits`` significant figures (no exponent for ordinary magnitudes).

    >>> _filter_sig(0.43469, 2), _filter_sig(0.0000097, 2), _filter_sig(1234.5, 2)
    ('0.43', '0.0000097', '1,234')
    """
    if x == 0:
        return "0"
    decimals = max(digits - 1 - int(math.floor(math.log10(abs(x)))), 0)
    return f"{x:,.{decimals}f}"


def _filter_pct(x, decimals: int = 1) -> str:
    """A fraction as a percentage: 0.02284 → '2.3 %'."""
    return f"{100 * x:.{decimals}f} %"


def _filter_latex(item) -> str:
    """LaTeX of a ledger Term (``label = formula``) or of a SymPy expression, with the registry's names."""
    if isinstance(item, Term):
        return f"{item.label} = {latex(item.expr)}"
    return latex(item)


def _filter_gb(n) -> str:
    """Decimal gigabytes, whole when exact (the interview's ``84 GB``), else to the cent."""
    return f"{int(n) // 10**9:,} GB" if int(n) % 10**9 == 0 else fmt_bytes(n, "GB")


def _filter_gib(n) -> str:
    return fmt_bytes(n, "GiB")


FILTERS = {"bytes": jinja2.pass_context(_filter_bytes), "gb": _filter_gb, "gib": _filter_gib, "count": _filter_count,
           "sig": _filter_sig, "pct": _filter_pct, "latex": _filter_latex}


def _finalize_for(markup):
    def finalize(value):
        if isinstance(value, Markup) or markup.name == "html":
            return value   # markup from a helper; HTML escapes the rest itself (autoescape)
        return markup.escape(value)
    return finalize


def templates_path() -> Path:
    """The shipped templates folder (``templates/`` of the repository, ``symvram.templates`` in the wheel)."""
    return Path(str(resources.files("symvram.templates")))


class _CompiledTemplates(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept in the temporary folder (compiling the two templates was a third of a cold
    ``explain``), one set per format (the compiled code holds the format's escaping); Jinja checks each against
    its template's source, and a cache that cannot be written is skipped."""

    def dump_bytecode(self, bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


@lru_cache(maxsize=8)
def _bytecode_cache(fmt: str) -> jinja2.BytecodeCache | None:
    try:
        return _CompiledTemplates(pattern=f"__symvram_{fmt}_%s.cache")
    except (OSError, RuntimeError):  # no private temporary folder: compile every time
        return None


def environment(template_dir: str | None = None) -> jinja2.Environment:
    """The Jinja2 environment: TeX-safe delimiters, strict undefined, explicit filters;
    ``template_dir`` (a user's own templates) is searched before the shipped ones."""
    paths = ([template_dir] if template_dir else []) + [str(templates_path())]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(paths), undefined=jinja2.StrictUndefined, autoescape=False,
        block_start_string="<%", block_end_string="%>", variable_start_string="<<", variable_end_string=">>",
        comment_start_string="<#", comment_end_string="#>", trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True)
    env.filters.update(FILTERS)
    return env


@lru_cache(maxsize=32)
def _format_env(fmt: str, template_dir: str | None) -> jinja2.Environment:
    """The environment of one format, built on first use (not at import: a cold start pays for it only
    when it renders)."""
    return environment(template_dir).overlay(autoescape=fmt == "html", finalize=_finalize_for(MARKUP[fmt]),
                                             bytecode_cache=_bytecode_cache(fmt))


def _figures(ctx: dict) -> dict:
    """The figures a format may embed, drawn from the gathered numbers (matplotlib is imported only then: the
    CLI's start stays fast)."""
    def comparison():
        from . import plots

        return plots.breakdown(ctx["recipe_breakdowns"](), ctx["units"], cards=[ctx["gpu"]], requested=ctx["sc"])

    return {"comparison": comparison}


def render_context(ctx: dict, fmt: str = "markdown", lang: str = "en", template_dir: str | None = None,
                   version: str | None = None) -> str:
    """Render a context from ``explain_context``: the language's content, then the format's layout."""
    if fmt not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    if lang not in LANGS:
        raise UserError(f"--lang must be one of {', '.join(LANGS)}; got {lang!r}")
    if template_dir is not None and not Path(template_dir).is_dir():
        raise UserError(f"--template-dir {template_dir!r} is not a folder")
    env = _format_env(fmt, template_dir)
    markup = MARKUP[fmt]
    version = version or __import__("symvram").__version__
    ctx = {**ctx, "figures": _figures(ctx)}
    try:
        body = env.get_template(f"explain.{lang}.j2").render(**ctx, m=markup, lang=lang, fmt=fmt)
        return env.get_template(f"layout.{markup.suffix}.j2").render(
            **ctx, m=markup, lang=lang, fmt=fmt, version=version, body=Markup(markup.finish(body)))
    except jinja2.TemplateError as e:
        where = f" ({e.name}:{e.lineno})" if isinstance(e, jinja2.TemplateSyntaxError) else ""
        raise UserError(f"template error{where}: {e.message}") from None
    except UnicodeDecodeError as e:
        raise UserError(f"a template in --template-dir is not UTF-8 text ({e.reason} at byte {e.start})") from None


def render(sc: Scenario, fmt: str = "markdown", lang: str = "en", gpu: str = "a100-80g", other: str | None = None,
           units: str = "GiB", template_dir: str | None = None, version: str | None = None) -> str:
    """The worked answer for ``sc`` as a Markdown, HTML or TeX document in English or Chinese."""
    return render_context(explain_context(sc, gpu=gpu, other=other, units=units), fmt, lang, template_dir, version)
