"""Measurement side of symvram (optional extra ``validate``: torch, transformers, peft).

``symvram.validate.measure.measure(spec) -> dict`` runs real training steps of a Hugging Face
model under PyTorch's FakeTensorMode and returns the peak of live tensor bytes;
``symvram.validate.explain_peak.explain_peak(spec) -> dict`` lists the tensors alive at that peak;
``symvram.validate.spec`` maps a Scenario to a measurement spec and back (torch-free).

Importing this package does not import torch; importing ``.measure`` or ``.explain_peak`` does.
"""

from __future__ import annotations

import importlib.util

__all__ = ["is_available", "missing_reason", "LEDGER_VERSIONS", "version_note"]

# The library versions whose saved tensors and allocations the ledger follows (the validate extra's minimum;
# CI installs exactly these). Other versions are accepted and measured; validate says when they differ.
LEDGER_VERSIONS = {"torch": "2.13.0", "transformers": "5.24.0", "peft": "0.21.2", "bitsandbytes": "0.50.2"}


def version_note(measured: dict[str, str]) -> tuple[str, list[str]]:
    """A line setting the versions a measurement ran with beside the ledger's, and a warning per difference.

    A local build suffix (``2.13.0+cpu``) is the same release.

    >>> version_note({"torch": "2.13.0+cpu", "transformers": "5.30.1", "peft": "0.21.2"})[1]
    ['measured with transformers 5.30.1; the ledger follows 5.24.0: a difference from the estimate may come from the library']
    """
    line = ("measured with " + ", ".join(f"{k} {v}" for k, v in measured.items()) + "; the ledger follows "
            + ", ".join(f"{k} {LEDGER_VERSIONS[k]}" for k in measured if k in LEDGER_VERSIONS))
    warnings = [f"measured with {k} {v}; the ledger follows {LEDGER_VERSIONS[k]}: a difference from the estimate "
                "may come from the library" for k, v in measured.items()
                if k in LEDGER_VERSIONS and v.split("+")[0] != LEDGER_VERSIONS[k]]
    return line, warnings


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
        "pip install 'symvram[validate]' (torch>=2.13.0, transformers>=5.24.0, peft>=0.21.2, bitsandbytes>=0.50.2)"
    )
