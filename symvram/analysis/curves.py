"""The numbers behind the plots, gathered apart from their drawing (``present.plots`` draws them).

- ``seq_curves``: the peak over a sequence grid, one curve per LoRA rank (one for full fine-tuning), each with
  ``fit``'s longest sequence per card, and where a curve stays flat, why;
- ``fit_cells``: which (batch, seq) cells of a grid train on a card under the caching allocator's reserved line.

Curves and maps are evaluated with the lambdified peak (``evaluate.grid_function``) over numpy arrays, never
with ``subs`` in a loop.

>>> from symvram.scenario import Scenario
>>> c = seq_curves(Scenario.create("7b", method="lora"), ranks=(8,), seqs=[512, 1024])
>>> [int(p) for p in c.curves[0].peak] == [evaluate(c.scenario.with_changes(rank=8, seq=s)).peak for s in (512, 1024)]
True
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..card_memory import card_memory, fits_on_card
from ..errors import UserError
from ..evaluate import evaluate, grid_function, peak_expr
from ..ledger import build_ledger
from ..presets import GPUSpec
from ..scenario import Scenario
from ..symbols import sym
from .fit import DEFAULT_HEADROOM, fit, headroom_bytes, max_rank


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


@dataclass(frozen=True)
class Curve:
    """One line of a seq-curve: its scenario (``at``: the rank set), the peak at each grid point (bytes) and
    ``fit``'s longest sequence on each card whose answer fits inside the grid."""

    at: Scenario
    peak: np.ndarray
    longest: tuple[tuple[GPUSpec, int], ...]


@dataclass(frozen=True)
class FlatStretch:
    """Where a curve stays within 1 % of its start for an octave or more: the curve, the grid's last index of
    the stretch, and why (at the fullest moment of its start, what grows with seq is a sliver of the peak)."""

    curve: int
    end: int
    moment: str
    growing_share: float


@dataclass(frozen=True)
class SeqCurves:
    scenario: Scenario
    seqs: np.ndarray
    curves: tuple[Curve, ...]
    cards: tuple[GPUSpec, ...]
    flat: FlatStretch | None


def _flat_stretch(sc: Scenario, s: np.ndarray, peak: np.ndarray) -> tuple[int, str, float] | None:
    rising = np.nonzero(peak > peak[0] * 1.01)[0]
    end = (rising[0] if len(rising) else len(s)) - 1
    if s[end] < 2 * s[0]:
        return None
    bd = evaluate(sc.with_changes(seq=int(s[0])))
    led = bd.ledger
    moment = next(m for m in led.moments if m.key == bd.peak_moment)
    grows = sum(bd.terms[k] for k in moment.terms if sym("seq") in led.expand(led.by_key[k].expr).free_symbols)
    return end, moment.label, grows / bd.peak


def seq_curves(sc: Scenario, ranks: Sequence[int] = (8, 16, 64, 256), seqs: Sequence[int] | None = None,
               cards: Sequence[GPUSpec] = (), seq_max: int | None = None,
               headroom: int | str = DEFAULT_HEADROOM) -> SeqCurves:
    """The peak against sequence length, one curve per LoRA rank (one for full fine-tuning), each with ``fit``'s
    longest sequence per card (under the reserved line, with the same headroom). ``seqs`` default: 256 points
    up to ``seq_max`` (default ``default_seq_max``: what a user trains at)."""
    led = build_ledger(sc.structure)
    s = seq_grid(sc, seq_max, 256) if seqs is None else np.asarray(seqs, dtype=np.int64)
    if s.size == 0 or s.min() < 1:
        raise UserError("sequence lengths must be positive integers")
    values = sc.values()
    if sc.lora:
        limit = max_rank(sc)
        for r in ranks:
            if not 1 <= r <= limit:
                raise UserError(f"--ranks {r}: a LoRA rank must be between 1 and {limit} (min(d_in, d_out))")
        fn = grid_function(led, peak_expr(led), ("seq", "rank"), values)
        lines = [(np.broadcast_to(fn(s, r), s.shape), sc.with_changes(rank=r)) for r in ranks]
    else:
        fn = grid_function(led, peak_expr(led), ("seq",), values)
        lines = [(np.broadcast_to(fn(s), s.shape), sc)]
    curves = tuple(Curve(at, peak, tuple((card, answer.value) for card in cards
                                         for answer in [fit(at, card, solve="seq", headroom=headroom)]
                                         if answer.status == "fits" and s.min() <= answer.value <= s.max()))
                   for peak, at in lines)
    flat = next((FlatStretch(i, *found) for i, c in enumerate(curves) if len(s) > 1
                 for found in [_flat_stretch(c.at, s, c.peak)] if found), None)
    return SeqCurves(sc, s, curves, tuple(cards), flat)


