"""``MemoryCheckCallback``: symvram's check inside transformers' Trainer and TRL's trainers (SFTTrainer …).

One line in the script::

    trainer.add_callback(MemoryCheckCallback(on_exceed="raise"))

- ``on_train_begin`` (the model prepared, the optimizer made, checkpointing switched on): the run read from the
  live objects (``symvram.readers.live``: model, TrainingArguments or TRL's config, optimizer, the longest sample
  of the training set), its predicted peak against each local device — over, the triage as TrainingArguments /
  PEFT edits, then a warning or ``MemoryExceeded`` before step 1;
- after steps 1 and 2 (``steps=``): the measured peak per phase beside the prediction, one log line per step,
  and ``symvram-memory.json`` in ``args.output_dir``.

The Trainer calls its callbacks by name (``getattr(callback, event)``), so this class need not subclass
``TrainerCallback``: importing it imports neither transformers nor torch.
"""
from __future__ import annotations

from .check import MemoryCheck, MemoryExceeded, read_run

__all__ = ["MemoryCheckCallback", "MemoryExceeded"]


class MemoryCheckCallback:
    """The Trainer's memory check. ``on_exceed``: warn or raise; ``gpu``: compare with a named card or a size
    (``"rtx-4090"``, ``"24GiB"``) instead of the devices; ``steps``: the steps measured (default 1 and 2);
    ``headroom``: kept free on the device (default 1GiB); ``log``: where lines go (default print, main process).
    Settings the objects do not hold (rare) may be given as Scenario keywords (``settings``)."""

    def __init__(self, on_exceed: str = "warn", gpu: str | int | None = None, steps: tuple[int, ...] = (1, 2),
                 headroom: str | int = "1GiB", units: str = "GiB", log=None, **settings):
        self.options = dict(on_exceed=on_exceed, gpu=gpu, steps=steps, headroom=headroom, units=units)
        self.settings = settings
        self._log = log
        self.check: MemoryCheck | None = None
        MemoryCheck.validate_options(**self.options)   # a wrong option fails at construction, not at step 1

    def __getattr__(self, name: str):
        if name.startswith("on_"):   # every other Trainer event: nothing to do
            return _ignore
        raise AttributeError(name)

    def on_train_begin(self, args, state, control, model=None, optimizer=None, train_dataloader=None, **_):
        from ..readers.live import from_training

        log = self._log or (print if getattr(state, "is_world_process_zero", True) else _ignore)
        dataset = getattr(train_dataloader, "dataset", None)
        training = read_run(lambda: from_training(model, args, optimizer, dataset=dataset, **self.settings), log)
        if training is None:
            return
        self.check = MemoryCheck(training, output_dir=args.output_dir, log=log, **self.options)
        self.check.preflight(model)
        self.check.start(model, optimizer)

    def on_step_begin(self, args, state, control, **_):
        if self.check:
            self.check.phase(state.global_step + 1, "forward_backward")

    def on_pre_optimizer_step(self, args, state, control, **_):
        if self.check:
            self.check.phase(state.global_step + 1, "optimizer")

    def on_optimizer_step(self, args, state, control, **_):
        if self.check:
            self.check.phase(state.global_step + 1, "zero_grad")

    def on_step_end(self, args, state, control, **_):
        if self.check:
            self.check.step_end(state.global_step)

    def on_train_end(self, args, state, control, **_):
        if self.check and self.check.measuring:   # fewer steps than asked to measure
            self.check.finish()


def _ignore(*args, **kwargs):
    return None
