"""When one card is not enough: for each strategy × method, the fewest GPUs whose per-GPU peak fits.

The per-GPU peak is the ledger's Max over moments with N (``gpus``) left free; every term is a
constant or a constant over N, so it is non-increasing in N and the smallest N that fits is found
on its lambdified function over 1 … max_gpus at once, then re-estimated exactly with ``evaluate``.
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
>>> from symvram.analysis.fit import load_card
>>> sc = Scenario.create("70b", grad_checkpointing=True)
>>> r = plan(sc, load_card("a100-80g"), methods=("qlora",), strategies=("ddp",))
>>> r.rows[0].gpus, r.rows[0].params_gpus
(1, 1)
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..errors import UserError
from ..evaluate import Breakdown, evaluate, grid_function
from ..ledger import build_ledger
from ..presets import GPUSpec, gpu_presets
from ..present.tables import host_bytes
from ..scenario import MAX_GPUS, METHODS, Scenario
from .fit import DEFAULT_HEADROOM, headroom_bytes

MAX_TP = 8  # tensor parallelism needs NVLink: it stays inside one node
TP_INTERCONNECTS = ("nvlink", "infinity-fabric")   # data/gpus.toml's `interconnect` fast enough for TP


def host_resident(bd: Breakdown) -> int:
    """Bytes one rank keeps in CPU memory under offload: the ledger's host terms less the foreach AdamW
    buffer, which DeepSpeed's CPU Adam (an in-place, tensor-by-tensor C++ kernel) never allocates."""
    led = bd.ledger
    temp = bd.terms["optimizer_temp"] if "optimizer_temp" in led.by_key and led.by_key["optimizer_temp"].block == "host" else 0
    return host_bytes(bd) - temp


def interconnect(card: GPUSpec) -> str | None:
    """The card's GPU-to-GPU link from ``data/gpus.toml`` (``nvlink``, ``pcie`` …); None for a card given
    as a size, whose link is unknown.

    >>> from symvram.analysis.fit import load_card
    >>> interconnect(load_card("rtx-4090")), interconnect(load_card("a100-80g")), interconnect(load_card("80GiB"))
    ('pcie', 'nvlink', None)
    """
    return gpu_presets().get(card.key, {}).get("interconnect")


def tensor_parallel_ok(card: GPUSpec) -> bool:
    """Tensor parallelism is offered unless the card is known to talk over PCIe only."""
    return interconnect(card) in TP_INTERCONNECTS + (None,)


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

    @property
    def fits(self) -> bool:
        return self.gpus is not None

    @property
    def host_total(self) -> int:
        """CPU memory the whole job needs for offloaded shards (each data-parallel rank's share)."""
        return host_resident(self.at) * self.at.scenario.gpus * self.tp


@dataclass(frozen=True)
class PlanResult:
    card: GPUSpec
    headroom: int
    max_gpus: int
    rows: tuple[PlanRow, ...]

    @property
    def budget(self) -> int:
        return self.card.usable_bytes - self.headroom

    def best(self, method: str, offload: bool | None = None) -> PlanRow | None:
        """Fewest GPUs for ``method`` (only offloading strategies, or none, when ``offload`` says so);
        ties go to the cheaper communication (earlier strategy)."""
        fitting = [r for r in self.rows if r.method == method and r.fits
                   and (offload is None or (r.strategy.offload != "none") == offload)]
        return min(fitting, key=lambda r: (r.gpus, STRATEGIES.index(r.strategy))) if fitting else None

    def __repr__(self) -> str:
        from ..present.display import plan_repr
        return plan_repr(self)

    def _repr_markdown_(self) -> str:
        from ..present.display import plan_markdown
        return plan_markdown(self)


def _first_fit(sc: Scenario, exprs_of, budget: int, top: int) -> int | None:
    """Smallest N in 1 … top with max(exprs(N)) ≤ budget, on the lambdified (non-increasing)
    expressions; each moment is lambdified alone (a SymPy Max over them is slow to build)."""
    ledger = build_ledger(sc.structure)
    ns = np.arange(1, top + 1)
    values = np.zeros(ns.shape)
    for expr in exprs_of(ledger):
        fn = grid_function(ledger, expr, ("gpus",), sc.values())
        values = np.maximum(values, np.broadcast_to(np.asarray(fn(ns), dtype=float), ns.shape))
    ok = np.nonzero(values <= budget)[0]
    return int(ns[ok[0]]) if len(ok) else None


