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
from ..ledger.weights import TRAINABLE_WEIGHTS

# measured category -> which estimate terms (by block / key) belong to it
CATEGORIES = ("params", "grads", "optimizer_state", "activations_and_temporaries")


def _category(key: str, block: str) -> str:
    if block == "base" or key in TRAINABLE_WEIGHTS:
        return "params"
    if key in ("grads", "grads_before_first_layer"):
        return "grads"
    if key in ("optimizer_states", "optimizer_steps"):
        return "optimizer_state"
    return "activations_and_temporaries"


def estimate_groups(bd: Breakdown) -> dict[str, int]:
    """Bytes of the estimate's peak moment in the measurement's categories (buffers count as params)."""
    out = dict.fromkeys(CATEGORIES, 0)
    moment = next(m for m in bd.ledger.moments if m.key == bd.peak_moment)
    for key in moment.terms:
        term = bd.ledger.by_key[key]
        cat = _category(key, term.block)
        if key == "buffers":
            continue  # MemTracker reports buffers apart; they are a few hundred bytes
        out[cat] += bd.terms[key]
    return out


def measured_groups(measured: dict) -> dict[str, int]:
    b = measured.get("breakdown_at_peak") or {}
    return {
        "params": b.get("params", 0),
        "grads": b.get("grads", 0),
        "optimizer_state": b.get("optimizer_state", 0),
        "activations_and_temporaries": sum(b.get(k, 0) for k in (
            "activations", "backward_temp", "optimizer_step_temp", "inputs_other")),
    }


def comparison(bd: Breakdown, measured: dict) -> dict:
    """JSON-ready: per category and for the peak, estimate, measurement and relative error."""
    est, meas = estimate_groups(bd), measured_groups(measured)
    rows = {c: {"estimate": est[c], "measured": meas[c]} for c in CATEGORIES}
    rows["peak"] = {"estimate": bd.peak, "measured": measured["peak_bytes"]}
    for row in rows.values():
        row["error"] = (row["estimate"] - row["measured"]) / row["measured"] if row["measured"] else None
    return {"rows": rows, "estimate_moment": bd.peak_moment, "measured_phase": measured.get("peak_phase"),
            "versions": measured.get("versions", {}), "seconds": measured.get("seconds")}
