"""The CLI's reports of every analysis result, text (table or Markdown) and JSON, in the render layer.

``symvram whatif``, ``fit``, ``sensitivity``, ``plan`` and ``diagnose`` parse their arguments, call the
analysis and print what these functions return; the results' ``repr`` and Jupyter Markdown
(``symvram.present.display``) use them too. Each is registered for its result type and format in
``symvram.rendering``, so that ``render(result, "text")`` and ``render(result, "json")`` find it.
"""
from __future__ import annotations

from ..analysis.diagnose import PART_NAMES, PARTS, Diagnosis
from ..analysis.estimate import CompareReport, EstimateReport, Timing
from ..analysis.fit import KNOBS, FitResult
from ..analysis.host import host_bytes
from ..analysis.plan import STRATEGIES, PlanResult, interconnect, tensor_parallel_ok
from ..analysis.sensitivity import Comparison, SensitivityResult
from ..analysis.whatif import WhatIf
from ..ledger.terms import BLOCKS
from ..rendering import renders
from ..scenario import METHODS
from ..symbols import SYMBOLS, latex, text
from ..stacks import summary as stack_summary
from ..units import UNITS, fmt_bytes, fmt_flops
from .tables import (BLOCK_TITLES, card_memory_json, card_memory_lines, comparison, detail, markdown_cell,
                     moment_label, number_in, render_rows, title, to_json, tower_note)


# ---- estimate: the report, its time lines and verdicts --------------------------------------------------

def time_json(t: Timing) -> dict:
    """The JSON ``time`` block: FLOPs always; seconds and tokens/s on a card."""
    if t.step is not None and not isinstance(t.step, str):   # a StepTime on a card
        return t.step.json()
    f, c = t.flops, t.comm
    return {"flops_per_step": f.per_step, "flops": f.by_phase, "flops_by_term": f.by_term,
            "comm_bytes_per_step": c["network"], "host_bytes_per_step": c["host"], "hbm_bytes_per_step": c["hbm"],
            "seconds_per_step": None, "tokens_per_second": None,
            "why_no_seconds": t.step if isinstance(t.step, str) else
            "a step time needs a card: pass --gpu (with --mfu, --interconnect to change the assumptions)"}


def time_lines(t: Timing) -> list[str]:
    """One line of FLOPs (and, on a card, one of time) with the assumptions."""
    f = t.flops
    lines = [f"time: {fmt_flops(f.per_step)} matmul FLOPs per micro-batch step on one GPU (forward "
             f"{fmt_flops(f.by_phase['forward'])}, backward {fmt_flops(f.by_phase['backward'])}"
             + (f", recompute {fmt_flops(f.by_phase['recompute'])}" if f.by_phase["recompute"] else "") + ")"]
    if isinstance(t.step, str):
        lines.append(f"  no step time: {t.step.removeprefix('symvram: error: ')}")
    elif t.step is None:
        lines.append("  step time: pass --gpu for seconds per step and tokens/s")
    else:
        lines.append(f"  on {t.step.card.name}: {t.step.summary()}; assuming " + "; ".join(t.step.assumptions()))
    return lines


def estimate_text(r: EstimateReport, units: str, fmt: str, reading=None) -> str:
    """``symvram estimate --method …`` as text or Markdown: the ledger, the card's memory, the time, the verdict."""
    verdict = estimate_verdict(r.diagnosis, units, reading)[0] if r.diagnosis is not None else ""
    return (detail(r.breakdown, units, fmt) + "\n\n" + "\n".join(card_memory_lines(r.memory, units)) + "\n"
            + "\n".join(time_lines(r.timing)) + ("\n\n" + verdict if verdict else ""))


def estimate_json(r: EstimateReport, units: str = "GiB", reading=None) -> dict:
    """``symvram estimate --method … --format json``: the ledger's JSON with the card's memory, time and verdict."""
    out = to_json(r.breakdown)
    out["bytes"].update(card_memory_json(r.memory))
    verdict = estimate_verdict(r.diagnosis, units, reading)[1] if r.diagnosis is not None else None
    return {**out, "time": time_json(r.timing), **({"verdict": verdict} if verdict else {})}


def compare_time_line(r: CompareReport) -> str:
    """One line: each method's matmul FLOPs per step (the time ledger beside the memory table)."""
    cells = [f"{name} {fmt_flops(r.timings[name].flops.per_step)}" for name, _ in r.rows]
    return ("time: matmul FLOPs per micro-batch step — " + "; ".join(cells)
            + " (seconds per step: estimate --method … --gpu CARD)")


def compare_text(r: CompareReport, units: str, fmt: str) -> str:
    """``symvram estimate MODEL`` as text or Markdown: the head line, the table, the FLOPs line, the verdict."""
    sc, first = r.rows[0][1].scenario, r.rows[0][1]
    head = f"{sc.model.name}: P = {first.derived['P']:,} parameters{tower_note(sc)}; "
    lora = dict(r.rows).get("LoRA")
    if lora:
        head += (f"LoRA r={lora.scenario.rank} on {','.join((*lora.scenario.targets, *lora.scenario.head_targets))} = "
                 f"{lora.derived['P_train']:,} trainable; ")
    head += f"batch {sc.batch}, seq {sc.seq}" + (", checkpointing" if sc.grad_checkpointing else "")
    head += "\n" + stack_summary((lora or first).scenario)
    notes = "".join(f"\n{name}: not shown — {reason}" for name, reason in r.skipped)
    text = head + "\n\n" + comparison(list(r.rows), units, fmt) + ("\n" + notes if notes else "")
    text += "\n\n" + compare_time_line(r)
    return text + ("\n\n" + compare_verdict(r, units) if r.card is not None else "")