def _moment_exprs(ledger):
    return [ledger.moment_expr(m) for m in ledger.moments]


def _params_expr(ledger):
    return [ledger.block_expr("base") + ledger.block_expr("trainable")]


def fewest_gpus(sc: Scenario, budget: int, top: int) -> tuple[int | None, Breakdown]:
    """Fewest data-parallel GPUs N ≤ top whose exact per-GPU peak fits ``budget``; the estimate there
    (or at ``top`` when none fits)."""
    n = _first_fit(sc, _moment_exprs, budget, top)
    if n is None:
        return None, evaluate(sc.with_changes(gpus=top))
    at = evaluate(sc.with_changes(gpus=n))
    while at.peak > budget and n < top:  # whole-byte rounding can move the boundary by one
        n += 1
        at = evaluate(sc.with_changes(gpus=n))
    while n > 1 and (below := evaluate(sc.with_changes(gpus=n - 1))).peak <= budget:
        n, at = n - 1, below
    return (n, at) if at.peak <= budget else (None, at)


def tp_degrees(sc: Scenario) -> list[int]:
    """Tensor-parallel degrees 2 … 8 that split the heads, KV heads and d_ff evenly."""
    dims = {**sc.model.dims, **dict(sc.overrides)}
    g = math.gcd(dims["heads"], dims["kv_heads"], dims["intermediate"])
    return [t for t in range(2, MAX_TP + 1) if g % t == 0]


def _row(sc: Scenario, method: str, st: Strategy, budget: int, max_gpus: int) -> PlanRow | None:
    try:
        base = sc.with_changes(method=method, zero=st.zero, offload=st.offload, tp=1, sequence_parallel=False,
                               gpus=1)
    except UserError:  # e.g. QLoRA with fp32 weights: that method does not apply to this recipe
        return None
    if not st.tensor_parallel:
        n, at = fewest_gpus(base, budget, max_gpus)
        return PlanRow(method, st, n, 1, at, _first_fit(base, _params_expr, budget, max_gpus))
    best, params = None, []
    for t in tp_degrees(base):
        shaped = base.with_changes(tp=t, sequence_parallel=True)
        n, at = fewest_gpus(shaped, budget, max(1, max_gpus // t))
        p = _first_fit(shaped, _params_expr, budget, max(1, max_gpus // t))
        if p is not None:
            params.append(p * t)
        row = PlanRow(method, st, None if n is None else n * t, t, at, None if p is None else p * t)
        if best is None or (row.fits, -(row.gpus or 0), -row.at.peak) > (best.fits, -(best.gpus or 0), -best.at.peak):
            best = row
    # the parameter side's own count is minimised over t too (not taken at the t whose whole peak fits)
    return None if best is None else dataclasses.replace(best, params_gpus=min(params, default=None))


def plan(sc: Scenario, gpu: GPUSpec, max_gpus: int = 64, headroom: int | str = DEFAULT_HEADROOM,
         methods: tuple[str, ...] | None = None, strategies: tuple[str, ...] | None = None) -> PlanResult:
    """Every strategy × method (``methods`` default: full, LoRA, QLoRA) on ``gpu`` cards."""
    if isinstance(max_gpus, bool) or not isinstance(max_gpus, int) or not 1 <= max_gpus <= MAX_GPUS:
        raise UserError(f"--max-gpus must be an integer from 1 to {MAX_GPUS}; got {max_gpus!r}")
    unknown = set(strategies or ()) - set(BY_KEY)
    if unknown:
        raise UserError(f"unknown strategy {', '.join(sorted(unknown))}; strategies are {', '.join(BY_KEY)}")
    room = headroom_bytes(headroom, gpu.usable_bytes)
    budget = gpu.usable_bytes - room
    rows = []
    for method in methods or METHODS:
        for st in STRATEGIES:
            if strategies and st.key not in strategies:
                continue
            if st.tensor_parallel and not tensor_parallel_ok(gpu):   # TP over PCIe: not a plan anyone runs
                continue
            row = _row(sc, method, st, budget, max_gpus)
            if row is not None:
                rows.append(row)
    return PlanResult(gpu, room, max_gpus, tuple(rows))


__all__ = ["plan", "interconnect", "tensor_parallel_ok", "fewest_gpus", "PlanResult", "PlanRow", "STRATEGIES", "Strategy"]
