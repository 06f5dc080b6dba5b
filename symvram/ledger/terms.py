"""Terms, their roles, moments and the ledger that holds them.

A ``Term`` is one line of a ledger: a SymPy expression over registry symbols, its **role** (what the
tensor is: a weight, a gradient, a saved activation …), its **place** (device, host, paged), its
**lifetime** (the phases of the step it is alive in), its LaTeX name and a one-line reason. A
``Moment`` is an instant of the training step (end of forward, start of the loss backward, optimizer
step …) whose live bytes are a sum of terms; the peak is the largest moment.

What a role means is written once, in ``ROLES``: the block it is reported in, the ZeRO stage that
divides it, how tensor parallelism splits it, what CPU offload does to it, its triage part, its
category as torch's ``MemTracker`` measures it and its lifetime. Sharding, offload, the moments,
the triage, validate's comparison and the page all read that table (like the categories torch's
``torch/distributed/_tools/mem_tracker.py`` gives every tensor, ``_MemRefType``, and the states a
module moves through, ``_ModState``). A new kind of term is one new row.

>>> ROLES[Role.OPTIMIZER_STATE].zero_stage, ROLES[Role.OPTIMIZER_STATE].block
(1, 'trainable')
>>> [p.name for p in ROLES[Role.GRADIENT].lifetime]
['BACKWARD_END', 'OPTIMIZER_STEP']
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, IntEnum
from functools import cached_property

import sympy as sp

from .dimensions import check

BLOCKS = ("base", "trainable", "activations")


class Phase(IntEnum):
    """The phases of one training step, in program order: a term's lifetime is the phases it is alive in, a
    moment is an instant of one phase. The recompute phases exist under activation checkpointing; a layer's
    backward temporaries are made anew in every layer's backward (alive in both layer phases, not between)."""

    PREFILL = -2                # GRPO: generation's first forward over the prompts (no grad), before the step
    DECODE = -1                 # GRPO: generation's last decoding step, its KV cache at full length
    FIRST_LAYER_FORWARD = 0     # FSDP2: the first layer's all-gather in forward
    FORWARD = 1                 # the decoder layers' forward (the last layer's, at its DoRA weight norm)
    LOSS = 2                    # the lm_head and the loss
    REFERENCE_FORWARD = 3       # a preference objective's reference forward (no grad), after the policy's
    LOSS_BACKWARD = 4           # the start of the loss backward
    HEAD_BACKWARD = 5           # lm_head's backward, its weight gradient made (optimizer in backward: stepped)
    FINAL_NORM_BACKWARD = 6     # the final norm's backward
    LAST_LAYER_RECOMPUTE = 7    # checkpointing: the last layer's forward run again
    LAST_LAYER_BACKWARD = 8     # the last layer's MLP backward
    LAYER_END = 9               # FSDP2: a layer's input-norm backward, its gradients unsharded
    FIRST_LAYER_RECOMPUTE = 10  # checkpointing: the first layer's forward run again
    FIRST_LAYER_BACKWARD = 11   # the first layer's MLP backward
    BACKWARD_END = 12           # every gradient made
    OPTIMIZER_STEP = 13         # optimizer.step()


def span(first: Phase, last: Phase) -> tuple[Phase, ...]:
    """The phases from ``first`` to ``last``, both included: a tensor made in ``first`` and freed after ``last``.

    >>> [p.name for p in span(Phase.BACKWARD_END, Phase.OPTIMIZER_STEP)]
    ['BACKWARD_END', 'OPTIMIZER_STEP']
    """
    return tuple(p for p in Phase if first <= p <= last)


WHOLE_STEP = span(Phase.PREFILL, Phase.OPTIMIZER_STEP)            # GRPO's generation included
TRAINING_STEP = span(Phase.FIRST_LAYER_FORWARD, Phase.OPTIMIZER_STEP)   # forward, backward, optimizer step


class Place(str, Enum):
    """Where a term's bytes are: on the GPU (in its peak), in CPU memory (offloaded) or in CUDA unified memory
    (paged: outside torch's allocator). Host and paged terms are reported in their own block."""

    DEVICE = "device"
    HOST = "host"
    PAGED = "paged"


