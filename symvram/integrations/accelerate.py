"""``preflight(accelerator, model, optimizer, batch)``: symvram's check in an accelerate loop, one line after
``accelerator.prepare``::

    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    symvram.preflight(accelerator, model, optimizer, next(iter(loader)), on_exceed="raise")

Before step 1 the verdict (and the triage when over); then, through the optimizer's own step hooks, the measured
peak of steps 1 and 2 beside the prediction, and the report in ``output_dir`` (None: no file). The loop is read
as the ``torch`` stack (a plain PyTorch loop over transformers + PEFT), with accelerate's mixed precision as
torch.autocast and its number of processes as the data-parallel degree.
"""
from __future__ import annotations

from ..readers.live import from_training
from .check import LoopCheck, MemoryExceeded, read_run

__all__ = ["preflight", "MemoryExceeded"]
AUTOCAST = {"bf16": "bf16", "fp16": "fp16", "no": "none", None: "none"}


def preflight(accelerator, model, optimizer=None, batch=None, on_exceed: str = "warn", gpu: str | int | None = None,
              steps: tuple[int, ...] = (1, 2), headroom: str | int = "1GiB", output_dir: str | None = None,
              units: str = "GiB", log=None, **settings) -> LoopCheck:
    """The check of an accelerate loop (see the module docstring); returns the LoopCheck (its ``report()``), or None
    when symvram cannot read the run (one warning says why; the loop goes on unchecked)."""
    LoopCheck.validate_options(on_exceed, gpu, headroom, steps, units)
    given = {"autocast": AUTOCAST.get(str(getattr(accelerator, "mixed_precision", "no")).lower(), "none"), **settings}
    main = getattr(accelerator, "is_main_process", True)
    log = log or (print if main else (lambda *_: None))
    training = read_run(lambda: from_training(model, None, optimizer, batch,
                                              gpus=int(getattr(accelerator, "num_processes", 1)), **given), log)
    if training is None:
        return None
    kind = str(getattr(accelerator, "distributed_type", "NO")).rsplit(".", 1)[-1]
    if kind in ("DEEPSPEED", "FSDP"):
        training.unmodelled.append(f"accelerate's {kind} plugin: its sharding is not read from the live objects; "
                                   "estimated as data parallelism (symvram check --from the accelerate config reads it)")
    check = LoopCheck(training, on_exceed=on_exceed, gpu=gpu, steps=steps, headroom=headroom, output_dir=output_dir,
                      units=units, log=log)
    return check.attach(model, optimizer) if optimizer is not None else _preflight_only(check, model)


def _preflight_only(check: LoopCheck, model) -> LoopCheck:
    check.preflight(model)
    return check
