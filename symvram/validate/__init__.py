"""Measurement side of symvram (optional extra ``validate``: torch, transformers, peft).

``measure(spec) -> dict`` runs real training steps of a Hugging Face model under PyTorch's
FakeTensorMode and returns the peak of live tensor bytes (see :mod:`symvram.validate.measure`).
``explain_peak(spec) -> dict`` lists the tensors alive at that peak.

Importing this package does not import torch; the first use of ``measure`` / ``explain_peak``
does.
"""

from __future__ import annotations

import importlib.util

__all__ = ["MISSING_REASON", "explain_peak", "is_available", "measure"]


def _missing() -> list[str]:
    return [m for m in ("torch", "transformers", "peft") if importlib.util.find_spec(m) is None]


def is_available() -> bool:
    """True when torch, transformers and peft are importable."""
    return not _missing()


def MISSING_REASON() -> str:  # noqa: N802 - reads like a constant at the call site
    miss = _missing()
    if not miss:
        return ""
    return (
        f"symvram validate needs {', '.join(miss)}: "
        "pip install 'symvram[validate]' (torch==2.13.0, transformers==5.24.0, peft==0.21.2)"
    )


def measure(spec: dict) -> dict:
    """Measure one case; see :func:`symvram.validate.measure.measure`."""
    from .measure import measure as _measure

    return _measure(spec)


def explain_peak(spec: dict, **kwargs) -> dict:
    """List the live tensors at the global peak; see :func:`symvram.validate.explain_peak.explain_peak`."""
    from .explain_peak import explain_peak as _explain

    return _explain(spec, **kwargs)
