"""When one card is not enough: for each strategy × method, the fewest GPUs whose per-GPU peak fits.

The per-GPU peak is the ledger's Max over moments with N (``gpus``) left free; every term is a
constant or a constant over N, so it is non-increasing in N and the smallest N that fits is found
in closed form (each moment is A + B/N: two exact estimates give A and B), then re-estimated exactly
with ``evaluate``; with an allocator asked for, N grows until one rank's allocation schedule replays on the
card (symvram.card_memory.fits_on_card).
Strategies are listed in order of communication cost (cheapest first):

===========================  ============================================================
DDP                          every GPU holds everything; gradients all-reduced once a step
ZeRO-1 / ZeRO-2              optimizer states (and gradients) split; same traffic as DDP
ZeRO-3 / FSDP FULL_SHARD     parameters split too: all-gathered in forward and in backward
TP + SP (t ≤ 8) × ZeRO-1     Megatron tensor parallel inside a node, activations all-reduced
ZeRO-3 + optimizer offload   optimizer on the CPU: gradients and parameters cross PCIe
ZeRO-3 + parameter offload   parameters live on the CPU and cross PCIe every forward/backward
===========================  ============================================================

>>> from symvram.scenario import Scenario
>>> from symvram.presets import load_card
>>> sc = Scenario.create("70b", grad_checkpointing=True)
>>> r = plan(sc, load_card("a100-80g"), methods=("qlora",), strategies=("ddp",))
>>> r.rows[0].gpus, r.rows[0].params_gpus
(1, 1)
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..card_memory import allocator_from_env, device_block, fits_on_card
from ..errors import UserError
from ..evaluate import Breakdown, evaluate
from ..presets import GPUSpec, gpu_presets
from ..scenario import MAX_GPUS, METHODS, Scenario
from .fit import DEFAULT_HEADROOM, headroom_bytes
from .host import host_bytes

MAX_TP = 8  # tensor parallelism needs NVLink: it stays inside one node
TP_INTERCONNECTS = ("nvlink", "infinity-fabric")   # data/gpus.toml's `interconnect` fast enough for TP


def interconnect(card: GPUSpec, override: str | None = None) -> str | None:
    """The kind of the card's GPU-to-GPU link (``nvlink``, ``infinity-fabric``, ``pcie``, ``network``): the
    ``kind`` in ``data/interconnects.toml`` of its ``interconnect`` in ``data/gpus.toml`` (or of ``override``,
    --interconnect); None for a card given as a size, whose link is unknown.

    >>> from symvram.presets import load_card
    >>> interconnect(load_card("rtx-4090")), interconnect(load_card("a100-80g")), interconnect(load_card("80GiB"))
    ('pcie', 'nvlink', None)
    """
    from ..timing import interconnects

    link = override or gpu_presets().get(card.key, {}).get("interconnect")
    return interconnects()[link]["kind"] if link else None


def tensor_parallel_ok(card: GPUSpec, override: str | None = None) -> bool:
    """Tensor parallelism is offered unless the card is known to talk over PCIe (or a network) only."""
    return interconnect(card, override) in TP_INTERCONNECTS + (None,)


@dataclass(frozen=True)
class Strategy:
    key: str
    name: str
    zero: int
    offload: str
    tensor_parallel: bool
    reason: str


STRATEGIES = (
    Strategy("ddp", "DDP", 0, "none", False,
             "cheapest: one all-reduce of the gradients per step, but every GPU holds every byte"),
    Strategy("zero1", "ZeRO-1", 1, "none", False,
             "same traffic as DDP (reduce-scatter gradients, all-gather updated weights); splits optimizer states"),
    Strategy("zero2", "ZeRO-2 / FSDP SHARD_GRAD_OP", 2, "none", False,
             "same traffic as DDP; gradients are reduce-scattered into shards as well"),
    Strategy("zero3", "ZeRO-3 / FSDP FULL_SHARD", 3, "none", False,
             "all-gathers every layer's parameters in forward and again in backward: half again DDP's traffic"),
    Strategy("tp", "TP + SP (t ≤ 8) × ZeRO-1", 1, "none", True,
             "all-reduces activations inside every layer, forward and backward: needs NVLink within one node"),
    Strategy("zero3_offload", "ZeRO-3 + optimizer offload", 3, "optimizer", False,
             "ZeRO-3's traffic plus gradients down and parameters up over PCIe; the optimizer step runs on the CPU"),
    Strategy("zero3_param_offload", "ZeRO-3 + parameter offload", 3, "optimizer+params", False,
             "slowest: parameters also cross PCIe in every forward and backward"),
)
BY_KEY = {s.key: s for s in STRATEGIES}


@dataclass(frozen=True)
class PlanRow:
    """One strategy × method. ``gpus`` is the fewest total GPUs that fit (None: not within max_gpus);
    ``at`` the exact estimate there (or at the most GPUs tried); ``params_gpus`` the fewest GPUs for
    the parameter side alone (weights + trainable triple), the count the interview arithmetic gives."""

    method: str
    strategy: Strategy
    gpus: int | None
    tp: int
    at: Breakdown
    params_gpus: int | None
    time: object = None   # symvram.timing.StepTime at ``at`` (fitting rows on a card with figures)

    @property
    def fits(self) -> bool:
        return self.gpus is not None

    @property
    def tokens_per_second(self) -> float | None:
        return self.time.tokens_per_second if self.time is not None else None

    @property
    def tokens_per_second_per_gpu(self) -> float | None:
        return self.time.tokens_per_second_per_gpu if self.time is not None else None

    @property
    def host_total(self) -> int:
        """CPU memory the whole job needs for offloaded shards (each data-parallel rank's share)."""
        return host_bytes(self.at) * self.at.scenario.gpus * self.tp


def plan_budget(card: GPUSpec, headroom: int) -> int:
    """What each GPU's tensors may reach in a plan: usable memory − headroom − the device block of a
    multi-GPU job (symvram.card_memory: cuBLAS workspaces, one communicator's NCCL buffers); the
    allocator's cached blocks beyond it are fit's and diagnose's replay to judge."""
    block = device_block(card, gpus=2)
    return card.usable_bytes - headroom - block["cublas_workspaces"] - block["nccl_buffers"]


@dataclass(frozen=True)
class PlanResult:
    card: GPUSpec
    headroom: int
    max_gpus: int
    rows: tuple[PlanRow, ...]
    interconnect: str | None = None   # --interconnect: the link step times and TP eligibility assume
    allocator: str | None = None      # --allocator: each count also replayed through that caching allocator

    @property
    def budget(self) -> int:
        """Per GPU: the card less the context, the headroom, and the device block every multi-GPU row holds
        (the cuBLAS workspaces inside the allocator, one NCCL communicator's buffers beside it)."""
        return plan_budget(self.card, self.headroom)

    def best(self, method: str, offload: bool | None = None) -> PlanRow | None:
        """Fewest GPUs for ``method`` (only offloading strategies, or none, when ``offload`` says so);
        ties go to the cheaper communication (earlier strategy)."""
        fitting = [r for r in self.rows if r.method == method and r.fits
                   and (offload is None or (r.strategy.offload != "none") == offload)]
        return min(fitting, key=lambda r: (r.gpus, STRATEGIES.index(r.strategy))) if fitting else None

    @property
    def ranked(self) -> tuple[PlanRow, ...]:
        """The setups that fit, fastest first by predicted tokens/s per GPU (the throughput of the cards
        paid for; the total grows with the count), then the rest in strategy order."""
        timed = sorted((r for r in self.rows if r.fits and r.time is not None),
                       key=lambda r: (-r.tokens_per_second_per_gpu, r.gpus))
        return tuple(timed) + tuple(r for r in self.rows if r not in timed)

    def fastest(self, method: str | None = None) -> PlanRow | None:
        rows = [r for r in self.ranked if r.time is not None and (method is None or r.method == method)]
        return rows[0] if rows else None

    def __repr__(self) -> str:
        from ..rendering import render
        return render(self, "repr")

    def _repr_markdown_(self) -> str:
        from ..rendering import render
        return render(self, "markdown")


EDGE = 1 << 20  # closed-form values this close to the budget are checked exactly (whole-byte rounding)


def _on(sc: Scenario, gpus: int) -> Scenario:
    """``sc`` on ``gpus`` data-parallel GPUs. The count is a number of the ledger, not part of its structure,
    and 1 ≤ gpus ≤ --max-gpus is checked once by ``plan``: no ``with_changes`` re-checking every setting.

    >>> _on(Scenario.create("7b"), 4) == Scenario.create("7b", gpus=4)
    True
    """
    on = dataclasses.replace(sc, gpus=gpus)
    on.__dict__["structure"] = sc.structure  # the cached_property, kept: the same structure, other numbers
    return on


def _ends(sc: Scenario) -> tuple[Breakdown, Breakdown]:
    """The exact estimates at N = 1 and N = 2 data-parallel GPUs."""
    return evaluate(_on(sc, 1)), evaluate(_on(sc, 2))


def _closed_form(pairs) -> list[tuple[int, int]]:
    """(A, B) of each per-GPU quantity A + B/N from its exact values at N = 1 and 2 (v1 = A + B,
    v2 = A + B/2): every term is a constant or a constant over N."""
    return [(2 * v2 - v1, 2 * (v1 - v2)) for v1, v2 in pairs]


def _first_fit(forms, budget: int, top: int) -> int | None:
    """Smallest N in 1 … top with every A + B/N ≤ budget: N ≥ B / (budget − A)."""
    n = 1
    for a, b in forms:
        if a + b <= budget:
            continue
        if a >= budget:
            return None
        n = max(n, -(-b // (budget - a)))
    return n if n <= top else None


def _near(forms, n: int, budget: int) -> bool:
    """Whether the closed form at N = n is within whole-byte rounding of the budget."""
    return n >= 1 and abs(max(a + b / n for a, b in forms) - budget) <= EDGE


def _params(bd: Breakdown) -> int:
    return bd.blocks["base"] + bd.blocks["trainable"]


def _params_gpus(sc: Scenario, ends, budget: int, top: int) -> int | None:
    """Fewest N whose parameter side (weights + trainable triple) fits: the closed form, checked exactly
    where whole-byte rounding could move it by one."""
    forms = _closed_form([(_params(ends[0]), _params(ends[1]))])
    n = _first_fit(forms, budget, top)
    if n is None or not (_near(forms, n, budget) or _near(forms, n - 1, budget)):
        return n
    while n < top and _params(evaluate(_on(sc, n))) > budget:
        n += 1
    while n > 1 and _params(evaluate(_on(sc, n - 1))) <= budget:
        n -= 1
    return n if _params(evaluate(_on(sc, n))) <= budget else None


def fewest_gpus(sc: Scenario, budget: int, top: int, ends=None, card: GPUSpec | None = None,
                margin: int = 0, allocator: str | None = None) -> tuple[int | None, Breakdown]:
    """Fewest data-parallel GPUs N ≤ top whose exact per-GPU peak fits ``budget`` and, on ``card``, whose
    rank's allocation schedule replays two steps in the card's memory (symvram.card_memory.fits_on_card: the
    caching allocator's segments, modelled, not measured); the estimate there (or at ``top`` when none fits)."""
    b1, b2 = ends or _ends(sc)
    forms = _closed_form([(b1.moments[k], b2.moments[k]) for k in b1.moments])
    n = _first_fit(forms, budget, top)
    if n is None:
        return None, evaluate(_on(sc, top))
    known = {1: b1, 2: b2}

    def at_n(k: int) -> Breakdown:
        if k not in known:
            known[k] = evaluate(_on(sc, k))
        return known[k]

    at = at_n(n)
    while at.peak > budget and n < top:  # whole-byte rounding can move the boundary by one
        n += 1
        at = at_n(n)
    if at.peak <= budget and _near(forms, n - 1, budget):
        while n > 1 and (below := at_n(n - 1)).peak <= budget:
            n, at = n - 1, below
    if at.peak > budget:
        return None, at
    while card is not None and not fits_on_card(at.scenario, card, allocator, margin):
        if n == top:
            return None, at
        n += 1
        at = at_n(n)
    return n, at


def tp_degrees(sc: Scenario) -> list[int]:
    """Tensor-parallel degrees 2 … 8 that split the heads, KV heads and d_ff (an expert's too) evenly: the widths
    Scenario's check asks to divide."""
    dims = {**sc.model.dims, **dict(sc.overrides)}
    g = math.gcd(*(dims[n] for n in ("heads", "kv_heads", "intermediate", "moe_intermediate") if n in dims))
    return [t for t in range(2, MAX_TP + 1) if g % t == 0]


def _row(sc: Scenario, method: str, st: Strategy, budget: int, max_gpus: int, card: GPUSpec | None = None,
         margin: int = 0, allocator: str | None = None) -> PlanRow | None:
    try:
        base = sc.with_changes(method=method, zero=st.zero, offload=st.offload, tp=1, sequence_parallel=False,
                               gpus=1)
    except UserError:  # e.g. QLoRA with fp32 weights: that method does not apply to this recipe
        return None
    if not st.tensor_parallel:
        ends = _ends(base)
        n, at = fewest_gpus(base, budget, max_gpus, ends, card, margin, allocator)
        return PlanRow(method, st, n, 1, at, _params_gpus(base, ends, budget, max_gpus))
    rows, params = [], []
    for t in tp_degrees(base):   # ranked on the tensors; the allocator replays only the best (the slow part)
        shaped = base.with_changes(tp=t, sequence_parallel=True)
        ends = _ends(shaped)
        n, at = fewest_gpus(shaped, budget, max(1, max_gpus // t), ends)
        p = _params_gpus(shaped, ends, budget, max(1, max_gpus // t))
        if p is not None:
            params.append(p * t)
        rows.append((PlanRow(method, st, None if n is None else n * t, t, at, None if p is None else p * t), shaped, ends))
    if not rows:
        return None
    rows.sort(key=lambda r: (r[0].fits, -(r[0].gpus or 0), -r[0].at.peak), reverse=True)
    best = rows[0][0]
    for row, shaped, ends in rows:
        if not row.fits or card is None:
            break
        n, at = fewest_gpus(shaped, budget, max(1, max_gpus // row.tp), ends, card, margin, allocator)
        if n is not None:
            best = dataclasses.replace(row, gpus=n * row.tp, at=at)
            break
        best = dataclasses.replace(row, gpus=None, at=at)
    # the parameter side's own count is minimised over t too (not taken at the t whose whole peak fits)
    return dataclasses.replace(best, params_gpus=min(params, default=None))


def _timed(row: PlanRow, gpu: GPUSpec, mfu, interconnect) -> PlanRow:
    """The row with its step time at the fewest GPUs (none on a card without peak figures, unless a
    time was asked for with --mfu or --interconnect: then the card's missing figure is an error)."""
    from dataclasses import replace

    from ..timing import step_time

    if not row.fits:
        return row
    try:
        return replace(row, time=step_time(row.at.scenario, gpu, mfu, interconnect))
    except UserError:
        if mfu is not None or interconnect is not None:
            raise
        return row


def plan(sc: Scenario, gpu: GPUSpec, max_gpus: int = 64, headroom: int | str = DEFAULT_HEADROOM,
         methods: tuple[str, ...] | None = None, strategies: tuple[str, ...] | None = None,
         mfu: float | None = None, interconnect: str | None = None, step_times: bool = True,
         allocator: str | None = None) -> PlanResult:
    """Every strategy × method (``methods`` default: full, LoRA, QLoRA) on ``gpu`` cards, each setup that
    fits with its predicted step time (symvram.timing) at ``mfu`` over ``interconnect``; ``step_times=False``
    leaves them out (for a reader of the GPU counts alone). With ``allocator`` (default | expandable) a count
    fits only once one rank's allocation schedule also replays two steps on the card (the caching allocator's
    segments: modelled, not measured; a replay per row, so asked for)."""
    if isinstance(max_gpus, bool) or not isinstance(max_gpus, int) or not 1 <= max_gpus <= MAX_GPUS:
        raise UserError(f"--max-gpus must be an integer from 1 to {MAX_GPUS}; got {max_gpus!r}")
    unknown = set(strategies or ()) - set(BY_KEY)
    if unknown:
        raise UserError(f"unknown strategy {', '.join(sorted(unknown))}; strategies are {', '.join(BY_KEY)}")
    room = headroom_bytes(headroom, gpu.usable_bytes)
    budget = plan_budget(gpu, room)
    if allocator is not None:
        allocator_from_env(allocator)   # a bad name: one line, exit 2
    rows = []
    for method in methods or METHODS:
        for st in STRATEGIES:
            if strategies and st.key not in strategies:
                continue
            if st.tensor_parallel and not tensor_parallel_ok(gpu, interconnect):   # TP over PCIe: not a plan anyone runs
                continue
            row = _row(sc, method, st, budget, max_gpus, gpu if allocator else None, room, allocator)
            if row is not None:
                rows.append(_timed(row, gpu, mfu, interconnect) if step_times else row)
    return PlanResult(gpu, room, max_gpus, tuple(rows), interconnect, allocator)


__all__ = ["plan", "interconnect", "tensor_parallel_ok", "fewest_gpus", "PlanResult", "PlanRow", "STRATEGIES", "Strategy"]