class Role(str, Enum):
    """What a term is (its row of ``ROLES`` says what follows from that)."""

    WEIGHT = "weight"                                  # a base weight (frozen under LoRA), packed or not
    BUFFER = "buffer"                                  # a module buffer (rotary inv_freq …)
    ADAPTER = "adapter"                                # LoRA's A and B (and DoRA's magnitude)
    TRAINABLE_COPY = "trainable copy"                  # PEFT modules_to_save: a trainable copy of a module
    MASTER = "master copy"                             # the fp32 master the optimizer updates
    GRADIENT = "gradient"                              # every trainable weight's gradient
    GRADIENTS_SO_FAR = "gradients so far"              # the gradients made before a moment of the backward
    EARLY_GRADIENT = "early gradient"                  # a gradient the loss backward makes (a trainable lm_head)
    OPTIMIZER_STATE = "optimizer state"                # the optimizer's per-element states (m, v …)
    STEP_COUNT = "step count"                          # the optimizer's 0-d step tensors, one per parameter tensor
    OPTIMIZER_STEP_TEMPORARY = "optimizer-step temporary"  # what optimizer.step() allocates and frees
    SAVED_ACTIVATION = "saved activation"              # what the forward saves for backward
    LOSS_ACTIVATION = "loss activation"                # what the loss saves for its backward (freed after it)
    STEP_INPUT = "step input"                          # the batch's ids and the shared RoPE tables: the whole step
    STAGING_BUFFER = "staging buffer"                  # a device buffer a library keeps between steps (Unsloth's)
    RECOMPUTED_ACTIVATION = "recomputed activation"    # one layer's saved tensors, rebuilt (or still saved)
    FORWARD_TEMPORARY = "forward temporary"            # what one forward op holds and frees (DoRA's weight norm)
    EXPERTS_TEMPORARY = "experts temporary"            # what the last layer's dense experts hold in forward (Llama 4)
    LORA_FORWARD_TEMPORARY = "LoRA forward temporary"  # the last layer's LoRA down projection's forward locals
    LAYER_WORKING_SET = "layer working set"            # what one sub-block of a layer's forward makes and frees
    HEAD_WORKING_SET = "head working set"              # what the model head's forward makes and frees (LoRA on lm_head)
    RECOMPUTE_TEMPORARY = "recompute temporary"        # what one op of a checkpointed layer's recompute holds
    LOSS_TEMPORARY = "loss temporary"                  # the logits while the loss is computed
    REFERENCE_TEMPORARY = "reference temporary"        # what a reference model's no-grad forward holds (DPO)
    LOSS_BACKWARD_TEMPORARY = "loss backward temporary"  # the loss backward's gradients
    GENERATION_CACHE = "generation cache"              # GRPO: the KV cache transformers' generate builds (no grad)
    GENERATION_TEMPORARY = "generation temporary"      # GRPO: what one generation forward or decoding step holds
    BACKWARD_TEMPORARY = "backward temporary"          # a backward op's gradients and scratch
    EMBEDDING_GRADIENT = "embedding gradient"          # the gradient reaching the embedding, whole on every rank
    GATHERED_WEIGHT = "gathered weight"                # ZeRO-3: a unit's parameters all-gathered
    UNSHARDED_GRADIENT = "unsharded gradient"          # ZeRO-3: a unit's gradients before their reduce-scatter
    COMMUNICATION_BUFFER = "communication buffer"      # a collective's input or output buffer
    LAYER_END = "layer end"                            # FSDP2: the bytes a layer's backward end adds up (mixed)
    FORWARD_FLOPS = "forward FLOPs"                    # matmul FLOPs of the forward
    BACKWARD_FLOPS = "backward FLOPs"                  # … of the backward
    RECOMPUTE_FLOPS = "recompute FLOPs"                # … of checkpointing's recompute
    NETWORK_TRAFFIC = "network traffic"                # bytes a step moves between GPUs
    HOST_TRAFFIC = "host traffic"                      # … between GPU and CPU (offload)
    HBM_TRAFFIC = "HBM traffic"                        # … through GPU memory beyond the matmuls
    CPU_TRAFFIC = "CPU memory traffic"                 # … through host memory (the offloaded optimizer's update)


