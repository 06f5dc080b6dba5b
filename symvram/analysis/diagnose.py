"""OOM triage, the one the CLI, ``explain``, the notebooks and the page all use.

1. **Where the peak is.** The peak is one moment of the step (the ledger's ``moments``: forward and
   loss, loss backward, the layers' backward, the optimizer step …). Its live bytes are split into
   what actually lives there: the *parameter side* (weights, gradients, optimizer states, master,
   adapters), the *optimizer-step temporaries* (foreach AdamW's ``sqrt(v)`` buffer), the *loss*
   (vocabulary-sized logits and their fp32 gradients), the *saved activations*, and the *backward
   temporaries* (one layer's recomputed tensors and MLP gradients). The cause is the parameter side
   when it alone is over the budget, otherwise the largest of the other parts.
2. **The probe** (batch 1 and a short sequence on the real job) keeps the parameter side and the
   optimizer step whole and shrinks the rest; it tells a ledger that is wrong about parameters from
   one that is right.
3. **Remedies for that moment**, cheapest first — free ones (fused AdamW, a chunked cross-entropy,
   SDPA instead of eager attention, ``max_seq_len`` from the data's P95), then gradient checkpointing,
   batch 1 with accumulation, the precision of the optimizer and of QLoRA's non-quantized weights (PEFT's k-bit
   preparation upcasts them to fp32), the optimizer in backward, the optimizer on the CPU (DeepSpeed
   ZeRO-Offload: the same update, its time price the PCIe traffic and the CPU's update), LoRA/QLoRA, and only
   then more cards (from ``plan``,
   TP only over NVLink). A remedy is offered only when the part it shrinks lives at the current peak
   and, while the parameter side alone is over, only if it shrinks the parameter side. Each is
   re-estimated on top of the previous ones; the triage stops at the first that fits. Each carries its
   **time price** (``time_price``: the predicted step time per token on a card with peak figures, else the
   matmul FLOPs per token), and checkpointing's cost is derived from the FLOPs ledger, not quoted.

With a measured peak, the unknown overhead (CUDA context the card's usable figure did not cover,
allocator rounding and fragmentation, library workspaces) is fitted as measured − estimated at the
measured settings and added to every predicted peak.

>>> from symvram.scenario import Scenario
>>> d = diagnose(Scenario.create("7b", method="full"), 80 * 2**30)
>>> d.cause, d.moment, d.proposals[0].key
('optimizer', 'optimizer_step', 'fused_adamw')
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..card_memory import CardMemory, card_memory
from ..errors import UserError
from ..evaluate import Breakdown, evaluate
from ..ledger.terms import Term
from ..presets import GPUSpec
from ..scenario import BNB_OPTIMIZERS, Scenario
from ..stacks import ZERO_OFFLOAD, stacks
from .fit import DEFAULT_HEADROOM, headroom_bytes
from .plan import PlanRow, plan, tensor_parallel_ok

PROBE_SEQ = 512
PARTS = ("parameter", "optimizer", "loss", "activation", "backward", "generation")
PART_NAMES = {"parameter": "parameter side (weights, gradients, optimizer states, master)",
              "optimizer": "optimizer-step temporaries", "loss": "loss (vocabulary-sized logits and gradients)",
              "activation": "saved activations", "backward": "backward temporaries (one layer, MLP gradients)",
              "generation": "generation (GRPO: the KV cache and one decoding step)"}
TIERS = ("free", "recompute", "throughput", "precision", "method", "more cards")


def part_of(term: Term) -> str:
    """Which part of a moment ``term`` belongs to: its role's triage part (``ledger.terms.ROLES``).

    >>> from symvram.ledger.build import build_ledger
    >>> from symvram.ledger.structure import Structure
    >>> [part_of(t) for t in build_ledger(Structure()).terms][:3]
    ['parameter', 'parameter', 'parameter']
    """
    return term.info.triage


def moment_parts(bd: Breakdown, moment: str | None = None) -> dict[str, dict[str, int]]:
    """part → {term key: bytes} of the terms live at ``moment`` (default: the peak's)."""
    m = next(x for x in bd.ledger.moments if x.key == (moment or bd.peak_moment))
    out: dict[str, dict[str, int]] = {p: {} for p in PARTS}
    for key in m.terms:
        out[part_of(bd.ledger.by_key[key])][key] = bd.terms[key]
    return out


def part_bytes(bd: Breakdown, moment: str | None = None) -> dict[str, int]:
    return {p: sum(v.values()) for p, v in moment_parts(bd, moment).items()}


def parameter_side(bd: Breakdown) -> int:
    """Base weights + the trainable triple on the GPU: what is there at the optimizer step whatever the batch."""
    return bd.blocks["base"] + bd.blocks["trainable"]


@dataclass(frozen=True)
class Remedy:
    """One step: the changes (cumulative with the earlier steps) and the estimate after. A remedy the
    engine cannot model yet (``after`` None) carries ``bound``: the bytes of its part at the moment,
    the most it can save; the steps after it are estimated without it."""

    key: str
    title: str
    tier: str
    changes: dict
    cost: str
    before: Breakdown
    after: Breakdown | None
    bound: int = 0
    price: float | None = None     # % more time per token (negative: faster); see time_price
    price_basis: str = ""

    @property
    def modelled(self) -> bool:
        return self.after is not None

    @property
    def saving(self) -> int:
        return self.before.peak - self.after.peak if self.after is not None else self.bound


@dataclass(frozen=True)
class Diagnosis:
    """``cause``: fits | parameter | optimizer | loss | activation | backward. ``overhead``: fitted
    from a measurement (0 without). ``proposals``: every remedy in order, modelled or not;
    ``remedies``: the modelled ones, each on top of the previous."""

    estimate: Breakdown
    card: GPUSpec
    headroom: int
    parameter_bytes: int
    probe: Breakdown
    proposals: tuple[Remedy, ...]
    skipped: tuple[tuple[str, str], ...]
    cards: PlanRow | None
    overhead: int = 0
    measured: tuple[int, Breakdown] | None = None
    parts: dict = field(default_factory=dict)
    memory: CardMemory | None = None   # the caching-allocator replay on the card (symvram.card_memory)

    @property
    def remedies(self) -> tuple[Remedy, ...]:
        return tuple(r for r in self.proposals if r.modelled)

    @property
    def budget(self) -> int:
        """What the ledger's (allocated) peak may reach: what the caching allocator may reserve (the card less
        the context, NCCL's buffers, headroom and fitted overhead) less the cuBLAS workspaces it holds. The
        allocator's cached blocks on top are the replay's to judge (``cause``: fragmentation)."""
        return self.memory.capacity - self.memory.block["cublas_workspaces"]

    @property
    def expandable_saving(self) -> int:
        """Reserved bytes that ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` saves (0: none, or in use)."""
        m = self.memory
        if m is None or m.allocator == "expandable":
            return 0
        return max(m.reserved["default"] - m.reserved["expandable"], 0)

    @property
    def moment(self) -> str:
        return self.estimate.peak_moment

    @property
    def moment_label(self) -> str:
        return next(m.label for m in self.estimate.ledger.moments if m.key == self.moment)

    @property
    def activation_bytes(self) -> int:
        """The peak less the parameter side: what the batch, the sequence and the step's temporaries add."""
        return self.estimate.peak - self.parameter_bytes

    @property
    def cause(self) -> str:
        if self.memory is not None:
            if self.memory.fits:
                return "fits"
            if self.memory.schedule_allocated <= self.memory.capacity and self.expandable_saving:
                return "fragmentation"   # the tensors fit; the allocator's cached, split blocks do not
        elif self.estimate.peak <= self.budget:
            return "fits"
        if self.parameter_bytes > self.budget:
            return "parameter"
        sizes = part_bytes(self.estimate)
        return max(PARTS[1:], key=lambda p: sizes[p])

    side = cause   # the name earlier releases used

    @property
    def fixed(self) -> bool:
        """Whether the remedies make it fit: expandable segments for fragmentation, else the last remedy."""
        if self.cause == "fragmentation" and self.memory.oom_at["expandable"] is None:
            return True
        return bool(self.remedies) and self.remedies[-1].after.peak <= self.budget

    @property
    def changes_method(self) -> bool:
        return any("method" in r.changes for r in self.remedies)

    def __repr__(self) -> str:
        from ..rendering import render
        return render(self, "repr")

    def _repr_markdown_(self) -> str:
        from ..rendering import render
        return render(self, "markdown")


@dataclass(frozen=True)
class _Candidate:
    key: str
    title: str
    tier: str
    parts: tuple[str, ...]      # the parts of a moment it shrinks
    changes: dict | None        # None: the engine cannot model it (yet)
    cost: str


def _precision(sc: Scenario) -> dict:
    """8-bit states (bitsandbytes' 8-bit optimizers update in one fused kernel per tensor: no foreach
    temporary, so the estimate says fused) and no fp32 master copy."""
    out = {}
    if sc.state_dtype != "int8" and sc.optimizer in ("adamw", "lion", "sgd-momentum"):
        out["state_dtype"] = "int8"
        if sc.optimizer == "adamw":
            out["optimizer_impl"] = "fused"
    if sc.master == "fp32":
        out["master"] = "none"
    return out




def _offloadable(sc: Scenario) -> bool:
    """Whether the optimizer can move to the CPU: Adam(W) states (8-bit ones go back to fp32; a step in backward goes
    back to one after it), not there yet, no tensor parallelism, a 16-bit or LoRA model (QLoRA's 4-bit base under DeepSpeed is not modelled), under DeepSpeed
    or under plain data parallelism (FSDP2's CPUOffloadPolicy moves the parameters too)."""
    return (sc.offload == "none" and sc.tp == 1 and sc.method != "qlora"
            and sc.optimizer in ("adamw", *BNB_OPTIMIZERS)
            and (sc.zero == 0 or stacks()[sc.stack].get("zero_impl") == "deepspeed"))


def liger_applies(sc: Scenario) -> bool:
    """Liger's layer kernels are modelled for this model (Scenario's own check), outside the interview stack (the
    reference answer's arithmetic, whose remedies are its own)."""
    if sc.stack == "interview":
        return False
    try:
        sc.with_changes(liger=True)
    except UserError:
        return False
    return True


def _candidates(sc: Scenario, p95_seq: int | None) -> list[_Candidate]:
    """Every remedy that applies to the current settings ``sc``, in the order of their cost."""
    out = []
    if sc.optimizer == "adamw" and sc.optimizer_impl != "fused":
        out.append(_Candidate("fused_adamw", "fused AdamW (torch.optim.AdamW(..., fused=True))", "free", ("optimizer",),
                              {"optimizer_impl": "fused"},
                              f"none: the same update in one CUDA kernel, without the {sc.optimizer_impl} "
                              "implementation's temporary"))
    if sc.loss_impl == "torch":  # the others already keep no vocabulary-sized tensors whole
        out.append(_Candidate("chunked_loss", "a chunked / fused cross-entropy (e.g. Liger's fused linear "
                              "cross-entropy)", "free", ("loss",), {"loss_impl": "liger"},
                              "none in memory or accuracy: the loss is computed over chunks of tokens, so the "
                              "vocabulary-sized fp32 logits and their gradients never exist whole; a kernel library"))
    if not sc.liger and liger_applies(sc):
        out.append(_Candidate("liger", "Liger's layer kernels", "free", ("activation",), {"liger": True},
                              "a kernel library (Triton; modelled, not measured)"))
    if sc.objective == "dpo" and not sc.precompute_ref:
        out.append(_Candidate("precompute_ref", "precomputed reference log-probs (DPOConfig("
                              "precompute_ref_log_probs=True))", "free", ("parameter", "loss"),
                              {"precompute_ref": True},
                              "one no-grad pass of the reference over the dataset before training; then no reference "
                              "model" * (sc.reference == "copy") + " and no reference forward per step (not with "
                              "sync_ref_model)"))
    if sc.attention == "eager":
        out.append(_Candidate("sdpa", "SDPA / FlashAttention instead of eager attention", "free", ("activation",),
                              {"attention": "sdpa"}, "none where the model supports it (attn_implementation=\"sdpa\"): "
                              "the b·heads·s² attention scores are never stored"))
    if p95_seq is not None and p95_seq < sc.seq:
        out.append(_Candidate("seq_p95", f"max_seq_len {p95_seq} (the data's P95) instead of {sc.seq}", "free",
                              ("activation", "loss", "backward"), {"seq": p95_seq},
                              "the longest 5 % of samples are truncated (or packed/split)"))
    if not sc.grad_checkpointing:
        from ..timing import flops

        share = flops(sc).recompute_share_if_checkpointed
        out.append(_Candidate("checkpointing", "gradient checkpointing", "recompute", ("activation",),
                              {"grad_checkpointing": True},
                              f"each layer's forward is recomputed in backward: +{100 * share:.0f} % matmul FLOPs "
                              f"for {sc.method}"))
    elif sc.checkpoint_every > 1:   # selective: every k-th layer checkpointed, the others save their activations
        from ..timing import flops

        share = flops(sc.with_changes(checkpoint_every=1)).per_step / flops(sc).per_step - 1
        out.append(_Candidate("checkpointing", f"gradient checkpointing of every layer (instead of one in "
                              f"{sc.checkpoint_every})", "recompute", ("activation",), {"checkpoint_every": 1},
                              f"the other layers' forwards are recomputed in backward too: +{100 * share:.0f} % matmul "
                              f"FLOPs for {sc.method}"))
    elif sc.checkpoint_ops:   # op-level: each layer keeps every second matmul's output and SDPA's
        from ..timing import flops

        share = flops(sc.with_changes(checkpoint_ops=False)).per_step / flops(sc).per_step - 1
        out.append(_Candidate("checkpointing", "gradient checkpointing of whole layers (instead of torchtitan's "
                              "op-level policy)", "recompute", ("activation",), {"checkpoint_ops": False},
                              f"each layer's whole forward is recomputed in backward: +{100 * share:.0f} % matmul "
                              f"FLOPs for {sc.method}"))
    if (sc.stack != "interview" and sc.grad_checkpointing and not sc.offload_activations
            and sc.checkpoint_impl == "non-reentrant" and not sc.checkpoint_ops
            and sc.checkpoint_every == 1 and sc.gpus == 1 and sc.objective == "sft" and not sc.dora
            and not (sc.modules_to_save or sc.head_targets)):
        out.append(_Candidate("offload_activations", "activation offloading (" + (
                                  "torchtune's enable_activation_offloading" if sc.structure.model_code == "torchtune"
                                  else "TRL's activation_offloading") + ")",
                              "throughput", ("activation",), {"offload_activations": True},
                              "each layer's checkpointed input crosses PCIe twice per step (to pinned host memory in "
                              "the forward, back for its recompute), overlapped with compute on a second stream; "
                              "the host needs those bytes pinned (modelled, not measured: the copies' overlap)"))
    if (sc.stack == "unsloth" and sc.grad_checkpointing and sc.checkpoint_impl != "unsloth"
            and not sc.offload_activations and sc.checkpoint_every == 1 and not sc.checkpoint_ops and sc.gpus == 1
            and sc.objective == "sft"):
        out.append(_Candidate("unsloth_checkpointing", "Unsloth's offloaded gradient checkpointing",
                              "throughput", ("activation",), {"checkpoint_impl": "unsloth"},
                              "every layer input but the last (and the leaf embedding output) crosses PCIe twice per "
                              "micro-batch on a side stream; two staging buffers of one input stay on the card, the "
                              "inputs in pinned host memory (modelled, not measured)"))
    if sc.batch > 1:
        out.append(_Candidate("batch1", f"batch 1, with {sc.batch}× the gradient accumulation steps", "throughput",
                              ("activation", "loss", "backward"), {"batch": 1},
                              "the same effective batch (micro-batch × accumulation steps × GPUs); smaller kernels "
                              "run less efficiently"))
    if sc.kbit_prepared:   # PEFT's k-bit preparation upcasts every non-quantized weight (embeddings, lm_head) to fp32
        out.append(_Candidate("kbit_prep", "no fp32 upcast of the non-quantized weights (skip PEFT's "
                              "prepare_model_for_kbit_training)", "precision", ("parameter", "activation", "loss"),
                              {"kbit_prep": "none", "grad_checkpointing": sc.grad_checkpointing,
                               "checkpoint_impl": sc.checkpoint_impl},
                              "the embeddings, lm_head and norms stay 16-bit (and so does the residual stream): a "
                              "small numerical risk; call model.gradient_checkpointing_enable() yourself, which the "
                              "preparation did (axolotl: embeddings_skip_upcast: true)"))
    precision = _precision(sc)
    if precision:
        words = [w for k, w in (("state_dtype", "8-bit optimizer states"), ("master", "no fp32 master copy"))
                 if k in precision]
        out.append(_Candidate("precision", ", ".join(words), "precision", ("parameter", "optimizer"), precision,
                              "bitsandbytes 8-bit AdamW (AdamW8bit, a fused kernel): a small accuracy risk"
                              + ("; without the master, bf16 rounds away updates below ≈ 2^-8 of a weight"
                                 if "master" in precision else "")))
    if not sc.optimizer_in_backward and sc.optimizer in ("adamw", "sgd", "sgd-momentum") and sc.gpus == 1:
        out.append(_Candidate("in_backward", "optimizer in backward (one optimizer per parameter, stepped by its "
                              "post-accumulate-grad hook)", "method", ("parameter", "optimizer"),
                              {"optimizer_in_backward": True},
                              "no gradient accumulation (the effective batch is the micro-batch) and no clipping by "
                              "the global gradient norm: each parameter is stepped alone as its gradient is made "
                              "(torch's register_post_accumulate_grad_hook recipe; torchtune optimizer_in_bwd: True); "
                              "no extra FLOPs"))
    if _offloadable(sc):
        out.append(_Candidate("offload", "the optimizer on the CPU (DeepSpeed ZeRO-Offload: zero_optimization "
                              f"stage {sc.zero or 2}, offload_optimizer device cpu, DeepSpeed's CPU Adam)", "method",
                              ("parameter", "optimizer"), {**ZERO_OFFLOAD, "zero": sc.zero or 2},
                              "the fp32 master, gradients and Adam moments live in CPU memory: every step sends the "
                              "gradients over PCIe and takes the weights back, and the CPU updates them (the time "
                              "price; modelled, not measured)"
                              + ("; DeepSpeed's bf16 engine instead of the current stack" if sc.stack != "deepspeed"
                                 else "")
                              + ("; fp32 moments instead of the 8-bit ones above (DeepSpeed's CPU Adam takes no "
                                 "bitsandbytes states)" if sc.state_dtype == "int8" else "")
                              + ("; one step after the backward instead of the optimizer in backward (the "
                                 "accumulation and clipping come back)" if sc.optimizer_in_backward else "")))
    if sc.dora:
        out.append(_Candidate("no_dora", "plain LoRA instead of DoRA", "method", ("parameter", "activation", "backward"),
                              {"dora": False}, "no magnitude vector: a different fine-tune; DoRA's per-forward weight "
                              "norm (its weight-sized temporaries and extra matmuls) goes too"))
    if sc.modules_to_save:
        out.append(_Candidate("no_modules_to_save", f"no trainable copies of {', '.join(sc.modules_to_save)} "
                              "(modules_to_save)", "method", ("parameter", "optimizer", "activation"),
                              {"modules_to_save": ()}, "those modules stay frozen: rows of tokens added to the "
                              "vocabulary keep their initial values (PEFT's trainable_token_indices trains those rows "
                              "alone)"))
    if sc.head_targets:
        out.append(_Candidate("no_head_lora", f"no LoRA on {', '.join(sc.head_targets)}", "method",
                              ("parameter", "optimizer", "activation"), {"targets": sc.targets, "head_targets": ()},
                              "the head modules stay frozen; the layers keep their adapters"))
    if sc.method == "full":
        out.append(_Candidate("lora", "LoRA (frozen base, adapters only)", "method", ("parameter", "optimizer"),
                              {"method": "lora"}, "adapters instead of every weight: a different fine-tune"))
    if sc.method != "qlora":
        out.append(_Candidate("qlora", "QLoRA (4-bit NF4 base, LoRA adapters)", "method", ("parameter",),
                              {"method": "qlora"}, "dequantization makes steps slower; the base is 4-bit"
                              + ("; adapters instead of full fine-tuning" if sc.method == "full" else "")))
    return out


def triage_steps(est: Breakdown, budget: int, p95_seq: int | None) -> tuple[list[Remedy], list[tuple[str, str]]]:
    """The remedies from ``est`` until the peak fits ``budget`` (or none is left): at each step the
    cheapest tier first (among the free ones the largest saving); each applies to the current peak's moment."""
    sc = est.scenario
    proposals, skipped, done = [], [], set()
    current, changes = est, {}
    while current.peak > budget:
        sizes = part_bytes(current)
        params_over = parameter_side(current) > budget
        if p95_seq is None and "seq_p95" not in done and not params_over and (
                sizes["activation"] + sizes["loss"] + sizes["backward"]) * 10 >= current.peak:
            done.add("seq_p95")
            skipped.append(("max_seq_len from the data's P95",
                            "pass --p95-seq: the 95th percentile of your tokenized lengths; a default max_seq_len "
                            "(often 4096) pads or keeps far more tokens than most samples have"))
        floor = min(current.peak - budget, current.peak // 50)   # a remedy must save at least this much (2 %)
        options = []
        for c in _candidates(current.scenario, p95_seq):
            if c.key in done or not any(sizes[p] for p in c.parts):
                continue
            if params_over and "parameter" not in c.parts:
                continue   # nothing but the parameter side can bring a parameter side under the budget
            if c.key in ("lora", "qlora") and changes.get("offload") == "optimizer" and sc.offload == "none":
                c = replace(c, changes={**c.changes, "offload": "none"},   # an adapter's optimizer is small
                            cost=c.cost + "; the optimizer back on the GPU (the adapters' states are small)")
            after = None
            if c.changes is not None:
                try:
                    after = evaluate(sc.with_changes(**{**changes, **c.changes}))
                except UserError:   # e.g. fp16 weights cannot drop the fp32 master: keep the rest of the remedy
                    kept = {k: v for k, v in c.changes.items() if k != "master"}
                    if c.key != "precision" or not kept or kept == c.changes:
                        continue
                    try:
                        after = evaluate(sc.with_changes(**{**changes, **kept}))
                    except UserError:
                        continue
                    c = _Candidate(c.key, "8-bit optimizer states", c.tier, c.parts, kept,
                                   c.cost.split("; without the master")[0])
                saving = current.peak - after.peak
            else:
                saving = sum(sizes[p] for p in c.parts)
            if saving < max(floor, 1):
                continue
            # free remedies by what they save; the costly ones in their order of cost (LoRA before QLoRA)
            options.append((TIERS.index(c.tier), -saving if c.tier == "free" else 0, len(options), c, after))
        if not options:
            break
        _, _, _, c, after = min(options)
        done.add(c.key)
        if after is None:
            proposals.append(Remedy(c.key, c.title, c.tier, {}, c.cost, current, None,
                                    sum(sizes[p] for p in c.parts)))
            continue
        changes = {**changes, **c.changes}
        proposals.append(Remedy(c.key, c.title, c.tier, dict(changes), c.cost, current, after))
        current = after
    return proposals, skipped


def time_price(before: Scenario, after: Scenario, card: GPUSpec, mfu: float | None = None,
               interconnect: str | None = None) -> tuple[float, str]:
    """% more time per token that ``after`` takes than ``before``: the roofline's step time (symvram.timing)
    on a card with peak figures, else the matmul FLOPs per token (the card-independent part of it)."""
    from ..ledger.comm import build_comm
    from ..timing import flops, step_time

    try:
        a, b = step_time(before, card, mfu, interconnect), step_time(after, card, mfu, interconnect)
        return 100 * (a.tokens_per_second_per_gpu / b.tokens_per_second_per_gpu - 1), "step time"
    except UserError:
        per_token = [flops(x).per_step / (x.batch * x.seq) for x in (before, after)]
        basis = "matmul FLOPs per token"
        added = build_comm(after.structure).by_key.keys() - build_comm(before.structure).by_key.keys()
        if "dequantize" in added:
            basis += "; it adds memory-bound work (dequantization), unpriced without a card's bandwidth"
        if "cpu_optimizer_update" in added:
            basis += ("; it adds PCIe traffic and the CPU's optimizer update to every step, unpriced without a card's "
                      "figures: --tflops and --hbm-gbps, or a named card")
        return 100 * (per_token[1] / per_token[0] - 1), basis


def _priced(r: Remedy, card: GPUSpec, mfu, interconnect) -> Remedy:
    if not r.modelled:
        return r
    price, basis = time_price(r.before.scenario, r.after.scenario, card, mfu, interconnect)
    return replace(r, price=price, price_basis=basis)


def diagnose(sc: Scenario, capacity: int | GPUSpec, headroom: int | str = DEFAULT_HEADROOM,
             p95_seq: int | None = None, measured_peak: int | None = None, measured_at: dict | None = None,
             max_gpus: int = 64, mfu: float | None = None, interconnect: str | None = None,
             allocator: str | None = None) -> Diagnosis:
    """Triage an OOM of ``sc`` on a card of ``capacity`` bytes (or a GPUSpec); "fits" is the simulated caching
    allocator's answer (``allocator``: default | expandable, else PYTORCH_CUDA_ALLOC_CONF's)."""
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
    memory = card_memory(sc, card, allocator, room + max(overhead, 0))
    budget = memory.capacity - memory.block["cublas_workspaces"]
    proposals, skipped = triage_steps(est, budget, p95_seq)
    proposals = [_priced(r, card, mfu, interconnect) for r in proposals]
    modelled = [r for r in proposals if r.modelled]
    last = modelled[-1].after if modelled else est
    cards = None
    if last.peak > budget or any("method" in r.changes for r in modelled):
        offloaded = {*ZERO_OFFLOAD, "zero"} if any(r.key == "offload" for r in modelled) else set()
        kept = {k: v for r in modelled for k, v in r.changes.items()   # the fixes, same method (in backward:
                if k not in ("method", "optimizer_in_backward", *offloaded)}   # one GPU only; plan offloads itself)
        result = plan(sc.with_changes(**kept), GPUSpec(card.key, card.name, card.memory_bytes,
                                                       card.usable_bytes - max(overhead, 0)),
                      max_gpus=max_gpus, headroom=room, methods=(sc.method,))
        cards = result.best(sc.method, offload=False) or result.best(sc.method)
    return Diagnosis(est, card, room, parameter_side(est), probe, tuple(proposals), tuple(skipped), cards,
                     overhead, measured, moment_parts(est), memory)


__all__ = ["diagnose", "time_price", "Diagnosis", "Remedy", "parameter_side", "moment_parts", "part_bytes", "part_of", "PARTS",
           "PART_NAMES", "tensor_parallel_ok"]