def compare_json(r: CompareReport) -> dict:
    """The reference answer's rows as JSON, each with its time block (FLOPs), and the refused rows' reasons."""
    return {**{name: {**to_json(bd), "time": time_json(r.timings[name])} for name, bd in r.rows},
            **{name: {"error": reason} for name, reason in r.skipped}}


def estimate_verdict(d: Diagnosis, units: str, reading=None) -> tuple[str, dict]:
    """``estimate --gpu``'s verdict (text and JSON): fits or over by how much, with the remedies when not."""
    sc = d.estimate.scenario
    fb = (lambda n: fmt_bytes(n, units))
    cards = f"{sc.gpus} × {d.card.name}" if sc.gpus > 1 else d.card.name
    if d.side == "fits":
        line = (f"verdict on {cards}: fits — peak {fb(d.estimate.peak)} per GPU, budget {fb(d.budget)} "
                f"({fb(d.card.usable_bytes)} usable − {fb(d.headroom)} headroom), {fb(d.budget - d.estimate.peak)} to spare")
    elif d.side == "fragmentation":
        m = d.memory
        line = (f"verdict on {cards}: does not fit — the tensors do (peak {fb(d.estimate.peak)} per GPU, budget "
                f"{fb(d.budget)}), but the {m.allocator} caching allocator would reserve {fb(m.reserved_peak)}, more than "
                f"the {fb(m.capacity)} it may hold: fragmentation (modelled, not measured)")
    else:
        line = (f"verdict on {cards}: does not fit — peak {fb(d.estimate.peak)} per GPU, budget {fb(d.budget)}, "
                f"over by {fb(d.estimate.peak - d.budget)} ({d.side} side)")
    lines = [line] + remedy_lines(d, units, reading)
    if d.side != "fits" and not d.fixed:
        lines.append("  none of these is enough: see symvram diagnose (more cards) or symvram plan")
    edits = remedy_edits(d, reading) if reading is not None else [None] * len(d.remedies)
    data = {"card": d.card.name, "gpus": sc.gpus, "budget_bytes": d.budget, "peak_bytes": d.estimate.peak,
            "fits": d.side == "fits",
            "remedies": [{"title": x.title, "changes": x.changes, "peak_after_bytes": x.after.peak,
                          "fits": x.after.peak <= d.budget, **({"edits": e} if e is not None else {})}
                         for x, e in zip(d.remedies, edits)]}
    return "\n".join(lines), data


def compare_verdict(r: CompareReport, units: str) -> str:
    """``estimate --gpu`` without --method: each method fits (with its tokens/s per GPU) or is over by how much."""
    fb = (lambda n: fmt_bytes(n, units))

    def speed(name) -> str:
        v = r.tokens_per_second[name]
        return "" if v is None else f", {v:,.0f} tokens/s per GPU"   # None: a card without peak figures

    words = [f"{name} {'fits' + speed(name) if bd.peak <= r.budget else 'over by ' + fb(bd.peak - r.budget)}"
             for name, bd in r.rows]
    return f"on {r.card.name} (budget {fb(r.budget)} per GPU): " + "; ".join(words)


# ---- whatif ---------------------------------------------------------------------------------------------

def _signed(n: int, units: str) -> str:
    return ("+" if n > 0 else "") + fmt_bytes(n, units).split()[0]


def _value(table: dict[str, int], key: str, units: str) -> str:
    """A term's or moment's bytes, or a dash where that ledger has no such term."""
    return fmt_bytes(table[key], units).split()[0] if key in table else "—"


def _number(v: int | float) -> str:
    return f"{v:,}" if isinstance(v, int) or float(v).is_integer() else f"{v:g}"


def whatif_text(w: WhatIf, units: str, fmt: str) -> str:
    md = fmt == "markdown"
    code = (lambda s: f"`{s}`") if md else (lambda s: s)
    b, a = w.before, w.after
    sc = b.scenario
    change = ", ".join(f"{n} {_number(x)} → {_number(y)}" for n, x, y in w.symbol_values())
    lines = [("## " if md else "") + f"{sc.model.name} · {sc.method}: what if {change}", stack_summary(sc), ""]
    rows = [["block", "term", "formula", f"before ({units})", f"after ({units})", f"Δ ({units})"]]
    terms = w.terms()
    for block in dict.fromkeys(t.block for t in terms):
        for t in (t for t in terms if t.block == block):
            rows.append([block, t.key, code(latex(t.expr)) if md else text(t.expr), _value(b.terms, t.key, units),
                         _value(a.terms, t.key, units),
                         _signed(w.term_delta(t.key), units)])
    lines += [render_rows(rows, "lllrrr", fmt), ""]
    rows = [["block", f"before ({units})", f"after ({units})", f"Δ ({units})"]]
    for block in BLOCKS:
        rows.append([BLOCK_TITLES[block], fmt_bytes(b.blocks[block], units).split()[0],
                     fmt_bytes(a.blocks[block], units).split()[0], _signed(w.block_delta(block), units)])
    rows.append(["ledger total", fmt_bytes(b.ledger_total, units).split()[0], fmt_bytes(a.ledger_total, units).split()[0],
                 _signed(a.ledger_total - b.ledger_total, units)])
    lines += [render_rows(rows, "lrrr", fmt), ""]
    rows = [["moment of the step", f"before ({units})", f"after ({units})", f"Δ ({units})"]]
    for m in w.moments():
        mark = "".join((" ← peak before" if m.key == b.peak_moment else "", " ← peak after" if m.key == a.peak_moment else ""))
        rows.append([m.label + mark, _value(b.moments, m.key, units), _value(a.moments, m.key, units),
                     _signed(w.moment_delta(m.key), units)])
    lines += [render_rows(rows, "lrrr", fmt), ""]
    labels = {m.key: m.label for m in w.moments()}
    lines.append(f"peak: {fmt_bytes(b.peak, units)} ({labels[b.peak_moment]}) → {fmt_bytes(a.peak, units)} "
                 f"({labels[a.peak_moment]}): {_signed(w.peak_delta, units)} {units} "
                 f"({100 * w.peak_delta / b.peak:+.1f} %)")
    t = w.time()
    lines.append(f"time: {fmt_flops(t['before']['flops_per_step'])} → {fmt_flops(t['after']['flops_per_step'])} matmul "
                 f"FLOPs per step, {t['flops_per_token_change_percent']:+.1f} % per token (step times: estimate --gpu)")
    return "\n".join(lines)