STAGE_NAMES = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}   # the names of RoleInfo.zero_stage's stages


@dataclass(frozen=True)
class RoleInfo:
    """What a role means for the ledger.

    ``block``: where it is reported (base | trainable | activations | transient; a FLOPs term's phase, a
    traffic term's link). ``unit``: B or FLOP. ``zero_stage``: the lowest ZeRO stage that divides it over the N
    data-parallel ranks (None: never). ``tp``: how tensor parallelism splits it — ``parameters`` (per-rank
    parameter counts, heads, d_ff, V), ``activations`` (heads, d_ff, V; sequence parallelism splits the rest
    along the sequence), ``replicated`` (whole on every rank), None (born per rank). ``offload``: what CPU offload
    does — ``optimizer`` (moved to the host by any offload), ``params`` (moved by optimizer+params), ``dropped``
    (a view of gradients that offload keeps on the host), None (stays). ``triage``: its part of a moment
    (analysis.diagnose.PARTS). ``measured``: its category in torch's MemTracker (validate.measure.BREAKDOWN_KEYS).
    ``lifetime``: the phases it is alive in, unless the term says otherwise.
    """

    block: str
    unit: str = "B"
    zero_stage: int | None = None
    tp: str | None = "activations"
    offload: str | None = None
    triage: str | None = None
    measured: str | None = None
    lifetime: tuple[Phase, ...] = ()


