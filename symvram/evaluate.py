"""Ledger × numbers → a Breakdown of plain integers (bytes), and cached lambdified functions for grids.

Single estimates substitute exact SymPy numbers (byte-exact integers); grids use ``lambdify``
once per (ledger, free symbols) and then numpy arrays.

>>> from symvram.scenario import Scenario
>>> sc = Scenario.create("7b", method="full")
>>> bd = evaluate(sc)
>>> bd.blocks["trainable"] // 10**9
70
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sympy as sp

from .ledger import Ledger, build_ledger
from .ledger.terms import BLOCKS
from .scenario import Scenario
from .symbols import SYMBOLS, sym


def _exact(value) -> sp.Number:
    if isinstance(value, int):
        return sp.Integer(value)
    return sp.Rational(value) if not float(value).is_integer() else sp.Integer(int(value))


@dataclass(frozen=True)
class Breakdown:
    """Plain numbers of one scenario: every term, block, moment, the peak and its moment."""

    scenario: Scenario
    ledger: Ledger
    derived: dict[str, int]       # P, P_train, P_lora … as integers
    terms: dict[str, int]         # term key -> bytes (transients included)
    blocks: dict[str, int]        # base / trainable / activations
    moments: dict[str, int]       # moment key -> live bytes
    values: dict[str, float]      # every leaf symbol's value

    @property
    def ledger_total(self) -> int:
        return sum(self.blocks[b] for b in BLOCKS)

    @property
    def peak_moment(self) -> str:
        return max(self.moments, key=self.moments.__getitem__)

    @property
    def peak(self) -> int:
        return self.moments[self.peak_moment]

    def __repr__(self) -> str:
        from .rendering import render
        return render(self, "repr")

    def _repr_markdown_(self) -> str:
        from .rendering import render
        return render(self, "markdown")


def substitution(ledger: Ledger, values: dict) -> dict[sp.Symbol, sp.Number]:
    """Leaf values plus derived quantities (P, P_train …), evaluated in order."""
    subs = {SYMBOLS[n].symbol: _exact(v) for n, v in values.items()}
    for symbol, definition in ledger.definitions:
        subs[symbol] = definition.xreplace(subs)
    return subs


def evaluate(sc: Scenario) -> Breakdown:
    ledger = build_ledger(sc.structure)
    values = sc.values()
    subs = substitution(ledger, values)
    terms = {t.key: int(sp.ceiling(t.expr.xreplace(subs))) for t in ledger.terms}
    blocks = {b: sum(terms[t.key] for t in ledger.block_terms(b)) for b in BLOCKS}
    moments = {m.key: sum(terms[k] for k in m.terms) for m in ledger.moments}
    derived = {str(symbol): int(subs[symbol]) for symbol, _ in ledger.definitions}
    if "P" not in derived:
        derived["P"] = int(subs[sym("P")])
    return Breakdown(sc, ledger, derived, terms, blocks, moments, values)


@lru_cache(maxsize=512)
def _lambdified(expr: sp.Expr, names: tuple[str, ...]):
    return sp.lambdify([SYMBOLS[n].symbol for n in names], expr, modules="numpy")


def grid_function(ledger: Ledger, expr: sp.Expr, free: tuple[str, ...], values: dict):
    """A numpy function of the ``free`` symbols, every other symbol fixed at ``values``.

    >>> import numpy as np
    >>> sc = Scenario.create("7b", method="lora")
    >>> led = build_ledger(sc.structure)
    >>> peak = peak_expr(led)
    >>> fn = grid_function(led, peak, ("seq",), sc.values())
    >>> bool(fn(np.array([1024, 2048]))[1] > fn(np.array([1024, 2048]))[0])
    True
    """
    fixed = {SYMBOLS[n].symbol: _exact(v) for n, v in values.items() if n not in free}
    if isinstance(expr, sp.Max):  # substitute moment by moment: SymPy's Max compares its arguments on every rebuild
        full = sp.Max(*(ledger.expand(a).xreplace(fixed) for a in expr.args), evaluate=False)
    else:
        full = ledger.expand(expr).xreplace(fixed)
    return _lambdified(full, free)


def peak_expr(ledger: Ledger) -> sp.Expr:
    """The peak as a SymPy Max over the moments (derived quantities not yet expanded)."""
    return sp.Max(*(ledger.moment_expr(m) for m in ledger.moments), evaluate=False)
