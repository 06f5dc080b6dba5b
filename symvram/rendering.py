"""How results display themselves without naming the render layer: a registry of renderers by (type, format).

The result classes (Breakdown, Ledger, Term, WhatIf, FitResult, SensitivityResult, PlanResult …) live
below the render layer and call ``render(self, "repr")`` or ``render(self, "markdown")`` from one-line
methods. The render layer (``symvram.present.display`` and ``symvram.present.reports``) fills the registry
with ``@renders(Type, fmt)``; a lookup that finds nothing imports the render layer once, by name, as a
plugin (as SymPy's printers are found for its expressions), so that nothing below it imports it.

Formats: ``repr`` (one line for a console), ``markdown`` (Jupyter), ``text`` (the CLI's table output),
``json`` (the CLI's JSON contract, a dict).

>>> class Thing:
...     pass
>>> @renders(Thing, "repr")
... def _thing_repr(t, **kw):
...     return "<Thing>"
>>> render(Thing(), "repr")
'<Thing>'
>>> render(Thing(), "latex")
Traceback (most recent call last):
...
TypeError: no latex renderer for Thing
"""
from __future__ import annotations

import importlib
from collections.abc import Callable

RENDER_LAYER = ("symvram.present.display", "symvram.present.reports")
_RENDERERS: dict[tuple[type, str], Callable] = {}
_loaded = False


def renders(cls: type, fmt: str) -> Callable[[Callable], Callable]:
    """Register the decorated function as the ``fmt`` renderer of ``cls`` (and its subclasses)."""
    def register(fn: Callable) -> Callable:
        _RENDERERS[(cls, fmt)] = fn
        return fn
    return register


def renderer(cls: type, fmt: str) -> Callable | None:
    """The renderer for ``cls`` in ``fmt`` (its own or its nearest base class's), loading the render layer
    on the first miss."""
    global _loaded
    for _ in range(2):
        for base in cls.__mro__:
            if (base, fmt) in _RENDERERS:
                return _RENDERERS[(base, fmt)]
        if _loaded:
            return None
        _loaded = True
        for name in RENDER_LAYER:
            importlib.import_module(name)
    return None


def render(obj, fmt: str, **options):
    """``obj`` rendered in ``fmt``; ``options`` (``units`` …) go to the renderer."""
    fn = renderer(type(obj), fmt)
    if fn is None:
        raise TypeError(f"no {fmt} renderer for {type(obj).__name__}")
    return fn(obj, **options)


def formats(cls: type) -> list[str]:
    """The formats registered for ``cls`` (after loading the render layer)."""
    renderer(cls, "repr")
    return sorted({fmt for (c, fmt) in _RENDERERS if c in cls.__mro__})


__all__ = ["render", "renderer", "renders", "formats"]