_P = Phase
LAYER_BACKWARDS = (_P.LAST_LAYER_BACKWARD, _P.FIRST_LAYER_BACKWARD)   # made anew in each layer's backward
ROLES: dict[Role, RoleInfo] = {
    Role.WEIGHT: RoleInfo("base", zero_stage=3, tp="parameters", offload="params", triage="parameter",
                          measured="params", lifetime=WHOLE_STEP),
    Role.BUFFER: RoleInfo("base", tp="parameters", triage="parameter", measured="buffers", lifetime=WHOLE_STEP),
    Role.ADAPTER: RoleInfo("trainable", zero_stage=3, tp="parameters", offload="params", triage="parameter",
                           measured="params", lifetime=WHOLE_STEP),
    Role.TRAINABLE_COPY: RoleInfo("trainable", zero_stage=3, tp="parameters", offload="params", triage="parameter",
                                  measured="params", lifetime=WHOLE_STEP),
    Role.MASTER: RoleInfo("trainable", zero_stage=1, tp="parameters", offload="optimizer", triage="parameter",
                          measured="params", lifetime=WHOLE_STEP),
    Role.GRADIENT: RoleInfo("trainable", zero_stage=2, tp="parameters", offload="optimizer", triage="parameter",
                            measured="grads", lifetime=span(_P.BACKWARD_END, _P.OPTIMIZER_STEP)),
    Role.GRADIENTS_SO_FAR: RoleInfo("transient", zero_stage=2, tp="parameters", offload="dropped",
                                    triage="parameter", measured="grads",
                                    lifetime=span(_P.FIRST_LAYER_RECOMPUTE, _P.FIRST_LAYER_BACKWARD)),
    # made by the loss backward, reduce-scattered with the root unit at the end of backward (not divided)
    Role.EARLY_GRADIENT: RoleInfo("transient", tp="parameters", triage="parameter", measured="grads",
                                  lifetime=span(_P.FINAL_NORM_BACKWARD, _P.LAST_LAYER_BACKWARD)),
    Role.OPTIMIZER_STATE: RoleInfo("trainable", zero_stage=1, tp="parameters", offload="optimizer",
                                   triage="parameter", measured="optimizer_state", lifetime=WHOLE_STEP),
    # one per parameter tensor: a rank keeps one per (sharded) tensor, so ZeRO does not divide them
    Role.STEP_COUNT: RoleInfo("trainable", tp="parameters", offload="optimizer", triage="parameter",
                              measured="optimizer_state", lifetime=WHOLE_STEP),
    Role.OPTIMIZER_STEP_TEMPORARY: RoleInfo("transient", zero_stage=1, tp="parameters", offload="optimizer",
                                            triage="optimizer", measured="optimizer_step_temp",
                                            lifetime=(_P.OPTIMIZER_STEP,)),
    Role.SAVED_ACTIVATION: RoleInfo("activations", triage="activation", measured="activations",
                                    lifetime=span(_P.FORWARD, _P.LAST_LAYER_BACKWARD)),
    Role.LOSS_ACTIVATION: RoleInfo("activations", triage="loss", measured="activations",
                                   lifetime=span(_P.LOSS, _P.LOSS_BACKWARD)),
    Role.STEP_INPUT: RoleInfo("activations", tp="replicated", triage="activation", measured="inputs_other",
                              lifetime=TRAINING_STEP),
    # allocated once and resized, never freed while training, generation included (unsloth_zoo's offloaded
    # checkpointer's staging buffers)
    Role.STAGING_BUFFER: RoleInfo("activations", tp=None, triage="activation", measured="activations",
                                  lifetime=WHOLE_STEP),
    Role.RECOMPUTED_ACTIVATION: RoleInfo("transient", triage="backward", measured="activations",
                                         lifetime=(_P.FIRST_LAYER_BACKWARD,)),
    Role.FORWARD_TEMPORARY: RoleInfo("transient", triage="backward", measured="activations",
                                     lifetime=(_P.FORWARD,)),
    Role.EXPERTS_TEMPORARY: RoleInfo("transient", triage="activation", measured="activations",
                                     lifetime=(_P.FORWARD,)),
    Role.LORA_FORWARD_TEMPORARY: RoleInfo("transient", triage="activation", measured="activations",
                                          lifetime=(_P.FORWARD,)),
    # below every moment (the ledger's peaks do not change); the caching allocator's segments follow them:
    # the schedule makes and frees each sub-block's set in every layer's forward and recompute
    Role.LAYER_WORKING_SET: RoleInfo("transient", triage="activation", measured="activations"),
    Role.HEAD_WORKING_SET: RoleInfo("transient", triage="loss", measured="activations"),
    # made in backward (torch's MemTracker counts what a recompute makes as backward temporaries)
    Role.RECOMPUTE_TEMPORARY: RoleInfo("transient", triage="backward", measured="backward_temp",
                                       lifetime=(_P.LAST_LAYER_RECOMPUTE,)),
    Role.LOSS_TEMPORARY: RoleInfo("transient", triage="loss", measured="activations", lifetime=(_P.LOSS,)),
    Role.REFERENCE_TEMPORARY: RoleInfo("transient", triage="loss", measured="activations",
                                       lifetime=(_P.REFERENCE_FORWARD,)),
    Role.LOSS_BACKWARD_TEMPORARY: RoleInfo("transient", triage="loss", measured="backward_temp",
                                           lifetime=(_P.LOSS_BACKWARD,)),
    Role.GENERATION_CACHE: RoleInfo("transient", triage="generation", measured="activations",
                                    lifetime=(_P.PREFILL, _P.DECODE)),
    Role.GENERATION_TEMPORARY: RoleInfo("transient", triage="generation", measured="activations",
                                        lifetime=(_P.DECODE,)),
    Role.BACKWARD_TEMPORARY: RoleInfo("transient", triage="backward", measured="backward_temp",
                                      lifetime=LAYER_BACKWARDS),
    Role.EMBEDDING_GRADIENT: RoleInfo("transient", tp="replicated", triage="backward", measured="backward_temp",
                                      lifetime=(_P.BACKWARD_END,)),
    # ZeRO's own buffers, born per rank (torch's FSDPMemTracker has categories for them, MemTracker none)
    Role.GATHERED_WEIGHT: RoleInfo("transient", tp=None, triage="parameter"),
    Role.UNSHARDED_GRADIENT: RoleInfo("transient", tp=None, triage="parameter"),
    Role.COMMUNICATION_BUFFER: RoleInfo("transient", tp=None, triage="parameter"),
    # i·A_saved of the layers below, the sharded gradients above and the buffers: mostly the parameter side
    Role.LAYER_END: RoleInfo("transient", tp=None, triage="parameter", lifetime=(_P.LAYER_END,)),
    Role.FORWARD_FLOPS: RoleInfo("forward", unit="FLOP", tp=None),
    Role.BACKWARD_FLOPS: RoleInfo("backward", unit="FLOP", tp=None),
    Role.RECOMPUTE_FLOPS: RoleInfo("recompute", unit="FLOP", tp=None),
    Role.NETWORK_TRAFFIC: RoleInfo("network", tp=None),
    Role.HOST_TRAFFIC: RoleInfo("host", tp=None),
    Role.HBM_TRAFFIC: RoleInfo("hbm", tp=None),
    Role.CPU_TRAFFIC: RoleInfo("cpu", tp=None),
}
# the persistent parameter side, optimizer states and gradients: the first groups of every moment, in this order
PARAMETERS = (Role.WEIGHT, Role.BUFFER, Role.ADAPTER, Role.TRAINABLE_COPY, Role.MASTER)
STATES = (Role.OPTIMIZER_STATE, Role.STEP_COUNT)
GRADIENTS = (Role.GRADIENT, Role.GRADIENTS_SO_FAR, Role.EARLY_GRADIENT)