def whatif_json(w: WhatIf) -> dict:
    return {
        "changes": {n: {"before": x, "after": y} for n, x, y in w.symbol_values()},
        "before": to_json(w.before), "after": to_json(w.after),
        "delta": {"terms": {t.key: w.term_delta(t.key) for t in w.terms()},
                  "blocks": {blk: w.block_delta(blk) for blk in BLOCKS},
                  "moments": {m.key: w.moment_delta(m.key) for m in w.moments()},
                  "peak": w.peak_delta},
        "time": w.time(),
    }


# ---- fit ------------------------------------------------------------------------------------------------

UNIT_WORDS = {"seq": "tokens", "batch": "sequences", "rank": ""}



def fit_json(r: FitResult) -> dict:
    def reserved(cm):
        return None if cm is None else {"reserved_peak": cm.reserved_peak, "device_peak": cm.device_peak,
                                         "oom_at_event": cm.oom_at[cm.allocator]}

    return {
        "knob": r.knob, "status": r.status, "value": r.value, "limit": r.limit, "limit_reason": r.limit_reason,
        "card": {"key": r.card.key, "name": r.card.name, "memory_bytes": r.card.memory_bytes,
                 "usable_bytes": r.card.usable_bytes},
        "headroom_bytes": r.headroom, "budget_bytes": r.budget, "allocator": r.memory.allocator, "how": r.how,
        "device_block": dict(r.memory.block),
        "binding_moment": r.binding_moment if r.status == "fits" else None,
        "peak_at_value": {"value": r.at.values[r.knob], "bytes": r.at.peak, "moment": r.at.peak_moment,
                          **reserved(r.memory)},
        "peak_above": None if r.above is None else {"value": r.above.values[r.knob], "bytes": r.above.peak,
                                                    "moment": r.above.peak_moment, **reserved(r.memory_above)},
        "inputs": r.at.scenario.inputs(),
    }


def card_budget_line(card, cm, margin: int, units: str) -> str:
    """The card less what is not the caching allocator's: what the allocator may reserve."""
    fb = lambda n: fmt_bytes(n, units)   # noqa: E731
    nccl = cm.block["nccl_buffers"]
    return (f"{fb(card.memory_bytes)} memory − {fb(cm.block['cuda_context'])} CUDA context"
            + (f" − {fb(nccl)} NCCL buffers" if nccl else "") + (f" − {fb(margin)} margin" if margin else "")
            + f" = {fb(cm.capacity)} for the caching allocator ({ALLOCATOR_WORDS[cm.allocator]}; modelled, not measured)")


ALLOCATOR_WORDS = {"default": "default allocator", "expandable": "expandable_segments:True"}


def fit_text(r: FitResult, units: str) -> str:
    sc = r.at.scenario
    unit = UNIT_WORDS[r.knob]
    num = (lambda v: f"{v:,} {unit[:-1] if v == 1 and unit.endswith('s') else unit}".rstrip())  # 1 sequence
    fixed = ", ".join(f"{k} {getattr(sc, k)}" for k in KNOBS if k != r.knob and (k != "rank" or sc.lora))
    lines = [f"{sc.model.name} · {sc.method} · {fixed} on {r.card.name}: "
             + card_budget_line(r.card, r.memory, r.headroom, units), stack_summary(sc)]
    fb = lambda n: fmt_bytes(n, units)   # noqa: E731
    if r.status == "none":
        lines.append(f"nothing fits: even {r.knob} 1 reserves {fb(r.memory.reserved_peak)} "
                     f"(allocated {fb(r.at.peak)}), {fb(r.memory.reserved_peak - r.budget)} over")
        return "\n".join(lines)
    if r.status == "all":
        lines.append(f"everything fits up to the limit: {r.knob} {num(r.value)} ({r.limit_reason}) reserves "
                     f"{fb(r.memory.reserved_peak)}, {fb(r.budget - r.memory.reserved_peak)} under")
        return "\n".join(lines)
    moment = {m.key: m.label for m in r.at.ledger.moments}
    lines.append(f"largest {r.knob} that fits: {num(r.value)} under the reserved line (max_memory_reserved of the "
                 f"{ALLOCATOR_WORDS[r.memory.allocator]} ≤ {fb(r.budget)}, not the allocated one: the allocator replay "
                 f"runs two steps; the ledger's moments, {r.how}, bound it first; the binding moment is "
                 f"{moment[r.binding_moment]})")
    lines.append(f"  at {r.knob} {num(r.value)}: reserved {fb(r.memory.reserved_peak)} "
                 f"({r.budget - r.memory.reserved_peak:,} bytes under), allocated {fb(r.at.peak)}, "
                 f"nvidia-smi {fb(r.memory.device_peak)}")
    lines.append(f"  at {r.knob} {num(r.value + 1)}: out of memory (allocated {fb(r.above.peak)}; reserved "
                 f"{fb(r.memory_above.reserved_peak)} on an unbounded card)")
    return "\n".join(lines)


# ---- sensitivity ----------------------------------------------------------------------------------------

def amount(n: float, units: str) -> str:
    """Bytes in the card unit, or in its mega unit when under one of those (derivatives are small)."""
    small = {"GiB": "MiB", "GB": "MB"}.get(units, units)
    return fmt_bytes(n, units if abs(n) >= UNITS[units] else small)


