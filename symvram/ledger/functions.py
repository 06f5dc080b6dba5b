"""Integer helpers the ledger's expressions need beyond +, ×, Max: exact on numbers, smooth for derivatives,
printable as LaTeX, numpy and JavaScript (the calculator page). No comparison operators in the printed code.

>>> from symvram.symbols import sym
>>> ceil_div(8320, 256), at_least(4095, 4096), at_least(4096, 4096)
(33, 0, 1)
>>> import sympy as sp; n = sp.Symbol("n", positive=True)
>>> sp.diff(ceil_div(n, 256), n), sp.diff(at_least(n, 4096), n)
(1/256, 0)
"""
from __future__ import annotations

import math

import sympy as sp


def next_power_of_two(x) -> int:
    """The smallest power of two ≥ x, on Python numbers (pow2_ceil's definition; the compiled evaluation's too).

    >>> next_power_of_two(1), next_power_of_two(1000), next_power_of_two(1024)
    (1, 1024, 1024)
    """
    return 1 << max(int(math.ceil(x)) - 1, 0).bit_length()


def ceil_blocks(n, block) -> int:
    """⌈n / block⌉ on Python ints or Fractions (ceil_div's definition; the compiled evaluation's too)."""
    return -(-n // block)


class ceil_div(sp.Function):  # noqa: N801 - reads like the math
    """⌈n / B⌉: blocks of B elements needed for n (bitsandbytes' one constant per block). Its derivative
    is taken as 1/B (the sensitivity of the average)."""

    @classmethod
    def eval(cls, n, B):
        if n.is_Number and B.is_Number:
            return sp.Integer(ceil_blocks(sp.Rational(n), sp.Rational(B)))
        return None

    def fdiff(self, argindex=1):
        n, B = self.args
        return 1 / B if argindex == 1 else -n / B**2

    def _latex(self, printer, exp=None):
        r"""⌈n/B⌉, or ⌈n/B⌉^exp where a power of it prints (a Mamba scan's (c + 1)² expands to ⌈s/C⌉²).

        >>> from sympy import latex, symbols
        >>> print(latex(ceil_div(*symbols("s C")) ** 2))
        \left\lceil \frac{s}{C} \right\rceil^{2}
        """
        n, B = (printer._print(a) for a in self.args)
        out = rf"\left\lceil \frac{{{n}}}{{{B}}} \right\rceil"
        return out if exp is None else rf"{out}^{{{exp}}}"

    def _numpycode(self, printer):
        n, B = (printer._print(a) for a in self.args)
        return f"numpy.ceil(({n}) / ({B}))"

    def _javascript(self, printer):
        n, B = (printer._print(a) for a in self.args)
        return f"Math.ceil(({n}) / ({B}))"


class at_least(sp.Function):  # noqa: N801
    """1 when the integer n ≥ m, else 0 (a size threshold, e.g. bitsandbytes' min_8bit_size); derivative 0."""

    @classmethod
    def eval(cls, n, m):
        if n.is_Number and m.is_Number:
            return sp.Integer(1 if n >= m else 0)
        return None

    def fdiff(self, argindex=1):
        return sp.Integer(0)

    def _latex(self, printer):
        n, m = (printer._print(a) for a in self.args)
        return rf"[{n} \geq {m}]"

    def _numpycode(self, printer):
        n, m = (printer._print(a) for a in self.args)
        return f"numpy.heaviside(({n}) - ({m}), 1.0)"

    def _javascript(self, printer):
        n, m = (printer._print(a) for a in self.args)
        return f"Math.sign(Math.max(({n}) - ({m}) + 1, 0))"


class pow2_ceil(sp.Function):  # noqa: N801
    """The smallest power of two ≥ x (triton.next_power_of_2); derivative taken as 1."""

    @classmethod
    def eval(cls, x):
        if x.is_Number:
            return sp.Integer(next_power_of_two(sp.Rational(x)))
        return None

    def fdiff(self, argindex=1):
        return sp.Integer(1)

    def _latex(self, printer):
        return rf"2^{{\left\lceil \log_2 {printer._print(self.args[0])} \right\rceil}}"

    def _numpycode(self, printer):
        x = printer._print(self.args[0])
        return f"numpy.exp2(numpy.ceil(numpy.log2(numpy.maximum({x}, 1))))"

    def _javascript(self, printer):
        x = printer._print(self.args[0])
        return f"Math.pow(2, Math.ceil(Math.log2(Math.max({x}, 1))))"


def largest_indicators(values) -> list[sp.Expr]:
    """Per value, 1 when it is the largest of ``values`` (the first of equal ones), else 0: products of ``at_least``,
    so that a term can keep the winning branch of a Max symbolically.

    >>> a, b = sp.symbols("a b")
    >>> largest_indicators([a, b])
    [at_least(a, b), 1 - at_least(a, b)]
    >>> [i.subs({a: 3, b: 3}) for i in largest_indicators([a, b])]
    [1, 0]
    """
    return [sp.Mul(*(1 - at_least(v, a) for v in values[:j]), *(at_least(a, v) for v in values[j + 1:]))
            for j, a in enumerate(values)]