@dataclass(frozen=True)
class Term:
    """One term: its expression (bytes, or FLOPs for a FLOPs term), its role, where it is and when it lives.

    >>> from symvram.symbols import sym
    >>> t = Term("grads", Role.GRADIENT, sym("P_train") * sym("bytes_grad"), r"M_{grad}", "one gradient per trainable weight")
    >>> t.expr, t.block
    (P_train*bytes_grad, 'trainable')
    """

    key: str
    role: Role
    expr: sp.Expr
    label: str
    why: str
    source: str = ""
    place: Place = Place.DEVICE
    lifetime: tuple[Phase, ...] | None = None   # None: the role's (ROLES); (): alive in no moment
    # the tensors it is made of, (how many, one tensor's bytes), where its expression's monomials are not: a
    # constant times a shape (TRL's [min(T, 4096), 32768] tile is one tensor, not 32768), a length that is a
    # difference (s − p positions), the larger of two working sets (Max); () : each monomial a tensor
    # (ledger.schedule.pieces). A size with the factor L is that many tensors in every layer.
    tensors: tuple[tuple[int, sp.Expr], ...] = ()
    # the rows each of its tensors holds per example (ledger.objectives.reshape: DPO's chosen and rejected sequences
    # run as one forward of 2·batch rows): a monomial with the factor batch and coefficient c is c/rows tensors of
    # rows·batch rows — one [2b, s, h] tensor, not two [b, s, h] (ledger.schedule.pieces)
    rows: int = 1
    # the per-layer term (its key) this term is the first-layer moments' value of, where they recompute the lowest
    # layer of another kind (ledger.activations._kind_first_layer): the allocation schedule's layer loop makes that
    # term's tensors in every layer, this one stands for no tensors of its own; "": a term of its own
    stands_for: str = ""

    def __post_init__(self) -> None:
        check(self.expr, ROLES[self.role].unit, self.key)   # bytes for memory and traffic, FLOP for FLOPs

    @property
    def info(self) -> RoleInfo:
        return ROLES[self.role]

    @property
    def block(self) -> str:
        """The block it is reported in: its role's, or host / paged when it is not on the device."""
        return ROLES[self.role].block if self.place is Place.DEVICE else self.place.value

    @property
    def phases(self) -> tuple[Phase, ...]:
        """The phases it is alive in: its own lifetime, or its role's."""
        return ROLES[self.role].lifetime if self.lifetime is None else self.lifetime

    def alive(self, phase: Phase) -> bool:
        """On the device in ``phase``."""
        return self.place is Place.DEVICE and phase in self.phases

    def __repr__(self) -> str:
        from ..rendering import render
        return render(self, "repr")

    def _repr_latex_(self) -> str:
        from ..rendering import render
        return render(self, "latex")


@dataclass(frozen=True)
class Moment:
    """An instant of the step, in ``phase``: ``terms`` are the keys of the terms live then."""

    key: str
    label: str
    terms: tuple[str, ...]
    why: str
    phase: Phase