TIME_ELASTICITY = ("time elasticity: x/F · ∂F/∂x of the step's matmul FLOPs F (symvram.ledger.flops): the % more "
                   "compute per % more x")


def sensitivity_explanation(res: SensitivityResult, c: Comparison, units: str) -> list[str]:
    """Why knob a moves the peak more than knob b, and by how much: every number from the expressions."""
    lines = [f"why {c.a.knob} moves the peak {c.ratio:.1f}× as much as {c.b.knob} (per percent):"]
    for row in (c.a, c.b):
        tops = ", ".join(f"{s.key} {amount(s.bytes, units)}" for s in row.shares[:3])
        lines.append(f"  {row.knob}·∂peak/∂{row.knob} = {amount(row.proportional_bytes, units)} "
                     f"({100 * row.elasticity:.1f} % of the {fmt_bytes(res.peak, units)} peak) moves with "
                     f"{row.knob}: {tops}")
    linear = [r.knob for r in (c.a, c.b) if r.knob not in {str(x) for x in r.derivative.free_symbols}]
    if linear:
        lines.append(f"  the peak is linear in {' and in '.join(linear)} (∂peak/∂x does not contain x), so each "
                     "elasticity is exactly the share of the peak that is proportional to the knob")
    lines.append(f"  so 1 % less {c.a.knob} saves {amount(c.a.proportional_bytes / 100, units)}, 1 % less "
                 f"{c.b.knob} {amount(c.b.proportional_bytes / 100, units)}")
    (va, sa), (vb, sb) = c.halved[c.a.knob], c.halved[c.b.knob]
    lines.append(f"  re-estimated: {c.a.knob} {c.a.at:g} → {va:g} saves {fmt_bytes(sa, units)}; "
                 f"{c.b.knob} {c.b.at:g} → {vb:g} saves {fmt_bytes(sb, units)}"
                 + (f" ({sa / sb:.1f}× as much)" if sb > 0 else ""))
    return lines


@renders(SensitivityResult, "markdown")
def sensitivity_markdown(res: SensitivityResult, units: str = "GiB") -> str:
    """The ranked knobs (elasticity = % change of the peak per % change of the knob) and each ∂peak/∂x."""
    moment = moment_label(res.breakdown.ledger, res.moment)
    lines = [f"**{title(res.breakdown)}**: peak {fmt_bytes(res.peak, units)} at *{moment}*, the active "
             "moment, whose derivative is the peak's", "", stack_summary(res.breakdown.scenario), ""]
    rows = [["#", "knob", "meaning", "at", "∂peak/∂x per unit", "elasticity", f"x·∂peak/∂x ({units})",
             "time elasticity"]]
    for n, r in enumerate(res.rows, 1):
        d = SYMBOLS[r.knob]
        rows.append([str(n), f"${d.latex}$ `{r.knob}`", markdown_cell(d.meaning), f"{r.at:,g} " + (d.unit[:-1] if r.at == 1 and d.unit.endswith("s") else d.unit),
                     amount(r.value, units), f"{r.elasticity:.4f}", number_in(r.proportional_bytes, units),
                     f"{r.time_elasticity:.4f}"])
    lines += [render_rows(rows, "rllrrrrr", "markdown"), TIME_ELASTICITY, ""]
    for r in res.rows:
        lines.append(f"$$\\frac{{\\partial\\,\\mathrm{{peak}}}}{{\\partial {SYMBOLS[r.knob].latex}}} = "
                     f"{r.derivative_latex}$$")
    return "\n".join(lines)


def sensitivity_text(res: SensitivityResult, c: Comparison | None, units: str, fmt: str) -> str:
    """The ranked knobs as a text table, or (``fmt="markdown"``) the one Markdown table that Jupyter shows
    too (``sensitivity_markdown``), then the comparison of two knobs."""
    if fmt == "markdown":
        explanation = sensitivity_explanation(res, c, units) if c is not None else []
        return sensitivity_markdown(res, units) + ("\n\n" + "\n".join(explanation) if explanation else "")
    sc = res.breakdown.scenario
    label = next(m.label for m in res.breakdown.ledger.moments if m.key == res.moment)
    lines = [f"{sc.model.name} · {sc.method}" + (f" r={sc.rank}" if sc.lora else "") +
             f" · batch {sc.batch} · seq {sc.seq}: peak {fmt_bytes(res.peak, units)} at {label} "
             "(the active moment: its derivative is the peak's)", stack_summary(sc), ""]
    rows = [["#", "knob", "meaning", "at", "∂peak/∂x (per unit)", "elasticity", f"x·∂peak/∂x ({units})",
             "time elasticity"]]
    for n, r in enumerate(res.rows, 1):   # the value with its unit in one cell: the table fits 100 columns
        d = SYMBOLS[r.knob]
        rows.append([str(n), r.knob, d.meaning, f"{r.at:,g} {d.unit}", amount(r.value, units),
                     f"{r.elasticity:.4f}", fmt_bytes(r.proportional_bytes, units).split()[0], f"{r.time_elasticity:.4f}"])
    lines += [render_rows(rows, "rlllrrrr", "table"), TIME_ELASTICITY, "", "derivatives of the active moment:"]
    lines += [f"  ∂peak/∂{r.knob} = {text(r.derivative)}" for r in res.rows]
    if c is not None:
        lines += [""] + sensitivity_explanation(res, c, units)
    return "\n".join(lines)


