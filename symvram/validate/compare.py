"""Estimate beside measurement, category by category (torch-free: works on a measured dict).

The measured breakdown at the peak (MemTracker's categories) is compared with the terms of the
estimate's peak moment, grouped the same way.

>>> from symvram.api import estimate
>>> bd = estimate("llama-2-7b", method="lora", adapter_dtype="fp32", state_dtype="fp32", device="cpu")
>>> groups = estimate_groups(bd)
>>> groups["params"] == bd.terms["weights"] + bd.terms["adapters"]
True
"""
from __future__ import annotations

from ..evaluate import Breakdown
from ..ledger.terms import Term

CATEGORIES = ("params", "grads", "optimizer_state", "activations_and_temporaries")
# MemTracker's categories (validate.measure.BREAKDOWN_KEYS) as this comparison groups them; buffers (a few hundred
# bytes) are reported apart and left out
GROUPS = {"params": "params", "grads": "grads", "optimizer_state": "optimizer_state",
          "activations": "activations_and_temporaries", "backward_temp": "activations_and_temporaries",
          "optimizer_step_temp": "activations_and_temporaries", "inputs_other": "activations_and_temporaries"}


def category(term: Term) -> str | None:
    """The comparison's category of ``term``: its role's measured category, grouped (None: left out). ZeRO's own
    buffers, which MemTracker has no category for, count with the temporaries."""
    measured = term.info.measured
    return "activations_and_temporaries" if measured is None else GROUPS.get(measured)


def estimate_groups(bd: Breakdown) -> dict[str, int]:
    """Bytes of the estimate's peak moment in the measurement's categories (buffers left out)."""
    out = dict.fromkeys(CATEGORIES, 0)
    moment = next(m for m in bd.ledger.moments if m.key == bd.peak_moment)
    for key in moment.terms:
        cat = category(bd.ledger.by_key[key])
        if cat is not None:
            out[cat] += bd.terms[key]
    return out


def measured_groups(measured: dict) -> dict[str, int]:
    """Bytes of the measured breakdown at the peak in the comparison's categories."""
    b, out = measured.get("breakdown_at_peak") or {}, dict.fromkeys(CATEGORIES, 0)
    for name, group in GROUPS.items():
        out[group] += b.get(name, 0)
    return out


def comparison(bd: Breakdown, measured: dict) -> dict:
    """JSON-ready: per category and for the peak, estimate, measurement and relative error."""
    est, meas = estimate_groups(bd), measured_groups(measured)
    rows = {c: {"estimate": est[c], "measured": meas[c]} for c in CATEGORIES}
    rows["peak"] = {"estimate": bd.peak, "measured": measured["peak_bytes"]}
    for row in rows.values():
        row["error"] = (row["estimate"] - row["measured"]) / row["measured"] if row["measured"] else None
    return {"rows": rows, "estimate_moment": bd.peak_moment, "measured_phase": measured.get("peak_phase"),
            "versions": measured.get("versions", {}), "seconds": measured.get("seconds")}
