"""What the card holds: the caching allocator's reserved peak over the ledger's allocation schedule, and
the device block beyond it (the CUDA context, NCCL's buffers); the cuBLAS workspaces are allocations of
the schedule, as torch makes them through the caching allocator.

Modelled, not measured: the allocator replay (symvram.allocator, from CUDACachingAllocator.cpp), NCCL's
buffers; the context is data/gpus.toml's memory − usable; the cuBLAS workspaces were measured on an H200.

The three levels a user meets: ``allocated`` (``torch.cuda.max_memory_allocated()``, the ledger's peak),
``reserved`` (``max_memory_reserved()``, with the default allocator and with
``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``) and ``device`` (what ``nvidia-smi`` shows: reserved +
context + NCCL). A setup fits a card when the replay, given the card's memory less the context, NCCL and
the user's margin, runs two steps without an OOM.

>>> from symvram.scenario import Scenario
>>> from symvram.presets import load_card
>>> cm = card_memory(Scenario.create("llama-3-8b", method="lora", batch=2, seq=1024), load_card("h100-80g"))
>>> cm.allocated <= cm.schedule_allocated <= cm.reserved["default"] < cm.device_peak
True
"""
from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import sympy as sp

from .allocator import AllocatorConfig, replay
from .errors import UserError
from .evaluate import evaluate, exact_function
from .ledger import build_ledger
from .ledger.schedule import ledger_schedule
from .presets import GPUSpec, size_card_context
from .scenario import Scenario
from .symbols import sym

ALLOCATORS = ("default", "expandable")


@dataclass(frozen=True)
class DeviceTerm:
    """One line of the device block: bytes as a SymPy expression over registry symbols, why, where from,
    and whether the caching allocator holds it (then it is inside ``reserved``, not on top of it)."""

    key: str
    expr: sp.Expr
    why: str
    source: str
    in_allocator: bool


DEVICE_TERMS = (
    DeviceTerm("cuda_context", sym("cuda_context"), "the CUDA context and the driver's reservations",
               "data/gpus.toml memory_gib − usable_gib", False),
    DeviceTerm("cublas_workspaces", sym("cublas_threads") * (sym("cublas_workspace") + sym("cublaslt_workspace")),
               "one cuBLAS and one cuBLASLt workspace per thread that runs matmuls",
               "torch aten/src/ATen/cuda/CublasHandlePool.cpp (measured on an H200: docs/accuracy.md)", True),
    DeviceTerm("nccl_buffers", sym("nccl_communicators") * sym("nccl_channels") * sym("nccl_buffer"),
               "NCCL's Simple-protocol buffer per channel of each communicator (multi-GPU only)",
               "NCCL_BUFFSIZE (NCCL docs, environment variables); modelled, not measured", False),
)


@lru_cache(maxsize=1)
def _device_data() -> dict:
    return tomllib.loads(resources.files("symvram.data").joinpath("device.toml").read_text(encoding="utf-8"))


def device_values(card: GPUSpec | None, gpus: int = 1, overrides: tuple = ()) -> dict[str, int]:
    """The device symbols' numbers on a card for a job of ``gpus`` (registry defaults, the card's context and
    compute capability, no communicator on one GPU; ``--set`` overrides win)."""
    from .symbols import SYMBOLS

    values = {name: d.default for name, d in SYMBOLS.items() if d.group == "device" and d.default is not None}
    values["cuda_context"] = card.memory_bytes - card.usable_bytes if card else size_card_context()
    cc = _device_data()["compute_capability"].get(card.key) if card else None
    if cc is not None:
        by_major = _device_data()["cublas_workspace_bytes"]
        values["cublas_workspace"] = by_major[max((m for m in by_major if int(m) <= cc), key=int)]
    if gpus == 1:
        values["nccl_communicators"] = 0
    values.update({k: v for k, v in overrides if k in values})
    return values


def device_block(card: GPUSpec | None, gpus: int = 1, overrides: tuple = ()) -> dict[str, int]:
    """Each device term's bytes on a card for a job of ``gpus``.

    >>> from symvram.presets import load_card
    >>> block = device_block(load_card("a100-80g"))
    >>> block["cublas_workspaces"] == 2 * (8519680 + 2**20), block["nccl_buffers"]
    (True, 0)
    >>> device_block(load_card("h100-80g"), gpus=8)["nccl_buffers"] // 2**20   # 16 channels × 4 MiB
    64
    """
    fn = exact_function((), tuple(t.expr for t in DEVICE_TERMS))
    return {t.key: int(v) for t, v in zip(DEVICE_TERMS, fn(device_values(card, gpus, overrides)))}


