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

    @cached_property
    def symbol(self) -> sp.Symbol:
        if self.integer:
            return sp.Symbol(self.name, positive=True, integer=True)
        return sp.Symbol(self.name, positive=True)


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
    """LaTeX of ``expr`` with the registry's symbol names (``h`` for hidden, ``\\beta_{w}`` …)."""
    return sp.latex(expr, symbol_names=LATEX_NAMES, mul_symbol="dot")
