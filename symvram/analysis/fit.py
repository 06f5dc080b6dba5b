"""Inverse questions: the largest integer seq, batch or LoRA rank whose predicted peak fits a card.

Each moment of the step is, once every other symbol has its number, a polynomial in the knob with
non-negative slope (activations grow with b·s and b·s²; adapters with r), so the peak — a Max of
moments — fits exactly when every moment does: solve each moment = budget for its largest root and
take the smallest. A moment that is not such a polynomial (for-loop AdamW's Max over matrices) is
searched on its lambdified expression (doubling, then bisection). The answer is always re-estimated
with ``evaluate`` at the value and at value + 1.

"Fits" is the caching allocator's answer (symvram.card_memory; modelled, not measured): the ledger's
allocation schedule replayed for two steps runs without an OOM in the card's memory less the CUDA context,
NCCL's buffers and ``headroom``, an optional margin of the user's (default 0). The moments give the
allocated peak's bound; the allocator's slack (reserved − allocated) read at each answer lowers it, and the
replay decides at the answer and at answer + 1.

>>> from symvram.scenario import Scenario
>>> sc = Scenario.create("7b", method="lora", rank=64, batch=4)
>>> from symvram.presets import load_card
>>> r = fit(sc, load_card("a100-80g"), solve="seq")
>>> r.status, r.memory.fits, r.memory_above.fits, r.above.values["seq"] == r.value + 1
('fits', True, False, True)
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import sympy as sp

from ..card_memory import CardMemory, card_memory, fits_on_card
from ..errors import UserError, excerpt
from ..evaluate import Breakdown, evaluate, grid_function, substitution
from ..ledger import build_ledger
from ..presets import GPUSpec
from ..units import fmt_bytes, parse_size
from ..scenario import MAX_BATCH, MAX_RANK, MAX_SEQ, Scenario, smallest_target_side
from ..symbols import SYMBOLS, sym

KNOBS = ("seq", "batch", "rank")
DEFAULT_HEADROOM = "0"
def headroom_bytes(text: str | int, capacity: int) -> int:
    """``--headroom``: a size (``1GiB``), a percentage of the card (``5%``) or ``0``.

    >>> headroom_bytes("5%", 80 * 2**30) / 2**30
    4.0
    """
    if isinstance(text, int):
        value = text
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*%\s*", str(text))
        if m:
            share = float(m.group(1))
            value = int(capacity * share / 100) if share < 100 else capacity   # 1e400% is no share of a card
        elif str(text).strip() in ("0", "0GiB", "0GB"):
            value = 0
        else:
            value = parse_size(text)
    if value < 0 or value >= capacity:
        raise UserError(f"--headroom {text} leaves nothing of the card's {fmt_bytes(capacity)}")
    return value


def max_rank(sc: Scenario) -> int:
    """The largest rank that is still low-rank for every targeted matrix: min(d_in, d_out)."""
    dims = tuple(sorted((n, v) for n, v in sc.values().items() if SYMBOLS[n].group == "model"))  # --set included
    return smallest_target_side(sc.model.family, sc.targets, dims)


LIMITS = {"seq": (MAX_SEQ, "symvram's sequence limit"), "batch": (MAX_BATCH, "symvram's batch limit"),
          "rank": (MAX_RANK, "symvram's rank limit")}


def knob_limit(sc: Scenario, knob: str, limit: int | None = None) -> tuple[int, str]:
    """The largest value the search may answer, and why it is the limit. A stated limit, or the model's
    context, beyond what symvram estimates is refused, not capped: the answer would not be what it says.

    >>> knob_limit(Scenario.create("7b"), "seq", 10**9)
    Traceback (most recent call last):
    ...
    symvram.errors.UserError: --limit 1000000000 is beyond symvram's sequence limit (10000000); give at most 10000000
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise UserError(f"--limit must be a positive integer; got {excerpt(limit)}")
    most, most_reason = LIMITS[knob]
    if limit is not None and limit > most:
        raise UserError(f"--limit {excerpt(limit)} is beyond {most_reason} ({most}); give at most {most}")
    if knob == "seq":
        if limit is not None:
            return limit, "the stated limit"
        context = sc.model.max_position
        if context and context > most:
            raise UserError(f"--solve seq: {sc.model.name}'s context (max_position_embeddings {context}) is beyond "
                            f"{most_reason} ({most}); give --limit (at most {most})")
        if context:
            return context, f"max_position_embeddings of {sc.model.name}"
        return most, most_reason
    if knob == "batch":
        return (limit, "the stated limit") if limit else (most, most_reason)
    top = max_rank(sc)
    if limit is not None and limit < top:
        return limit, "the stated limit"
    return top, "min(d_in, d_out) of the targeted matrices"


def check_knob(sc: Scenario, knob: str) -> None:
    if knob not in KNOBS:
        raise UserError(f"--solve must be one of {', '.join(KNOBS)}; got {knob!r}")
    if knob == "rank" and not sc.lora:
        raise UserError(f"--solve rank does not apply to --method {sc.method}: there are no LoRA adapters")