def sensitivity_json(res: SensitivityResult, c: Comparison | None, units: str) -> dict:
    out = {
        "peak_bytes": res.peak, "active_moment": res.moment, "inputs": res.breakdown.scenario.inputs(),
        "knobs": [{"knob": r.knob, "meaning": SYMBOLS[r.knob].meaning, "unit": SYMBOLS[r.knob].unit, "at": r.at,
                   "derivative_latex": r.derivative_latex, "value": r.value, "elasticity": r.elasticity,
                   "proportional_bytes": r.proportional_bytes, "time_elasticity": r.time_elasticity,
                   "terms": [{"key": s.key, "bytes": s.bytes} for s in r.shares]} for r in res.rows],
    }
    if c is not None:
        out["comparison"] = {"a": c.a.knob, "b": c.b.knob, "elasticity_ratio": c.ratio,
                             "halved": {k: {"value": v, "saves_bytes": saved} for k, (v, saved) in c.halved.items()},
                             "explanation": sensitivity_explanation(res, c, units)}
    return out


# ---- plan -----------------------------------------------------------------------------------------------

def plan_json(r: PlanResult) -> dict:
    return {
        "card": {"key": r.card.key, "name": r.card.name, "usable_bytes": r.card.usable_bytes},
        "headroom_bytes": r.headroom, "budget_bytes": r.budget, "max_gpus": r.max_gpus, "allocator": r.allocator,
        "rows": [{"method": row.method, "strategy": row.strategy.key, "strategy_name": row.strategy.name,
                  "fits": row.fits, "gpus": row.gpus, "tp": row.tp, "params_only_gpus": row.params_gpus,
                  "per_gpu_peak_bytes": row.at.peak, "peak_moment": row.at.peak_moment,
                  "host_bytes_per_gpu": host_bytes(row.at), "host_bytes_total": row.host_total,
                  "communication_rank": STRATEGIES.index(row.strategy) + 1, "communication": row.strategy.reason,
                  "tokens_per_second": row.tokens_per_second, "tokens_per_second_per_gpu": row.tokens_per_second_per_gpu,
                  "seconds_per_step": row.time.seconds_per_step if row.time else None,
                  "seconds": row.time.seconds if row.time else None,
                  "speed_rank": r.ranked.index(row) + 1 if row.time else None}
                 for row in r.rows],
        "fastest": {m: (f.strategy.key if (f := r.fastest(m)) else None) for m in METHODS
                    if any(x.method == m for x in r.rows)},
        "fastest_why": why_fastest(r),
        "time_assumptions": next((x.time.assumptions() for x in r.ranked if x.time), None),
        "best": {m: (b.strategy.key if (b := r.best(m)) else None) for m in METHODS if any(x.method == m for x in r.rows)},
    }


def why_fastest(r: PlanResult) -> str | None:
    """Why the fastest setup wins: GPU-seconds per 1,000 tokens by kind (compute, memory, network, host),
    against the fewest-GPU setup's."""
    top = r.fastest()
    if top is None:
        return None

    def cost(row):   # GPU-seconds per 1,000 tokens, by kind
        scale = 1000 * row.time.gpus_total / row.time.tokens_per_step
        return {k: row.time.seconds[k] * scale for k in ("compute", "memory", "network", "host", "cpu")}

    mine = cost(top)
    parts = ", ".join(f"{k} {v:.3g}" for k, v in mine.items() if v)
    text = (f"{top.method} with {top.strategy.name} on {top.gpus}: {top.tokens_per_second_per_gpu:,.0f} tokens/s per "
            f"GPU ({top.tokens_per_second:,.0f} in all); GPU-seconds per 1,000 tokens: {parts}")
    fewest = min((x for x in r.ranked if x.time is not None), key=lambda x: (x.gpus, -x.tokens_per_second_per_gpu))
    if fewest is not top:
        theirs = cost(fewest)
        extra = max(theirs, key=lambda k: theirs[k] - mine[k])
        text += (f"; the fewest-GPU setup ({fewest.method}, {fewest.strategy.name} on {fewest.gpus}) reaches "
                 f"{fewest.tokens_per_second_per_gpu:,.0f} per GPU, losing most on {extra} "
                 f"({theirs[extra]:.3g} against {mine[extra]:.3g})")
    return text


def plan_summary(r: PlanResult, method: str, units: str) -> str:
    """One sentence per method: the fewest GPUs without offload (ties: cheaper communication), then
    what offload saves in cards and costs in host memory."""
    rows = [x for x in r.rows if x.method == method]
    plain = r.best(method, offload=False)
    offload = r.best(method, offload=True)
    never = [x.strategy.name for x in rows if not x.fits]
    parts = []
    if plain:
        parts.append(f"{plain.strategy.name} on {plain.gpus} × {r.card.name} ({fmt_bytes(plain.at.peak, units)} per GPU)")
    if offload and (plain is None or offload.gpus < plain.gpus):
        parts.append(f"with {offload.strategy.name} on {offload.gpus} ({fmt_bytes(offload.at.peak, units)} per GPU, "
                     f"{fmt_bytes(offload.host_total, units)} of host memory)")
    if not parts:
        return f"{method}: nothing fits on {r.max_gpus} × {r.card.name}"
    text = f"{method}: " + "; or ".join(parts)
    if never:
        text += f"; {', '.join(never)} {'does' if len(never) == 1 else 'do'} not fit on {r.max_gpus}"
    starved = [x for x in rows if x.params_gpus and (not x.fits or x.gpus > x.params_gpus)]
    if starved and not rows[0].at.scenario.grad_checkpointing:
        text += (f" — activations, which ZeRO does not divide, cost cards ({starved[0].strategy.name}: "
                 f"{starved[0].params_gpus} for the parameters alone): try --grad-checkpointing or a shorter --seq")
    return text


