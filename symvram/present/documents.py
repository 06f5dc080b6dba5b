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
from ..ledger.terms import BLOCKS, Role, Term
from ..ledger.sharding import shard_definitions
from ..analysis.diagnose import LOSS_HOOK, PART_NAMES, PARTS, diagnose, part_bytes, parameter_side
from ..analysis.plan import STRATEGIES, plan, tensor_parallel_ok
from ..presets import load_card, load_model
from ..scenario import METHODS, Scenario
from ..symbols import SYMBOLS, latex, sym
from ..units import UNITS, fmt_bytes

FORMATS = ("markdown", "html", "tex")
LANGS = ("en", "zh")
OTHER_SCALE = {"small": "70b", "large": "7b"}   # 7B ↔ 70B: the reference answer's re-derivation
LARGE = 30_000_000_000                          # a model above this many parameters re-derives at 7B


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
    groups = sc.structure.arch.target_sets  # another family names its modules otherwise: pass the group
    kw["targets"] = next((g for g, members in groups.items() if set(members) == set(sc.targets)), sc.targets)
    return Scenario.create(load_model(model), **kw)


def per_param(bd: Breakdown) -> dict:
    """Bytes per parameter, term by term: each term's derivative with respect to the count it scales with.

    >>> pp = per_param(evaluate(Scenario.create("7b", method="full", master="fp32")))
    >>> [(r["key"], r["bytes"]) for r in pp["rows"]], pp["total"].value
    ([('weights', 2), ('grads', 2), ('master', 4), ('optimizer_states', 8)], 16.0)
    """
    subs, led, sc = _subs(bd), bd.ledger, bd.scenario
    coefficients = _per_param_coefficients(bd)
    rows = [{"key": key, "label": led.by_key[key].label, "latex": latex(coefficient),
             "bytes": int(value_of(coefficient, subs))} for key, coefficient in coefficients]
    total = sp.Add(*(c for _, c in coefficients))
    counted = {key for key, _ in coefficients}
    # the parameter-side terms that are not a fixed number of bytes per parameter (8-bit states: fp32 below a
    # size, paged above one; Adafactor's factored states): named beside the figure, never silently left out
    uncounted = [{"key": t.key, "label": t.label, "bytes": bd.terms[t.key]} for t in led.terms
                 if t.role is Role.OPTIMIZER_STATE and t.key not in counted and bd.terms[t.key]]
    return {"rows": rows, "total": derive(r"\beta_{\mathrm{param}}", total, subs, r"B/param"),
            "counted": sorted(counted), "uncounted": uncounted, "optimizer": sc.optimizer,
            "state_dtype": sc.state_dtype, "paged": sc.structure.paged}


# the roles of the parameter side and the count each scales with: bytes per parameter are their derivatives
PER_PARAMETER = {Role.WEIGHT: sym("P"), Role.ADAPTER: sym("P_lora"), Role.GRADIENT: sym("P_train"),
                 Role.MASTER: sym("P_train"), Role.OPTIMIZER_STATE: sym("P_train")}


def _per_param_coefficients(bd: Breakdown) -> list[tuple[str, sp.Expr]]:
    """(term key, its derivative with respect to the count it scales with) for ``per_param``."""
    out = []
    for t in bd.ledger.terms:
        count = PER_PARAMETER.get(t.role)
        if count is None or t.block == "paged" or (t.role is Role.WEIGHT and bd.scenario.lora):
            continue   # the frozen base of LoRA is not the parameter side of its trainable parameters
        coefficient = sp.diff(t.expr, count)
        if coefficient == 0:   # not linear in the count (Adafactor's factored states)
            continue
        out.append((t.key, coefficient))
    return out


def per_param_value(bd: Breakdown) -> float:
    """``per_param(bd)["total"].value`` without its formulas printed (the comparison table's column).

    >>> per_param_value(evaluate(Scenario.create("7b", method="full", master="fp32")))
    16.0
    """
    return float(value_of(sp.Add(*(c for _, c in _per_param_coefficients(bd))), _subs(bd)))