def allocator_from_env(choice: str | None = None) -> str:
    """``--allocator``, else what ``PYTORCH_CUDA_ALLOC_CONF`` says, else the default allocator."""
    if choice is not None:
        if choice not in ALLOCATORS:
            raise UserError(f"--allocator {choice!r}: expected one of {', '.join(ALLOCATORS)}")
        return choice
    try:
        conf = AllocatorConfig.parse(os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
    except ValueError as e:
        raise UserError(str(e)) from None
    return "expandable" if conf.expandable_segments else "default"


def _config(allocator: str) -> AllocatorConfig:
    """The replay's settings: PYTORCH_CUDA_ALLOC_CONF's (max_split_size_mb, roundup_power2_divisions …)
    with expandable segments as ``allocator`` says."""
    try:
        conf = AllocatorConfig.parse(os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
    except ValueError as e:
        raise UserError(str(e)) from None
    return AllocatorConfig(allocator == "expandable", conf.max_split_size, conf.max_non_split_rounding,
                           conf.roundup_power2_divisions)


@lru_cache(maxsize=256)
def _sized_schedule(structure, layers: int, layer_order: tuple[str, ...] = ()):
    ledger = build_ledger(structure)
    schedule = ledger_schedule(ledger, layers, layer_order, tuple(count for _, count, _ in structure.arch.kinds))
    return schedule, exact_function(ledger.definitions, schedule.sizes)


def schedule_events(sc: Scenario, workspaces: tuple[int, ...] = ()) -> list[tuple]:
    """The ledger's schedule in bytes, the ``workspaces`` allocated (for good) after the parameters, as the
    first forward's first matmul does."""
    values = sc.values()
    order = sc.structure.arch.layer_order({k: int(v) for k, v in values.items()})
    schedule, fn = _sized_schedule(sc.structure, int(values["layers"]), order)
    sizes = [max(0, math.ceil(v)) for v in fn(values)]
    events = [(op, i, sizes[k] if k >= 0 else 0) for op, i, k in schedule.events]
    params = schedule.parameters
    return events[:params] + [("alloc", -1 - j, w) for j, w in enumerate(workspaces)] + events[params:]


def schedule_peaks(sc: Scenario) -> dict[str, dict[str, int]]:
    """The ledger's schedule alone (no workspaces: what a traced run's tensors are) replayed with each
    allocator: {allocator: {"allocated_peak", "reserved_peak"}}, to set beside ``validate``'s traced schedule."""
    events = schedule_events(sc)
    out = {}
    for name in ALLOCATORS:
        r = replay(events, _config(name))
        out[name] = {"allocated_peak": r.peak_allocated, "reserved_peak": r.peak_reserved}
    return out


@dataclass(frozen=True)
class CardMemory:
    """The three levels of one scenario on one card (bytes). ``reserved``: the replay's peak with each
    allocator on an unbounded card; ``on_card``: the peak where the card's limit made the allocator free
    cached blocks and retry (None: it ran out); ``allocator``: the one the answer follows; ``oom_at``: the
    event at which the card ran out (None: it fits); ``capacity``: what the allocator may reserve."""

    allocated: int
    schedule_allocated: int
    reserved: dict[str, int]
    block: dict[str, int]
    allocator: str
    capacity: int | None
    oom_at: dict[str, int | None]
    on_card: dict[str, int | None]

    @property
    def reserved_peak(self) -> int:
        """The reserved peak of the answer's allocator: on the card where it fits there, else unbounded."""
        return self.on_card[self.allocator] or self.reserved[self.allocator]

    @property
    def outside(self) -> int:
        """The device block's bytes outside the caching allocator (context, NCCL)."""
        return sum(v for t, v in zip(DEVICE_TERMS, self.block.values()) if not t.in_allocator)

    @property
    def device_peak(self) -> int:
        """What nvidia-smi shows at the peak: reserved + context + NCCL."""
        return self.reserved_peak + self.outside

    @property
    def fits(self) -> bool:
        return self.oom_at[self.allocator] is None

    @property
    def fragmentation(self) -> int:
        """Reserved beyond allocated: cached free blocks and the segments' slack."""
        return self.reserved_peak - self.schedule_allocated


def _events_on(sc: Scenario, card: GPUSpec | None, margin: int) -> tuple[list[tuple], dict, int | None]:
    block, values = device_block(card, sc.gpus, sc.overrides), device_values(card, sc.gpus, sc.overrides)
    per_thread = (int(values["cublas_workspace"]), int(values["cublaslt_workspace"]))
    events = schedule_events(sc, per_thread * int(values["cublas_threads"]))
    outside = sum(v for t, v in zip(DEVICE_TERMS, block.values()) if not t.in_allocator)
    return events, block, (card.memory_bytes - outside - margin if card else None)


def fits_on_card(sc: Scenario, card: GPUSpec, allocator: str | None = None, margin: int = 0) -> bool:
    """Whether two steps of ``sc`` run on ``card`` under the simulated allocator (one replay, stopped at an OOM).
    The schedule is a model of the step's allocations; the ledger's allocated peak is exact, and no allocator
    holds less than the live tensors, so that bounds the answer too (the schedule misses FSDP2's layer ends)."""
    events, _, capacity = _events_on(sc, card, margin)
    return evaluate(sc).peak <= capacity and replay(events, _config(allocator_from_env(allocator)), capacity).fits


def card_memory(sc: Scenario, card: GPUSpec | None = None, allocator: str | None = None, margin: int = 0,
                both: bool = True) -> CardMemory:
    """Replay the scenario's schedule with both allocators (``both``; else only ``allocator``); with a card,
    also against the memory it leaves the allocator (its memory less the context, NCCL's buffers and
    ``margin``)."""
    allocator = allocator_from_env(allocator)
    events, block, capacity = _events_on(sc, card, margin)
    reserved, oom_at, on_card = {}, {}, {}
    for name in sorted(ALLOCATORS if both else (allocator,), key=ALLOCATORS.index):
        unbounded = replay(events, _config(name))
        reserved[name], oom_at[name], on_card[name] = unbounded.peak_reserved, None, unbounded.peak_reserved
        allocated = unbounded.peak_allocated
        if capacity is not None and unbounded.peak_reserved > capacity:
            bounded = replay(events, _config(name), capacity)
            oom_at[name], on_card[name] = bounded.oom_at, bounded.peak_reserved if bounded.fits else None
    return CardMemory(evaluate(sc).peak, allocated, reserved, block, allocator, capacity, oom_at, on_card)