def plan_text(r: PlanResult, sc, units: str, fmt: str) -> str:
    head = (f"{sc.model.name} · batch {sc.batch} · seq {sc.seq}" + (" · checkpointing" if sc.grad_checkpointing else "")
            + f" on {r.card.name}: {fmt_bytes(r.card.usable_bytes, units)} usable − {fmt_bytes(r.headroom, units)} "
              f"headroom = {fmt_bytes(r.budget, units)} per GPU"
            + (f"; each count replayed on the card through the {r.allocator} caching allocator (one rank's "
               "schedule; modelled, not measured)" if r.allocator else "")) + "\n" + stack_summary(sc)
    table = [["method", "strategy", "GPUs", "GPUs for params", f"per-GPU peak ({units})", f"host ({units})",
              "tokens/s per GPU", "tokens/s"] + (["communication"] if fmt == "markdown" else [])]
    # ZeRO without offload on one GPU divides by N = 1: DDP's memory (ZeRO-3: more), so where DDP fits one GPU
    # those rows say nothing (the JSON keeps them)
    ddp_on_one = {x.method for x in r.rows if x.strategy.zero == 0 and x.fits and x.gpus == 1 and x.tp == 1}
    hidden = [x for x in r.ranked if x.method in ddp_on_one and x.strategy.zero and x.strategy.offload == "none"
              and x.fits and x.gpus == 1 and x.tp == 1]
    for row in r.ranked:
        if row in hidden:
            continue
        gpus = (str(row.gpus) + (f" (t={row.tp})" if row.tp > 1 else "")) if row.fits else f"> {r.max_gpus}"
        params = str(row.params_gpus) if row.params_gpus else f"> {r.max_gpus}"
        peak = fmt_bytes(row.at.peak, units).split()[0] + ("" if row.fits else f" at {row.at.scenario.gpus * row.tp}")
        speed = ([f"{row.tokens_per_second_per_gpu:,.0f}", f"{row.tokens_per_second:,.0f}"] if row.time
                 else ["—", "—"])
        table.append([row.method, row.strategy.name, gpus, params, peak,
                      fmt_bytes(row.host_total, units).split()[0], *speed]
                     + ([row.strategy.reason] if fmt == "markdown" else []))
    methods = [m for m in METHODS if any(x.method == m for x in r.rows)]
    lines = [head, "", render_rows(table, "llrrrrrrl"[:len(table[0])], fmt),
             "GPUs for params: the fewest GPUs the parameter side alone (weights, gradients, optimizer states) fits "
             "on, before activations"]
    if hidden:
        lines.append(f"not shown: ZeRO without offload on 1 GPU for {', '.join(sorted({x.method for x in hidden}))}, "
                     "where DDP fits one GPU (ZeRO divides by N = 1: the same memory; ZeRO-3 adds its gathered buffers)")
    lines.append("")
    if fmt != "markdown":   # the communication of each strategy once, below the table (it fits a terminal)
        shown = [x for x in STRATEGIES if any(row.strategy is x for row in r.rows)]
        lines += ["communication, cheapest first:"] + [f"  {x.name}: {x.reason}" for x in shown] + [""]
    lines += [plan_summary(r, m, units) for m in methods]
    timed = next((x for x in r.ranked if x.time), None)
    if timed:
        lines += ["", "ranked by predicted tokens/s per GPU (fastest first; GPUs is the fewest that fit)",
                  "fastest: " + why_fastest(r), "time assumes: " + "; ".join(   # every row's (offload's PCIe, CPU)
                      dict.fromkeys(a for x in r.ranked if x.time for a in x.time.assumptions()))]
    else:
        lines += ["", f"no step times: {r.card.name} has no peak FLOP/s figure in data/gpus.toml (rows in strategy order)"]
    if not tensor_parallel_ok(r.card, r.interconnect):
        lines.append(f"tensor parallelism is left out: {r.card.name} cards talk over {interconnect(r.card, r.interconnect)} "
                     "(data/gpus.toml, --interconnect), and TP all-reduces activations inside every layer, which needs NVLink")
    return "\n".join(lines)


# ---- diagnose -------------------------------------------------------------------------------------------

def _moment(bd, key=None) -> str:
    key = key or bd.peak_moment
    return next(m.label for m in bd.ledger.moments if m.key == key)


def probe_advice(d: Diagnosis) -> str:
    """What the probe (batch 1, short sequence) can and cannot tell for this job."""
    sc = d.estimate.scenario
    suspects = (["the LoRA target modules (all-linear adapts more matrices than q,v)"] if sc.lora else []) + [
        "an fp32 master copy the framework keeps", "the optimizer's state precision and implementation"]
    return ("Still OOM → the parameter side is bigger than this ledger: check " + ", ".join(suspects)
            + ". Runs → the batch- and sequence-dependent part is the problem: go on.")


def verdict(d: Diagnosis, fb) -> str:
    parts = d.parts
    sizes = {p: sum(v.values()) for p, v in parts.items()}
    cause = d.cause
    if cause == "fragmentation":
        m = d.memory
        return (f"verdict: fragmentation — the tensors fit ({fb(m.schedule_allocated)} allocated of the "
                f"{fb(m.capacity)} the allocator may reserve), but the caching allocator reserves "
                f"{fb(m.reserved_peak)}: {fb(m.reserved_peak - m.schedule_allocated)} of cached, split blocks")
    if cause == "fits":
        return (f"verdict: the ledger says it fits with {fb(d.budget - d.estimate.peak)} to spare; an OOM means "
                "something the ledger does not hold (another process, a leak, a different recipe): measure "
                "with --measured-peak")
    if cause == "parameter":
        return (f"verdict: the parameter side alone (weights, gradients and optimizer states, all alive at the "
                f"optimizer step: {fb(d.parameter_bytes)}) is over the budget by "
                f"{fb(d.parameter_bytes - d.budget)}: no batch, sequence, checkpointing or loss setting can fix it; "
                "only the precision of the weights or the optimizer, the optimizer's place (CPU offload, one step "
                "per parameter in backward), the method or more cards can")
    room = d.budget - sizes["parameter"]
    # "largest" is said only when it is true: the parameter side is often the biggest part without being over alone
    rank = ("the largest part of the peak" if sizes[cause] >= sizes["parameter"] else
            f"the largest part beside the parameter side ({fb(sizes['parameter'])})")
    where = {"optimizer": f"at the {d.moment_label} the activations are already freed: the optimizer's own "
                          f"temporaries ({fb(sizes['optimizer'])}) do not fit in the {fb(room)} the parameter side leaves",
             "loss": f"the loss's vocabulary-sized tensors ({fb(sizes['loss'])}) are {rank}; "
                     f"the parameter side leaves {fb(room)}",
             "activation": f"the saved activations ({fb(sizes['activation'])}) are {rank}; "
                           f"the parameter side leaves {fb(room)}",
             "backward": f"the backward temporaries ({fb(sizes['backward'])}) are {rank}; "
                         f"the parameter side leaves {fb(room)}"}[cause]
    return f"verdict: {where}"


