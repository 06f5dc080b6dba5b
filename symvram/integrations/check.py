"""The check every training loop shares: the prediction of a live run (``readers.live``), set against the
devices before step 1, then against the measured peak of the first steps, and written to a JSON report.

1. **Before step 1** (``MemoryCheck.preflight``): the predicted peak (on CUDA the caching allocator's reserved
   peak, ``Prediction.reserved``; else the allocated bytes) against what each local CUDA device can give this process
   (``torch.cuda.mem_get_info``'s free bytes plus what the process already reserved: its weights are part of the
   prediction), less the headroom — or against a named card (``gpu=``), which works on a CPU too. Over: the triage
   (``symvram.diagnose``), its remedies written as TrainingArguments / PEFT / script edits, then a warning or
   ``MemoryExceeded`` (``on_exceed``). On a CPU with no card named, the device comparison is skipped, saying so.
2. **The first steps** (``phase`` / ``step_end``): on CUDA ``torch.cuda.max_memory_allocated()`` and
   ``max_memory_reserved()`` per phase of each step (forward+backward, optimizer); on a CPU validate's tracker
   (``validate.measure.PeakTracker``: PyTorch's MemTracker on the real tensors) in place of the counters. One log
   line per step, then the report (``symvram-memory.json`` in the output folder): the prediction, the measurement,
   the scenario read with its sources and what is not modelled, the library versions.

The reserved figure is the caching allocator's replay of the ledger's schedule (``symvram.card_memory``): modelled,
not measured here.
"""
from __future__ import annotations

import json
import sys
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..api import diagnose, estimate
from ..errors import UserError
from ..evaluate import Breakdown
from ..ledger.terms import Role
from ..present.reports import diagnosis_text
from ..readers.live import Training
from ..units import fmt_bytes

REPORT = "symvram-memory.json"
PHASES = ("forward_backward", "optimizer")   # the parts of a step the loops' hooks separate
ON_EXCEED = ("warn", "raise")


class MemoryExceeded(RuntimeError):
    """The predicted peak does not fit the device: raised before step 1 with ``on_exceed="raise"``."""


def read_run(read, log):
    """``read()`` (a ``from_training`` call), or None with one warning when symvram cannot read this run (a model
    family it has no ledger for, …): the check is advice, a run it cannot read goes on unchecked."""
    try:
        return read()
    except UserError as e:
        message = f"symvram: this run is not checked: {e}"
        log(message)
        warnings.warn(message, stacklevel=3)
        return None


@dataclass(frozen=True)
class Prediction:
    """The predicted peak of one training step: allocated bytes (the ledger), by phase; ``reserved``: the caching
    allocator's reserved peak (``reserved_peak``; None on a CPU run; the device check uses it when set)."""

    allocated: int
    moment: str
    by_phase: dict[str, int]
    reserved: int | None = None

    @property
    def device_bytes(self) -> int:
        """What the device must hold: the reserved figure when known, else the allocated peak."""
        return self.reserved if self.reserved is not None else self.allocated

    @classmethod
    def of(cls, est: Breakdown, grads_in_forward: bool = False, reserved: int | None = None) -> "Prediction":
        """The ledger's moments grouped by phase. ``grads_in_forward``: the loop zeroes the gradients after the
        forward, not after the optimizer step (Lightning's automatic optimization), so the previous step's
        gradients (the ledger's ``grads`` term) are still alive at the end of the forward.

        >>> from symvram import estimate
        >>> e = estimate("7b", method="full")
        >>> p = Prediction.of(e)
        >>> p.moment, p.by_phase["optimizer"] == p.allocated
        ('optimizer_step', True)
        >>> q = Prediction.of(e, grads_in_forward=True)     # 7B full: the optimizer step stays the peak
        >>> q.by_phase["forward_backward"] - e.moments["forward_loss"] == e.terms["grads"], q.moment
        (True, 'optimizer_step')
        """
        moments = dict(est.moments)
        if grads_in_forward:
            grads = sum(est.terms[t.key] for t in est.ledger.terms if t.role is Role.GRADIENT)
            moments["forward_loss + grads"] = moments.pop("forward_loss") + grads
        phases = {"forward_backward": [v for k, v in moments.items() if not k.startswith("optimizer")],
                  "optimizer": [v for k, v in moments.items() if k.startswith("optimizer")]}
        moment = max(moments, key=moments.__getitem__)
        return cls(moments[moment], moment, {k: max(v) for k, v in phases.items() if v}, reserved)


