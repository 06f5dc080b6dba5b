"""The look shared by the figures and the page: one colour for each thing, and short card names.

Block colours (Okabe–Ito: colour-blind safe, legible on white and on black) mean the ledger's blocks
and nothing else; the temporaries are a neutral grey, drawn hatched. Ranks take a ramp keyed by the
rank's value, so r = 64 is the same colour in every figure; fits / does not fit are a neutral pair.
Plain hex strings: the page's template reads them too, without importing matplotlib.

>>> BLOCK_COLORS["base"], rank_color(64) == rank_color(64.0), rank_color(8) != rank_color(64)
('#0072B2', True, True)
>>> short_card_name("NVIDIA GeForce RTX 4090 24GB"), short_card_name("AMD Instinct MI300X 192GB")
('RTX 4090 24GB', 'MI300X 192GB')
"""
from __future__ import annotations

import math

BLOCK_COLORS = {"base": "#0072B2", "trainable": "#E69F00", "activations": "#009E73", "transient": "#8C8C8C"}
# plasma from purple to coral (no block hue), one step per power of two: r ≤ 4, 8, 16, 32, 64, 128, 256, ≥ 512
RANK_RAMP = ("#6A00A8", "#8606A6", "#9E199D", "#B52F8C", "#C8437B", "#D8576B", "#E66C5C", "#F2844B")
FIT_COLORS = {"fits": "#D9D9D9", "allocator runs out": "#A3A3A3", "does not fit": "#6E6E6E"}
NEUTRAL = "#7F7F7F"   # card lines, the run's own seq, the tornado's bars: not data of a block
VENDOR_WORDS = ("NVIDIA", "GeForce", "AMD", "Instinct")


def rank_color(rank: float) -> str:
    """The ramp's colour for a LoRA rank: by log2 of the value, not by its position in a list."""
    step = round(math.log2(max(rank, 4))) - 2
    return RANK_RAMP[min(step, len(RANK_RAMP) - 1)]


RANK_DASHES = ("-", "--", "-.", ":")


def rank_linestyle(rank: float) -> str:
    """The line style of a LoRA rank, by log2 of the value like its colour: ranks a factor 2 apart, whose
    colours are neighbours on the ramp, never share a style.

    >>> [rank_linestyle(r) for r in (8, 16, 32, 64)]
    ['--', '-.', ':', '-']
    """
    return RANK_DASHES[(round(math.log2(max(rank, 4))) - 2) % len(RANK_DASHES)]


def short_card_name(name: str) -> str:
    """A card's name without the vendor's words (figure titles and the page's card menu)."""
    words = [w for w in name.split() if w not in VENDOR_WORDS]
    return " ".join(words) or name


__all__ = ["BLOCK_COLORS", "RANK_RAMP", "FIT_COLORS", "NEUTRAL", "rank_color", "rank_linestyle", "short_card_name"]
