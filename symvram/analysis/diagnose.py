"""OOM triage: which side is over, the probe that tells them apart on the real job, and the remedies
in the reference answer's order, each re-estimated from the ledger, stopping where the job fits.

Sides: the parameter side is what exists before the first token (base weights + the trainable triple:
gradients, optimizer states, master, adapters); the activation side is the rest of the peak (saved
activations and the step's temporaries). The probe — batch 1 and a short sequence on the real job —
keeps the parameter side whole and shrinks the other: still OOM means the parameters are bigger than
the ledger (targets, an fp32 master the framework keeps, optimizer precision); fits means activations.

Remedies, cumulative: the free ones first — those whose time price (symvram.timing: the predicted
step time per token on a card with peak figures, else matmul FLOPs per token) is at most
``FREE_PRICE`` % — then the priced ones, each group in the reference answer's order: max_seq_len from
the data's P95; gradient checkpointing (its price derived from the FLOPs ledger: one more forward);
batch 1 with gradient accumulation; optimizer precision (8-bit states, no fp32 master); QLoRA; only
then more cards (from ``plan``, for the job with the earlier fixes and its own method). Each remedy
carries its time price beside the bytes it saves.

With a measured peak, the unknown overhead (CUDA context the card's usable figure did not cover,
allocator rounding and fragmentation, library workspaces) is fitted as measured − estimated at the
measured settings and added to every predicted peak.

>>> from symvram.scenario import Scenario
>>> d = diagnose(Scenario.create("llama-3-8b", method="lora", batch=4, seq=4096), 24 * 2**30)
>>> d.side, [r.key for r in d.remedies]
('activation', ['batch1', 'precision', 'checkpointing'])
>>> [round(r.price) for r in d.remedies]       # % more time per token: batch 1 and 8-bit states are free
[0, 0, 43]
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError
from ..evaluate import Breakdown, evaluate
from ..presets import GPUSpec
from ..scenario import Scenario
from .fit import DEFAULT_HEADROOM, headroom_bytes
from .plan import PlanRow, plan

PROBE_SEQ = 512
FREE_PRICE = 1.0   # % of time per token: a remedy at or below this costs nothing worth naming


@dataclass(frozen=True)
class Remedy:
    """One step of the triage: the changes (cumulative with the earlier steps) and the estimate after."""

    key: str
    title: str
    changes: dict
    cost: str
    before: Breakdown
    after: Breakdown
    price: float | None = None     # % more time per token (negative: faster), see time_price
    price_basis: str = ""

    @property
    def saving(self) -> int:
        return self.before.peak - self.after.peak


@dataclass(frozen=True)
class Diagnosis:
    """``side``: fits | activation | parameter. ``overhead``: fitted from a measurement (0 without)."""

    estimate: Breakdown
    card: GPUSpec
    headroom: int
    parameter_bytes: int
    probe: Breakdown
    remedies: tuple[Remedy, ...]
    skipped: tuple[tuple[str, str], ...]
    cards: PlanRow | None
    overhead: int = 0
    measured: tuple[int, Breakdown] | None = None

    @property
    def budget(self) -> int:
        """What the ledger's peak may reach: usable memory − headroom − fitted overhead."""
        return self.card.usable_bytes - self.headroom - max(self.overhead, 0)

    @property
    def activation_bytes(self) -> int:
        return self.estimate.peak - self.parameter_bytes

    @property
    def side(self) -> str:
        if self.estimate.peak <= self.budget:
            return "fits"
        return "parameter" if self.parameter_bytes > self.budget else "activation"

    @property
    def fixed(self) -> bool:
        return bool(self.remedies) and self.remedies[-1].after.peak <= self.budget

    def __repr__(self) -> str:
        from ..present.display import diagnosis_repr
        return diagnosis_repr(self)

    def _repr_markdown_(self) -> str:
        from ..present.display import diagnosis_markdown
        return diagnosis_markdown(self)


def parameter_side(bd: Breakdown) -> int:
    """Base weights + the trainable triple on the GPU: what is there before the first token."""
    return bd.blocks["base"] + bd.blocks["trainable"]


def _candidates(sc: Scenario, p95_seq: int | None) -> list[tuple[str, str, dict, str] | tuple[str, str, None, str]]:
    """(key, title, changes or None, cost or why skipped) in the reference order."""
    out = []
    if p95_seq is None:
        out.append(("seq_p95", "max_seq_len from the data's P95", None,
                    "pass --p95-seq: the 95th percentile of your tokenized lengths; a default max_seq_len (often "
                    "4096) pads or keeps far more tokens than most samples have, and activations grow with it"))
    elif p95_seq < sc.seq:
        out.append(("seq_p95", f"max_seq_len {p95_seq} (the data's P95) instead of {sc.seq}", {"seq": p95_seq},
                    "the longest 5 % of samples are truncated (or packed/split)"))
    if not sc.grad_checkpointing:
        from ..timing import flops

        share = flops(sc).recompute_share_if_checkpointed
        out.append(("checkpointing", "gradient checkpointing", {"grad_checkpointing": True},
                    f"each layer's forward is recomputed in backward: +{100 * share:.0f} % matmul FLOPs for {sc.method}"))
    if sc.batch > 1:
        out.append(("batch1", f"batch 1 with gradient accumulation over {sc.batch} steps", {"batch": 1},
                    f"same effective batch ({sc.batch}); smaller kernels run less efficiently"))
    precision = {}
    if sc.state_dtype != "int8":
        precision["state_dtype"] = "int8"
    if sc.master == "fp32":
        precision["master"] = "none"
    if precision:
        out.append(("precision", "8-bit optimizer states" + (", no fp32 master" if "master" in precision else ""),
                    precision, "bitsandbytes 8-bit AdamW: a small accuracy risk; bf16 weights need no fp32 master"))
    if sc.method != "qlora":
        out.append(("qlora", "QLoRA (4-bit NF4 base, LoRA adapters)", {"method": "qlora"},
                    "dequantization makes steps slower" + ("; LoRA instead of full fine-tuning" if sc.method == "full" else "")))
    return out


