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
    """Stacked base / trainable / activations per named estimate; a diamond marks each peak."""
    rows = list(rows)
    with _theme(theme):
        fig, ax = _axes((1.6 * len(rows) + 3, 4.8))
        x = np.arange(len(rows))
        bottom = np.zeros(len(rows))
        for block in BLOCKS:
            heights = np.array([in_units(bd.blocks[block], units) for _, bd in rows])
            ax.bar(x, heights, 0.6, bottom=bottom, color=BLOCK_COLORS[block], label=BLOCK_NAMES[block])
            bottom += heights
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


def seq_curve(sc: Scenario, ranks: Sequence[int] = (8, 16, 64, 256), seqs: Sequence[int] | None = None,
              cards: Sequence[GPUSpec] = (), units: str = "GiB", theme: str = "light") -> Figure:
    """Peak against sequence length, one line per LoRA rank (one line for full fine-tuning).

    ``seqs`` default: 256 points up to the model's max_position_embeddings (8192 when unknown)."""
    led = build_ledger(sc.structure)
    top = sc.model.max_position or 8192
    s = np.unique(np.linspace(1, top, 256).astype(np.int64)) if seqs is None else np.asarray(seqs, dtype=np.int64)
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
            for n, r in enumerate(ranks):
                peak = np.broadcast_to(fn(s, r), s.shape)
                ax.plot(s, in_units(peak, units), color=LINE_COLORS[n % len(LINE_COLORS)], label=f"r = {r}")
        else:
            fn = grid_function(led, peak_expr(led), ("seq",), values)
            ax.plot(s, in_units(np.broadcast_to(fn(s), s.shape), units), color=LINE_COLORS[0], label=sc.method)
        _card_lines(ax, cards, units)
        ax.set_xlabel("sequence length s (tokens)")
        ax.set_ylabel(f"peak ({units})")
        ax.set_xlim(s.min(), s.max())
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
            headroom: int | str = DEFAULT_HEADROOM, units: str = "GiB", theme: str = "light") -> Figure:
    """Fits / does not fit ``card`` (usable memory − headroom) over a batch × seq grid.

    The image's cell [i, j] is 1 when batch ``batches[i]`` and seq ``seqs[j]`` fit."""
    b = np.arange(1, 33, dtype=np.int64) if batches is None else np.asarray(batches, dtype=np.int64)
    top = sc.model.max_position or 8192
    s = np.linspace(top / 64, top, 64).astype(np.int64) if seqs is None else np.asarray(seqs, dtype=np.int64)
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
                  interpolation="nearest", extent=_extent(s, b))
        ax.set_xlabel("sequence length s (tokens)")
        ax.set_ylabel("micro-batch size b (sequences)")
        ax.set_title(f"{sc.model.name} · {sc.method} on {card.name}: budget {fmt_bytes(budget, units)} "
                     f"({fmt_bytes(card.usable_bytes, units)} usable − headroom)")
        ax.legend(handles=[Patch(color=FIT_COLORS[1], label="fits"), Patch(color=FIT_COLORS[0], label="does not fit")],
                  loc="upper right", fontsize="small")
    return fig


def _extent(s: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float]:
    """Cell edges so that each cell is centred on its grid value (grids are evenly spaced)."""
    ds = (s[-1] - s[0]) / (len(s) - 1) if len(s) > 1 else 1
    db = (b[-1] - b[0]) / (len(b) - 1) if len(b) > 1 else 1
    return (s[0] - ds / 2, s[-1] + ds / 2, b[0] - db / 2, b[-1] + db / 2)


__all__ = ["breakdown", "seq_curve", "tornado", "fit_map", "THEMES"]
