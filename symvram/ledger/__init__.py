"""The symbolic model: SymPy expressions for every memory term, no numbers and no printing.

``build_ledger(structure)`` returns the Ledger for the discrete choices of a scenario (method,
targets, recipe, attention, checkpointing …); numbers enter only in ``symvram.evaluate``.
"""
from .build import build_ledger
from .terms import Ledger, Moment, Term

__all__ = ["build_ledger", "Ledger", "Moment", "Term"]
