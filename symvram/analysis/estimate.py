"""``symvram estimate``'s answer gathered apart from its printing: one result object per form of the command.

``estimate_report`` (``--method …``): the Breakdown, the step's FLOPs and traffic, its time on a card, the
caching allocator's replay and, on a card, the verdict (a Diagnosis). ``compare_report`` (no ``--method``):
the reference answer's rows, each with its FLOPs and, on a card, its tokens/s. The render layer
(``present.reports``) formats these and computes nothing (like accelerate's ``gather_data`` apart from its
printing).

>>> from symvram.scenario import Scenario
>>> r = estimate_report(Scenario.create("7b", method="lora"))
>>> r.timing.step is None, r.timing.flops.per_step > 0, r.diagnosis is None
(True, True, True)
"""
from __future__ import annotations

from dataclasses import dataclass

from ..card_memory import CardMemory, card_memory
from ..errors import UserError
from ..evaluate import Breakdown, evaluate
from ..presets import GPUSpec
from ..scenario import Scenario
from ..timing import Flops, StepTime, comm_bytes, flops, step_time
from .diagnose import DEFAULT_HEADROOM, Diagnosis, diagnose


@dataclass(frozen=True)
class Timing:
    """A step's matmul FLOPs and bytes moved (``comm``: network, host, HBM), and on a card its time: a StepTime,
    the reason there is none (a card without datasheet figures), or None (no card)."""

    flops: Flops
    comm: dict[str, int]
    step: StepTime | str | None = None


def timing(sc: Scenario, card: GPUSpec | None = None, mfu: float | None = None,
           interconnect: str | None = None) -> Timing:
    """The Timing of ``sc``; on ``card`` its step time. A card without figures gives the reason, unless an
    ``mfu`` or ``interconnect`` was asked for (then it is the error)."""
    step: StepTime | str | None = None
    if card is not None:
        try:
            step = step_time(sc, card, mfu, interconnect)
        except UserError as e:
            if mfu is not None or interconnect is not None:   # a time was asked for
                raise
            step = str(e)   # the memory answer stands; the time line says why there is none
    return Timing(step.flops if isinstance(step, StepTime) else flops(sc), comm_bytes(sc), step)


@dataclass(frozen=True)
class EstimateReport:
    """One scenario's answer: its ledger evaluated, its timing, its replay on the card (or on no card) and, with
    a card, the verdict with its remedies."""

    breakdown: Breakdown
    timing: Timing
    memory: CardMemory
    diagnosis: Diagnosis | None = None


def estimate_report(sc: Scenario, card: GPUSpec | None = None, headroom: int | str = DEFAULT_HEADROOM,
                    allocator: str | None = None, mfu: float | None = None,
                    interconnect: str | None = None) -> EstimateReport:
    """Everything ``symvram estimate --method …`` prints, for ``sc`` (on ``card``, when given)."""
    bd = evaluate(sc)
    time = timing(sc, card, mfu, interconnect)
    memory = card_memory(sc, card, allocator)
    verdict = None if card is None else diagnose(sc, card, headroom=headroom, allocator=allocator, mfu=mfu,
                                                 interconnect=interconnect)
    return EstimateReport(bd, time, memory, verdict)


@dataclass(frozen=True)
class CompareReport:
    """The reference answer's rows (``rows``: name, Breakdown; ``skipped``: name, why refused), each row's
    Timing (FLOPs and traffic, no card), and on a card (``card``, ``budget``) each row's tokens/s per GPU (None
    where the card has no figures)."""

    rows: tuple[tuple[str, Breakdown], ...]
    skipped: tuple[tuple[str, str], ...]
    timings: dict[str, Timing]
    card: GPUSpec | None = None
    budget: int | None = None
    tokens_per_second: dict[str, float | None] | None = None


def compare_report(rows, skipped=(), card: GPUSpec | None = None, budget: int | None = None) -> CompareReport:
    """The rows of ``api.compare`` with their timings and, on ``card`` within ``budget``, their speeds."""
    rows = tuple(rows)
    speeds = None
    if card is not None:
        speeds = {}
        for name, bd in rows:
            try:
                speeds[name] = step_time(bd.scenario, card).tokens_per_second_per_gpu
            except UserError:   # a card without peak figures: the memory verdict alone
                speeds[name] = None
    return CompareReport(rows, tuple(skipped), {name: timing(bd.scenario) for name, bd in rows}, card, budget, speeds)
