"""symvram: a symbolic ledger of GPU memory for fine-tuning LLMs (full, LoRA, QLoRA; one GPU or many).

>>> import symvram
>>> e = symvram.estimate("7b", method="full")
>>> e.bytes["base"], e.bytes["trainable"]
(14000000000, 70000000000)
"""
from .api import estimate, Scenario

__all__ = ["estimate", "Scenario"]
__version__ = "0.1.0"
