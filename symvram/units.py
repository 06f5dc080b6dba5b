"""Bytes to text and text to bytes (core: every layer may use it). Bytes inside; GiB (2^30) printed by
default, GB (10^9) on request.

>>> fmt_bytes(14_000_000_000)
'13.04 GiB'
>>> fmt_bytes(14_000_000_000, "GB")
'14.00 GB'
>>> parse_size("24GB"), parse_size("24 GiB"), parse_size("24g")
(24000000000, 25769803776, 25769803776)
>>> parse_size("1e400GiB")
Traceback (most recent call last):
...
symvram.errors.UserError: '1e400GiB' is larger than any accelerator (over 1 PiB)
"""
from __future__ import annotations

import math
import re

from .errors import UserError, excerpt

UNITS = {"GiB": 1 << 30, "GB": 10**9, "MiB": 1 << 20, "MB": 10**6}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")
_SUFFIX = {"": None, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6, "mib": 1 << 20,
           "g": 1 << 30, "gb": 10**9, "gib": 1 << 30, "t": 1 << 40, "tb": 10**12, "tib": 1 << 40}


def check_units(units: str) -> str:
    if units not in UNITS:
        raise UserError(f"--units must be one of {', '.join(UNITS)}; got {excerpt(units)}")
    return units


def fmt_bytes(n: float, units: str = "GiB", digits: int = 2) -> str:
    """``n`` bytes in ``units``, with the unit written out."""
    return f"{n / UNITS[check_units(units)]:,.{digits}f} {units}"


def in_units(n: float, units: str = "GiB") -> float:
    return n / UNITS[check_units(units)]


def parse_size(text: str) -> int:
    """A memory size: ``24GB`` (10^9), ``24GiB``/``24g``/``24G`` (2^30), ``80e9`` or plain bytes."""
    m = _SIZE.match(str(text))
    if not m:
        raise UserError(f"cannot read {excerpt(text)} as a memory size (try 24GiB, 24GB or 80g)")
    number, suffix = float(m.group(1)), m.group(2).lower()
    if suffix not in _SUFFIX:
        raise UserError(f"unknown unit {excerpt(m.group(2))} in {excerpt(text)} (use GiB, GB, MiB, MB or g)")
    scale = _SUFFIX[suffix] or 1
    value = number * scale
    if math.isinf(value) or value > 1 << 50:  # 1e400 reads as infinity
        raise UserError(f"{excerpt(text)} is larger than any accelerator (over 1 PiB)")
    if value <= 0:
        raise UserError(f"memory size must be positive; got {excerpt(text)}")
    if value < 1:
        raise UserError(f"{excerpt(text)} is less than one byte (a bare number is bytes; write 0.5GiB for half a GiB)")
    return int(value)


def fmt_flops(n: float) -> str:
    """FLOPs with an SI prefix: ``fmt_flops(8.9e13)`` → ``'89.0 TFLOP'``."""
    for scale, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {prefix}FLOP"
    return f"{n:.3g} FLOP"