def time_price(before: Scenario, after: Scenario, card: GPUSpec, mfu: float | None = None,
               interconnect: str | None = None) -> tuple[float, str]:
    """% more time per token that ``after`` takes than ``before``: the roofline's step time on a card with
    peak figures, else the matmul FLOPs per token (the card-independent part of it)."""
    from ..timing import flops, step_time

    try:
        a, b = step_time(before, card, mfu, interconnect), step_time(after, card, mfu, interconnect)
        return 100 * (a.tokens_per_second_per_gpu / b.tokens_per_second_per_gpu - 1), "step time"
    except UserError:
        from ..ledger.comm import build_comm

        per_token = [flops(x).per_step / (x.batch * x.seq) for x in (before, after)]
        basis = "matmul FLOPs per token"
        if "dequantize" in build_comm(after.structure).by_key and "dequantize" not in build_comm(before.structure).by_key:
            basis += "; it adds memory-bound work (dequantization), unpriced without a card's bandwidth"
        return 100 * (per_token[1] / per_token[0] - 1), basis


def _free(price: float, basis: str) -> bool:
    return price <= FREE_PRICE and "unpriced" not in basis


def diagnose(sc: Scenario, capacity: int | GPUSpec, headroom: int | str = DEFAULT_HEADROOM,
             p95_seq: int | None = None, measured_peak: int | None = None, measured_at: dict | None = None,
             max_gpus: int = 64, mfu: float | None = None, interconnect: str | None = None) -> Diagnosis:
    """Triage an OOM of ``sc`` on a card of ``capacity`` bytes (or a GPUSpec)."""
    card = capacity if isinstance(capacity, GPUSpec) else GPUSpec("capacity", f"{capacity:,} B card", capacity, capacity)
    room = headroom_bytes(headroom, card.usable_bytes)
    if p95_seq is not None and (isinstance(p95_seq, bool) or not isinstance(p95_seq, int) or p95_seq < 1):
        raise UserError(f"--p95-seq must be a positive integer; got {p95_seq!r}")
    est = evaluate(sc)
    overhead, measured = 0, None
    if measured_peak is not None:
        if measured_peak <= 0:
            raise UserError(f"--measured-peak must be positive; got {measured_peak!r}")
        at = evaluate(sc.with_changes(**(measured_at or {})))
        overhead, measured = measured_peak - at.peak, (measured_peak, at)
    probe = evaluate(sc.with_changes(batch=1, seq=min(PROBE_SEQ, sc.seq)))
    partial = Diagnosis(est, card, room, parameter_side(est), probe, (), (), None, overhead, measured)
    budget = partial.budget
    remedies, skipped = [], []
    current, changes = est, {}
    if current.peak > budget:
        pending = _candidates(sc, p95_seq)
        skipped += [(title, cost) for _, title, change, cost in pending if change is None]
        pending = [c for c in pending if c[2] is not None]
        while pending and current.peak > budget:
            # the first free remedy from here (time price ≤ FREE_PRICE %), else the first in the reference order
            tried = []
            for cand in pending:
                key, title, change, cost = cand
                try:
                    after = evaluate(sc.with_changes(**changes, **change))
                except UserError as e:  # e.g. no master dropped for fp16 weights
                    tried.append((cand, None, str(e)))
                    continue
                price, basis = time_price(current.scenario, after.scenario, card, mfu, interconnect)
                tried.append((cand, (after, price, basis), ""))
                if _free(price, basis):
                    break
            for cand, _, why in tried:
                if why:
                    skipped.append((cand[1], why))
                    pending.remove(cand)
            usable = [(c, r) for c, r, why in tried if not why]
            if not usable:
                break
            cand, (after, price, basis) = next(((c, r) for c, r in usable if _free(r[1], r[2])), usable[0])
            pending.remove(cand)
            key, title, change, cost = cand
            changes = {**changes, **change}
            remedies.append(Remedy(key, title, dict(changes), cost, current, after, price, basis))
            current = after
    cards = None
    if current.peak > budget:
        kept = sc.with_changes(**{k: v for k, v in changes.items() if k != "method"})  # the fixes, same method
        result = plan(kept, GPUSpec(card.key, card.name, card.memory_bytes, card.usable_bytes - max(overhead, 0)),
                      max_gpus=max_gpus, headroom=room, methods=(sc.method,))
        cards = result.best(sc.method, offload=False) or result.best(sc.method)
    return Diagnosis(est, card, room, partial.parameter_bytes, probe, tuple(remedies), tuple(skipped), cards,
                     overhead, measured)


__all__ = ["diagnose", "Diagnosis", "Remedy", "parameter_side"]
