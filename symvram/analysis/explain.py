"""The worked answer's numbers and formulas, gathered from the engine for the documents (``symvram explain``).

``explain_context(sc)`` returns every number, formula and derivation a document prints (nothing is typed in a
template); the render layer (``present.documents``) writes it as Markdown, HTML or TeX. A derivation is the
formula, the numbers substituted and the result, as LaTeX (``derive``).

>>> from symvram.scenario import Scenario
>>> ctx = explain_context(Scenario.create("7b"))
>>> ctx["per_param"]["total"].value
12.0
"""
from __future__ import annotations

import dataclasses
import re

import sympy as sp

from ..errors import UserError
from ..evaluate import Breakdown, evaluate, substitution
from ..ledger.activations import per_layer_bytes
from ..ledger.architecture import family
from ..ledger.terms import BLOCKS, Role
from ..ledger.sharding import shard_definitions
from ..presets import load_card, load_model
from ..scenario import METHODS, Scenario
from ..symbols import SYMBOLS, latex, sym
from ..units import UNITS, fmt_bytes
from .diagnose import PART_NAMES, PARTS, diagnose, part_bytes, parameter_side
from .plan import STRATEGIES, plan, tensor_parallel_ok

OTHER_SCALE = {"small": "70b", "large": "7b"}   # 7B ↔ 70B: the reference answer's re-derivation
LARGE = 30_000_000_000                          # a model above this many parameters re-derives at 7B


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
    arch = sc.structure.arch   # another family names its modules otherwise: pass the group (all-linear as the
    kw["targets"] = next((g for g, members in arch.target_sets.items()   # model has it: modules under a switch left out)
                          if set(members) == set(sc.targets)
                          or (g == "all-linear" and arch.is_all_linear(sc.targets, sc.structure.options))), sc.targets)
    spec = load_model(model)
    if spec.tower is None and spec.image_text_to_text is None:   # a text model: a multimodal checkpoint's loader and
        for name in ("loader", "image_tokens", "train_vision"):  # images stay with it
            kw.pop(name)
    other = family(spec.family)
    if isinstance(kw["targets"], str) and kw["targets"] not in other.target_sets:   # a group only this family has
        kw["targets"] = other.extra("default_targets", "all-linear")   # (Nemotron-H's "linear"): the other's default
    return Scenario.create(spec, **kw)


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
    # offload: the counted terms that live in CPU memory (the bytes per parameter count them wherever they are)
    host = [(key, c) for key, c in coefficients if led.by_key[key].block == "host"]
    return {"rows": rows, "total": derive(r"\beta_{\mathrm{param}}", total, subs, r"B/param"),
            "counted": sorted(counted), "uncounted": uncounted, "optimizer": sc.optimizer,
            "state_dtype": sc.state_dtype, "paged": sc.structure.paged,
            "host_per_param": int(value_of(sp.Add(*(c for _, c in host)), subs)),
            "host_bytes": sum(bd.terms[key] for key, _ in host)}


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


def per_param_value(bd: Breakdown, on_gpu: bool = False) -> float:
    """``per_param(bd)["total"].value`` without its formulas printed (the comparison table's column); ``on_gpu``:
    without the terms offloaded to CPU memory.

    >>> per_param_value(evaluate(Scenario.create("7b", method="full", master="fp32")))
    16.0
    >>> per_param_value(evaluate(Scenario.create("7b", method="full", stack="deepspeed", offload="optimizer")), True)
    2.0
    """
    return float(value_of(sp.Add(*(c for key, c in _per_param_coefficients(bd)
                                   if not on_gpu or bd.ledger.by_key[key].block != "host")), _subs(bd)))


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
    term, = build_flops(sc.structure).phase_terms("recompute")   # full, every k-th layer, or op-level
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
                     "params": parameter_side(bd), "step_temp": sum(bd.terms[t.key] for t in bd.ledger.terms
                                                                 if t.role is Role.OPTIMIZER_STEP_TEMPORARY),
                     "per_param": per_param_value(bd), "gpu_per_param": per_param_value(bd, on_gpu=True),
                     "P_train": bd.derived["P_train"],
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
    ("chunked_loss", lambda sc: {"loss_impl": "liger"}),
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


def explain_context(sc: Scenario, gpu: str = "a100-80g", other: str | None = None, units: str = "GiB") -> dict:
    """Every number and formula of the worked answer for ``sc``, from the engine.

    >>> ctx = explain_context(Scenario.create("7b"))
    >>> ctx["lora"]["P_lora"], ctx["other"]["model"].name
    (159907840, '70b')
    """
    if units not in UNITS:
        raise UserError(f"--units must be one of {', '.join(UNITS)}; got {units!r}")
    if sc.train_vision:   # the worked answer sets the step beside its checkpointed twin
        raise UserError("explain --train-vision: the worked answer compares the step with activation checkpointing, "
                        "which a trained vision tower is not modelled under (its blocks recompute in its own backward, "
                        "after the decoder's); symvram estimate gives the step")
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
        # each recipe's breakdown, for the comparison figure (evaluated only by a format that draws it)
        "recipe_breakdowns": lambda: [(key, evaluate(sc.with_changes(**changes))) for key, changes in RECIPES
                                      if not isinstance(_try(sc, **changes), str)],
    }
