"""``MemoryCheckCallback`` for PyTorch Lightning: symvram's check before the first training batch, then the
measured peak of steps 1 and 2 beside the prediction::

    from symvram.integrations.lightning import MemoryCheckCallback
    trainer = lightning.Trainer(callbacks=[MemoryCheckCallback(on_exceed="raise")], ...)

Lightning accepts only subclasses of its ``Callback``: the class is made on first access, which imports
lightning (``lightning`` or ``pytorch_lightning``, whichever is installed), never before.

The LightningModule's transformers model (the first submodule with a config) is read with its optimizer and the
first batch; Lightning's ``precision`` gives the recipe (``bf16-mixed``: autocast on fp32 weights, ``bf16-true``:
bf16 weights, no autocast) and ``trainer.world_size`` the data-parallel degree. The loop is the ``torch`` stack,
with one difference the prediction takes in: Lightning's automatic optimization zeroes the gradients after
``training_step`` and before ``backward`` (lightning 2.6 ``loops/optimization/automatic.py``, ``Closure.closure``),
so from step 2 on the previous step's gradients are alive at the end of the forward.
"""
from __future__ import annotations

from functools import cache

__all__ = ["MemoryCheckCallback"]
AUTOCAST = {"bf16-mixed": "bf16", "16-mixed": "fp16", "bf16": "bf16", "16": "fp16"}   # the others: none


def _hf_model(module):
    """The transformers model inside a LightningModule: the first module with a ``config`` that has a model_type."""
    for m in module.modules():
        if getattr(getattr(m, "config", None), "model_type", None) and hasattr(m.config, "to_dict"):
            return m
    from ..errors import UserError

    raise UserError("MemoryCheckCallback reads a transformers model inside the LightningModule; none was found "
                    "(no submodule with a .config)")


@cache
def _callback_class():
    try:
        from lightning.pytorch import Callback
    except ImportError:
        from pytorch_lightning import Callback

    from ..readers.live import from_training
    from .check import LoopCheck, read_run

    class MemoryCheckCallback(Callback):
        """Lightning's memory check. ``on_exceed``: warn or raise; ``gpu``: a named card or a size instead of the
        devices; ``steps``: the steps measured; ``output_dir``: where the report goes (default the trainer's
        log_dir, else its default_root_dir)."""

        def __init__(self, on_exceed="warn", gpu=None, steps=(1, 2), headroom="1GiB", output_dir=None, units="GiB",
                     log=None, **settings):
            LoopCheck.validate_options(on_exceed, gpu, headroom, steps, units)
            self.options = dict(on_exceed=on_exceed, gpu=gpu, steps=steps, headroom=headroom, units=units)
            self.output_dir, self._log, self.settings = output_dir, log, settings
            self.check = None
            self.unread = False   # symvram could not read the run: it goes on unchecked

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if self.check is None and not self.unread:
                self._begin(trainer, pl_module, batch)
            # Lightning's closure runs forward and backward inside optimizer.step(): its own hooks mark the phases
            if self.check is not None:
                self.check.phase(trainer.global_step + 1, "forward_backward")

        def _begin(self, trainer, pl_module, batch):
            optimizer = trainer.optimizers[0] if trainer.optimizers else None
            given = {"autocast": AUTOCAST.get(str(trainer.precision), "none"), **self.settings}
            log = self._log or (print if trainer.is_global_zero else (lambda *_: None))
            model = read_run(lambda: _hf_model(pl_module), log)
            training = None if model is None else read_run(
                lambda: from_training(model, None, optimizer, batch, gpus=trainer.world_size, **given), log)
            if training is None:
                self.unread = True
                return
            out = self.output_dir or trainer.log_dir or trainer.default_root_dir
            # Lightning zeroes the gradients after training_step, before backward (loops/optimization/automatic.py,
            # Closure.closure): the previous step's gradients live through the forward
            self.check = LoopCheck(training, output_dir=out, log=log, grads_in_forward=True, **self.options)
            self.check.preflight(model)
            self.check.start(model, optimizer)

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            if self.check is not None:
                self.check.phase(trainer.global_step + 1, "optimizer")

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if self.check is not None:
                self.check.step_end(trainer.global_step)

        def on_train_end(self, trainer, pl_module):
            if self.check is not None and self.check.measuring:
                self.check.finish()

    return MemoryCheckCallback


def __getattr__(name: str):
    if name == "MemoryCheckCallback":
        return _callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
