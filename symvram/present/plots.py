"""Figures of the ledger (matplotlib, no pyplot state): each function returns a Figure.

- ``breakdown``: stacked bars of the three blocks per method, with the peak marked;
- ``seq_curve``: the peak against the sequence length for several LoRA ranks, cards as horizontal lines;
- ``tornado``: the elasticities of a sensitivity result;
- ``fit_map``: which (batch, seq) pairs train on a card under the caching allocator's reserved line.

The numbers come gathered (``analysis.curves``: the curves and the map's cells; a Comparison's rows; a
sensitivity result): these functions draw them and compute nothing. Colours come from ``style`` (the page uses the same ones);
``theme="dark"`` draws for a dark notebook. Axis labels carry the unit; every figure's subtitle is
``estimate``'s configuration line (``subtitle``).

>>> from symvram.api import compare
>>> fig = breakdown(compare("7b").rows)
>>> fig.axes[0].get_ylabel()
'memory (GiB)'
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import contextmanager

# No ``matplotlib.use`` here: importing this module must not switch a notebook's backend. A bare
# ``Figure`` draws with whatever canvas its ``savefig`` format needs; the CLI picks Agg itself.
import textwrap

import numpy as np
from matplotlib import rcParams, style
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..analysis.curves import FitCells, SeqCurves
from ..analysis.sensitivity import SensitivityResult
from ..evaluate import Breakdown
from ..ledger.terms import BLOCKS, STAGE_NAMES
from ..presets import GPUSpec
from ..scenario import Scenario
from ..errors import UserError
from ..symbols import SYMBOLS
from .style import BLOCK_COLORS, FIT_COLORS, NEUTRAL, rank_color, rank_linestyle, short_card_name
from .tables import BLOCK_TITLES, setup_line
from ..units import fmt_bytes, in_units

THEMES = {"light": "default", "dark": "dark_background"}
KNOB_GROUPS = (("your settings", lambda group: group != "model"), ("the model's shape", lambda group: group == "model"))


@contextmanager
def _theme(theme: str):
    if theme not in THEMES:
        raise UserError(f"--theme must be one of {', '.join(THEMES)}; got {theme!r}")
    with style.context(THEMES[theme]):
        yield


def _axes(size: tuple[float, float]):
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def subtitle(sc: Scenario) -> str:
    """``estimate``'s configuration line, the stack named, and "per GPU" where the run is sharded."""
    parts = [setup_line(sc), f"stack {sc.stack}"]
    if sc.gpus * sc.tp > 1:
        parts.append(f"per GPU of {sc.gpus * sc.tp} ({STAGE_NAMES[sc.zero]}" + (f", TP {sc.tp})" if sc.tp > 1 else ")"))
    return " · ".join(parts)


def _per_gpu(sc: Scenario) -> str:
    return " per GPU" if sc.gpus * sc.tp > 1 else ""


def _titles(fig, ax, title: str, sc: Scenario) -> None:
    """The question as the figure's title, the setup as the axes' subtitle; the subtitle and the x label
    are wrapped to the axes' width once the layout is known, so that no text runs off the figure. Only the
    layout is run for that (the widths are of the axes and of the texts), not a draw of every artist."""
    fig.suptitle(textwrap.fill(title, int(fig.get_figwidth() * 11)))
    ax.set_title(subtitle(sc), fontsize="small")
    fig.get_layout_engine().execute(fig)
    room = ax.get_window_extent().width
    for text in (ax.title, ax.xaxis.label):
        lines = text.get_text().split("\n")
        width = text.get_window_extent().width
        if width > room:
            chars = int(max(map(len, lines)) * room / width * 0.95)
            text.set_text("\n".join(textwrap.fill(line, chars) for line in lines))


def _card_lines(ax, cards: Sequence[GPUSpec], units: str) -> None:
    for card in cards:
        y = in_units(card.usable_bytes, units)
        ax.axhline(y, color=NEUTRAL, linestyle="--", linewidth=1)
        ax.annotate(f"{short_card_name(card.name)}: {fmt_bytes(card.usable_bytes, units)} usable", (1, y), xycoords=("axes fraction", "data"),
                    xytext=(-4, 3), textcoords="offset points", ha="right", va="bottom", fontsize="small")


