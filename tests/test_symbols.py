"""The registry's printers: symvram's LaTeX is SymPy's, with the registry's names."""
from __future__ import annotations

import itertools

import pytest
import sympy as sp

from symvram.ledger import build_ledger
from symvram.scenario import Scenario
from symvram.symbols import LATEX_NAMES, latex, lex_terms


@pytest.mark.parametrize("model", ["llama-3-8b", "gemma-2-9b", "mixtral-8x7b", "qwen2.5-0.5b"])
def test_latex_is_sympys_term_for_term(model):
    """``latex`` orders sums with ``lex_terms`` (which skips SymPy's complex() of every coefficient): the same
    LaTeX as ``sympy.latex`` for every term of varied ledgers, and the same order for every sum inside them."""
    exprs = set()
    for method, kw in itertools.product(("full", "lora", "qlora"), ({}, {"zero": 3, "gpus": 2},
                                                                    {"grad_checkpointing": True, "attention": "eager"})):
        exprs.update(t.expr for t in build_ledger(Scenario.create(model, method=method, **kw).structure).terms)
    sums = {e for expr in exprs for e in sp.preorder_traversal(expr) if isinstance(e, sp.Add)}
    assert len(sums) > 30
    assert all(lex_terms(e) == e.as_ordered_terms() for e in sums)
    assert all(latex(e) == sp.latex(e, symbol_names=LATEX_NAMES, mul_symbol="dot") for e in exprs)