@dataclass(frozen=True)
class FitCells:
    """A batch × seq grid on a card. ``cells[i, j]`` for batch ``batches[i]`` and seq ``seqs[j]``: 2 where two
    steps run under the simulated allocator, 1 where the live tensors and the cuBLAS workspaces fit but the
    allocator runs out (fragmentation), 0 where the tensors do not. ``peaks``: the ledger's allocated peaks;
    ``budget``: what the tensors may take of the allocator's share (``capacity``: the card less the context,
    NCCL's buffers and ``margin``)."""

    scenario: Scenario
    card: GPUSpec
    batches: np.ndarray
    seqs: np.ndarray
    peaks: np.ndarray
    cells: np.ndarray
    budget: int
    capacity: int
    margin: int
    allocator: str
    nccl: bool


def fit_cells(sc: Scenario, card: GPUSpec, batches: Sequence[int] | None = None, seqs: Sequence[int] | None = None,
              headroom: int | str = DEFAULT_HEADROOM, seq_max: int | None = None,
              allocator: str | None = None) -> FitCells:
    """Which (batch, seq) pairs train on ``card``: batches 1–32 and 64 seqs on a log2 axis up to ``seq_max`` by
    default. The tensors' line is the ledger's solved peak; along each row the replay (``allocator``, else
    PYTORCH_CUDA_ALLOC_CONF's; modelled, not measured) finds the last cell that fits (the peak grows with seq and
    batch, so a row's last cell is at most the one of the row below)."""
    b = np.arange(1, 33, dtype=np.int64) if batches is None else np.asarray(batches, dtype=np.int64)
    s = seq_grid(sc, seq_max, 64) if seqs is None else np.asarray(seqs, dtype=np.int64)
    if b.size == 0 or s.size == 0 or b.min() < 1 or s.min() < 1:
        raise UserError("batch sizes and sequence lengths must be positive integers")
    margin = headroom_bytes(headroom, card.usable_bytes)
    cm = card_memory(sc, card, allocator, margin, both=False)
    budget = cm.capacity - cm.block["cublas_workspaces"]
    led = build_ledger(sc.structure)
    fn = grid_function(led, peak_expr(led), ("batch", "seq"), sc.values())
    B, S = np.meshgrid(b, s, indexing="ij")
    peaks = np.broadcast_to(fn(B, S), B.shape)
    cells = (peaks <= budget).astype(int)
    last = s.size   # a row's cells that fit end at most where the row below ends
    for i in np.argsort(b):
        tensors = int(cells[i].sum())   # the row's cells whose tensors fit: a prefix, the peak rising with seq
        j = min(last, tensors)
        while j > 0 and not fits_on_card(sc.with_changes(batch=int(b[i]), seq=int(s[j - 1])), card, allocator, margin):
            j -= 1
        cells[i, :j] = 2
        last = j
    return FitCells(sc, card, b, s, peaks, cells, budget, cm.capacity, margin, cm.allocator,
                    bool(cm.block["nccl_buffers"]))
