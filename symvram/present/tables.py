"""Tables of a Breakdown: text, Markdown and the JSON contract. Numbers come from ``evaluate``;
this module only formats them.

>>> from symvram.api import estimate
>>> data = to_json(estimate("7b", method="full"))
>>> data["params"]["trainable"], data["bytes"]["base"] - data["bytes"]["base"] % 10**9   # 2 B/param + a 256-B buffer
(7000000000, 14000000000)
"""
from __future__ import annotations

from ..analysis.host import host_bytes, paged_bytes
from ..evaluate import Breakdown
from ..ledger.sharding import notes
from ..ledger.terms import BLOCKS, Role
from ..stacks import summary
from ..symbols import latex, text
from ..units import fmt_bytes

BLOCK_TITLES = {"base": "base weights", "trainable": "trainable (grads, optimizer, master, adapters)",
                "activations": "activations", "transient": "temporaries (only at some moments)",
                "host": "host (CPU) memory, offloaded",
                "paged": "paged optimizer states (CUDA unified memory)"}


def term_latex(bd: Breakdown, key: str) -> str:
    t = bd.ledger.by_key[key]
    return f"{t.label} = {latex(t.expr)}"


def moe_notes(bd: Breakdown, units: str = "GiB") -> list[str]:
    """Plain sentences for adapters and 4-bit bases on an MoE model, whose fused 3-D expert weights are not
    nn.Linear: PEFT's all-linear reaches them (target_parameters, one A and B per expert) and bitsandbytes
    does not quantize them.

    >>> from symvram.scenario import Scenario
    >>> from symvram.evaluate import evaluate
    >>> moe_notes(evaluate(Scenario.create("qwen3-30b-a3b", method="lora", rank=16)))[0][:60]
    'MoE LoRA: the targets reach the fused experts (gate, gate_up'
    """
    from ..evaluate import evaluate

    sc = bd.scenario
    experts = {m.name for m in sc.structure.arch.moe_weights}
    if not experts or not sc.lora:
        return []
    out = []
    reached = [t for t in sc.targets if t in experts]
    if reached:
        rest = tuple(t for t in sc.targets if t not in experts)
        without = evaluate(sc.with_changes(targets=rest)).derived["P_lora"] if rest else 0
        out.append(f"MoE LoRA: the targets reach the fused experts ({', '.join(reached)}; PEFT's target_parameters "
                   f"gives each of the {sc.values().get('experts', 0):,} experts its own A and B): "
                   f"{bd.derived['P_lora'] - without:,} of the {bd.derived['P_lora']:,} trainable parameters"
                   + (f"; without them (--targets {','.join(rest)}) {without:,}" if rest else ""))
    if sc.method == "qlora":
        kept = bd.terms.get("weights_16bit", 0)
        out.append(f"MoE QLoRA: bitsandbytes quantizes nn.Linear modules only, and the fused expert weights are "
                   f"not: {bd.derived['P_keep']:,} of the {bd.derived['P']:,} parameters stay unquantized, "
                   f"{fmt_bytes(kept, units)} of the {fmt_bytes(bd.blocks['base'], units)} base"
                   + (" (in fp32: PEFT's k-bit preparation upcasts them)" if sc.kbit_prepared else
                      f" (in {sc.dtype})"))
    return out


def to_json(bd: Breakdown) -> dict:
    """The output contract of ``symvram estimate --format json``."""
    led = bd.ledger
    return {
        "params": {"total": bd.derived["P"], "trainable": bd.derived["P_train"],
                   **{k: v for k, v in bd.derived.items() if k not in ("P", "P_train")}},
        "bytes": {**bd.blocks, "ledger_total": bd.ledger_total, "peak": bd.peak, "peak_moment": bd.peak_moment,
                  "host": host_bytes(bd), **({"paged": paged_bytes(bd)} if bd.ledger.block_terms("paged") else {})},
        "notes": notes(bd.scenario.structure, bd.scenario.gpus) + moe_notes(bd),
        "terms": [{"key": t.key, "block": t.block, "latex": term_latex(bd, t.key), "bytes": bd.terms[t.key],
                   "why": t.why, "source": t.source} for t in led.terms],
        "moments": [{"key": m.key, "label": m.label, "bytes": bd.moments[m.key], "terms": list(m.terms),
                     "why": m.why} for m in led.moments],
        "definitions": {str(s): latex(e) for s, e in led.definitions},
        "inputs": bd.scenario.inputs(),
    }


