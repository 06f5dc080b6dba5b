"""The Python API: the same rooms as the CLI, through another door.

>>> e = estimate("llama-2-7b", method="lora", rank=64, adapter_dtype="fp32")
>>> e.params["trainable"]
159907840
"""
from __future__ import annotations

from .evaluate import Breakdown, evaluate
from .presets import ModelSpec
from .scenario import Scenario


def estimate(model: str | ModelSpec, **settings) -> Breakdown:
    """Estimate one scenario. ``settings`` are Scenario fields (method, rank, batch, seq, dtype …)."""
    return evaluate(Scenario.create(model, **settings))