def lora_table(bd: Breakdown) -> dict:
    """r·(d_in + d_out) per target matrix, per layer and in total, its share of P, and ∂P_LoRA/∂r."""
    sc, subs = bd.scenario, _subs(bd)
    r, L = sym("rank"), sym("layers")
    definition = dict(bd.ledger.definitions)[sym("P_lora")]
    rows = []
    for t in sc.targets:
        lin = sc.structure.arch.target_map[t]
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


def comparison(sc: Scenario, capacity: int) -> list[dict]:
    """Full (without and with the fp32 master), LoRA and QLoRA for ``sc``'s model and activation
    settings: the blocks, the optimizer step's temporary (its own line: it is not one of the three
    blocks), the peak, and the peak with gradient checkpointing."""
    rows = []
    for key, changes in RECIPES:
        other = _try(sc, **changes)
        if isinstance(other, str):
            rows.append({"key": key, "refused": other})
            continue
        bd = evaluate(other)
        ckpt = evaluate(other.with_changes(grad_checkpointing=True))
        rows.append({"key": key, "refused": None, "blocks": bd.blocks, "total": bd.ledger_total, "peak": bd.peak,
                     "params": parameter_side(bd), "step_temp": bd.terms.get("optimizer_temp", 0),
                     "per_param": per_param_value(bd), "P_train": bd.derived["P_train"],
                     "fits": bd.peak <= capacity, "moment": _label(bd),
                     "peak_ckpt": ckpt.peak, "fits_ckpt": ckpt.peak <= capacity,
                     "peak_fused": evaluate(other.with_changes(optimizer_impl="fused")).peak
                     if other.optimizer == "adamw" and other.optimizer_impl != "fused" else None,
                     "base_terms": {t.key: bd.terms[t.key] for t in bd.ledger.terms if t.role is Role.WEIGHT},
                     "P_quant": bd.derived.get("P_quant"), "P_keep": bd.derived.get("P_keep")})
    return rows


def _label(bd: Breakdown, key: str | None = None) -> str:
    return next(m.label for m in bd.ledger.moments if m.key == (key or bd.peak_moment))


def card_sizes(card) -> dict:
    """The card's memory in both units; ``nominal_gib``: the number in its name ("80GB"), which HBM's
    power-of-two stacks make a GiB figure."""
    m = re.search(r"(\d+)\s*GB\b", card.name)
    return {"memory": card.memory_bytes, "usable": card.usable_bytes,
            "nominal_gib": int(m.group(1)) if m else None,
            "nominal_bytes": int(m.group(1)) * 2**30 if m else None}


def headline(sc: Scenario, budget: int, compared: list[dict] | None = None) -> dict:
    """The short answer in the question's units: each recipe's parameter side (weights, gradients,
    optimizer states, master: the interview arithmetic), its peak, and whether it fits the budget
    (``compared``: ``comparison(sc, budget)``, when the caller has it already)."""
    rows = {r["key"]: r for r in (comparison(sc, budget) if compared is None else compared) if not r["refused"]}
    return {"rows": rows, "P": evaluate(sc).derived["P"]}


def timeline(bd: Breakdown) -> dict:
    """Every moment of the step, the parts live then, and the reconciliation of the ledger total with the
    peak: peak = total − (block terms not live at the peak) + (temporaries live at the peak)."""
    rows = []
    for m in bd.ledger.moments:
        parts = part_bytes(bd, m.key)
        rows.append({"key": m.key, "label": m.label, "why": m.why, "bytes": bd.moments[m.key], "parts": parts,
                     "peak": m.key == bd.peak_moment})
    moment = next(m for m in bd.ledger.moments if m.key == bd.peak_moment)
    live = set(moment.terms)
    freed = [(t.key, bd.terms[t.key]) for t in bd.ledger.terms if t.block in BLOCKS and t.key not in live]
    temps = [(t.key, bd.terms[t.key]) for t in bd.ledger.terms if t.block == "transient" and t.key in live]
    freed_bytes, temp_bytes = sum(v for _, v in freed), sum(v for _, v in temps)
    assert bd.ledger_total - freed_bytes + temp_bytes == bd.peak
    used = set().union(*(bd.ledger.by_key[k].expr.free_symbols for k, v in temps if v))
    return {"rows": rows, "freed": freed_bytes, "temps": temp_bytes,
            "temp_terms": [{"key": k, "bytes": v, "label": bd.ledger.by_key[k].label, "why": bd.ledger.by_key[k].why,
                            "latex": latex(bd.ledger.by_key[k].expr)} for k, v in temps if v],
            # the quantities the per-GPU temporaries are written with (FSDP2's A_saved), defined under their table
            "where": [{"latex": f"{latex(s)} = {latex(e)}", "meaning": SYMBOLS[str(s)].meaning}
                      for s, e in shard_definitions(bd.scenario.structure) if s in used],
            "freed_keys": [k for k, v in freed if v], "parts": part_bytes(bd)}