def _requested(rows, sc: Scenario | None) -> int | None:
    """The row of ``sc``'s method (full: and its master choice)."""
    for i, (_, bd) in enumerate(rows):
        if sc and bd.scenario.method == sc.method and (sc.method != "full" or bd.scenario.master == sc.master):
            return i
    return None


def breakdown(rows: Iterable[tuple[str, Breakdown]], units: str = "GiB", theme: str = "light",
              cards: Sequence[GPUSpec] = (), requested: Scenario | None = None) -> Figure:
    """Stacked base / trainable / activations per named estimate, what the peak holds beyond them
    (temporaries) hatched on top, a diamond at each peak with its value above the bar; the cards' usable
    memory as lines; the row of ``requested``'s method drawn solid, the others faded."""
    rows = list(rows)
    chosen = _requested(rows, requested)
    with _theme(theme):
        fig, ax = _axes((1.6 * len(rows) + 3.4, 5.4))
        x = np.arange(len(rows))
        alpha = [1.0 if chosen in (None, i) else 0.45 for i in range(len(rows))]
        bottom = np.zeros(len(rows))
        for block in BLOCKS:
            heights = np.array([in_units(bd.blocks[block], units) for _, bd in rows])
            bars = ax.bar(x, heights, 0.6, bottom=bottom, color=BLOCK_COLORS[block], label=BLOCK_TITLES[block])
            for bar, a in zip(bars, alpha):
                bar.set_alpha(a)
            bottom += heights
        # what the peak holds beyond the three blocks (temporaries: fp32 logits, the optimizer's scratch …),
        # hatched up to the peak; nothing where a peak moment holds less than the blocks' sum
        above = np.array([in_units(max(0, bd.peak - bd.ledger_total), units) for _, bd in rows])
        temporaries = ax.bar(x, above, 0.6, bottom=bottom, color="none", edgecolor=BLOCK_COLORS["transient"],
                             hatch="///", linewidth=0.8, label="temporaries: the peak above the blocks")
        peaks = [in_units(bd.peak, units) for _, bd in rows]
        (marker,) = ax.plot(x, peaks, linestyle="none", marker="D", markersize=7, color=rcParams["text.color"],
                            label="peak: the fullest moment of the step (max_memory_allocated)")
        tops = np.maximum(bottom + above, peaks)
        for xi, p, top in zip(x, peaks, tops):   # above the bar and the marker, never across them
            ax.annotate(f"{p:,.1f}", (xi, top), textcoords="offset points", xytext=(0, 7), ha="center", va="bottom",
                        fontsize="small", fontweight="bold")
        freed = [name for (name, bd) in rows if bd.peak < bd.ledger_total]
        if freed:
            ax.annotate(f"peak below the stack ({', '.join(freed)}): part of a block is not live at the fullest moment\n"
                        "(not yet allocated, or already freed)", (0.01, 0.99), xycoords="axes fraction", va="top",
                        fontsize="x-small")
        _card_lines(ax, cards, units)
        highest = max([*tops, *(in_units(c.usable_bytes, units) for c in cards)], default=1)
        ax.set_ylim(0, highest * 1.12)
        ax.set_xticks(x, [name for name, _ in rows])
        if chosen is not None:
            ax.get_xticklabels()[chosen].set_fontweight("bold")
        ax.set_ylabel(f"memory{_per_gpu(rows[0][1].scenario) if rows else ''} ({units})")
        blocks = [Patch(color=BLOCK_COLORS[b], label=BLOCK_TITLES[b]) for b in BLOCKS]   # solid, not a faded bar
        fig.legend(handles=[marker, *blocks, temporaries], loc="outside lower center", ncols=2, fontsize="small",
                   frameon=False)
        lead = requested or rows[0][1].scenario
        _titles(fig, ax, f"{lead.model.name}: the three blocks of the ledger and the peak, by method", lead)
    return fig


def _pow2_ticks(ax, low: float, high: float, log_axis: bool = True) -> None:
    """Ticks at the powers of two in [low, high], labelled in tokens."""
    ks = [k for k in range(0, 41) if low <= 2 ** k <= high]
    if ks:
        ax.set_xticks([2 ** k if log_axis else k for k in ks], [f"{2 ** k:,}" for k in ks])


