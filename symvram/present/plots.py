"""Figures of the ledger (matplotlib, no pyplot state): each function returns a Figure.

- ``breakdown``: stacked bars of the three blocks per method, with the peak marked;
- ``seq_curve``: the peak against the sequence length for several LoRA ranks, cards as horizontal lines;
- ``tornado``: the elasticities of a sensitivity result;
- ``fit_map``: which (batch, seq) pairs fit a card.

Curves and maps are evaluated with the lambdified peak (``evaluate.grid_function``) over numpy
arrays, never with ``subs`` in a loop. Colours are the Okabe–Ito palette (colour-blind safe, legible on
white and on black); ``theme="dark"`` draws for a dark notebook. Axis labels carry the unit.

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
import numpy as np
from matplotlib import style
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..analysis.fit import DEFAULT_HEADROOM, headroom_bytes, max_rank
from ..analysis.sensitivity import SensitivityResult
from ..errors import UserError
from ..evaluate import Breakdown, grid_function, peak_expr
from ..ledger import build_ledger
from ..ledger.terms import BLOCKS
from ..presets import GPUSpec
from ..scenario import Scenario
from .units import fmt_bytes, in_units

THEMES = {"light": "default", "dark": "dark_background"}
# Okabe–Ito: readable for colour-blind readers, and on both white and black backgrounds
BLOCK_COLORS = {"base": "#0072B2", "trainable": "#E69F00", "activations": "#009E73"}
PEAK_COLOR = "#D55E00"
LINE_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442")
FIT_COLORS = ("#D55E00", "#009E73")   # does not fit, fits
BLOCK_NAMES = {"base": "base weights", "trainable": "trainable (grads, optimizer, master, adapters)",
               "activations": "activations"}


@contextmanager
def _theme(theme: str):
    if theme not in THEMES:
        raise UserError(f"--theme must be one of {', '.join(THEMES)}; got {theme!r}")
    with style.context(THEMES[theme]):
        yield


def _axes(size: tuple[float, float]):
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def breakdown(rows: Iterable[tuple[str, Breakdown]], units: str = "GiB", theme: str = "light") -> Figure:
    """Stacked base / trainable / activations per named estimate, what the peak holds beyond them
    (temporaries) hatched on top; a diamond marks each peak."""
    rows = list(rows)
    with _theme(theme):
        fig, ax = _axes((1.6 * len(rows) + 3, 4.8))
        x = np.arange(len(rows))
        bottom = np.zeros(len(rows))
        for block in BLOCKS:
            heights = np.array([in_units(bd.blocks[block], units) for _, bd in rows])
            ax.bar(x, heights, 0.6, bottom=bottom, color=BLOCK_COLORS[block], label=BLOCK_NAMES[block])
            bottom += heights
        # what the peak holds beyond the three blocks (temporaries: fp32 logits, the optimizer's scratch …),
        # hatched up to the peak; nothing where a peak moment holds less than the blocks' sum
        above = np.array([in_units(max(0, bd.peak - bd.ledger_total), units) for _, bd in rows])
        ax.bar(x, above, 0.6, bottom=bottom, color="none", edgecolor=PEAK_COLOR, hatch="///", linewidth=0.8,
               label="temporaries: the peak above the blocks")
        peaks = [in_units(bd.peak, units) for _, bd in rows]
        ax.plot(x, peaks, linestyle="none", marker="D", markersize=8, color=PEAK_COLOR,
                label="peak (max_memory_allocated)")
        for xi, p in zip(x, peaks):
            ax.annotate(f"{p:,.1f}", (xi, p), textcoords="offset points", xytext=(10, 0), va="center")
        ax.set_xticks(x, [name for name, _ in rows])
        ax.set_ylabel(f"memory ({units})")
        model = rows[0][1].scenario.model.name if rows else ""
        ax.set_title(f"{model}: the three blocks of the ledger and the peak")
        ax.legend(loc="upper right", fontsize="small")
    return fig


def _card_lines(ax, cards: Sequence[GPUSpec], units: str) -> None:
    for card in cards:
        y = in_units(card.usable_bytes, units)
        ax.axhline(y, color="grey", linestyle="--", linewidth=1)
        ax.annotate(f"{card.name}: {fmt_bytes(card.usable_bytes, units)} usable", (1, y), xycoords=("axes fraction", "data"),
                    xytext=(-4, 3), textcoords="offset points", ha="right", va="bottom", fontsize="small")


def default_seq_max(sc: Scenario) -> int:
    """The longest sequence a picture spans by default: what a user trains at, not the model's context —
    four times ``--seq``, at least 8192, never past max_position_embeddings.

    >>> default_seq_max(Scenario.create("7b", seq=2048)), default_seq_max(Scenario.create("llama-3.1-8b", seq=2048))
    (4096, 8192)
    """
    want = max(4 * sc.seq, 8192)
    return min(want, sc.model.max_position) if sc.model.max_position else want


def seq_grid(sc: Scenario, seq_max: int | None, points: int) -> np.ndarray:
    """``points`` sequence lengths evenly spaced on a log2 axis, from 1/32 of ``seq_max`` (at least 16)."""
    top = seq_max or default_seq_max(sc)
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 2:
        raise UserError(f"--seq-max must be an integer of at least 2; got {seq_max!r}")
    low = min(max(16, top // 32), top - 1)
    return np.unique(np.round(np.geomspace(low, top, points)).astype(np.int64))


def _pow2_ticks(ax, low: float, high: float, log_axis: bool = True) -> None:
    """Ticks at the powers of two in [low, high], labelled in tokens."""
    ks = [k for k in range(0, 41) if low <= 2 ** k <= high]
    if ks:
        ax.set_xticks([2 ** k if log_axis else k for k in ks], [f"{2 ** k:,}" for k in ks])


def seq_curve(sc: Scenario, ranks: Sequence[int] = (8, 16, 64, 256), seqs: Sequence[int] | None = None,
              cards: Sequence[GPUSpec] = (), units: str = "GiB", theme: str = "light",
              seq_max: int | None = None) -> Figure:
    """Peak against sequence length on a log2 axis, one line per LoRA rank (one line for full fine-tuning);
    the cards as horizontal lines, where each line crosses them labelled, the scenario's own ``seq`` marked,
    the y axis clipped a little above the largest card.

    ``seqs`` default: points up to ``seq_max`` (default ``default_seq_max``: what a user trains at)."""
    led = build_ledger(sc.structure)
    s = seq_grid(sc, seq_max, 256) if seqs is None else np.asarray(seqs, dtype=np.int64)
    if s.size == 0 or s.min() < 1:
        raise UserError("sequence lengths must be positive integers")
    values = sc.values()
    with _theme(theme):
        fig, ax = _axes((8, 4.8))
        if sc.lora:
            limit = max_rank(sc)
            for r in ranks:
                if not 1 <= r <= limit:
                    raise UserError(f"--ranks {r}: a LoRA rank must be between 1 and {limit} (min(d_in, d_out))")
            fn = grid_function(led, peak_expr(led), ("seq", "rank"), values)
            curves = [(np.broadcast_to(fn(s, r), s.shape), LINE_COLORS[n % len(LINE_COLORS)], f"r = {r}")
                      for n, r in enumerate(ranks)]
        else:
            fn = grid_function(led, peak_expr(led), ("seq",), values)
            curves = [(np.broadcast_to(fn(s), s.shape), LINE_COLORS[0], sc.method)]
        for peak, color, label in curves:
            ax.plot(s, in_units(peak, units), color=color, label=label)
        _card_lines(ax, cards, units)
        for card in cards:  # where each line first goes over each card
            for peak, color, _ in curves:
                over = np.nonzero(peak > card.usable_bytes)[0]
                if len(over) and over[0] > 0:
                    x = int(s[over[0] - 1])
                    ax.annotate(f"{x:,}", (x, in_units(card.usable_bytes, units)), xytext=(0, -12),
                                textcoords="offset points", ha="center", fontsize="x-small", color=color)
        if s.min() <= sc.seq <= s.max():  # the scenario's own seq (a collection: ax.lines holds only curves and cards)
            ax.vlines([sc.seq], 0, 1, transform=ax.get_xaxis_transform(), colors="grey", linestyles=":",
                      linewidth=1, label=f"--seq {sc.seq:,}")
        ax.set_xscale("log", base=2)
        _pow2_ticks(ax, s.min(), s.max())
        ax.set_xlabel("sequence length s (tokens)")
        ax.set_ylabel(f"peak ({units})")
        ax.set_xlim(s.min(), s.max())
        highest = max(float(np.max(in_units(peak, units))) for peak, _, _ in curves)
        if cards:  # every card line shows; a curve far above the largest card is cut a little above it
            largest = max(in_units(c.usable_bytes, units) for c in cards)
            ax.set_ylim(0, min(max(highest * 1.05, largest * 1.1), largest * 1.25))
        else:
            ax.set_ylim(bottom=0)
        ax.set_title(f"{sc.model.name} · {sc.method} · batch {sc.batch}: peak against sequence length")
        ax.legend(loc="upper left", fontsize="small")
    return fig


def tornado(res: SensitivityResult, top: int | None = None, units: str = "GiB", theme: str = "light") -> Figure:
    """Elasticities (percent change of the peak per percent change of the knob), largest on top."""
    rows = list(res.rows[:top] if top else res.rows)[::-1]
    with _theme(theme):
        fig, ax = _axes((8, 0.4 * len(rows) + 1.6))
        y = np.arange(len(rows))
        values = [r.elasticity for r in rows]
        ax.barh(y, values, color=[LINE_COLORS[0] if v >= 0 else PEAK_COLOR for v in values])
        ax.set_yticks(y, [r.knob for r in rows])
        ax.axvline(0, color="grey", linewidth=1)
        for yi, v in zip(y, values):
            ax.annotate(f"{v:.3f}", (v, yi), textcoords="offset points", xytext=(4 if v >= 0 else -4, 0),
                        ha="left" if v >= 0 else "right", va="center", fontsize="small")
        ax.margins(x=0.12)
        ax.set_xlabel("elasticity (% change of the peak per % change of the knob)")
        sc = res.breakdown.scenario
        ax.set_title(f"{sc.model.name} · {sc.method}: what moves the {fmt_bytes(res.peak, units)} peak")
    return fig


def fit_map(sc: Scenario, card: GPUSpec, batches: Sequence[int] | None = None, seqs: Sequence[int] | None = None,
            headroom: int | str = DEFAULT_HEADROOM, units: str = "GiB", theme: str = "light",
            seq_max: int | None = None) -> Figure:
    """Fits / does not fit ``card`` (usable memory − headroom) over a batch × seq grid, seq on a log2
    axis up to ``seq_max`` (default ``default_seq_max``), the scenario's own (seq, batch) marked.

    The image's cell [i, j] is 1 when batch ``batches[i]`` and seq ``seqs[j]`` fit."""
    b = np.arange(1, 33, dtype=np.int64) if batches is None else np.asarray(batches, dtype=np.int64)
    s = seq_grid(sc, seq_max, 64) if seqs is None else np.asarray(seqs, dtype=np.int64)
    if b.size == 0 or s.size == 0 or b.min() < 1 or s.min() < 1:
        raise UserError("batch sizes and sequence lengths must be positive integers")
    budget = card.usable_bytes - headroom_bytes(headroom, card.usable_bytes)
    led = build_ledger(sc.structure)
    fn = grid_function(led, peak_expr(led), ("batch", "seq"), sc.values())
    B, S = np.meshgrid(b, s, indexing="ij")
    fits = (np.broadcast_to(fn(B, S), B.shape) <= budget).astype(int)
    with _theme(theme):
        fig, ax = _axes((8, 5))
        ax.imshow(fits, origin="lower", aspect="auto", cmap=ListedColormap(FIT_COLORS), vmin=0, vmax=1,
                  interpolation="nearest", extent=_extent(np.log2(s), b))
        _pow2_ticks(ax, s.min(), s.max(), log_axis=False)
        here = []
        if s.min() <= sc.seq <= s.max() and b.min() <= sc.batch <= b.max():
            here = [ax.scatter([np.log2(sc.seq)], [sc.batch], marker="x", color="black", zorder=3,
                       label=f"--seq {sc.seq:,}, --batch {sc.batch}")]
        ax.set_xlabel("sequence length s (tokens)")
        ax.set_ylabel("micro-batch size b (sequences)")
        ax.set_title(f"{sc.model.name} · {sc.method} on {card.name}:\nbudget {fmt_bytes(budget, units)} "
                     f"({fmt_bytes(card.usable_bytes, units)} usable − headroom)", fontsize="medium")
        ax.legend(handles=[Patch(color=FIT_COLORS[1], label="fits"), Patch(color=FIT_COLORS[0], label="does not fit"),
                           *here],
                  loc="upper right", fontsize="small")
    return fig


def _extent(s: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float]:
    """Cell edges so that each cell is centred on its grid value (grids are evenly spaced; the seq grid
    is given in log2)."""
    ds = (s[-1] - s[0]) / (len(s) - 1) if len(s) > 1 else 1
    db = (b[-1] - b[0]) / (len(b) - 1) if len(b) > 1 else 1
    return (s[0] - ds / 2, s[-1] + ds / 2, b[0] - db / 2, b[-1] + db / 2)


__all__ = ["breakdown", "seq_curve", "tornado", "fit_map", "default_seq_max", "THEMES"]