def remedy_edits(d: Diagnosis, reading) -> list[list[str]]:
    """Each remedy's own changes (not the ones above it) as edits to the --from files, or to the script of a run
    read from its live objects (``readers.live.Training.edits``)."""
    from ..readers.edits import edits

    write = getattr(reading, "edits", None) or (lambda step, batch_before: edits(reading, step, batch_before))
    out, before = [], {}
    for r in d.remedies:
        step = {k: v for k, v in r.changes.items() if before.get(k) != v}
        out.append(write(step, batch_before=r.before.scenario.batch))
        before = r.changes
    return out


def remedy_lines(d: Diagnosis, units: str, reading=None) -> list[str]:
    """The remedies for the peak's moment, cheapest first: modelled ones with their saving and the peak after,
    the ones the engine cannot model yet with the most they can save; with a Reading (--from), each modelled
    remedy followed by its edits to the user's files."""
    fb = (lambda n: fmt_bytes(n, units))
    lines = []
    if d.proposals or d.skipped:
        lines += ["", f"remedies for the {d.moment_label}, cheapest first (each keeps the ones above it; "
                      "stops at the first that fits)" + (":" if reading is None else ", as edits to your "
                                                       + ("script:" if hasattr(reading, "edits") else "files:"))]
    if d.cause == "fragmentation":
        m = d.memory
        after = "fits" if m.oom_at["expandable"] is None else "still out of memory"
        lines.append(f"  0. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segments that grow by pages, so freed "
                     f"blocks at their end are reused): saves {fb(d.expandable_saving)} of reserved memory → "
                     f"{fb(m.reserved['expandable'])} reserved, {after}; cost: none in memory or accuracy, "
                     "slower first allocations")
    for skipped, why in d.skipped:
        lines.append(f"  - {skipped}: skipped — {why}")
    edits = iter(remedy_edits(d, reading) if reading is not None else [[] for _ in d.remedies])
    for n, r in enumerate(d.proposals, 1):
        if not r.modelled:
            lines.append(f"  {n}. {r.title}: up to {fb(r.bound)} at the {_moment(r.before)} (not modelled yet: the "
                         f"steps below are estimated without it); cost: {r.cost}")
            continue
        where = "fits" if r.after.peak <= d.budget else f"still {fb(r.after.peak - d.budget)} over"
        price = "" if r.price is None else (f"; time price {r.price:+.1f} % per token ({r.price_basis})"
                                            if abs(r.price) >= 0.05 or "unpriced" in r.price_basis
                                            else f"; free in time ({r.price_basis})")
        lines.append(f"  {n}. {r.title}: saves {fb(r.saving)} → peak {fb(r.after.peak)} at the {_moment(r.after)}, "
                     f"{where}{price}; cost: {r.cost}")
        lines += [f"       {e}" for e in next(edits)]
    return lines


def diagnosis_text(d: Diagnosis, units: str, reading=None) -> str:
    sc, est = d.estimate.scenario, d.estimate
    fb = (lambda n: fmt_bytes(n, units))
    budget = (card_budget_line(d.card, d.memory, d.headroom + max(d.overhead, 0), units)
              + (f" (the margin includes {fb(d.overhead)} of measured overhead)" if d.overhead > 0 else "")
              + f"; the tensors' share, less the cuBLAS workspaces it holds: {fb(d.budget)}")
    lines = [f"{sc.model.name} · {sc.method}" + (f" r={sc.rank}" if sc.lora else "") + f" · batch {sc.batch} · "
             f"seq {sc.seq} on {d.card.name}: budget {budget}", stack_summary(sc), ""]
    if d.measured:
        measured, at = d.measured
        lines.append(f"measured: {fb(measured)} at batch {at.scenario.batch}, seq {at.scenario.seq}; the ledger "
                     f"predicts {fb(at.peak)} there: the measurement is {fb(abs(d.overhead))} "
                     f"({100 * d.overhead / at.peak:+.1f} %) {'above' if d.overhead >= 0 else 'below'} the estimate"
                     + (" — taken as unknown overhead (context, allocator, fragmentation) and kept free below"
                        if d.overhead > 0 else "" if d.overhead == 0 else
                        f" — the run holds less than the ledger counts there: a setting the run uses differently "
                        f"(loss implementation, checkpointing, optimizer, LoRA targets) or a term it does not keep; "
                        f"no overhead is added and the verdicts below stay on the estimate, so they may be "
                        f"pessimistic by up to {fb(-d.overhead)}"))
    lines.append(f"estimate: peak {fb(est.peak)} at the {d.moment_label}; what lives there:")
    for part in PARTS:
        terms = {k: v for k, v in d.parts[part].items() if v}
        if sum(terms.values()) * 1000 >= est.peak:   # parts below 0.1 % of the peak (rotary cache, ids) are noise
            shown = [(k, v) for k, v in sorted(terms.items(), key=lambda kv: -kv[1]) if v * 1000 >= est.peak][:4]
            detail = ", ".join(f"{k} {fb(v)}" for k, v in shown)
            name = PART_NAMES[part]
            if part == "parameter" and sc.zero == 3:   # the parameter side holds ZeRO-3's gathered units too
                name = name[:-1] + "; ZeRO-3's gathered units)"
            lines.append(f"  {name}: {fb(sum(terms.values()))} ({detail})")
    lines.append(verdict(d, fb))
    if d.cause == "optimizer":
        lines.append(f"probe: batch 1, seq {d.probe.scenario.seq} predicts {fb(d.probe.peak)} — it cannot split the "
                     "sides here: the optimizer step's temporaries do not depend on the batch or the sequence; the "
                     "first remedy below is the test")
    elif d.cause not in ("fits", "parameter"):
        verdict_probe = "fits" if d.probe.peak <= d.budget else "is over too"
        lines.append(f"probe: run the real job at batch 1, seq {d.probe.scenario.seq} (predicted {fb(d.probe.peak)}: "
                     f"{verdict_probe}). " + probe_advice(d))
    lines += remedy_lines(d, units, reading)
    if d.cards is not None:
        c = d.cards
        lead = f"  or keep {sc.method}:" if d.fixed else "  then more cards:"
        lines.append(f"{lead} {c.strategy.name} on {c.gpus} × {d.card.name} ({fb(c.at.peak)} per GPU"
                     + (f", {fb(c.host_total)} host" if c.host_total else "") + ") with the other fixes above"
                     + ("" if tensor_parallel_ok(d.card) else "; no tensor parallelism: these cards have no NVLink"))
    elif d.cause != "fits" and not d.fixed:
        lines.append("  more cards: nothing fits within --max-gpus; a larger card is needed")
    return "\n".join(lines)


