"""Worked-solution documents: the engine's numbers and formulas, rendered through Jinja2 templates.

``explain_context`` gathers every number and formula from the engine (nothing is typed in a
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
import dataclasses
import io
import math
import re
import shutil
import subprocess
import tempfile
from functools import lru_cache
from html import escape as html_escape
from importlib import resources
from pathlib import Path

import jinja2
import sympy as sp
from markupsafe import Markup

from ..errors import UserError
from ..evaluate import Breakdown, evaluate, substitution
from ..ledger.activations import per_layer_bytes
from ..ledger.terms import BLOCKS, Term
from ..analysis.fit import load_card
from ..analysis.plan import STRATEGIES, plan
from ..analysis.sensitivity import sensitivity
from ..presets import load_model
from ..scenario import METHODS, Scenario
from ..symbols import SYMBOLS, latex, sym
from .units import UNITS, fmt_bytes

FORMATS = ("markdown", "html", "tex")
LANGS = ("en", "zh")
OTHER_SCALE = {"small": "70b", "large": "7b"}   # 7B ↔ 70B: the reference answer's re-derivation
LARGE = 30_000_000_000                          # a model above this many parameters re-derives at 7B
PROBE_SEQ = 512                                 # the triage probe: batch 1 and a short sequence


# ---------------------------------------------------------------- numbers → LaTeX / text

def group_digits(n: int, sep: str = ",") -> str:
    """``1234567`` → ``1,234,567`` (``sep`` between groups of three).

    >>> group_digits(14000000000, r"\\,")
    '14\\\\,000\\\\,000\\\\,000'
    """
    return f"{n:,}".replace(",", sep)


def number_latex(value) -> str:
    """A number as LaTeX: integers grouped by thin spaces, fractions as decimals (up to 6 significant)."""
    if float(value).is_integer():
        return group_digits(int(value), r"\,")
    return f"{float(value):.6g}"


def amount_latex(text: str) -> str:
    """``'1,234.50 GiB'`` (``fmt_bytes`` output) as LaTeX: ``1{,}234.50\\ \\mathrm{GiB}``."""
    number, _, unit = text.partition(" ")
    return number.replace(",", "{,}") + (rf"\ \mathrm{{{unit}}}" if unit else "")


def substituted_latex(expr: sp.Expr, subs: dict) -> str:
    """``expr`` printed with every symbol replaced by its number, structure kept (nothing evaluated).

    >>> substituted_latex(sym("P") * sym("bytes_weight"), {sym("P"): 7, sym("bytes_weight"): 2})
    '7 \\\\cdot 2'
    """
    names = {s: number_latex(subs[s]) for s in expr.free_symbols}
    return sp.latex(expr, symbol_names=names, mul_symbol="dot")


def value_of(expr: sp.Expr, subs: dict):
    """The number of ``expr`` at ``subs`` (an exact SymPy number)."""
    return sp.sympify(expr).xreplace(subs)


@dataclasses.dataclass(frozen=True)
class Derivation:
    """The three lines of one derivation: symbolic formula, numbers substituted, result with unit."""

    symbolic: str       # LaTeX: label = formula
    substituted: str    # LaTeX: = numbers
    result: str         # LaTeX: = value unit
    value: float        # the result as a number (bytes, parameters or bytes/param)

    @property
    def lines(self) -> tuple[str, str, str]:
        return self.symbolic, self.substituted, self.result


def derive(label: str, expr: sp.Expr, subs: dict, unit: str, units: str = "GiB") -> Derivation:
    """Three lines for ``label = expr``; ``unit`` is ``bytes`` (shown in B and ``units``) or a word.

    >>> d = derive("M_{w}", sym("P") * sym("bytes_weight"), {sym("P"): 7 * 10**9, sym("bytes_weight"): 2}, "bytes")
    >>> d.result
    '= 14\\\\,000\\\\,000\\\\,000\\\\ \\\\mathrm{B} \\\\approx 13.04\\\\ \\\\mathrm{GiB}'
    """
    value = value_of(expr, subs)
    if unit == "bytes":
        n = int(sp.ceiling(value))
        result = rf"= {group_digits(n, chr(92) + ',')}\ \mathrm{{B}} \approx {amount_latex(fmt_bytes(n, units))}"
    else:
        result = rf"= {number_latex(value)}\ \mathrm{{{unit}}}"
    return Derivation(f"{label} = {latex(expr)}", f"= {substituted_latex(expr, subs)}", result, float(value))


# ---------------------------------------------------------------- the engine's numbers, gathered

def _subs(bd: Breakdown) -> dict:
    return substitution(bd.ledger, bd.values)


def _try(sc: Scenario, **changes) -> Scenario | str:
    """``sc.with_changes(**changes)``, or the engine's reason why that recipe is refused."""
    try:
        return sc.with_changes(**changes)
    except UserError as e:
        return str(e)


