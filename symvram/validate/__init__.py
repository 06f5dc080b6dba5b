"""Measurement side of symvram (optional extra ``validate``: torch, transformers, peft).

``symvram.validate.measure.measure(spec) -> dict`` runs real training steps of a Hugging Face
model under PyTorch's FakeTensorMode and returns the peak of live tensor bytes;
``symvram.validate.explain_peak.explain_peak(spec) -> dict`` lists the tensors alive at that peak;
``symvram.validate.spec`` maps a Scenario to a measurement spec and back (torch-free).

Importing this package does not import torch; importing ``.measure`` or ``.explain_peak`` does.
"""

from __future__ import annotations

import importlib.util

__all__ = ["is_available", "missing_reason"]


def _missing() -> list[str]:
    return [m for m in ("torch", "transformers", "peft") if importlib.util.find_spec(m) is None]


def is_available() -> bool:
    """True when torch, transformers and peft are importable."""
    return not _missing()


def missing_reason() -> str:
    """What to install for validate, or "" when everything is there."""
    miss = _missing()
    if not miss:
        return ""
    return (
        f"symvram validate needs {', '.join(miss)}: "
        "pip install 'symvram[validate]' (torch==2.13.0, transformers==5.24.0, peft==0.21.2)"
    )
