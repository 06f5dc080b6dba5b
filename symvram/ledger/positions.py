"""The objectives' table (``data/objectives.toml``) and what it says of one step's forward: the rows it runs per
example and the positions TRL's fused LM head scores in them. Below both the activations (SFT's fused head) and
the objectives (the preference objectives' and GRPO's).

>>> from symvram.ledger.structure import Structure
>>> scored(Structure()), scored(Structure(objective="dpo"))
(batch*(seq - 1), 2*batch*(seq - Max(1, prompt)))
>>> scored(Structure(objective="dpo")).subs({sym("batch"): 1, sym("seq"): 8, sym("prompt"): 0})
14
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


def row_positions(s_: Structure) -> sp.Expr:
    """The [rows·b, seq − 1] grid of positions TRL's fused LM head runs over (hidden[:, :-1] against
    labels[:, 1:], trl 1.16 trainer/utils.py:1617-1619 _fused_forward), which its per-token outputs are
    scattered back to."""
    return rows(s_.objective) * b * (seq - 1)


def scored(s_: Structure) -> sp.Expr:
    """Of ``row_positions``, the labelled ones (labels != -100) the head scores: all of them under SFT (no
    prompt), the completion's after its first token under an objective with a prompt: s − max(p, 1) per row (the
    prompt symbol is nonnegative, so ``--prompt 0`` scores s − 1)."""
    return row_positions(s_) if s_.objective == "sft" else rows(s_.objective) * b * (seq - sp.Max(p, 1))