WIDTH = 100  # terminal output fits this many columns; 0 (``symvram --wide``) keeps every line whole
MIN_TEXT_COLUMN = 16   # a text column is never narrower, even when its longest word is wider


def _shrink(widths: list[int], rows: list[list[str]], aligns: str, width: int) -> list[int]:
    """Column widths whose table fits ``width``: headers wider than their column's values wrap at a space
    first (two lines); then left-aligned text columns (after the first) wrap at their spaces, the one with
    the most to give first. Numbers, identifiers and the first column's values never break."""
    widths = list(widths)

    def longest_word(cells) -> int:
        return max((len(w) for c in cells for w in c.split()), default=0)

    body = [max((len(r[i]) for r in rows[1:]), default=0) for i in range(len(widths))]
    floor = [longest_word(r[i] for r in rows) if a == "l" and i > 0 else max(body[i], longest_word([rows[0][i]]))
             for i, a in enumerate(aligns)]
    floor = [min(f, w) for f, w in zip(floor, widths)]
    # a header on two lines at its best space (never narrower than its values): tried before three
    two = [max(floor[i], min((max(len(h[:k]), len(h[k + 1:])) for k in range(len(h)) if h[k] == " "),
                             default=widths[i])) for i, h in enumerate(rows[0])]
    text_columns = [i for i, a in enumerate(aligns) if a == "l" and i > 0]
    # last, when the words alone are too wide (an 8-bit optimizer's formula): a text column breaks inside its
    # words rather than the terminal cutting the whole row
    least = [MIN_TEXT_COLUMN] * len(widths)
    for columns, limit in ((range(len(widths)), two), (text_columns, floor), (range(len(widths)), floor),
                           (text_columns, least)):
        while sum(widths) + 2 * (len(widths) - 1) > width:
            candidates = [i for i in columns if widths[i] > limit[i]]
            if not candidates:
                break
            widths[max(candidates, key=lambda i: widths[i] - limit[i])] -= 1
    return widths


def _wrap_cell(cell: str, w: int) -> list[str]:
    import textwrap

    if len(cell) <= w:
        return [cell]
    return textwrap.wrap(cell, w, break_on_hyphens=False) or [""]