def diagnosis_json(d: Diagnosis, reading=None) -> dict:
    edits = remedy_edits(d, reading) if reading is not None else [None] * len(d.remedies)
    return {
        "card": {"name": d.card.name, "usable_bytes": d.card.usable_bytes}, "headroom_bytes": d.headroom,
        "overhead_bytes": d.overhead, "budget_bytes": d.budget, "cause": d.cause, "side": d.cause,
        "allocator": d.memory.allocator, "reserved_peak_bytes": d.memory.reserved_peak,
        "reserved_peaks_bytes": dict(d.memory.reserved), "device_peak_bytes": d.memory.device_peak,
        "allocator_capacity_bytes": d.memory.capacity, "device_block": dict(d.memory.block),
        "expandable_segments_saving_bytes": d.expandable_saving,
        "peak_bytes": d.estimate.peak, "peak_moment": d.estimate.peak_moment,
        "parts_bytes": {p: sum(v.values()) for p, v in d.parts.items()},
        "parameter_side_bytes": d.parameter_bytes, "activation_side_bytes": d.activation_bytes,
        "probe": {"batch": d.probe.scenario.batch, "seq": d.probe.scenario.seq, "peak_bytes": d.probe.peak},
        # the modelled remedies, each on top of the previous (as before); "proposals" adds, in order, the
        # remedies the engine cannot model yet (a chunked cross-entropy) with the most they can save
        "remedies": [{"key": r.key, "title": r.title, "tier": r.tier, "changes": r.changes, "saving_bytes": r.saving,
                      "peak_after_bytes": r.after.peak, "fits": r.after.peak <= d.budget, "cost": r.cost,
                      "time_price_percent": r.price, "time_price_basis": r.price_basis,
                      **({"edits": e} if e is not None else {})}
                     for r, e in zip(d.remedies, edits)],
        "proposals": [{"key": r.key, "title": r.title, "tier": r.tier, "modelled": r.modelled,
                       "saving_bytes": r.saving, "peak_after_bytes": r.after.peak if r.modelled else None,
                       "cost": r.cost} for r in d.proposals],
        "skipped": [{"title": t, "why": w} for t, w in d.skipped],
        "more_cards": None if d.cards is None else {"strategy": d.cards.strategy.key, "gpus": d.cards.gpus,
                                                    "per_gpu_peak_bytes": d.cards.at.peak},
        "measured": None if d.measured is None else {"peak_bytes": d.measured[0], "estimate_bytes": d.measured[1].peak},
        "inputs": d.estimate.scenario.inputs(),
    }



# ---- the registry -----------------------------------------------------------------------------------------

@renders(WhatIf, "text")
def _whatif_text(w: WhatIf, units: str = "GiB", fmt: str = "table") -> str:
    return whatif_text(w, units, fmt)


@renders(WhatIf, "json")
def _whatif_json(w: WhatIf, **_) -> dict:
    return whatif_json(w)


@renders(FitResult, "text")
def _fit_text(r: FitResult, units: str = "GiB", **_) -> str:
    return fit_text(r, units)


@renders(FitResult, "json")
def _fit_json(r: FitResult, **_) -> dict:
    return fit_json(r)


@renders(SensitivityResult, "text")
def _sensitivity_text(res: SensitivityResult, units: str = "GiB", fmt: str = "table",
                      comparison: Comparison | None = None) -> str:
    return sensitivity_text(res, comparison, units, fmt)


@renders(SensitivityResult, "json")
def _sensitivity_json(res: SensitivityResult, units: str = "GiB", comparison: Comparison | None = None) -> dict:
    return sensitivity_json(res, comparison, units)


@renders(PlanResult, "text")
def _plan_text(r: PlanResult, units: str = "GiB", fmt: str = "table") -> str:
    return plan_text(r, r.rows[0].at.scenario, units, fmt)


@renders(PlanResult, "json")
def _plan_json(r: PlanResult, **_) -> dict:
    return plan_json(r)


@renders(Diagnosis, "text")
def _diagnosis_text(d: Diagnosis, units: str = "GiB", reading=None) -> str:
    return diagnosis_text(d, units, reading)


@renders(Diagnosis, "json")
def _diagnosis_json(d: Diagnosis, reading=None, **_) -> dict:
    return diagnosis_json(d, reading)