def same_settings(sc: Scenario, model: str) -> Scenario:
    """The same method, recipe and activation settings on another model."""
    kw = {k: getattr(sc, k) for k in sc.__dataclass_fields__ if k != "model"}
    return Scenario.create(load_model(model), **kw)


def per_param(bd: Breakdown) -> dict:
    """Bytes per parameter, term by term: each term's derivative with respect to the count it scales with.

    >>> pp = per_param(evaluate(Scenario.create("7b", method="full", master="fp32")))
    >>> [(r["key"], r["bytes"]) for r in pp["rows"]], pp["total"].value
    ([('weights', 2), ('grads', 2), ('master', 4), ('optimizer_states', 8)], 16.0)
    """
    subs, led = _subs(bd), bd.ledger
    per = {"weights": sym("P"), "adapters": sym("P_lora"), "grads": sym("P_train"), "master": sym("P_train"),
           "optimizer_states": sym("P_train")}
    rows, coefficients = [], []
    for key, count in per.items():
        if key not in led.by_key or (key == "weights" and bd.scenario.lora):
            continue
        coefficient = sp.diff(led.by_key[key].expr, count)
        if coefficient == 0:   # not linear in the count (Adafactor's factored states)
            continue
        coefficients.append(coefficient)
        rows.append({"key": key, "label": led.by_key[key].label, "latex": latex(coefficient),
                     "bytes": int(value_of(coefficient, subs))})
    total = sp.Add(*coefficients)
    return {"rows": rows, "total": derive(r"\beta_{\mathrm{param}}", total, subs, r"B/param")}


def lora_table(bd: Breakdown) -> dict:
    """r·(d_in + d_out) per target matrix, per layer and in total, its share of P, and ∂P_LoRA/∂r."""
    sc, subs = bd.scenario, _subs(bd)
    r, L = sym("rank"), sym("layers")
    definition = dict(bd.ledger.definitions)[sym("P_lora")]
    rows = []
    for t in sc.targets:
        lin = sc.structure.arch.linear(t)
        per_matrix = r * (lin.d_in + lin.d_out)
        rows.append({"target": t, "d_in": int(value_of(lin.d_in, subs)), "d_out": int(value_of(lin.d_out, subs)),
                     "latex": latex(per_matrix), "per_layer": int(value_of(per_matrix, subs))})
    derivative = sp.diff(definition, r)
    return {
        "rows": rows, "rank": sc.rank, "layers": int(subs[L]),
        "per_layer": sum(row["per_layer"] for row in rows),
        "total": derive(r"P_{\mathrm{LoRA}}", definition, subs, "params"),
        "share": bd.derived["P_lora"] / bd.derived["P"],
        "derivative": derive(r"\frac{\partial P_{\mathrm{LoRA}}}{\partial r}", derivative, subs, "params"),
        "P_lora": bd.derived["P_lora"], "P": bd.derived["P"],
    }


def blocks(bd: Breakdown, units: str) -> dict:
    """The three blocks: base and trainable as three-line derivations, activations by value."""
    subs, led = _subs(bd), bd.ledger
    labels = {"base": r"M_{\mathrm{base}}", "trainable": r"M_{\mathrm{train}}", "activations": r"M_{\mathrm{act}}"}
    out = {}
    for b in BLOCKS:
        out[b] = {"bytes": bd.blocks[b], "terms": [
            {"key": t.key, "label": t.label, "latex": latex(t.expr), "bytes": bd.terms[t.key], "why": t.why}
            for t in led.block_terms(b)]}
        if b != "activations":
            out[b]["derivation"] = derive(labels[b], led.block_expr(b), subs, "bytes", units)
    return out


