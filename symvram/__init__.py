"""symvram: a symbolic ledger of GPU memory for fine-tuning LLMs (full, LoRA, QLoRA; one GPU or many).

The API (``symvram.api``) is loaded on first use, so ``import symvram`` itself is instant.

>>> import symvram
>>> e = symvram.estimate("7b", method="full")
>>> e.terms["weights"], e.terms["grads"], e.terms["optimizer_states"]
(14000000000, 14000000000, 56000000000)
"""
__version__ = "0.1.0"
__all__ = ["Scenario", "estimate", "compare", "whatif", "fit", "sensitivity", "plan", "diagnose", "explain", "plot",
           "step_time", "from_training", "preflight"]
# inside a training run (the integrations extra): the live objects' reader and accelerate's pre-flight check
_ELSEWHERE = {"from_training": "symvram.readers.live", "preflight": "symvram.integrations.accelerate"}


def __getattr__(name: str):
    if name in _ELSEWHERE:
        import importlib

        return getattr(importlib.import_module(_ELSEWHERE[name]), name)
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'symvram' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])
