"""The objectives' table (``data/objectives.toml``) and what it says of one step's forward: the rows it runs per
example and the positions TRL's fused LM head scores in them. Below both the activations (SFT's fused head) and
the objectives (the preference objectives' and GRPO's).

>>> from symvram.ledger.structure import Structure
>>> scored(Structure()), scored(Structure(objective="dpo"))
(batch*(seq - 1), 2*batch*(-prompt + seq))
"""
from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources

import sympy as sp

from ..symbols import sym
from .structure import Structure

b, seq, p = sym("batch"), sym("seq"), sym("prompt")


@cache
def objectives() -> dict[str, dict]:
    return tomllib.loads(resources.files("symvram.data").joinpath("objectives.toml").read_text(encoding="utf-8"))


def rows(objective: str) -> int:
    """Sequences the trained forward runs per example: 2 for DPO's chosen + rejected, 1 for KTO's completion."""
    return int(objectives()[objective]["rows"])


def scored(s_: Structure) -> sp.Expr:
    """Positions TRL's fused LM head scores in the forward's rows: hidden[:, :-1] against labels[:, 1:], of those
    the labelled ones (labels != -100): every row's but its last under SFT (no prompt: trl 1.16
    trainer/utils.py:1617-1619 _fused_forward), the completion's after the first token under an objective with a
    prompt (s − max(p, 1), which SymPy writes s − p: the prompt symbol is positive)."""
    return rows(s_.objective) * b * (seq - (1 if s_.objective == "sft" else sp.Max(p, 1)))
