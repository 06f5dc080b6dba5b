"""Tables of a Breakdown: text, Markdown and the JSON contract. Numbers come from ``evaluate``;
this module only formats them.

>>> from symvram.api import estimate
>>> data = to_json(estimate("7b", method="full"))
>>> data["params"]["trainable"], data["bytes"]["base"] - data["bytes"]["base"] % 10**9   # 2 B/param + a 256-B buffer
(7000000000, 14000000000)
"""
from __future__ import annotations

from ..evaluate import Breakdown
from ..ledger.sharding import notes
from ..ledger.terms import BLOCKS
from ..symbols import latex, text
from .units import fmt_bytes

BLOCK_TITLES = {"base": "base weights", "trainable": "trainable (grads, optimizer, master, adapters)",
                "activations": "activations", "transient": "temporaries (only at some moments)",
                "host": "host (CPU) memory, offloaded",
                "paged": "paged optimizer states (CUDA unified memory)"}


def term_latex(bd: Breakdown, key: str) -> str:
    t = bd.ledger.by_key[key]
    return f"{t.label} = {latex(t.expr)}"


def host_bytes(bd: Breakdown) -> int:
    """Bytes offloaded to CPU memory (per GPU's rank); never part of the GPU peak."""
    return sum(bd.terms[t.key] for t in bd.ledger.block_terms("host"))


def paged_bytes(bd: Breakdown) -> int:
    """Paged optimizer states: on the GPU when paged in, outside torch's allocator (never in the peak)."""
    return sum(bd.terms[t.key] for t in bd.ledger.block_terms("paged"))


def to_json(bd: Breakdown) -> dict:
    """The output contract of ``symvram estimate --format json``."""
    led = bd.ledger
    return {
        "params": {"total": bd.derived["P"], "trainable": bd.derived["P_train"],
                   **{k: v for k, v in bd.derived.items() if k not in ("P", "P_train")}},
        "bytes": {**bd.blocks, "ledger_total": bd.ledger_total, "peak": bd.peak, "peak_moment": bd.peak_moment,
                  "host": host_bytes(bd), **({"paged": paged_bytes(bd)} if bd.ledger.block_terms("paged") else {})},
        "notes": notes(bd.scenario.structure, bd.scenario.gpus),
        "terms": [{"key": t.key, "block": t.block, "latex": term_latex(bd, t.key), "bytes": bd.terms[t.key],
                   "why": t.why, "source": t.source} for t in led.terms],
        "moments": [{"key": m.key, "label": m.label, "bytes": bd.moments[m.key], "terms": list(m.terms),
                     "why": m.why} for m in led.moments],
        "definitions": {str(s): latex(e) for s, e in led.definitions},
        "inputs": bd.scenario.inputs(),
    }


def _rows_text(rows: list[list[str]], aligns: str) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for n, row in enumerate(rows):
        cells = [c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(row, widths, aligns)]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _rows_markdown(rows: list[list[str]], aligns: str) -> str:
    head = "| " + " | ".join(rows[0]) + " |"
    sep = "|" + "|".join("---:" if a == "r" else "---" for a in aligns) + "|"
    body = ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join([head, sep, *body])


def render_rows(rows: list[list[str]], aligns: str, fmt: str) -> str:
    return _rows_markdown(rows, aligns) if fmt == "markdown" else _rows_text(rows, aligns)


def detail(bd: Breakdown, units: str = "GiB", fmt: str = "table") -> str:
    """Every term with its formula and value, the block sums, each moment, and the peak."""
    sc = bd.scenario
    md = fmt == "markdown"
    title = (f"{sc.model.name} · {sc.method}" + (f" r={sc.rank}" if sc.lora else "") +
             (f" + trainable {', '.join(sc.modules_to_save)}" if sc.modules_to_save else "") +
             f" · batch {sc.batch} · seq {sc.seq} · {sc.dtype}" + (f"/autocast {sc.autocast}" if sc.autocast != "none" else "") +
             f" · {sc.optimizer} ({sc.optimizer_impl}), states {sc.state_dtype}" +
             (", fp32 master" if sc.master == "fp32" else "") + (", checkpointing" if sc.grad_checkpointing else "") +
             f" · {sc.attention}")
    from ..stacks import summary

    lines = [("## " if md else "") + title, summary(sc), ""]
    params = f"parameters: {bd.derived['P']:,} total, {bd.derived['P_train']:,} trainable " \
             f"({100 * bd.derived['P_train'] / bd.derived['P']:.2f} %)"
    lines += [params, ""]
    rows = [["block", "term", f"bytes ({units})", "formula", "why"]]
    for block in (*BLOCKS, "transient", "host", "paged"):
        for t in bd.ledger.block_terms(block):
            formula = f"${latex(t.expr)}$" if md else text(t.expr)
            rows.append([block, t.key, fmt_bytes(bd.terms[t.key], units).split()[0], formula, t.why])
    lines.append(render_rows(rows, "llrll", fmt))
    lines.append("")
    sums = [["", f"{units}"]]
    for block in BLOCKS:
        sums.append([BLOCK_TITLES[block], fmt_bytes(bd.blocks[block], units)])
    sums.append(["ledger total (base + trainable + activations)", fmt_bytes(bd.ledger_total, units)])
    if bd.ledger.block_terms("host"):
        sums.append([BLOCK_TITLES["host"] + ", not on the GPU", fmt_bytes(host_bytes(bd), units)])
    if bd.ledger.block_terms("paged"):
        sums.append([BLOCK_TITLES["paged"] + ": on the GPU when paged in, not in the peak (outside "
                     "torch.cuda.max_memory_allocated)", fmt_bytes(paged_bytes(bd), units)])
    lines.append(render_rows(sums, "lr", fmt))
    lines.append("")
    mrows = [["moment of the step", f"live ({units})", "what is live"]]
    for m in bd.ledger.moments:
        mark = " ← peak" if m.key == bd.peak_moment else ""
        mrows.append([m.label + mark, fmt_bytes(bd.moments[m.key], units), m.why])
    lines.append(render_rows(mrows, "lrl", fmt))
    lines.append("")
    lines.append(f"peak: {fmt_bytes(bd.peak, units)} ({bd.peak:,} bytes) at {bd.ledger.moments[[m.key for m in bd.ledger.moments].index(bd.peak_moment)].label}"
                 f" — the figure torch.cuda.max_memory_allocated() reports; add the CUDA context and allocator slack on top")
    lines += [f"note: {n}" for n in notes(bd.scenario.structure, bd.scenario.gpus)]
    return "\n".join(lines)


def comparison(rows: list[tuple[str, Breakdown]], units: str = "GiB", fmt: str = "table") -> str:
    """The reference answer's table: each method split into the three blocks, with the peak."""
    table = [["method", f"base ({units})", f"trainable ({units})", f"activations ({units})",
              f"ledger total ({units})", f"peak ({units})", "bytes/trainable param"]]
    for name, bd in rows:
        per_param = (bd.blocks["trainable"] + (bd.terms.get("weights", 0) if bd.scenario.method == "full" else 0)) / bd.derived["P_train"]
        table.append([name, *(fmt_bytes(bd.blocks[b], units).split()[0] for b in BLOCKS),
                      fmt_bytes(bd.ledger_total, units).split()[0], fmt_bytes(bd.peak, units).split()[0],
                      f"{per_param:.1f}"])
    return render_rows(table, "lrrrrrr", fmt)
