"""Ledger × numbers → a Breakdown of plain integers (bytes), and cached lambdified functions for grids.

Single estimates run one compiled Python function per structure (``exact_function``: exact integer and
``Fraction`` arithmetic, the same numbers as substituting SymPy rationals, about a hundred times faster);
grids use ``lambdify`` once per (ledger, free symbols) and then numpy arrays.

>>> from symvram.scenario import Scenario
>>> sc = Scenario.create("7b", method="full")
>>> bd = evaluate(sc)
>>> bd.blocks["trainable"] // 10**9
70
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache
from operator import itemgetter

import sympy as sp

from .ledger import Ledger, build_ledger
from .ledger.functions import at_least, ceil_blocks, ceil_div, next_power_of_two, pow2_ceil
from .ledger.sharding import divides_only, zero_divides
from .ledger.structure import Structure
from .ledger.terms import BLOCKS
from .scenario import Scenario
from .symbols import SYMBOLS, sym


def _number(value) -> int | Fraction:
    """A leaf value as an exact Python number (an int when it is whole)."""
    if type(value) is int:
        return value
    return int(value) if float(value).is_integer() else Fraction(value)


def _exact(value) -> sp.Number:
    """The same number as a SymPy Integer or Rational."""
    return sp.Rational(_number(value))


def _div(n, d) -> int | Fraction:
    """n / d exactly: an int when it divides."""
    if type(n) is int and type(d) is int:
        q, r = divmod(n, d)
        return q if not r else Fraction(n, d)
    return Fraction(n) / d


class _Irrational(ArithmeticError):
    """A fractional power (``--set quant_bits=3.5``): the value leaves the rationals."""


class _NotRational(TypeError):
    """An expression with no exact Python form (a log from differentiating 2^q): SymPy evaluates it."""


def _pow(b, e) -> int | Fraction:
    if type(e) is not int and e.denominator != 1:
        raise _Irrational
    return Fraction(b) ** e if e < 0 else b ** e


def _heaviside(x, at_zero):
    return 1 if x > 0 else 0 if x < 0 else at_zero


_RUNTIME = {"_number": _number, "_div": _div, "_pow": _pow, "_ceil_div": ceil_blocks, "_pow2_ceil": next_power_of_two,
            "_heaviside": _heaviside, "_ceil": math.ceil, "_floor": math.floor, "Fraction": Fraction}
_CALLS = {sp.Max: "max", sp.Min: "min", ceil_div: "_ceil_div", pow2_ceil: "_pow2_ceil", sp.ceiling: "_ceil",
          sp.floor: "_floor", sp.Heaviside: "_heaviside"}


def _name(s: sp.Symbol) -> str:
    """The symbol's name (its text: ``str`` of a plain Symbol, without running SymPy's printer)."""
    return s.name if type(s) is sp.Symbol else str(s)


class _Source:
    """Python source of SymPy expressions with exact arithmetic: rationals and divisions through ``_div``
    (an int when it divides, else a Fraction), the ledger's own functions by their integer definitions.

    One instance for the process: every symbol has one variable name (``x0``, ``x1`` … in the order first
    met) in every compiled function, so the text of an expression is the same in each and is written once
    (the ledgers of a plan or a document share most of their subexpressions)."""

    def __init__(self):
        self.names: dict[sp.Symbol, str] = {}
        self.texts: dict[sp.Basic, str] = {}
        self.symbols: dict[sp.Basic, frozenset] = {}

    def free(self, e: sp.Basic) -> frozenset:
        """``e.free_symbols``, remembered for every subexpression (SymPy walks the whole tree on each ask)."""
        out = self.symbols.get(e)
        if out is None:
            if e.is_Symbol:
                out = frozenset((e,))
            elif isinstance(e, _PLAIN):   # no bound variables: the union of the arguments' symbols
                out = frozenset().union(*map(self.free, e.args))
            else:
                out = frozenset(e.free_symbols)
            if len(self.symbols) > 100_000:
                self.symbols.clear()
            self.symbols[e] = out
        return out

    def name(self, s: sp.Symbol) -> str:
        if s not in self.names:
            self.names[s] = f"x{len(self.names)}"
        return self.names[s]

    def __call__(self, e: sp.Expr) -> str:
        text = self.texts.get(e)
        if text is None:
            if len(self.texts) > 100_000:   # a long session: bounded, not a growing store
                self.texts.clear()
            text = self.texts[e] = self._text(e)
        return text

    def _text(self, e: sp.Expr) -> str:
        if e.is_Integer:
            return str(e.p) if e.p >= 0 else f"({e.p})"
        if e.is_Rational:
            return f"Fraction({e.p}, {e.q})"
        if e.is_Symbol:
            return self.name(e)
        if e.is_Add:
            return "(" + " + ".join(self(a) for a in e.args) + ")"
        if e.is_Mul:
            num, den = [], []
            for a in e.args:
                if a.is_Rational and not a.is_Integer:
                    num += [str(a.p)] if a.p != 1 else []
                    den.append(str(a.q))
                elif a.is_Pow and a.exp.is_Integer and a.exp < 0:
                    den.append(self(a.base ** -a.exp))
                else:
                    num.append(self(a))
            top = "(" + " * ".join(num or ["1"]) + ")"
            return f"_div({top}, {' * '.join(den)})" if den else top
        if e.is_Pow:
            if e.exp.is_Integer and e.exp < 0:
                return f"_div(1, {self(e.base ** -e.exp)})"
            if e.exp.is_Integer:
                return f"({self(e.base)}) ** {int(e.exp)}"
            return f"_pow({self(e.base)}, {self(e.exp)})"
        if isinstance(e, at_least):
            n, m = (self(a) for a in e.args)
            return f"(1 if {n} >= {m} else 0)"
        if type(e) in _CALLS:
            return f"{_CALLS[type(e)]}({', '.join(self(a) for a in e.args)})"
        raise _NotRational(f"no exact Python form for {type(e).__name__}: {e}")


_PLAIN = (sp.Number, sp.Add, sp.Mul, sp.Pow, at_least, *_CALLS)   # what the ledgers are built of
_SOURCE = _Source()


def free_symbols(e: sp.Basic) -> frozenset:
    """``e.free_symbols``, each shared subexpression's found once for the process (a ledger's expressions share
    most of theirs; SymPy walks the whole tree on every ask).

    >>> sorted(s.name for s in free_symbols(sym("seq") * sym("batch") + 1))
    ['batch', 'seq']
    """
    return _SOURCE.free(e)


def _sympy_numbers(definitions, values: dict) -> dict[sp.Symbol, sp.Number]:
    subs = {SYMBOLS[n].symbol: _exact(v) for n, v in values.items()}
    for symbol, definition in definitions:
        subs[symbol] = definition.xreplace(subs)
    return subs


@lru_cache(maxsize=2048)
def exact_function(definitions: tuple[tuple[sp.Symbol, sp.Expr], ...], exprs: tuple[sp.Expr, ...]):
    """One compiled function of the leaf values (a dict by symbol name) returning each of ``exprs`` as an
    exact int or Fraction, the derived quantities of ``definitions`` computed first, in order; built once
    per (definitions, exprs). Equal to substituting exact SymPy numbers, without SymPy — except where the
    value leaves the rationals (a log, a fractional power), which SymPy's numbers give instead.

    >>> n, b = sym("seq"), sym("batch")
    >>> f = exact_function((), (n * b / 3, ceil_div(n, 256), sp.log(b)))
    >>> f({"seq": 1000, "batch": 2})
    (Fraction(2000, 3), 4, log(2))
    """
    defined = [s for s, _ in definitions]
    src = _SOURCE
    leaves = sorted(set().union(*map(src.free, (*exprs, *(d for _, d in definitions)))) - set(defined), key=_name)
    outputs, symbolic = [], []
    for i, e in enumerate(exprs):
        try:
            outputs.append(src(e))
        except _NotRational:
            outputs.append("None")
            symbolic.append(i)
    lines = [f"    {src.name(s)} = _number(v[{_name(s)!r}])" for s in leaves]
    lines += [f"    {src.name(s)} = {src(d)}" for s, d in definitions]
    lines.append("    return (" + "".join(f"{o}, " for o in outputs) + ")")
    namespace = dict(_RUNTIME)
    exec(compile("def f(v):\n" + "\n".join(lines) + "\n", "<symvram exact_function>", "exec"), namespace)
    compiled = namespace["f"]

    def f(values: dict) -> tuple:
        try:
            out, todo = compiled(values), symbolic
        except _Irrational:
            out, todo = (None,) * len(exprs), range(len(exprs))
        if not todo:
            return out
        subs = _sympy_numbers(definitions, values)
        out = list(out)
        for i in todo:
            out[i] = exprs[i].xreplace(subs)
        return tuple(out)

    return f


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
    """Leaf values plus derived quantities (P, P_train …) as SymPy numbers, evaluated in order (for
    documents that print the substituted expressions; numbers come from ``exact_function``)."""
    return _sympy_numbers(ledger.definitions, values)


@lru_cache(maxsize=256)
def _program(structure: Structure):
    """The ledger of ``structure``, its compiled function (derived quantities, then every term), and a
    getter of the terms each block and moment sums (each also takes the 0 appended to the terms twice,
    so that it returns a tuple even for one term or none)."""
    ledger = build_ledger(structure)
    if divides_only(structure):   # the DDP numbers with the sharded terms divided, as build_ledger composes them
        _, ddp, derived_names, keys, blocks, moments = _program(replace(structure, zero=0))
        divided = [len(derived_names) + i for i, t in enumerate(ledger.terms) if zero_divides(t, structure.zero)]

        def fn(values: dict) -> tuple:
            out, n = list(ddp(values)), _number(values["gpus"])
            for i in divided:
                out[i] = out[i] / n if isinstance(out[i], sp.Basic) else _div(out[i], n)
            return tuple(out)
        return ledger, fn, derived_names, keys, blocks, moments
    derived = [s for s, _ in ledger.definitions] + ([] if any(str(s) == "P" for s, _ in ledger.definitions)
                                                      else [sym("P")])
    fn = exact_function(ledger.definitions, (*derived, *(t.expr for t in ledger.terms)))
    keys = [t.key for t in ledger.terms]

    def getter(parts) -> itemgetter:
        return itemgetter(*(keys.index(k) for k in parts), len(keys), len(keys))

    blocks = {b: getter(t.key for t in ledger.block_terms(b)) for b in BLOCKS}
    moments = {m.key: getter(m.terms) for m in ledger.moments}
    return ledger, fn, [str(s) for s in derived], keys, blocks, moments


def evaluate(sc: Scenario) -> Breakdown:
    """The numbers of one scenario through its structure's compiled function (exact integers)."""
    ledger, fn, derived_names, keys, blocks, moments = _program(sc.structure)
    values = sc.values()
    numbers = fn(values)
    n = len(derived_names)
    derived = {name: int(v) for name, v in zip(derived_names, numbers)}
    sizes = (*map(math.ceil, numbers[n:]), 0)
    return Breakdown(sc, ledger, derived, dict(zip(keys, sizes)), {b: sum(g(sizes)) for b, g in blocks.items()},
                     {m: sum(g(sizes)) for m, g in moments.items()}, values)


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