def activations(sc: Scenario, units: str) -> dict:
    """Per-layer saved bytes (symbolic, substituted, value); the block and the peak with and without checkpointing."""
    plain = evaluate(sc.with_changes(grad_checkpointing=False))
    ckpt = evaluate(sc.with_changes(grad_checkpointing=True))
    per_layer = derive(r"A_{\mathrm{layer}}", per_layer_bytes(plain.scenario.structure), _subs(plain), "bytes", units)
    return {
        "per_layer": per_layer, "layers": plain.scenario.model.layers,
        "terms": blocks(plain, units)["activations"]["terms"],
        "plain": plain.blocks["activations"], "checkpointed": ckpt.blocks["activations"],
        "saved": plain.blocks["activations"] - ckpt.blocks["activations"],
        "peak_plain": plain.peak, "peak_checkpointed": ckpt.peak,
        "checkpoint_term": derive(r"A_{\mathrm{ckpt}}", ckpt.ledger.by_key["act_checkpoints"].expr, _subs(ckpt),
                                  "bytes", units),
        "recompute": recompute_price(ckpt),
    }


def recompute_price(ckpt: Breakdown) -> dict:
    """Checkpointing's time price from the FLOPs ledger: the recompute term (derived), its share of the
    step without checkpointing for this method, and for full fine-tuning and LoRA side by side."""
    from ..ledger.flops import build_flops
    from ..timing import flops

    sc = ckpt.scenario
    term = build_flops(sc.structure).by_key["recompute_layers"]
    out = {"derivation": derive(term.label, term.expr, _subs(ckpt), "FLOP"),
           "percent": 100 * flops(sc).recompute_share_if_checkpointed}
    for method in ("full", "lora"):
        try:
            out[method] = 100 * flops(sc.with_changes(method=method)).recompute_share_if_checkpointed
        except UserError:
            out[method] = None
    return out


RECIPES = (("full12", dict(method="full", master="none")), ("full16", dict(method="full", master="fp32")),
           ("lora", dict(method="lora")), ("qlora", dict(method="qlora")))   # LoRA keeps the run's master setting


def scale_plan(sc: Scenario, card) -> dict:
    """``analysis.plan``'s fewest GPUs for every strategy × method, arranged as a table, with each method's
    best strategy overall and without offload."""
    res = plan(sc, card)
    methods = [m for m in METHODS if any(r.method == m for r in res.rows)]
    by = {(r.method, r.strategy.key): r for r in res.rows}
    rows = [{"strategy": st, "cells": [by.get((m, st.key)) for m in methods]}
            for st in STRATEGIES if any((m, st.key) in by for m in methods)]
    return {"methods": methods, "rows": rows, "max_gpus": res.max_gpus, "headroom": res.headroom,
            "best": {m: res.best(m) for m in methods}, "best_on_gpu": {m: res.best(m, offload=False) for m in methods}}


def comparison(sc: Scenario, capacity: int) -> list[dict]:
    """Full (without and with the fp32 master), LoRA and QLoRA for ``sc``'s model and activation
    settings; ``peak_ckpt`` is the peak with gradient checkpointing."""
    rows = []
    for key, changes in RECIPES:
        other = _try(sc, **changes)
        if isinstance(other, str):
            rows.append({"key": key, "refused": other})
            continue
        bd = evaluate(other)
        rows.append({"key": key, "refused": None, "blocks": bd.blocks, "total": bd.ledger_total, "peak": bd.peak,
                     "per_param": per_param(bd)["total"].value, "P_train": bd.derived["P_train"],
                     "fits": bd.peak <= capacity,
                     "peak_ckpt": evaluate(other.with_changes(grad_checkpointing=True)).peak})
    return rows