@dataclass(frozen=True)
class MomentSpec:
    """One moment of the step: an instant of ``phase``, whose terms are those alive then (``Term.alive``). It
    exists when a term of role ``needs`` lives in that phase (``present``) or none does (not ``present``). A moment
    of one of several instants of a phase (FSDP2's layer ends) counts, of the terms of role ``one``, only the one
    named like it."""

    key: str
    label: str
    phase: Phase
    why: str
    needs: Role | None = None
    present: bool = True
    one: Role | None = None

    def holds(self, term: Term) -> bool:
        """Whether ``term`` is one of this moment's terms."""
        return term.alive(self.phase) and (term.role is not self.one or term.key == self.key)


# FSDP2's layer ends: the layers whose input-norm backward can be the peak (ledger.sharding.LAYER_ENDS gives
# their indices); each is a moment and a term of role LAYER_END of the same name
LAYER_END_NAMES = ("last", "next", "second", "first")

# the moments in the order they are reported (the DoRA ones after the layers' backward they compete with); the
# ones that need ZeRO-3's gathered weights or FSDP2's layer ends exist only under those layouts
MOMENTS = (
    MomentSpec("generation_prefill", "generation, the prompts' forward (no grad)", Phase.PREFILL,
               "GRPO: the parameters, optimizer states and the buffered generation batch while generate's first "
               "forward runs the prompts through the last layer's MLP beside their KV cache",
               Role.GENERATION_CACHE),
    MomentSpec("generation_decode", "generation, the last decoding step (no grad)", Phase.DECODE,
               "GRPO: the parameters, optimizer states and the buffered generation batch beside the KV cache of "
               "every prompt and completion at full length, while the last layer concatenates its keys and values",
               Role.GENERATION_CACHE),
    MomentSpec("first_layer_forward", "forward, the first layer's all-gather", Phase.FIRST_LAYER_FORWARD,
               "the root gathered, its all-gather output not yet freed beside the first layer's", Role.GATHERED_WEIGHT),
    MomentSpec("forward_loss", "forward, computing the loss", Phase.LOSS,
               "every saved activation, {computing} (step 2: optimizer states exist)"),
    MomentSpec("reference_forward", "the reference model's forward (no grad)", Phase.REFERENCE_FORWARD,
               "the policy's saved activations and per-token log-probabilities while the reference model runs its "
               "forward under no_grad", Role.REFERENCE_TEMPORARY),
    MomentSpec("loss_backward", "start of the loss backward", Phase.LOSS_BACKWARD,
               "every saved activation plus {backward}"),
    MomentSpec("head_step", "backward, stepping lm_head's weight", Phase.HEAD_BACKWARD,
               "optimizer in backward: lm_head's gradient is made and stepped while every saved activation and the "
               "hidden states' gradient are alive", Role.GRADIENT),
    MomentSpec("final_norm_backward", "backward through the final norm", Phase.FINAL_NORM_BACKWARD,
               "the loss gradients are freed; every layer's activations are still saved"),
    MomentSpec("last_layer_backward", "backward through the last layer's MLP", Phase.LAST_LAYER_BACKWARD,
               "every layer's activations are still saved while the last layer's MLP backward runs",
               Role.RECOMPUTED_ACTIVATION, present=False),
    MomentSpec("recompute", "backward, recomputing the last layer", Phase.LAST_LAYER_BACKWARD,
               "the checkpointed inputs plus one recomputed layer's saved tensors and its MLP backward",
               Role.RECOMPUTED_ACTIVATION),
    MomentSpec("recompute_lora_output", "backward, recomputing the last layer's LoRA down projection",
               Phase.LAST_LAYER_RECOMPUTE, "the checkpointed inputs, the last layer's saved tensors rebuilt and its "
               "down projection's LoRA forward, before its MLP backward", Role.RECOMPUTE_TEMPORARY),
    MomentSpec("experts_forward", "forward, the last layer's experts", Phase.FORWARD,
               "every layer's activations are saved while the last layer's experts run every token through all E "
               "of them (E·T-row temporaries)", Role.EXPERTS_TEMPORARY),
    MomentSpec("experts_recompute", "backward, recomputing the last layer's experts", Phase.LAST_LAYER_RECOMPUTE,
               "the checkpointed inputs and the last layer's saved tensors rebuilt while its experts run again (Llama 4's "
               "every token through all E of them), beside the incoming gradient", Role.EXPERTS_TEMPORARY),
    MomentSpec("first_experts_recompute", "backward, recomputing the first layer's experts",
               Phase.FIRST_LAYER_RECOMPUTE, "nearly every gradient made while the first layer's experts run again "
               "beside the incoming gradient", Role.EXPERTS_TEMPORARY),
    MomentSpec("lora_output_forward", "forward, the last layer's LoRA down projection", Phase.FORWARD,
               "every layer's activations are saved while the last layer's down projection runs its LoRA forward "
               "(no checkpointing, no loss yet)", Role.LORA_FORWARD_TEMPORARY),
    MomentSpec("first_recompute_lora_output", "backward, recomputing the first layer's LoRA down projection",
               Phase.FIRST_LAYER_RECOMPUTE, "the first layer's checkpointed input and saved tensors rebuilt, its down "
               "projection's LoRA forward, and every later layer's gradient made", Role.RECOMPUTE_TEMPORARY),
    MomentSpec("dora_forward", "forward, the last layer's DoRA weight norm", Phase.FORWARD,
               "every layer's activations are saved while the last layer's DoRA forward builds weight-sized "
               "temporaries", Role.FORWARD_TEMPORARY),
    MomentSpec("dora_recompute_last", "backward, recomputing the last layer's DoRA weight norm",
               Phase.LAST_LAYER_RECOMPUTE, "every layer's checkpointed input, the last layer recomputed and one DoRA "
               "forward's weight-sized temporaries, before any LoRA gradient exists", Role.FORWARD_TEMPORARY),
    MomentSpec("dora_recompute", "backward, recomputing the first layer's DoRA weight norm",
               Phase.FIRST_LAYER_RECOMPUTE, "the first layer is recomputed with nearly every gradient made: its saved "
               "tensors and one DoRA forward's weight-sized temporaries", Role.FORWARD_TEMPORARY),
    *(MomentSpec(f"{which}_layer_end", f"backward, the {which} layer's input norm", Phase.LAYER_END,
                 f"the {which} layer's gradients unsharded beside its input norm's backward", Role.LAYER_END,
                 one=Role.LAYER_END) for which in LAYER_END_NAMES),
    MomentSpec("first_layer_backward", "backward, reaching the first layer", Phase.FIRST_LAYER_BACKWARD,
               "nearly every gradient exists while the first layer's tensors and its MLP backward are live"),
    MomentSpec("backward_end", "end of backward", Phase.BACKWARD_END, "all gradients exist; the activations are freed"),
    MomentSpec("optimizer_step", "optimizer step", Phase.OPTIMIZER_STEP,
               "weights, gradients, states and the optimizer's own temporaries"),
)