def reserved_peak(sc) -> int | None:
    """The caching allocator's reserved peak of a CUDA run (``symvram.card_memory``'s replay of the ledger's
    schedule, with PYTORCH_CUDA_ALLOC_CONF's allocator; modelled, not measured); None on a CPU run.

    >>> from symvram.scenario import Scenario
    >>> reserved_peak(Scenario.create("7b", method="lora", device="cpu")) is None
    True
    """
    if sc.device != "cuda":
        return None
    from ..card_memory import card_memory

    return card_memory(sc, both=False).reserved_peak


@dataclass
class DeviceCheck:
    """One device against the prediction: ``available`` = free + this process's reserved − headroom."""

    device: str
    free: int
    reserved: int
    headroom: int

    @property
    def available(self) -> int:
        return self.free + self.reserved - self.headroom


@dataclass
class StepMeasurement:
    step: int
    source: str                                    # torch.cuda counters | validate's tracker (CPU)
    allocated: int
    reserved: int | None = None
    by_phase: dict[str, int] = field(default_factory=dict)


def _versions() -> dict[str, str]:
    """symvram and the libraries of the run that are imported (their installed versions)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"symvram": __import__("symvram").__version__}
    for name in ("torch", "transformers", "peft", "accelerate", "bitsandbytes", "trl", "lightning"):
        if name in sys.modules:
            try:
                out[name] = version(name)
            except PackageNotFoundError:
                out[name] = getattr(sys.modules[name], "__version__", "?")
    return out


class MemoryCheck:
    """The prediction of ``training`` and, once the run starts, what it really held (see the module docstring).

    ``gpu``: compare with this card (a name such as ``rtx-4090`` or a size such as ``24GiB``) instead of the
    devices; ``steps``: the steps measured (default 1 and 2); ``output_dir``: where the report goes (None: none);
    ``log``: where the lines go (default: print).
    """

    def __init__(self, training: Training, on_exceed: str = "warn", gpu: str | int | None = None,
                 headroom: str | int = "1GiB", steps: tuple[int, ...] = (1, 2), output_dir: str | None = None,
                 units: str = "GiB", log=print, grads_in_forward: bool = False):
        self.validate_options(on_exceed, gpu, headroom, steps, units)
        self.training, self.on_exceed, self.gpu, self.headroom = training, on_exceed, gpu, headroom
        self.steps, self.output_dir, self.units, self.log = tuple(sorted(set(steps))), output_dir, units, log
        self.estimate = estimate(training.scenario)
        self.prediction = Prediction.of(self.estimate, grads_in_forward, reserved_peak(training.scenario))
        self.devices: list[DeviceCheck] = []
        self.verdict = ""
        self.triage = ""
        self.measured: list[StepMeasurement] = []
        self._tracker = None
        self._started = self._finished = False
        self._untracked = 0
        self._phase: str | None = None
        self._phase_peaks: dict[str, int] = {}
        self._reserved_peak = 0

    @staticmethod
    def validate_options(on_exceed: str = "warn", gpu=None, headroom="1GiB", steps=(1, 2), units="GiB") -> None:
        """Refuse a wrong option where it is given (not at step 1), naming it and what is expected."""
        from ..analysis.fit import headroom_bytes
        from ..units import UNITS

        if on_exceed not in ON_EXCEED:
            raise UserError(f"on_exceed must be one of {', '.join(ON_EXCEED)}; got {on_exceed!r}")
        if isinstance(steps, int) or not steps or any(not isinstance(s, int) or isinstance(s, bool) or s < 1
                                                      for s in steps):
            raise UserError(f"steps must be a tuple of step numbers (1 is the first); got {steps!r}")
        if units not in UNITS:
            raise UserError(f"units must be one of {', '.join(UNITS)}; got {units!r}")
        if gpu is not None and not (isinstance(gpu, int) and not isinstance(gpu, bool) and gpu > 0):
            from ..api import _card

            _card(gpu)
        headroom_bytes(headroom, 1 << 40)

    def _card(self):
        """``gpu``: a card's name or size (``rtx-4090``, ``24GiB``), or a number of bytes taken as the budget as it
        is (what another process leaves, a test's small budget)."""
        from ..presets import GPUSpec

        if isinstance(self.gpu, int):
            return GPUSpec("budget", f"{self.gpu:,} B budget", self.gpu, self.gpu)
        from ..api import _card

        return _card(self.gpu)

    @property
    def measuring(self) -> bool:
        """Started and not finished (the tracker entered, or CUDA's counters being read)."""
        return self._started and not self._finished

    def fb(self, n: int) -> str:
        return fmt_bytes(n, self.units)

    # ------------------------------------------------------------------ before step 1
    def preflight(self, model=None) -> bool:
        """The verdict before step 1: True when the prediction fits every device checked (or none is checked).
        The devices are those ``model``'s parameters live on (this process's current device without one)."""
        need = self.prediction.device_bytes
        what = "predicted peak " + self.fb(need) + f" ({'reserved' if self.prediction.reserved else 'allocated'}" \
               f", at the {self.prediction.moment.replace('_', ' ')})"
        for line in self.training.unmodelled:
            self.log(f"symvram: not modelled: {line}")
        if self.gpu is not None:
            d = diagnose(self.training.scenario, self._card(), headroom=self.headroom)
            # the allocator's replay on the card (diagnose's verdict), and the allocated peak within its budget
            fits = d.cause == "fits" and self.prediction.allocated <= d.budget
            over = max(need - d.memory.capacity, self.prediction.allocated - d.budget)
            self.verdict = f"symvram: {what} on {d.card.name}: the allocator may reserve {self.fb(d.memory.capacity)} " \
                           f"(the card less its context and {self.fb(d.headroom)} headroom), the tensors " \
                           f"{self.fb(d.budget)} of it beside the cuBLAS workspaces: " + \
                           ("fits" if fits else f"over by {self.fb(over)}" if over > 0
                            else "does not fit (the caching allocator's cached, split blocks)")
            return self._decide(fits, d)
        self.devices = _cuda_devices(self.training, self.headroom, model)
        if not self.devices:
            self.verdict = f"symvram: {what}; no CUDA device: the device comparison is skipped (on a CPU run the " \
                           "measurement after the first steps still holds the prediction to account)"
            self.log(self.verdict)
            return True
        worst = min(self.devices, key=lambda dv: dv.available - need)
        fits = need <= worst.available
        self.verdict = f"symvram: {what} against {worst.device}: {self.fb(worst.free)} free + " \
                       f"{self.fb(worst.reserved)} this process reserved − {self.fb(worst.headroom)} headroom = " \
                       f"{self.fb(worst.available)}: " + ("fits" if fits else f"over by {self.fb(need - worst.available)}")
        return self._decide(fits, capacity=worst.free + worst.reserved)

    def _decide(self, fits: bool, d=None, capacity: int = 0) -> bool:
        """Log the verdict; over budget, the triage (``d``, or a diagnosis on ``capacity`` bytes), then warn or raise."""
        self.log(self.verdict)
        if fits:
            return True
        d = d or diagnose(self.training.scenario, capacity, headroom=self.headroom)
        self.triage = diagnosis_text(d, self.units, self.training)
        message = f"{self.verdict}\n{self.triage}"
        self.write_report()
        if self.on_exceed == "raise":
            raise MemoryExceeded(message)
        warnings.warn(message, stacklevel=3)
        return False

    # ------------------------------------------------------------------ the first steps
    def start(self, model=None, optimizer=None) -> None:
        """Begin measuring (before step 1): CUDA's peak counters reset, or on a CPU the tracker entered."""
        import torch

        self._started = True
        if self._on_cuda():
            for dv in self._cuda_indices():
                torch.cuda.reset_peak_memory_stats(dv)
            return
        from ..validate.measure import PeakTracker, quant_state_bytes

        raw = getattr(optimizer, "optimizer", optimizer)
        self._untracked = quant_state_bytes(model) if model is not None else 0   # 4-bit states: not parameters
        self._tracker = PeakTracker(raw)
        self._tracker.track_external(*(o for o in (model, raw) if o is not None))
        self._tracker.__enter__()

    def _on_cuda(self) -> bool:
        return self.training.scenario.device == "cuda" and bool(self._cuda_indices())

    def _cuda_indices(self) -> list[int]:
        import torch

        return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []

    def _peaks(self) -> tuple[int, int | None]:
        import torch

        if self._tracker is not None:
            seen = self._tracker._total() if self._phase is None else self._tracker.phase_peak.get(self._phase, 0)
            return seen + self._untracked, None
        dv = torch.cuda.current_device()
        return torch.cuda.max_memory_allocated(dv), torch.cuda.max_memory_reserved(dv)

    def phase(self, step: int, name: str) -> None:
        """A phase of ``step`` begins (``forward_backward``, ``optimizer``, or None when the step ends)."""
        if step not in self.steps or (self._tracker is None and not self._on_cuda()):
            return
        import torch

        if self._phase is not None:
            allocated, reserved = self._peaks()
            self._phase_peaks[self._phase] = max(self._phase_peaks.get(self._phase, 0), allocated)
            self._reserved_peak = max(self._reserved_peak, reserved or 0)
        self._phase = name
        if name is None:
            return
        if self._tracker is not None:
            self._tracker.set_phase(name)
        else:
            torch.cuda.reset_peak_memory_stats(torch.cuda.current_device())

    def step_end(self, step: int) -> StepMeasurement | None:
        """After ``step``: its measured peak, one log line; after the last measured step, the report."""
        if step not in self.steps:
            return None
        self.phase(step, None)
        if not self._phase_peaks:
            return None
        source = "validate's tracker (MemTracker on the CPU tensors)" if self._tracker is not None \
            else "torch.cuda.max_memory_allocated/max_memory_reserved"
        m = StepMeasurement(step, source, max(self._phase_peaks.values()),
                            self._reserved_peak if self._tracker is None else None, dict(self._phase_peaks))
        self.measured.append(m)
        self._phase_peaks, self._reserved_peak = {}, 0
        if self._tracker is not None:
            self._tracker.reset_mod_stats()
        self.log(self.line(m))
        if step == self.steps[-1]:
            self.finish()
        return m

    def line(self, m: StepMeasurement) -> str:
        """One line: the measured peak of a step beside the prediction, and where the measurement came from."""
        p = self.prediction.allocated
        reserved = f", {self.fb(m.reserved)} reserved" if m.reserved is not None else ""
        return (f"symvram: step {m.step}: measured {self.fb(m.allocated)} allocated{reserved}, predicted "
                f"{self.fb(p)} ({m.allocated - p:+,} B, {100 * (m.allocated - p) / p:+.1f} %) — {m.source}")

    def finish(self) -> None:
        """Stop measuring (the tracker left) and write the report."""
        self._finished = True
        if self._tracker is not None:
            self._tracker.__exit__(None, None, None)
            self._tracker = None
        self.write_report()

    # ------------------------------------------------------------------ the report
    def report(self) -> dict:
        sc = self.training.scenario
        return {
            "symvram_report": 1,
            "prediction": {**asdict(self.prediction), "unit": "bytes", "terms": self.estimate.terms,
                           "note": "allocated: the ledger's peak; reserved: the caching allocator's replay of its "
                                   "schedule (symvram.card_memory; modelled, not measured; null on a CPU run)"},
            "preflight": {"verdict": self.verdict, "devices": [asdict(d) for d in self.devices],
                          "triage": self.triage or None},
            "measurement": [asdict(m) for m in self.measured],
            "scenario": sc.inputs(),
            "scenario_read": [{"setting": k, "value": v, "source": s} for k, v, s in self.training.rows()],
            "not_modelled": self.training.unmodelled,
            "versions": _versions(),
        }

    def write_report(self) -> Path | None:
        if self.output_dir is None:
            return None
        path = Path(self.output_dir) / REPORT
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.report(), indent=2, default=str) + "\n", encoding="utf-8")
        return path