def triage(sc: Scenario, capacity: int) -> dict:
    """The OOM triage: a probe at batch 1 and a short sequence splits the parameter side from the
    activation side; then the fixes in order, each applied on top of the previous ones."""
    bd = evaluate(sc)
    probe = evaluate(sc.with_changes(batch=1, seq=min(PROBE_SEQ, sc.seq)))
    steps = (("seq", dict(seq=max(sc.seq // 2, 1))), ("checkpointing", dict(grad_checkpointing=True)),
             ("batch", dict(batch=1)), ("optimizer", dict(master="none", state_dtype="int8")),
             ("qlora", dict(method="qlora")))
    current, fixes = sc, []
    for key, changes in steps:
        nxt = _try(current, **changes)
        if isinstance(nxt, str) or nxt == current:
            continue
        current = nxt
        peak = evaluate(current).peak
        fixes.append({"key": key, "peak": peak, "fits": peak <= capacity, "seq": current.seq, "batch": current.batch})
    params_side = bd.blocks["base"] + bd.blocks["trainable"]
    return {"probe_seq": probe.scenario.seq, "probe_peak": probe.peak, "probe_fits": probe.peak <= capacity,
            "params_side": params_side, "activation_side": bd.peak - params_side, "peak": bd.peak,
            "fits": bd.peak <= capacity, "fixes": fixes}


KNOB_UNITS = {"seq": "B/token", "batch": "B/sequence", "rank": "B/rank"}


def ranked_knobs(sc: Scenario, units: str) -> dict:
    """The engine's sensitivity of the peak to seq, batch (and r under LoRA): ∂peak/∂x as three lines, ranked
    by elasticity (the percent change of the peak per percent change of x)."""
    res = sensitivity(sc, knobs=("seq", "batch") + (("rank",) if sc.lora else ()))
    subs = _subs(res.breakdown)
    moment = next(m for m in res.breakdown.ledger.moments if m.key == res.moment)
    rows = [{"knob": r.knob, "at": r.at, "elasticity": r.elasticity,
             "derivative": derive(rf"\frac{{\partial M_{{\mathrm{{peak}}}}}}{{\partial {SYMBOLS[r.knob].latex}}}",
                                  r.derivative, subs, KNOB_UNITS[r.knob], units)} for r in res.rows]
    return {"moment": moment, "rows": rows}


def activation_cuts(sc: Scenario, ranked: dict) -> list[dict]:
    """Ways to cut activations, each on its own and re-estimated: the knobs in the order of the engine's
    sensitivity (halved), then checkpointing and fused attention."""
    bd = evaluate(sc)
    halved = {"seq": dict(seq=max(sc.seq // 2, 1)), "batch": dict(batch=max(sc.batch // 2, 1))}
    options = tuple((r["knob"], halved[r["knob"]]) for r in ranked["rows"] if r["knob"] in halved) + (
        ("checkpointing", dict(grad_checkpointing=True)), ("attention", dict(attention="sdpa")))
    cuts = []
    for key, changes in options:
        other = _try(sc, **changes)
        if isinstance(other, str) or other == sc:
            continue
        cut = evaluate(other)
        cuts.append({"key": key, "activations": cut.blocks["activations"], "peak": cut.peak,
                     "saved": bd.blocks["activations"] - cut.blocks["activations"],
                     **{k: getattr(other, k) for k in ("seq", "batch")}})
    return cuts


def _plots():
    """matplotlib is imported only when a document embeds a figure (keeps the CLI's start fast)."""
    from . import plots

    return plots


def explain_context(sc: Scenario, gpu: str = "a100-80g", other: str | None = None, units: str = "GiB") -> dict:
    """Every number and formula of the worked answer for ``sc``, from the engine.

    >>> ctx = explain_context(Scenario.create("7b"))
    >>> ctx["lora"]["P_lora"], ctx["other"]["model"].name
    (159907840, '70b')
    """
    if units not in UNITS:
        raise UserError(f"--units must be one of {', '.join(UNITS)}; got {units!r}")
    card = load_card(gpu)
    bd = evaluate(sc)
    lora_bd = bd if sc.lora else evaluate(sc.with_changes(method="lora"))   # the same recipe, adapters only
    full = {k: sc.with_changes(method="full", dtype="bf16", autocast="none", master=m, adapter_dtype="bf16")
            for k, m in (("full12", "none"), ("full16", "fp32"))}   # the 12-vs-16 question is about bf16 weights
    fp16 = _try(sc, method="full", dtype="fp16", autocast="none", master="none", adapter_dtype="fp16")
    alt_rank = 16 if sc.rank != 16 else 64
    alt = evaluate(lora_bd.scenario.with_changes(rank=alt_rank))
    if other is None:
        other = OTHER_SCALE["large" if bd.derived["P"] > LARGE else "small"]
    other_sc = same_settings(sc, other)
    knobs = ranked_knobs(sc, units)
    return {
        "sc": sc, "model": sc.model, "units": units, "gpu": card, "capacity": card.usable_bytes, "ledger": bd.ledger,
        "P": bd.derived["P"], "P_train": bd.derived["P_train"],
        "peak": bd.peak, "peak_moment": next(m for m in bd.ledger.moments if m.key == bd.peak_moment),
        "ledger_total": bd.ledger_total, "blocks": blocks(bd, units), "per_param": per_param(bd),
        "full12": per_param(evaluate(full["full12"])), "full16": per_param(evaluate(full["full16"])),
        "fp16_refusal": fp16 if isinstance(fp16, str) else None,
        "lora": lora_table(lora_bd),
        "lora_trainable": lora_bd.blocks["trainable"],
        "alt_rank": alt_rank, "alt_P_lora": alt.derived["P_lora"], "alt_trainable": alt.blocks["trainable"],
        "alt_lora": lora_table(alt),
        "activations": activations(sc, units),
        "comparison": comparison(sc, card.usable_bytes),
        "other": {"model": other_sc.model, "P": evaluate(other_sc).derived["P"],
                  "comparison": comparison(other_sc, card.usable_bytes), "plan": scale_plan(other_sc, card)},
        "sensitivity": knobs, "cuts": activation_cuts(sc, knobs), "triage": triage(sc, card.usable_bytes),
        "figures": {"comparison": lambda: _plots().breakdown(
                        [(key, evaluate(sc.with_changes(**changes))) for key, changes in RECIPES
                         if not isinstance(_try(sc, **changes), str)], units)},
    }


# ---------------------------------------------------------------- formats: markup helpers for templates

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
        return Markup(mathml(tex, "inline"))

    def eq(self, *lines: str) -> Markup:
        return Markup('<div class="eq">' + "".join(mathml(line, "block") for line in lines) + "</div>")

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


def _breakable(tex: str) -> str:
    r"""Plain parentheses instead of ``\left( … \right)`` (one unbreakable box), so long lines can wrap."""
    return tex.replace(r"\left(", "(").replace(r"\right)", ")")


class TexFormat(MarkdownFormat):
    name, suffix = "tex", "tex"

    def escape(self, text) -> str:
        return "".join(_TEX_SPECIAL.get(c, c) for c in str(text))

    def h(self, level: int, text) -> Markup:
        command = {1: "section*", 2: "subsection*", 3: "subsubsection*", 4: "paragraph"}[level]
        return Markup(f"\\{command}{{{self._text(text)}}}")

    def b(self, text) -> Markup:
        return Markup(f"\\textbf{{{self._text(text)}}}")

    def code(self, text) -> Markup:
        return Markup(f"\\texttt{{{self.escape(text)}}}")

    def m(self, tex: str) -> Markup:
        return Markup(f"${_breakable(tex)}$")

    def eq(self, *lines: str) -> Markup:
        """Each line as text-style display math, which TeX breaks at + and · when it is wider than the page."""
        body = "\\\\\n".join(f"$\\displaystyle {_breakable(line)}$" for line in lines)
        return Markup(f"\\begin{{flushleft}}\n{body}\n\\end{{flushleft}}")

    def table(self, head, rows, align: str) -> Markup:
        """A tabular shrunk to the text width when wider; ``p`` (formula) and ``t`` (prose) columns wrap."""
        widths = {"r": "r", "l": "l", "p": "p{0.34\\linewidth}", "t": "p{0.28\\linewidth}"}
        spec = "".join(widths[a] for a in align)
        lines = [" & ".join(self._text(c) for c in head) + r" \\ \hline"]
        lines += [" & ".join(self._text(c) for c in row) + r" \\" for row in rows]
        return Markup("\\begin{center}\\small\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}{!}{"
                      "\\begin{tabular}{" + spec + "}\n" + "\n".join(lines) + "\n\\end{tabular}}\\end{center}")

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
        return "\n\n".join(out)


MARKUP = {"markdown": MarkdownFormat(), "html": HTMLFormat(), "tex": TexFormat()}


def mathml(tex: str, display: str = "inline") -> str:
    """LaTeX → MathML (latex2mathml), so an HTML document renders its formulas offline.

    >>> mathml("P \\\\cdot \\\\beta_{w}")[:45]
    '<math xmlns="http://www.w3.org/1998/Math/Math'
    """
    from latex2mathml.converter import convert

    return convert(tex, display=display)


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


FILTERS = {"bytes": jinja2.pass_context(_filter_bytes), "count": _filter_count,
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


ENV = environment()


@lru_cache(maxsize=32)
def _format_env(fmt: str, template_dir: str | None) -> jinja2.Environment:
    base = ENV if template_dir is None else environment(template_dir)
    return base.overlay(autoescape=fmt == "html", finalize=_finalize_for(MARKUP[fmt]))


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


def compile_pdf(tex: str, timeout: int = 120) -> bytes:
    """Run pdflatex on a document from ``render(..., fmt="tex")`` and return the PDF's bytes."""
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
        return pdf.read_bytes()