LEVERS = (
    ("fused_adamw", lambda sc: {"optimizer_impl": "fused"} if sc.optimizer == "adamw" and sc.optimizer_impl != "fused" else None),
    ("int8_states", lambda sc: {"state_dtype": "int8", **({"optimizer_impl": "fused"} if sc.optimizer == "adamw" else {})}
     if sc.state_dtype != "int8" else None),   # bitsandbytes' 8-bit AdamW is a fused kernel: no foreach buffer
    ("no_master", lambda sc: {"master": "none"} if sc.master == "fp32" else None),
    ("zero2", lambda sc: {"gpus": 8, "zero": 2} if sc.gpus == 1 and not sc.zero else None),
    ("seq_half", lambda sc: {"seq": max(sc.seq // 2, 1)} if sc.seq > 1 else None),
    ("batch_half", lambda sc: {"batch": max(sc.batch // 2, 1)} if sc.batch > 1 else None),
    ("checkpointing", lambda sc: {"grad_checkpointing": True} if not sc.grad_checkpointing else None),
    ("sdpa", lambda sc: {"attention": "sdpa"} if sc.attention == "eager" else None),
    ("chunked_loss", lambda sc: {LOSS_HOOK: "liger"} if LOSS_HOOK in Scenario.__dataclass_fields__ else None),
    ("rank_half", lambda sc: {"rank": max(sc.rank // 2, 1)} if sc.lora and sc.rank > 1 else None),
)


def levers(sc: Scenario) -> dict:
    """Each lever on its own, re-estimated, ranked by the GiB it takes off the peak (at the peak's own
    moment, wherever the peak moves). A chunked cross-entropy the engine cannot model yet is ranked by
    its bound: the loss's vocabulary-sized bytes live at the peak."""
    bd = evaluate(sc)
    parts = part_bytes(bd)
    rows = []
    for key, make in LEVERS:
        changes = make(sc)
        if changes is None:
            if key == "chunked_loss" and parts["loss"]:
                rows.append({"key": key, "saved": parts["loss"], "modelled": False, "peak": bd.peak - parts["loss"],
                             "moment": _label(bd)})
            continue
        other = _try(sc, **changes)
        if isinstance(other, str):
            continue
        after = evaluate(other)
        rows.append({"key": key, "saved": bd.peak - after.peak, "modelled": True, "peak": after.peak,
                     "moment": _label(after), **{k: getattr(other, k) for k in ("seq", "batch", "rank")}})
    rows.sort(key=lambda r: -r["saved"])
    activation_like = parts["activation"] + parts["loss"] + parts["backward"]
    return {"rows": rows, "moment": _label(bd), "moment_key": bd.peak_moment, "parts": parts,
            "activations_set_peak": activation_like > parts["optimizer"] and bd.peak_moment != "optimizer_step",
            "attention": attention_cost(sc)}


def attention_cost(sc: Scenario) -> dict:
    """SDPA / FlashAttention against eager attention: eager saves the b·heads·s² probabilities."""
    tried = [_try(sc, attention=a) for a in ("sdpa", "eager")]
    refused = next((x for x in tried if isinstance(x, str)), None)
    if refused:   # a family that runs one kernel only (Gemma 2: eager, for its soft-capped scores)
        return {"refused": refused}
    sdpa, eager = (evaluate(x) for x in tried)
    extra = [t for t in eager.ledger.terms if t.block == "activations" and eager.terms[t.key] != sdpa.terms.get(t.key)]
    return {"refused": None, "sdpa_act": sdpa.blocks["activations"], "eager_act": eager.blocks["activations"],
            "sdpa_peak": sdpa.peak, "eager_peak": eager.peak, "extra": eager.blocks["activations"] - sdpa.blocks["activations"],
            "terms": [{"label": t.label, "latex": latex(t.expr), "why": t.why} for t in extra]}


def scale_plan(sc: Scenario, card) -> dict:
    """``analysis.plan``'s fewest GPUs for every strategy × method, without and with gradient
    checkpointing; per method the headline (fewest cards without offload, either way) and the
    offload alternative with its host memory (no step times: the document prints none)."""
    plain, ckpt = (plan(sc.with_changes(grad_checkpointing=g), card, step_times=False) for g in (False, True))
    methods = [m for m in METHODS if any(r.method == m for r in plain.rows)]
    by = {(r.method, r.strategy.key): r for r in plain.rows}
    by_ckpt = {(r.method, r.strategy.key): r for r in ckpt.rows}
    rows = [{"strategy": st, "cells": [by.get((m, st.key)) for m in methods],
             "ckpt": [by_ckpt.get((m, st.key)) for m in methods]}
            for st in STRATEGIES if any((m, st.key) in by for m in methods)]

    def fewest(rows_):
        rows_ = [r for r in rows_ if r is not None]
        return min(rows_, key=lambda r: (r.gpus, r.at.scenario.grad_checkpointing)) if rows_ else None

    best = {m: fewest([plain.best(m, offload=False), ckpt.best(m, offload=False)]) for m in methods}
    offload = {m: fewest([plain.best(m, offload=True), ckpt.best(m, offload=True)]) for m in methods}
    return {"methods": methods, "rows": rows, "max_gpus": plain.max_gpus, "headroom": plain.headroom,
            "best_on_gpu": best, "offload": offload, "tp": tensor_parallel_ok(card)}


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
    triage = diagnose(sc, card)
    budget = triage.budget
    compared, other_compared = comparison(sc, budget), comparison(other_sc, budget)   # each also the headline's
    return {
        "sc": sc, "model": sc.model, "units": units, "gpu": card, "capacity": card.usable_bytes, "budget": budget,
        "headroom": triage.headroom, "card_sizes": card_sizes(card), "ledger": bd.ledger,
        "P": bd.derived["P"], "P_train": bd.derived["P_train"],
        "peak": bd.peak, "peak_moment": next(m for m in bd.ledger.moments if m.key == bd.peak_moment),
        "ledger_total": bd.ledger_total, "blocks": blocks(bd, units), "per_param": per_param(bd),
        "headline": headline(sc, budget, compared), "timeline": timeline(bd), "part_names": PART_NAMES, "parts": PARTS,
        "full12": per_param(evaluate(full["full12"])), "full16": per_param(evaluate(full["full16"])),
        "fp16_refusal": fp16 if isinstance(fp16, str) else None,
        "lora": lora_table(lora_bd),
        "lora_trainable": lora_bd.blocks["trainable"],
        "alt_rank": alt_rank, "alt_P_lora": alt.derived["P_lora"], "alt_trainable": alt.blocks["trainable"],
        "alt_lora": lora_table(alt),
        "activations": activations(sc, units),
        "comparison": compared,
        "other": {"model": other_sc.model, "P": evaluate(other_sc).derived["P"],
                  "headline": headline(other_sc, budget, other_compared), "comparison": other_compared,
                  "plan": scale_plan(other_sc, card)},
        "levers": levers(sc), "triage": triage,
        "figures": {"comparison": lambda: _plots().breakdown(
                        [(key, evaluate(sc.with_changes(**changes))) for key, changes in RECIPES
                         if not isinstance(_try(sc, **changes), str)], units, cards=[card], requested=sc)},
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
