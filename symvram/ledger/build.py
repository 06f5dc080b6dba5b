"""Assemble the ledger of one structure: terms of the three blocks, transients, and the moments
of a training step whose maximum is the peak.

>>> from symvram.ledger.structure import Structure
>>> led = build_ledger(Structure(method="full", params_given=True))
>>> led.expand(led.block_expr("trainable"))
P*bytes_grad + P*bytes_state*states_per_param
>>> [m.key for m in led.moments]
['forward_loss', 'loss_backward', 'final_norm_backward', 'last_layer_backward', 'first_layer_backward', 'backward_end', 'optimizer_step']
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from .activations import ACTIVATION_FIELDS, saved_terms, transient_terms
from .objectives import objectives, preference_terms, reshape
from .sharding import divide_terms, divides_only, shard_definitions, shard_terms
from .structure import Structure
from .terms import GRADIENTS, MOMENTS, PARAMETERS, STATES, Ledger, Moment, Role, Term
from .weights import base_terms, definitions, optimizer_temp_terms, stepping_impl, trainable_terms


# what the loss holds at its two moments, per --loss-impl: (computing it, the start of its backward)
LOSS_MOMENT_WORDS = {
    "torch": ("the logits and their fp32 copy", "two fp32 vocabulary-sized gradients"),
    "chunked": ("the chunks of logits and one chunk's fp32 copy", "one chunk's two fp32 vocabulary-sized gradients"),
    "liger": ("one chunk of logits and the gradients the fused loss writes in its forward",
              "the gradients the fused loss stored (nothing new)"),
    "cce": ("an fp32 dot product per token (no logits)", "the hidden states' gradient and the vocabulary sort"),
    "trl": ("one tile buffer of logits and fp32 statistics per token",
            "the tile buffer again and the hidden states' fp32 gradient"),
    "unsloth": ("one chunk of fp32 logits and the hidden states' gradient the fused loss writes in its forward",
                "the stored gradient, scaled (a new tensor)"),
    "score": ("one score per position (no vocabulary logits)", "the scores' gradient, one per position"),
    # ORPO, CPO/SimPO (ledger.objectives.logits_terms): the model's logits, with and without the chosen rows' NLL
    "logits, nll": ("the logits (fp32 under mixed precision), the chosen rows' shifted copy and log-softmax",
                    "three vocabulary-sized logits gradients"),
    "logits": ("the logits (and their fp32 copy under mixed precision)", "the logits the log-prob kernel saved and their gradient"),
    # LitGPT's chunked_cross_entropy (litgpt 0.5.13 utils.py:302-347): the 16-bit logits, no upcast
    "litgpt": ("the 16-bit logits (the previous step's too, while this step's are made) and their log-softmax",
               "one chunk's two 16-bit vocabulary-sized gradients"),
}


def _listing_order(term: Term) -> int:
    """A moment lists the parameters, the states, the gradients, the saved activations, a recomputed layer and
    then the temporaries (each group in the ledger's order)."""
    for i, roles in enumerate((PARAMETERS, STATES, GRADIENTS)):
        if term.role in roles:
            return i
    if term.info.block == "activations":
        return 3
    return 4 if term.role is Role.RECOMPUTED_ACTIVATION else 5


def _moments(terms: dict, s: Structure) -> tuple[Moment, ...]:
    """The moments of ``MOMENTS`` that exist for these terms (one GPU's: host and paged terms are in none), each
    with the terms alive in its phase."""
    paired = objectives()[s.objective].get("logits")
    computing, backward = LOSS_MOMENT_WORDS["score" if s.score_head else ("logits, nll" if s.nll else "logits")
                                            if paired else "litgpt" if s.model_code == "litgpt" else s.loss_impl]
    moments = []
    for spec in MOMENTS:
        if spec.needs and any(t.role is spec.needs and t.alive(spec.phase) for t in terms.values()) != spec.present:
            continue
        alive = sorted((t for t in terms.values() if spec.holds(t)), key=_listing_order)
        moments.append(Moment(spec.key, spec.label, tuple(t.key for t in alive),
                              spec.why.format(computing=computing, backward=backward), spec.phase))
    return tuple(moments)


@lru_cache(maxsize=256)
def _activation_terms(s: Structure) -> tuple[tuple, tuple]:
    """The saved and the transient terms, built once per ``ACTIVATION_FIELDS``."""
    return tuple(reshape(s, saved_terms(s))), tuple(reshape(s, transient_terms(s)))


@lru_cache(maxsize=1024)
def _single_gpu_ledger(s: Structure) -> Ledger:
    """The ledger on one GPU, before any sharding (only ``sharding`` reads the parallel fields)."""
    if s.optimizer_impl != "foreach":   # only the step's temporaries, the last terms, read the implementation
        twin = _single_gpu_ledger(replace(s, optimizer_impl="foreach"))
        terms = (*(t for t in twin.terms if t.role is not Role.OPTIMIZER_STEP_TEMPORARY), *optimizer_temp_terms(s))
        return replace(twin, terms=terms, moments=_moments({t.key: t for t in terms}, s))
    saved, transient = _activation_terms(s.keep(ACTIVATION_FIELDS))
    base = base_terms(s)
    terms = (*base, *trainable_terms(s), *saved, *transient, *preference_terms(s, base), *optimizer_temp_terms(s))
    by_key = {t.key: t for t in terms}
    assert len(by_key) == len(terms), "duplicate term keys"
    return Ledger(terms=terms, moments=_moments(by_key, s), definitions=tuple(definitions(s)))


@lru_cache(maxsize=4096)
def build_ledger(s: Structure) -> Ledger:
    """The ledger for one structure, built once and cached; the single-GPU ledger is shared by every parallel
    layout (ZeRO stage, offload, tensor and sequence parallel) of the same structure. A layout's moments are the
    same query over its per-GPU terms: host terms are in none, ZeRO's buffers join the phases they live in."""
    if not (s.zero or s.tensor_parallel or s.sequence_parallel or s.offload != "none"):
        return _single_gpu_ledger(s)
    if divides_only(s):
        ddp = build_ledger(replace(s, zero=0))
        return replace(ddp, terms=tuple(divide_terms(ddp.terms, s.zero)))
    single = _single_gpu_ledger(replace(s, zero=0, offload="none", tensor_parallel=False, sequence_parallel=False,
                                        optimizer_impl=stepping_impl(s)))
    terms = shard_terms(list(single.terms), s)  # per GPU: ZeRO / FSDP, tensor parallel, offload
    by_key = {t.key: t for t in terms}
    assert len(by_key) == len(terms), "duplicate term keys"
    return Ledger(terms=tuple(terms), moments=_moments(by_key, s),
                  definitions=single.definitions + shard_definitions(s))
