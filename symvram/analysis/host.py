"""CPU memory that offloading moves off the GPU (the ledger's ``host`` block): an analysis quantity,
used by plan and shown by the render layer."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..evaluate import Breakdown


def host_bytes(bd: Breakdown) -> int:
    """Bytes offloaded to CPU memory (per GPU's rank); never part of the GPU peak.

    >>> from symvram.api import estimate
    >>> host_bytes(estimate("7b", method="full", gpus=4, zero=3, offload="optimizer")) > 0
    True
    """
    return sum(bd.terms[t.key] for t in bd.ledger.block_terms("host"))
