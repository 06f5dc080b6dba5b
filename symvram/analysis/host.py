"""Memory that is not in the GPU allocator's peak: what offloading moves to the CPU (the ledger's
``host`` block) and bitsandbytes' paged optimizer states (``paged``). Analysis quantities, used by plan
and shown by the render layer."""
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


def paged_bytes(bd: Breakdown) -> int:
    """Paged optimizer states: on the GPU when paged in, outside torch's allocator (never in the peak).

    >>> from symvram.api import estimate
    >>> paged_bytes(estimate("qwen2.5-0.5b", method="full", optimizer="paged-adamw8bit")) > 0
    True
    """
    return sum(bd.terms[t.key] for t in bd.ledger.block_terms("paged"))