def seq_curve(data: SeqCurves, units: str = "GiB", theme: str = "light") -> Figure:
    """Peak against sequence length on a log2 axis, one line per LoRA rank (one line for full fine-tuning);
    the cards as horizontal lines, the scenario's own ``seq`` marked, the y axis clipped a little above the
    largest card, a flat stretch explained. Each line's legend entry names its rank and, per card, the longest
    sequence that fits (``fit``'s answer) — in the legend, not on the plot, where labels at the crossings sat on
    the other ranks' lines."""
    sc, s = data.scenario, data.seqs
    with _theme(theme):
        fig, ax = _axes((8, 5.2))
        colors = [rank_color(c.at.rank) if sc.lora else rcParams["text.color"] for c in data.curves]
        for curve, color in zip(data.curves, colors):
            longest = [f"{value:,} on {short_card_name(card.name)}" for card, value in curve.longest]
            ax.plot(s, in_units(curve.peak, units), color=color,
                    label=(f"r = {curve.at.rank}" if sc.lora else sc.method)
                    + (f": longest seq {', '.join(longest)}" if longest else ""),
                    linestyle=rank_linestyle(curve.at.rank) if sc.lora else "-")
        _card_lines(ax, data.cards, units)
        if (flat := data.flat) is not None:
            peak, end = data.curves[flat.curve].peak, flat.end
            text = (f"flat to s = {int(s[end]):,}: the peak is the {flat.moment} moment,\n"
                    f"where what grows with s is {100 * flat.growing_share:.1f} % of it (at s = {int(s[0]):,})")
            ax.annotate(text, (float(np.sqrt(s[0] * s[end])), in_units(peak[0], units)), xytext=(0, 6),
                        textcoords="offset points", ha="center", va="bottom", fontsize="x-small",
                        color=colors[flat.curve])
        if s.min() <= sc.seq <= s.max():  # the scenario's own seq (a collection: ax.lines holds only curves and cards)
            ax.vlines([sc.seq], 0, 1, transform=ax.get_xaxis_transform(), colors=NEUTRAL, linestyles=":",
                      linewidth=1, label=f"--seq {sc.seq:,}")
        ax.set_xscale("log", base=2)
        _pow2_ticks(ax, s.min(), s.max())
        ax.set_xlabel("sequence length s (tokens)")
        ax.set_ylabel(f"peak{_per_gpu(sc)} ({units})")
        ax.set_xlim(s.min(), s.max())
        highest = max(float(np.max(in_units(c.peak, units))) for c in data.curves)
        if data.cards:  # every card line shows; a curve far above the largest card is cut a little above it
            largest = max(in_units(c.usable_bytes, units) for c in data.cards)
            ax.set_ylim(0, min(max(highest * 1.05, largest * 1.1), largest * 1.25))
        else:
            ax.set_ylim(0, highest * 1.15)
        _titles(fig, ax, f"{sc.model.name}: peak against sequence length"
                + (", one line per LoRA rank" if sc.lora else ""), sc)
        ax.legend(loc="best", fontsize="small")
    return fig


def knob_label(knob: str) -> str:
    """A knob in words: its meaning from the symbol registry, then its name (the command-line spelling).

    >>> knob_label("seq")
    'sequence length (seq)'
    """
    return f"{SYMBOLS[knob].meaning.split(' (')[0]} ({knob})"


def tornado(res: SensitivityResult, top: int | None = None, units: str = "GiB", theme: str = "light") -> Figure:
    """Elasticities (percent change of the peak per percent change of the knob), largest on top, in two
    groups: your settings and the model's shape. Knobs that do not move the peak at all are left out (named
    below the axis)."""
    moving = [r for r in res.rows if r.elasticity != 0]
    still = [r.knob for r in res.rows if r.elasticity == 0]
    shown = moving[:top] if top else moving
    labels, values, y, heads, pos = [], [], [], [], 0.0
    for head, member in KNOB_GROUPS:   # top to bottom: a heading, then its rows by |elasticity|
        group = [r for r in shown if member(SYMBOLS[r.knob].group)]
        if not group:
            continue
        heads.append((pos, head))
        pos -= 1
        for r in group:
            labels.append(knob_label(r.knob))
            values.append(r.elasticity)
            y.append(pos)
            pos -= 1
        pos -= 0.5
    with _theme(theme):
        fig, ax = _axes((10, 0.4 * (len(y) + len(heads)) + 2.2))
        ax.barh(y, values, color=NEUTRAL)
        ax.set_yticks(y, labels)
        for yh, head in heads:
            ax.annotate(head, (0, yh), xycoords=("axes fraction", "data"), xytext=(-6, 0), textcoords="offset points",
                        ha="right", va="center", fontweight="bold", fontsize="small")
        ax.axvline(0, color=NEUTRAL, linewidth=1)
        for yi, v in zip(y, values):
            ax.annotate(f"{v:.3f}", (v, yi), textcoords="offset points", xytext=(4 if v >= 0 else -4, 0),
                        ha="left" if v >= 0 else "right", va="center", fontsize="small")
        ax.set_ylim(pos, 0.6)
        ax.margins(x=0.12)
        ax.set_xlabel("elasticity (% change of the peak per % change of the knob)"
                      + (f"\nno effect on the peak, not shown: {', '.join(still)}" if still else ""))
        sc = res.breakdown.scenario
        _titles(fig, ax, f"{sc.model.name}: what moves the {fmt_bytes(res.peak, units)} peak", sc)
    return fig