def _rows_text(rows: list[list[str]], aligns: str, width: int | None = None) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    width = WIDTH if width is None else width
    if width:
        widths = _shrink(widths, rows, aligns, width)
    out = []
    for n, row in enumerate(rows):
        cells = [_wrap_cell(c, w) for c, w in zip(row, widths)]
        for k in range(max(len(c) for c in cells)):
            part = [c[k] if k < len(c) else "" for c in cells]
            out.append("  ".join(p.rjust(w) if a == "r" else p.ljust(w) for p, w, a in zip(part, widths, aligns)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def terminal(text: str, width: int | None = None) -> str:
    """``text`` with every line longer than ``width`` (default WIDTH) wrapped under its own indent: tables
    already fit (``render_rows``), so what is left is prose. A line that starts with a file name (an edit
    to a --from file: ``run.yml: gradient_checkpointing: true``) stays whole, to be pasted as it is.

    >>> print(terminal("peak: " + "word " * 20 + "\\n  1. " + "word " * 10, 40))
    peak: word word word word word word word
      word word word word word word word
      word word word word word word
      1. word word word word word word word
           word word word
    """
    import re
    import textwrap

    width = WIDTH if width is None else width
    if not width:
        return text
    out = []
    for line in text.split("\n"):
        first = line.split(maxsplit=1)[0] if line.strip() else ""
        if len(line) <= width or re.fullmatch(r"\S*[/\\]\S*:|[\w.-]+\.\w+:", first):
            out.append(line)
            continue
        lead = re.match(r"\s*(?:\d+\. |- )?", line).group(0)
        out += textwrap.wrap(line, width, initial_indent="", subsequent_indent=" " * len(lead) + "  ",
                             break_on_hyphens=False, drop_whitespace=True) or [line]
    return "\n".join(out)


def _rows_markdown(rows: list[list[str]], aligns: str) -> str:
    head = "| " + " | ".join(rows[0]) + " |"
    sep = "|" + "|".join("---:" if a == "r" else "---" for a in aligns) + "|"
    body = ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join([head, sep, *body])


def render_rows(rows: list[list[str]], aligns: str, fmt: str, width: int | None = None) -> str:
    """Markdown, or a text table that fits ``width`` columns (default WIDTH: long text cells wrap)."""
    return _rows_markdown(rows, aligns) if fmt == "markdown" else _rows_text(rows, aligns, width)


def setup_line(sc) -> str:
    """The configuration line ``estimate --method`` opens with (the figures' subtitles repeat it)."""
    return (f"{sc.model.name} · {sc.method}" + (f" r={sc.rank}" if sc.lora else "") +
            "".join(f" + LoRA {name}" for name in sc.head_targets) +
            (f" + trainable {', '.join(sc.modules_to_save)}" if sc.modules_to_save else "") +
            (f" · packed row of {sc.seq} tokens" if sc.packing else f" · batch {sc.batch} · seq {sc.seq}") + f" · {sc.dtype}" + (f"/autocast {sc.autocast}" if sc.autocast != "none" else "") +
            f" · {sc.optimizer} ({sc.optimizer_impl}), states {sc.state_dtype}" +
            (", fp32 master" if sc.master == "fp32" else "") + (", checkpointing" if sc.grad_checkpointing else "") +
            (f" every {sc.checkpoint_every}th layer" if sc.grad_checkpointing and sc.checkpoint_every > 1 else "") +
            (" (torchtitan's op-level policy)" if sc.grad_checkpointing and sc.checkpoint_ops else "") +
            (", activations offloaded to the host" if sc.offload_activations else "") +
            f" · {sc.attention}")


def tower_note(sc) -> str:
    """The vision tower a multimodal checkpoint loads beside the decoder, for a header ("" without one)."""
    t = sc.model.tower
    return "" if t is None else (f" + {t.params:,} of its vision tower ({('its adapters trained' if sc.lora else 'trained') if sc.train_vision else 'frozen'}; "
                                 f"loaded as {t.loader}" + f"; {sc.image_tokens} image tokens per sample" * bool(sc.image_tokens)
                                 + ")")


def detail(bd: Breakdown, units: str = "GiB", fmt: str = "table") -> str:
    """Every term with its formula and value, the block sums, each moment, and the peak."""
    sc = bd.scenario
    md = fmt == "markdown"
    lines = [("## " if md else "") + setup_line(sc), summary(sc), ""]
    tower = bd.derived.get("P_lora_tower", sc.model.tower.params if sc.model.tower else 0) if sc.train_vision else 0
    params = f"parameters: {bd.derived['P']:,} total, {bd.derived['P_train']:,} trainable " \
             + (f"({tower:,} of them the tower's)" if tower else
                f"({100 * bd.derived['P_train'] / bd.derived['P']:.2f} %)") + tower_note(sc)
    lines += [params, ""]
    per = " per GPU" if sc.gpus * sc.tp > 1 else ""  # sharded results are each GPU's, and say so
    rows = [["block", "term", f"bytes{per} ({units})", "formula", "why"]]
    for block in (*BLOCKS, "transient", "host", "paged"):
        for t in bd.ledger.block_terms(block):
            formula = f"${latex(t.expr)}$" if md else text(t.expr)
            rows.append([block, t.key, fmt_bytes(bd.terms[t.key], units).split()[0], formula, t.why])
    lines.append(render_rows(rows, "llrll", fmt))
    lines.append("")
    sums = [["", f"{units}{per}"]]
    for block in BLOCKS:
        sums.append([BLOCK_TITLES[block], fmt_bytes(bd.blocks[block], units)])
    sums.append(["ledger total (base + trainable + activations)", fmt_bytes(bd.ledger_total, units)])
    if bd.ledger.block_terms("host"):
        sums.append([BLOCK_TITLES["host"] + ", not on the GPU" + (", per GPU" if per else ""),
                     fmt_bytes(host_bytes(bd), units)])
        if per:
            sums.append([f"host memory of the whole job ({sc.gpus * sc.tp} GPUs)",
                         fmt_bytes(host_bytes(bd) * sc.gpus * sc.tp, units)])
    if bd.ledger.block_terms("paged"):
        sums.append([BLOCK_TITLES["paged"] + ": on the GPU when paged in, not in the peak (outside "
                     "torch.cuda.max_memory_allocated)", fmt_bytes(paged_bytes(bd), units)])
    lines.append(render_rows(sums, "lr", fmt))
    lines.append("")
    mrows = [["moment of the step", f"live{per} ({units})", "what is live"]]
    for m in bd.ledger.moments:
        mark = " ← peak" if m.key == bd.peak_moment else ""
        mrows.append([m.label + mark, fmt_bytes(bd.moments[m.key], units), m.why])
    lines.append(render_rows(mrows, "lrl", fmt))
    lines.append("")
    lines.append(f"peak{per}: {fmt_bytes(bd.peak, units)} ({bd.peak:,} bytes) at {bd.ledger.moments[[m.key for m in bd.ledger.moments].index(bd.peak_moment)].label}"
                 f" — the figure torch.cuda.max_memory_allocated() reports; add the CUDA context and allocator slack on top")
    if (binds := generation_binds(bd, units)) is not None:
        lines.append(binds)
    lines += [f"note: {n}" for n in notes(bd.scenario.structure, bd.scenario.gpus) + moe_notes(bd, units)]
    return "\n".join(lines)


def generation_binds(bd, units: str = "GiB") -> str | None:
    """GRPO: which phase sets the peak — generation (its fullest moment before the step) or the training step."""
    from ..ledger.terms import MOMENTS, Phase

    before = {m.key for m in MOMENTS if m.phase < Phase.FIRST_LAYER_FORWARD}
    gen = [m for m in bd.ledger.moments if m.key in before]
    if not gen:
        return None
    g = max(gen, key=lambda m: bd.moments[m.key])
    t = max((m for m in bd.ledger.moments if m.key not in before), key=lambda m: bd.moments[m.key])
    which = "generation" if bd.moments[g.key] > bd.moments[t.key] else "training"
    return (f"{which} binds: generation peaks at {fmt_bytes(bd.moments[g.key], units)} ({g.label}), the "
            f"training step at {fmt_bytes(bd.moments[t.key], units)} ({t.label})")


def comparison(rows: list[tuple[str, Breakdown]], units: str = "GiB", fmt: str = "table") -> str:
    """The reference answer's table: each method split into the three blocks, with the peak."""
    per = " per GPU" if any(bd.scenario.gpus * bd.scenario.tp > 1 for _, bd in rows) else ""
    table = [["method", f"base ({units})", f"trainable ({units})", f"activations ({units})",
              f"ledger total ({units})", f"peak{per} ({units})", "bytes/trainable param"]]
    for name, bd in rows:
        full = bd.scenario.method == "full"   # the weights are trained: part of the parameter side
        weights = sum(bd.terms[t.key] for t in bd.ledger.terms if t.role is Role.WEIGHT) if full else 0
        per_param = (bd.blocks["trainable"] + weights) / bd.derived["P_train"]
        table.append([name, *(fmt_bytes(bd.blocks[b], units).split()[0] for b in BLOCKS),
                      fmt_bytes(bd.ledger_total, units).split()[0], fmt_bytes(bd.peak, units).split()[0],
                      f"{per_param:.1f}"])
    return render_rows(table, "lrrrrrr", fmt)


CARD_MEMORY_NOTE = ("modelled, not measured: the caching allocator replayed over the ledger's allocation schedule "
                    "(torch 2.13's CUDACachingAllocator rules), NCCL's buffers")


def card_memory_json(cm) -> dict:
    """The JSON of ``card_memory``: ``bytes.peak`` stays the allocated peak; these go beside it."""
    from ..card_memory import DEVICE_TERMS

    return {"reserved_peak": cm.reserved_peak, "device_peak": cm.device_peak, "allocator": cm.allocator,
            "reserved_peaks": dict(cm.reserved), "schedule_allocated_peak": cm.schedule_allocated,
            "device_block": [{"key": t.key, "bytes": cm.block[t.key], "in_allocator": t.in_allocator,
                              "formula": text(t.expr), "why": t.why, "source": t.source} for t in DEVICE_TERMS],
            "oom_at_event": cm.oom_at[cm.allocator] if cm.capacity is not None else None,
            "allocator_capacity": cm.capacity, "note": CARD_MEMORY_NOTE}


def card_memory_lines(cm, units: str = "GiB") -> list[str]:
    """What the card holds, from the tensors to nvidia-smi: allocated, reserved with each allocator, the
    device block."""
    from ..card_memory import DEVICE_TERMS

    chosen = {"default": "the default allocator", "expandable": "expandable_segments:True"}
    lines = ["what the card holds (" + CARD_MEMORY_NOTE + "):",
             f"  allocated (torch.cuda.max_memory_allocated): {fmt_bytes(cm.allocated, units)} tensors, "
             f"{fmt_bytes(cm.schedule_allocated, units)} with the cuBLAS workspaces and the allocator's 512-B rounding"]
    for name in cm.reserved:
        mark = "  ← this answer's" if name == cm.allocator else ""
        lines.append(f"  reserved (max_memory_reserved), {chosen[name]}: {fmt_bytes(cm.reserved[name], units)}{mark}")
    for t in DEVICE_TERMS:
        where = "inside reserved" if t.in_allocator else "beyond reserved"
        lines.append(f"  {t.key} = {text(t.expr)}: {fmt_bytes(cm.block[t.key], units)} ({where}; {t.why})")
    lines.append(f"  nvidia-smi level (reserved + context + NCCL): {fmt_bytes(cm.device_peak, units)}")
    return lines


def markdown_cell(text: str) -> str:
    """A Markdown table cell: a literal ``|`` would end the cell."""
    return text.replace("|", r"\|")


def number_in(n: int, units: str) -> str:
    """``n`` bytes in ``units``, the number alone (a table's column names the unit)."""
    return fmt_bytes(n, units).split()[0]


def moment_label(led, key: str) -> str:
    """The label of moment ``key`` of ledger ``led``."""
    return next(m.label for m in led.moments if m.key == key)


def title(bd: Breakdown) -> str:
    """One line naming the scenario: model, method, micro-batch, precision, optimizer."""
    sc = bd.scenario
    method = {"full": "full fine-tuning", "lora": "LoRA", "qlora": "QLoRA"}[sc.method]
    if sc.lora:
        method += f" r={sc.rank} on {len(sc.targets)} target module{'s' * (len(sc.targets) > 1)}"
        method += "".join(f" + {name}" for name in sc.head_targets)
    if sc.modules_to_save:
        method += f" + trainable {', '.join(sc.modules_to_save)} (modules_to_save)"
    parts = [sc.model.name, method, f"batch {sc.batch} × seq {sc.seq}",
             sc.dtype + (f" + autocast {sc.autocast}" if sc.autocast != "none" else "")
             + (" + fp32 master" if sc.master == "fp32" else ""),
             f"{sc.optimizer} ({sc.optimizer_impl}), states {sc.state_dtype}"]
    if sc.grad_checkpointing:
        parts.append("checkpointing" + (f" every {sc.checkpoint_every}th layer" if sc.checkpoint_every > 1 else "")
                     + (" (op-level)" if sc.checkpoint_ops else "")
                     + (", inputs offloaded to the host" if sc.offload_activations else ""))
    if sc.gpus > 1:
        parts.append(f"{sc.gpus} GPUs")
    return " · ".join(parts)