@dataclass(frozen=True)
class Ledger:
    """All terms of one scenario structure, the derived-quantity definitions, and the moments."""

    terms: tuple[Term, ...]
    moments: tuple[Moment, ...]
    definitions: tuple[tuple[sp.Symbol, sp.Expr], ...] = field(default=())

    @cached_property
    def by_key(self) -> dict[str, Term]:
        return {t.key: t for t in self.terms}

    def block_terms(self, block: str) -> tuple[Term, ...]:
        return tuple(t for t in self.terms if t.block == block)

    def block_expr(self, block: str) -> sp.Expr:
        return sp.Add(*(t.expr for t in self.block_terms(block)))

    def moment_expr(self, moment: Moment) -> sp.Expr:
        return sp.Add(*(self.by_key[k].expr for k in moment.terms))

    @cached_property
    def ledger_total(self) -> sp.Expr:
        """base + trainable + activations: the reference answer's sum."""
        return sp.Add(*(self.block_expr(b) for b in BLOCKS))

    def __repr__(self) -> str:
        from ..rendering import render
        return render(self, "repr")

    def _repr_markdown_(self) -> str:
        from ..rendering import render
        return render(self, "markdown")

    def expand(self, expr: sp.Expr) -> sp.Expr:
        """Substitute the derived quantities (P_train, P_lora …) by their definitions."""
        for symbol, definition in reversed(self.definitions):
            expr = expr.xreplace({symbol: definition})
        return expr
