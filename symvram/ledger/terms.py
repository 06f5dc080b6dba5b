"""Terms, moments and the ledger that holds them.

A ``Term`` is one line of the memory ledger: a SymPy expression in bytes over registry symbols,
the block it belongs to, its LaTeX name and a one-line reason. A ``Moment`` is an instant of the
training step (end of forward, start of the loss backward, optimizer step …) whose live bytes are a
sum of terms; the peak is the largest moment.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import sympy as sp

BLOCKS = ("base", "trainable", "activations")


@dataclass(frozen=True)
class Term:
    """One memory term. ``block`` is base | trainable | activations | transient.

    >>> from symvram.symbols import sym
    >>> t = Term("grads", "trainable", sym("P_train") * sym("bytes_grad"), r"M_{grad}", "one gradient per trainable weight")
    >>> t.expr
    P_train*bytes_grad
    """

    key: str
    block: str
    expr: sp.Expr
    label: str
    why: str
    source: str = ""

    def __repr__(self) -> str:
        from ..rendering import render
        return render(self, "repr")

    def _repr_latex_(self) -> str:
        from ..rendering import render
        return render(self, "latex")


@dataclass(frozen=True)
class Moment:
    """An instant of the step: ``terms`` are the keys of the terms live then."""

    key: str
    label: str
    terms: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Ledger:
    """All terms of one scenario structure, the derived-quantity definitions, and the moments."""

    terms: tuple[Term, ...]
    moments: tuple[Moment, ...]
    definitions: tuple[tuple[sp.Symbol, sp.Expr], ...] = field(default=())

    @cached_property
    def by_key(self) -> dict[str, Term]:
        return {t.key: t for t in self.terms}

    def block_terms(self, block: str) -> tuple[Term, ...]:
        return tuple(t for t in self.terms if t.block == block)

    def block_expr(self, block: str) -> sp.Expr:
        return sp.Add(*(t.expr for t in self.block_terms(block)))

    def moment_expr(self, moment: Moment) -> sp.Expr:
        return sp.Add(*(self.by_key[k].expr for k in moment.terms))

    @cached_property
    def ledger_total(self) -> sp.Expr:
        """base + trainable + activations: the reference answer's sum."""
        return sp.Add(*(self.block_expr(b) for b in BLOCKS))

    def __repr__(self) -> str:
        from ..rendering import render
        return render(self, "repr")

    def _repr_markdown_(self) -> str:
        from ..rendering import render
        return render(self, "markdown")

    def expand(self, expr: sp.Expr) -> sp.Expr:
        """Substitute the derived quantities (P_train, P_lora …) by their definitions."""
        for symbol, definition in reversed(self.definitions):
            expr = expr.xreplace({symbol: definition})
        return expr