def _cuda_devices(training: Training, headroom, model=None) -> list[DeviceCheck]:
    """This process's CUDA devices: those ``model``'s parameters live on, else the current device (under DDP each
    rank holds its own device: the others' free bytes are not this process's)."""
    if training.scenario.device != "cuda":
        return []
    import torch

    if not torch.cuda.is_available():
        return []
    from ..analysis.fit import headroom_bytes

    used = sorted({p.device.index for p in model.parameters() if p.device.type == "cuda"}) if model is not None else []
    out = []
    for i in used or [torch.cuda.current_device()]:
        free, total = torch.cuda.mem_get_info(i)
        out.append(DeviceCheck(f"cuda:{i} ({torch.cuda.get_device_name(i)})", free, torch.cuda.memory_reserved(i),
                               headroom_bytes(headroom, total)))
    return out


class LoopCheck(MemoryCheck):
    """A MemoryCheck that follows a hand-written loop through the optimizer's own hooks: ``optimizer.step()``
    begins the optimizer phase, and its return ends the step (and begins the next one's forward+backward). With
    gradient accumulation the hooks fire on the real steps only (accelerate skips the others)."""

    def attach(self, model, optimizer) -> "LoopCheck":
        raw = getattr(optimizer, "optimizer", optimizer)
        self.step_number = 1
        self.preflight(model)
        self.start(model, raw)
        self.phase(1, "forward_backward")
        self._hooks = [raw.register_step_pre_hook(self._before_step), raw.register_step_post_hook(self._after_step)]
        return self

    def _before_step(self, *_):
        self.phase(self.step_number, "optimizer")

    def _after_step(self, *_):
        self.step_end(self.step_number)
        self.step_number += 1
        if self.step_number > self.steps[-1]:
            for h in self._hooks:
                h.remove()
            return
        self.phase(self.step_number, "forward_backward")
