"""The one registry of SymPy symbols.

Every symbol a memory term uses is declared once in ``data/symbols.toml`` with its LaTeX
name, meaning, unit and (for constants and run settings) its default value. Code asks for
symbols by name; nothing else creates a ``sympy.Symbol``.

>>> from symvram.symbols import sym, SYMBOLS
>>> sym("hidden")
hidden
>>> SYMBOLS["hidden"].latex
'h'
>>> SYMBOLS["bytes_state"].default
4
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cached_property
from importlib import resources

import sympy as sp
from sympy.core.exprtools import decompose_power
from sympy.core.sorting import default_sort_key
from sympy.printing.latex import LatexPrinter as SympyLatexPrinter


@dataclass(frozen=True)
class SymbolDef:
    """One named quantity: its SymPy symbol, how it prints, what it means."""

    name: str
    latex: str
    meaning: str
    unit: str
    group: str
    integer: bool = False
    default: float | int | None = None
    zero_allowed: bool = False    # a run setting that may be 0 (the prompt): nonnegative, not positive

    @cached_property
    def symbol(self) -> sp.Symbol:
        sign = {"nonnegative": True} if self.zero_allowed else {"positive": True}
        return sp.Symbol(self.name, integer=True, **sign) if self.integer else sp.Symbol(self.name, **sign)


def _load() -> dict[str, SymbolDef]:
    text = resources.files("symvram.data").joinpath("symbols.toml").read_text(encoding="utf-8")
    return {name: SymbolDef(name=name, **fields) for name, fields in tomllib.loads(text).items()}


SYMBOLS: dict[str, SymbolDef] = _load()
LATEX_NAMES: dict[sp.Symbol, str] = {d.symbol: d.latex for d in SYMBOLS.values()}
BY_SYMBOL: dict[sp.Symbol, SymbolDef] = {d.symbol: d for d in SYMBOLS.values()}


def sym(name: str) -> sp.Symbol:
    """The registered symbol called ``name`` (KeyError names the close matches)."""
    try:
        return SYMBOLS[name].symbol
    except KeyError:
        from .errors import did_you_mean

        raise KeyError(f"unknown symbol {name!r}{did_you_mean(name, SYMBOLS)}") from None


_GREEK = {"\\beta": "β", "\\tau": "τ"}


def text_name(latex_name: str) -> str:
    """A terminal-friendly name from a LaTeX name: ``\\beta_{w}`` → ``β_w``, ``P_{\\mathrm{LoRA}}`` → ``P_LoRA``."""
    name = latex_name
    for tex, char in _GREEK.items():
        name = name.replace(tex, char)
    for junk in ("\\mathrm", "{", "}", "\\", " "):
        name = name.replace(junk, "")
    return name


TEXT_SYMBOLS: dict[sp.Symbol, sp.Symbol] = {d.symbol: sp.Symbol(text_name(d.latex)) for d in SYMBOLS.values()}


def text(expr: sp.Basic) -> str:
    """A one-line formula for terminals, with the registry's short names.

    >>> text(sym("batch") * sym("seq") * sym("hidden") * sym("bytes_fp32"))
    'b*h*s*β_32'
    """
    return sp.sstr(expr.xreplace(TEXT_SYMBOLS), order="none")


def latex(expr: sp.Basic) -> str:
    """LaTeX of ``expr`` with the registry's symbol names (``h`` for hidden, ``\\beta_{w}`` …).

    >>> print(latex(sym("bytes_weight") * sym("P") / 2))
    \\frac{P \\cdot \\beta_{w}}{2}
    """
    return LatexPrinter().doprint(expr)


class LatexPrinter(SympyLatexPrinter):
    """``sympy.latex`` with the registry's names and a centred dot, its sums ordered by ``lex_terms``."""

    def __init__(self, settings: dict | None = None):
        super().__init__({"symbol_names": LATEX_NAMES, "mul_symbol": "dot", **(settings or {})})

    def _as_ordered_terms(self, expr, order=None):
        return lex_terms(expr) if (order or self.order) is None else super()._as_ordered_terms(expr, order)


def lex_terms(expr: sp.Expr) -> list[sp.Expr]:
    """``expr.as_ordered_terms()`` (SymPy's printing order), faster: SymPy turns every coefficient into a Python
    complex through evalf, to break ties between equal monomials, which one sum never holds. Anything but a sum of
    commutative terms with rational coefficients is left to SymPy.

    >>> from symvram.symbols import sym
    >>> e = sym("seq")**2 * sym("batch") + 3 * sym("hidden") * sym("seq") + sym("batch") / 2 + 7
    >>> lex_terms(e) == e.as_ordered_terms()
    True
    """
    args = sp.Add.make_args(expr)
    if len(args) == 2 and any(a.is_Number for a in args):   # SymPy's special case of a number and a product
        return expr.as_ordered_terms()
    rows, gens = [], set()
    for term in args:
        coeff, rest = term.as_coeff_Mul()
        powers = {}
        for factor in sp.Mul.make_args(rest) if rest is not sp.S.One else ():
            if not factor.is_commutative or factor.is_number:
                return expr.as_ordered_terms()
            base, exponent = decompose_power(factor)
            powers[base] = exponent
        if not coeff.is_Rational:
            return expr.as_ordered_terms()
        gens.update(powers)
        rows.append((term, powers))
    position = {g: i for i, g in enumerate(sorted(gens, key=default_sort_key))}

    def descending(row) -> list:   # the monomial's exponents over the sorted generators, negated
        monomial = [0] * len(position)
        for base, exponent in row[1].items():
            monomial[position[base]] = -exponent
        return monomial
    return [term for term, _ in sorted(rows, key=descending)]