def fit_map(data: FitCells, units: str = "GiB", theme: str = "light") -> Figure:
    """Which (batch, seq) pairs train on the card (``analysis.curves.fit_cells``), seq on a log2 axis, the
    scenario's own (seq, batch) marked; a map where nothing fits (or everything does) says by how much. The line
    is the reserved one, as ``fit`` draws it (symvram.card_memory; modelled, not measured)."""
    sc, card, b, s, cells, peaks, budget = data.scenario, data.card, data.batches, data.seqs, data.cells, data.peaks, data.budget
    with _theme(theme):
        fig, ax = _axes((8, 5.4))
        ax.imshow(cells, origin="lower", aspect="auto", vmin=0, vmax=2, interpolation="nearest",
                  cmap=ListedColormap([FIT_COLORS["does not fit"], FIT_COLORS["allocator runs out"],
                                       FIT_COLORS["fits"]]), extent=_extent(np.log2(s), b))
        _pow2_ticks(ax, s.min(), s.max(), log_axis=False)
        here = []
        if s.min() <= sc.seq <= s.max() and b.min() <= sc.batch <= b.max():
            here = [ax.scatter([np.log2(sc.seq)], [sc.batch], marker="X", s=60, facecolor="white", edgecolor="black",
                               zorder=3, label=f"--seq {sc.seq:,}, --batch {sc.batch}")]
        if not cells.any() or (cells == 2).all():   # one colour alone says nothing: say what it means
            low, high = float(peaks.min()), float(peaks.max())
            text = (f"nothing fits: minimum {fmt_bytes(low, units)} > {fmt_bytes(budget, units)} budget" if not cells.any()
                    else f"everything fits: maximum {fmt_bytes(high, units)} ≤ {fmt_bytes(budget, units)} budget")
            ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontweight="bold",
                    bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": NEUTRAL}, color="black")
        ax.set_xlabel("sequence length s (tokens)")
        ax.set_ylabel("micro-batch size b (sequences)")
        outside = card.memory_bytes - data.capacity - data.margin
        _titles(fig, ax, f"{sc.model.name} on {short_card_name(card.name)}: the allocator may reserve "
                f"{fmt_bytes(data.capacity, units)} ({fmt_bytes(card.memory_bytes, units)} − {fmt_bytes(outside, units)} "
                f"context{' and NCCL' if data.nccl else ''}{' − margin' if data.margin else ''}; "
                f"{data.allocator} allocator, modelled, not measured)", sc)
        ax.legend(handles=[Patch(color=FIT_COLORS["fits"], label="fits (reserved)"),
                           Patch(color=FIT_COLORS["allocator runs out"], label="tensors fit, the allocator runs out"),
                           Patch(color=FIT_COLORS["does not fit"], label="does not fit"), *here],
                  loc="upper right", fontsize="small")
    return fig


def _extent(s: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float]:
    """Cell edges so that each cell is centred on its grid value (grids are evenly spaced; the seq grid
    is given in log2)."""
    ds = (s[-1] - s[0]) / (len(s) - 1) if len(s) > 1 else 1
    db = (b[-1] - b[0]) / (len(b) - 1) if len(b) > 1 else 1
    return (s[0] - ds / 2, s[-1] + ds / 2, b[0] - db / 2, b[-1] + db / 2)


__all__ = ["breakdown", "seq_curve", "tornado", "fit_map", "THEMES"]
