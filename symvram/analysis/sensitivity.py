"""Which knob moves the peak most: ∂peak/∂x from the expressions, and the elasticity x/peak · ∂peak/∂x.

The peak is a Max of moments; at a given point its derivative is the derivative of the *active*
moment (the argmax), with the derived quantities (P_train = P_LoRA ∝ r …) expanded. The elasticity
is unit-free — the percent change of the peak per percent change of x — so tokens, ranks and bytes
per element compare. For a term linear in x, x · ∂term/∂x is the term itself: the elasticity of a
linear knob is the share of the peak that grows in proportion to it.

>>> from symvram.scenario import Scenario
>>> res = sensitivity(Scenario.create("7b", method="lora", rank=64, seq=2048, batch=4))
>>> res.rows[0].knob, res.row("seq").elasticity > 10 * res.row("rank").elasticity
('seq', True)
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import sympy as sp

from ..errors import UserError
from ..evaluate import Breakdown, evaluate, exact_function
from ..ledger import build_ledger
from ..ledger.flops import build_flops
from ..ledger.structure import Structure
from ..symbols import SYMBOLS, latex, sym
from .whatif import apply_changes, check_symbol, ledger_symbols

DEFAULT_KNOBS = ("seq", "batch", "rank", "layers", "hidden", "intermediate", "vocab", "heads", "kv_heads",
                 "head_dim", "bytes_weight", "bytes_act", "bytes_state", "bytes_adapter", "states_per_param",
                 "quant_bits", "gpus", "tp")


@dataclass(frozen=True)
class TermShare:
    """The part of one term that grows in proportion to the knob: x · ∂term/∂x at the point."""

    key: str
    label: str
    bytes: float


@dataclass(frozen=True)
class Row:
    knob: str
    at: float                 # the knob's value at the point
    derivative: sp.Expr       # ∂(active moment)/∂x, symbolic
    value: float              # its value at the point, bytes per unit of x
    elasticity: float         # value · at / peak
    shares: tuple[TermShare, ...]   # terms of the active moment that move with x, largest first
    time_elasticity: float = 0.0    # x/F · ∂F/∂x of the step's matmul FLOPs F (the time ledger beside the memory one)

    @property
    def derivative_latex(self) -> str:
        return latex(self.derivative)

    @property
    def proportional_bytes(self) -> float:
        """x · ∂peak/∂x: the bytes of the peak that scale with x (for a linear knob)."""
        return self.value * self.at


@dataclass(frozen=True)
class SensitivityResult:
    breakdown: Breakdown
    moment: str                     # the active (argmax) moment
    rows: tuple[Row, ...]           # ranked by |elasticity|

    @property
    def peak(self) -> int:
        return self.breakdown.peak

    def row(self, knob: str) -> Row:
        for r in self.rows:
            if r.knob == knob:
                return r
        raise UserError(f"knob {knob!r} is not among {', '.join(r.knob for r in self.rows)}")

    def __repr__(self) -> str:
        from ..rendering import render
        return render(self, "repr")

    def _repr_markdown_(self) -> str:
        from ..rendering import render
        return render(self, "markdown")


def _diff(expr: sp.Expr, x: sp.Symbol) -> sp.Expr:
    """∂expr/∂x, 0 without differentiating when x does not occur (most knobs in most terms)."""
    return sp.diff(expr, x) if x in expr.free_symbols else sp.Integer(0)


def _scaled_diff(expr: sp.Expr, x: sp.Symbol) -> sp.Expr:
    """x·∂expr/∂x: for each monomial c·xᵏ·(no x) of a sum, k times itself, without differentiating (the
    expanded FLOPs polynomials); ``_diff`` elsewhere.

    >>> s, b = sym("seq"), sym("batch")
    >>> _scaled_diff(3 * s**2 * b + s + b, s)
    6*batch*seq**2 + seq
    """
    if x not in expr.free_symbols:
        return sp.Integer(0)
    if expr.is_Add:
        return sp.Add(*(_scaled_diff(a, x) for a in expr.args))
    powers = expr.as_powers_dict()
    k = powers.get(x)
    if k is not None and k.is_Number and all(x not in b.free_symbols | e.free_symbols
                                             for b, e in powers.items() if b != x):
        return k * expr
    return x * _diff(expr, x)


@lru_cache(maxsize=256)
def _derivatives(structure: Structure, moment: str, knobs: tuple[str, ...]):
    """Differentiated once per structure, active moment and knobs: each knob's ∂moment/∂x (symbolic), the
    (knob, term) pairs whose ∂term/∂x is not 0, the knob of each FLOPs term's x·∂F_term/∂x that is not 0, and
    one compiled function of the values returning, exactly, every FLOPs term, each ∂moment/∂x, each such
    ∂term/∂x and each such x·∂F_term/∂x (the FLOPs, expanded polynomials, by the power of x in each monomial)."""
    led = build_ledger(structure)
    terms = [(led.by_key[k], led.expand(led.by_key[k].expr)) for k in next(m for m in led.moments if m.key == moment).terms]
    flops = [x.expr for x in build_flops(structure).terms]
    parts = [(i, term, d) for i, k in enumerate(knobs) for term, e in terms if (d := _diff(e, sym(k))) != 0]
    derivatives = tuple(sp.Add(*(d for j, _, d in parts if j == i)) for i in range(len(knobs)))
    flops_parts = [(i, d) for i, k in enumerate(knobs) for f in flops if (d := _scaled_diff(f, sym(k))) != 0]
    fn = exact_function(led.definitions, (*flops, *derivatives, *(d for _, _, d in parts),
                                          *(d for _, d in flops_parts)))
    return (len(flops), derivatives, tuple((i, term) for i, term, _ in parts), tuple(i for i, _ in flops_parts),
            fn)


def sensitivity(sc, knobs: tuple[str, ...] | list[str] | None = None) -> SensitivityResult:
    """∂peak/∂x, its value and elasticity for each knob, ranked by |elasticity|.

    ``knobs=None``: every name of ``DEFAULT_KNOBS`` that the method's ledger contains. A knob given
    explicitly that the ledger does not contain (``rank`` with full fine-tuning) is a UserError."""
    bd = evaluate(sc)
    led = bd.ledger
    if knobs is None:
        names = [k for k in DEFAULT_KNOBS if k in ledger_symbols(led)]
    else:
        names = list(dict.fromkeys(knobs))
        for k in names:
            check_symbol(sc, k, option="--knobs")
    n_flops, derivatives, parts, flops_knobs, fn = _derivatives(sc.structure, bd.peak_moment, tuple(names))
    numbers = iter(fn(bd.values))
    flops_value = float(sum(next(numbers) for _ in range(n_flops)))
    values = [next(numbers) for _ in names]
    shares: list[list[TermShare]] = [[] for _ in names]
    for (i, term), d in zip(parts, numbers):
        if part := float(d) * bd.values[names[i]]:
            shares[i].append(TermShare(term.key, term.label, part))
    flops_scaled = [0] * len(names)   # x·∂F/∂x, exact; ∂F/∂x is it over the exact x
    for i, d in zip(flops_knobs, numbers):
        flops_scaled[i] += d
    rows = []
    for i, name in enumerate(names):
        at = bd.values[name]
        value = float(values[i])
        shares[i].sort(key=lambda s: -abs(s.bytes))
        time_el = float(flops_scaled[i] / Fraction(at)) * at / flops_value
        rows.append(Row(name, at, derivatives[i], value, value * at / bd.peak, tuple(shares[i]), time_el))
    rows.sort(key=lambda r: -abs(r.elasticity))
    return SensitivityResult(bd, bd.peak_moment, tuple(rows))


@dataclass(frozen=True)
class Comparison:
    """Knob ``a`` against knob ``b``: the ratio of their elasticities and what halving each saves."""

    a: Row
    b: Row
    ratio: float               # elasticity a / elasticity b
    halved: dict[str, tuple[float, int]]   # knob -> (halved value, bytes the re-estimated peak drops)


def halve(value: float, name: str) -> float:
    return max(1, int(value) // 2) if SYMBOLS[name].integer else value / 2


def compare(res: SensitivityResult, a: str, b: str) -> Comparison:
    """Compare two knobs of ``res``; each halving is re-estimated with ``evaluate`` (not linearised).

    >>> from symvram.scenario import Scenario
    >>> c = compare(sensitivity(Scenario.create("7b", method="lora", seq=2048, batch=4)), "seq", "rank")
    >>> c.halved["seq"][0], c.halved["rank"][0], c.halved["seq"][1] > 10 * c.halved["rank"][1]
    (1024, 32, True)
    """
    ra, rb = res.row(a), res.row(b)
    if rb.elasticity == 0:
        raise UserError(f"{b} does not move the peak at this point; nothing to compare {a} with")
    halved = {}
    for row in (ra, rb):
        new = halve(row.at, row.knob)
        after = evaluate(apply_changes(res.breakdown.scenario, {row.knob: new}))
        halved[row.knob] = (new, res.peak - after.peak)
    return Comparison(ra, rb, ra.elasticity / rb.elasticity, halved)