@dataclass(frozen=True)
class FitResult:
    """The answer of ``fit``. ``status``: fits (``value`` is the largest that fits, ``above`` the first
    that does not) | none (not even 1 fits; ``at`` is the estimate at 1) | all (``value`` = ``limit`` fits)."""

    knob: str
    status: str
    value: int | None
    limit: int
    limit_reason: str
    card: GPUSpec
    headroom: int
    at: Breakdown
    above: Breakdown | None
    bounds: dict[str, float]   # moment key -> largest knob value that moment allows (inf: no bound)
    how: str                   # "solved" | "searched"
    memory: CardMemory | None = None         # the allocator replay at ``at``
    memory_above: CardMemory | None = None   # ... and at ``above``

    @property
    def capacity(self) -> int:
        return self.card.usable_bytes

    @property
    def budget(self) -> int:
        """What the caching allocator may reserve: the card less the context, NCCL's buffers and the margin."""
        return self.memory.capacity

    @property
    def binding_moment(self) -> str:
        return min(self.bounds, key=self.bounds.__getitem__)

    def __repr__(self) -> str:
        from ..rendering import render
        return render(self, "repr")


def _monotone_poly(expr: sp.Expr, x: sp.Symbol) -> sp.Poly | None:
    """``expr`` as a polynomial in x that never decreases for x > 0, or None."""
    try:
        poly = sp.Poly(expr, x)
    except sp.PolynomialError:
        return None
    if not poly.domain.is_Numerical or any(c < 0 for c in poly.all_coeffs()[:-1]):
        return None
    return poly


def _search(fn, budget: int, limit: int) -> int:
    """Largest integer x in [0, limit] with fn(x) <= budget, fn non-decreasing (0 when none)."""
    if fn(1) > budget:
        return 0
    lo, hi = 1, 2
    while hi <= limit and fn(hi) <= budget:
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fn(mid) <= budget else (lo, mid)
    return lo


def _moment_bounds(sc: Scenario, knob: str, budget: int, limit: int) -> tuple[dict[str, float], str]:
    led = build_ledger(sc.structure)
    values = {k: v for k, v in sc.values().items() if k != knob}
    subs = substitution(led, values)
    x = sym(knob)
    bounds: dict[str, float] = {}
    how = "solved"
    for m in led.moments:
        expr = led.moment_expr(m).xreplace(subs)
        poly = _monotone_poly(expr, x)
        if poly is None:
            how = "searched"
            fn = grid_function(led, led.moment_expr(m), (knob,), values)
            found = _search(lambda v: float(fn(v)), budget, limit)
            bounds[m.key] = math.inf if found >= limit else found
        elif poly.degree() == 0:
            bounds[m.key] = math.inf if poly.eval(0) <= budget else 0
        elif poly.eval(limit) <= budget:
            bounds[m.key] = math.inf
        else:
            roots = [rt for rt in sp.Poly(poly - budget, x).real_roots() if rt > 0]
            bounds[m.key] = int(sp.floor(max(roots))) if roots else 0
    return bounds, how


def allocator_slack(cm: CardMemory) -> int:
    """What the allocator holds beyond the ledger's allocated peak (workspaces, rounding, cached blocks)."""
    return max(cm.reserved_peak - cm.allocated, 0)


def fit(sc: Scenario, capacity_bytes: int | GPUSpec, solve: str = "seq",
        headroom: int | str = DEFAULT_HEADROOM, limit: int | None = None, allocator: str | None = None) -> FitResult:
    """The largest integer ``solve`` (seq | batch | rank) whose two steps the simulated caching allocator runs on
    the card without an OOM (``allocator``: default | expandable, else PYTORCH_CUDA_ALLOC_CONF's)."""
    check_knob(sc, solve)
    card = capacity_bytes if isinstance(capacity_bytes, GPUSpec) else GPUSpec(
        key="capacity", name=f"{fmt_bytes(capacity_bytes)} card", memory_bytes=capacity_bytes,
        usable_bytes=capacity_bytes)
    room = headroom_bytes(headroom, card.usable_bytes)
    top, reason = knob_limit(sc, solve, limit)

    def memory_at(v: int) -> CardMemory:
        return card_memory(sc.with_changes(**{solve: v}), card, allocator, room, both=False)

    def fits(v: int) -> bool:
        return fits_on_card(sc.with_changes(**{solve: v}), card, allocator, room)

    cm = card_memory(sc, card, allocator, room, both=False)
    bounds, how = _moment_bounds(sc, solve, cm.capacity - allocator_slack(cm), top)
    value = max(int(min(min(bounds.values()), top)), 1)
    for _ in range(2):   # the slack grows with the activations: read it again at the answer
        cm = memory_at(value)
        bounds, how = _moment_bounds(sc, solve, cm.capacity - allocator_slack(cm), top)
        found = max(int(min(min(bounds.values()), top)), 1)
        if found == value:
            break
        value = found
    # the replay decides: step from the moments' answer to the last value that fits
    if fits(value):
        step = 1
        while value < top and fits(min(value + step, top)):
            value, step = min(value + step, top), step * 2
        while step > 1:
            step //= 2
            if value + step <= top and fits(value + step):
                value += step
    else:
        step = 1
        while value > 1 and not fits(max(value - step, 1)):
            value, step = max(value - step, 1), step * 2
        low = max(value - step, 1)
        if not fits(low):
            at = evaluate(sc.with_changes(**{solve: 1}))
            return FitResult(solve, "none", None, top, reason, card, room, at, None, bounds, how, memory_at(1))
        while value - low > 1:
            mid = (low + value) // 2
            low, value = (mid, value) if fits(mid) else (low, mid)
        value = low
    at, memory = evaluate(sc.with_changes(**{solve: value})), memory_at(value)
    if value >= top:
        return FitResult(solve, "all", value, top, reason, card, room, at, None, bounds, how, memory)
    above = evaluate(sc.with_changes(**{solve: value + 1}))
    return FitResult(solve, "fits", value, top, reason, card, room, at, above, bounds, how, memory, memory_at(value + 1))
