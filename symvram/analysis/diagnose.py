"""OOM triage: which side is over, the probe that tells them apart on the real job, and the remedies
in the reference answer's order, each re-estimated from the ledger, stopping where the job fits.

Sides: the parameter side is what exists before the first token (base weights + the trainable triple:
gradients, optimizer states, master, adapters); the activation side is the rest of the peak (saved
activations and the step's temporaries). The probe — batch 1 and a short sequence on the real job —
keeps the parameter side whole and shrinks the other: still OOM means the parameters are bigger than
the ledger (targets, an fp32 master the framework keeps, optimizer precision); fits means activations.

Remedies, cumulative, in order: max_seq_len from the data's P95; gradient checkpointing (≈ 20–30 %
slower); batch 1 with gradient accumulation; optimizer precision (8-bit states, no fp32 master);
QLoRA; only then more cards (from ``plan``, for the job with the earlier fixes and its own method).

With a measured peak, the unknown overhead (CUDA context the card's usable figure did not cover,
allocator rounding and fragmentation, library workspaces) is fitted as measured − estimated at the
measured settings and added to every predicted peak.

>>> from symvram.scenario import Scenario
>>> d = diagnose(Scenario.create("llama-3-8b", method="lora", batch=4, seq=4096), 24 * 2**30)
>>> d.side, [r.key for r in d.remedies]
('activation', ['checkpointing', 'batch1', 'precision'])
>>> d.remedies[-1].after.peak <= d.budget < d.remedies[-2].after.peak
True
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


@dataclass(frozen=True)
class Remedy:
    """One step of the triage: the changes (cumulative with the earlier steps) and the estimate after."""

    key: str
    title: str
    changes: dict
    cost: str
    before: Breakdown
    after: Breakdown

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
        out.append(("checkpointing", "gradient checkpointing", {"grad_checkpointing": True},
                    "≈ 20–30 % slower: each layer's forward is recomputed in backward"))
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


def diagnose(sc: Scenario, capacity: int | GPUSpec, headroom: int | str = DEFAULT_HEADROOM,
             p95_seq: int | None = None, measured_peak: int | None = None, measured_at: dict | None = None,
             max_gpus: int = 64) -> Diagnosis:
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
        for key, title, change, cost in _candidates(sc, p95_seq):
            if change is None:
                skipped.append((title, cost))
                continue
            try:
                after = evaluate(sc.with_changes(**changes, **change))
            except UserError as e:  # e.g. no master dropped for fp16 weights
                skipped.append((title, str(e)))
                continue
            changes = {**changes, **change}
            remedies.append(Remedy(key, title, dict(changes), cost, current, after))
            current = after
            if after.peak <= budget:
                break
    cards = None
    if current.peak > budget:
        kept = sc.with_changes(**{k: v for k, v in changes.items() if k != "method"})  # the fixes, same method
        result = plan(kept, GPUSpec(card.key, card.name, card.memory_bytes, card.usable_bytes - max(overhead, 0)),
                      max_gpus=max_gpus, headroom=room, methods=(sc.method,))
        cards = result.best(sc.method, offload=False) or result.best(sc.method)
    return Diagnosis(est, card, room, partial.parameter_bytes, probe, tuple(remedies), tuple(skipped), cards,
                     overhead, measured)


__all__ = ["diagnose", "Diagnosis", "Remedy", "parameter_side"]
