"""Dimensions of the ledger's expressions, from the registry's units (``data/symbols.toml``): every memory
term must come out in bytes, every FLOPs term as a count of operations — checked when a term is made, as
SymPy's ``physics.units`` dimension system (or lcapy's incompatible-quantity check) would.

Counts (elements, parameters, tokens, layers, heads …) are dimensionless; bytes per element times a count is
bytes; a bit is a byte's eighth (the 1/8 is a conversion factor, so ``bit`` is an amount of memory too).

>>> from symvram.symbols import sym
>>> dimension(sym("P_train") * sym("bytes_grad"))
B
>>> dimension(2 * sym("batch") * sym("seq") * sym("hidden"))
1
>>> dimension(sym("hidden") * sym("bytes_act") + sym("vocab"))
Traceback (most recent call last):
...
symvram.ledger.dimensions.DimensionError: vocab (1) + bytes_act*hidden (B): a sum of different dimensions
"""
from __future__ import annotations

from functools import lru_cache

import sympy as sp

from ..symbols import BY_SYMBOL
from .functions import at_least, ceil_div, pow2_ceil

BYTE, TIME = sp.Symbol("B"), sp.Symbol("s")
# a registry unit → its dimension (anything else is a count)
UNIT_DIMENSIONS = {"B": BYTE, "B/elem": BYTE, "bit": BYTE, "bit/param": BYTE, "B/s": BYTE / TIME,
                   "FLOP/s": 1 / TIME}


class DimensionError(ValueError):
    """An expression that adds, or compares, quantities of different dimensions."""


def _same(args) -> sp.Expr:
    dims = {a: dimension(a) for a in args if a != 0}
    if len(set(dims.values())) > 1:
        raise DimensionError(" + ".join(f"{a} ({d})" for a, d in dims.items()) + ": a sum of different dimensions")
    return next(iter(dims.values()), sp.Integer(1))


@lru_cache(maxsize=65536)
def dimension(expr: sp.Expr) -> sp.Expr:
    """The dimension of ``expr``: a product of powers of B (bytes) and s (seconds); 1 for a count."""
    if expr.is_Number:
        return sp.Integer(1)
    if expr.is_Symbol:
        return UNIT_DIMENSIONS.get(BY_SYMBOL[expr].unit, sp.Integer(1))
    if expr.is_Mul:
        return sp.Mul(*(dimension(a) for a in expr.args))
    if expr.is_Pow:
        base, exponent = expr.args
        if base.is_Number:   # 2**quant_bits: the number of codes of so many bits, a count
            return sp.Integer(1)
        if not exponent.is_Number:
            raise DimensionError(f"{expr}: a symbolic power of a quantity")
        return dimension(base) ** exponent
    if expr.is_Add or isinstance(expr, (sp.Max, sp.Min)):
        return _same(expr.args)
    if isinstance(expr, ceil_div):
        return dimension(expr.args[0]) / dimension(expr.args[1])
    if isinstance(expr, pow2_ceil):
        return dimension(expr.args[0])
    if isinstance(expr, at_least):   # an indicator: 1 or 0, comparing like with like
        _same(expr.args)
        return sp.Integer(1)
    raise DimensionError(f"{expr}: no dimension rule for {type(expr).__name__}")


UNIT_OF_DIMENSION = {BYTE: "B", sp.Integer(1): "FLOP"}   # what a term's role says it is in (a FLOP is a count)


def check(expr: sp.Expr, unit: str, what: str) -> None:
    """Raise ``DimensionError`` unless ``expr`` (or 0) is in ``unit`` (B or FLOP)."""
    if expr != 0 and UNIT_OF_DIMENSION.get(dimension(expr)) != unit:
        raise DimensionError(f"{what} = {expr} is in {dimension(expr)}, not {unit}")
