"""Assemble the ledger of one structure: terms of the three blocks, transients, and the moments
of a training step whose maximum is the peak.

>>> from symvram.ledger.structure import Structure
>>> led = build_ledger(Structure(method="full", nominal=True))
>>> led.expand(led.block_expr("trainable"))
P*bytes_grad + P*bytes_state*states_per_param
>>> [m.key for m in led.moments]
['forward_loss', 'loss_backward', 'final_norm_backward', 'last_layer_backward', 'first_layer_backward', 'backward_end', 'optimizer_step']
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from .activations import ACTIVATION_FIELDS, saved_terms, transient_terms
from .sharding import divide_terms, divides_only, gpu_moments, shard_definitions, shard_terms
from .structure import Structure
from .terms import Ledger, Moment
from .weights import TRAINABLE_WEIGHTS, base_terms, definitions, optimizer_temp_terms, trainable_terms


# what the loss holds at its two moments, per --loss-impl: (computing it, the start of its backward)
LOSS_MOMENT_WORDS = {
    "torch": ("the logits and their fp32 copy", "two fp32 vocabulary-sized gradients"),
    "chunked": ("the chunks of logits and one chunk's fp32 copy", "one chunk's two fp32 vocabulary-sized gradients"),
    "liger": ("one chunk of logits and the gradients the fused loss writes in its forward",
              "the gradients the fused loss stored (nothing new)"),
    "cce": ("an fp32 dot product per token (no logits)", "the hidden states' gradient and the vocabulary sort"),
    "trl": ("one tile buffer of logits and fp32 statistics per token",
            "the tile buffer again and the hidden states' fp32 gradient"),
}


def _moments(terms: dict, s: Structure) -> tuple[Moment, ...]:
    params = [k for k, t in terms.items() if t.block == "base" or k in TRAINABLE_WEIGHTS]
    states = [k for k in ("optimizer_states", "optimizer_steps") if k in terms]
    saved = [k for k, t in terms.items() if t.block == "activations"]
    kept = ["act_rope", "act_tokens"]  # alive for the whole step
    loss_saved = ("act_logsoftmax", "act_logit_softcap")  # freed once the loss backward is done
    computing, backward = LOSS_MOMENT_WORDS[s.loss_impl]
    moments = [
        Moment("forward_loss", "forward, computing the loss", tuple(params + states + saved + [
            k for k in ("logits", "logits_fp32") if k in terms]),
            f"every saved activation, {computing} (step 2: optimizer states exist)"),
        Moment("loss_backward", "start of the loss backward", tuple(params + states + saved + ["loss_backward_temp"]),
               f"every saved activation plus {backward}"),
    ]
    head = [k for k in ("head_grad",) if k in terms]  # a trainable lm_head's gradient exists from here on
    moments.append(Moment("final_norm_backward", "backward through the final norm", tuple(
        params + states + head + [k for k in saved if k not in loss_saved] + ["norm_backward_temp"]),
        "the loss gradients are freed; every layer's activations are still saved"))
    layer_temps = ["layer_backward_temp"] + [k for k in ("dequant_temp",) if k in terms]
    layer = ["one_layer"] + layer_temps
    if not s.grad_checkpointing:
        moments.append(Moment("last_layer_backward", "backward through the last layer's MLP", tuple(
            params + states + head + [k for k in saved if k not in loss_saved] + layer_temps),
            "every layer's activations are still saved while the last layer's MLP backward runs"))
    if s.grad_checkpointing:
        moments.append(Moment("recompute", "backward, recomputing the last layer", tuple(
            params + states + head + [k for k in saved if k in ("act_checkpoints", "act_sliding_mask")]
            + kept + layer),
            "the checkpointed inputs plus one recomputed layer's saved tensors and its MLP backward"))
    if "dora_weight_norm" in terms and not s.grad_checkpointing:
        moments.append(Moment("dora_forward", "forward, the last layer's DoRA weight norm", tuple(
            params + states + [k for k in saved if k not in loss_saved and k != "act_final_norm"] + ["dora_weight_norm"]),
            "every layer's activations are saved while the last layer's DoRA forward builds weight-sized temporaries"))
    if "dora_weight_norm" in terms and s.grad_checkpointing:
        moments.append(Moment("dora_recompute_last", "backward, recomputing the last layer's DoRA weight norm", tuple(
            params + states + head + [k for k in saved if k in ("act_checkpoints", "act_sliding_mask")] + kept
            + ["one_layer", "dora_weight_norm"]),
            "every layer's checkpointed input, the last layer recomputed and one DoRA forward's weight-sized "
            "temporaries, before any LoRA gradient exists"))
        moments.append(Moment("dora_recompute", "backward, recomputing the first layer's DoRA weight norm", tuple(
            params + states + ["grads_before_first_layer"] + kept + ["one_layer", "dora_weight_norm"]),
            "the first layer is recomputed with nearly every gradient made: its saved tensors and one DoRA "
            "forward's weight-sized temporaries"))
    moments.append(Moment("first_layer_backward", "backward, reaching the first layer", tuple(
        params + states + ["grads_before_first_layer"] + kept + layer),
        "nearly every gradient exists while the first layer's tensors and its MLP backward are live"))
    moments.append(Moment("backward_end", "end of backward", tuple(
        params + states + ["grads"] + kept + ["backward_tail"] + [k for k in ("tied_grad_sum",) if k in terms]),
        "all gradients exist; the activations are freed"))
    moments.append(Moment("optimizer_step", "optimizer step", tuple(
        params + states + ["grads"] + kept + [k for k in ("optimizer_temp",) if k in terms]),
        "weights, gradients, states and the optimizer's own temporaries"))
    return tuple(moments)


@lru_cache(maxsize=256)
def _activation_terms(s: Structure) -> tuple[tuple, tuple]:
    """The saved and the transient terms, built once per ``ACTIVATION_FIELDS``."""
    return tuple(saved_terms(s)), tuple(transient_terms(s))


@lru_cache(maxsize=1024)
def _single_gpu_ledger(s: Structure) -> Ledger:
    """The ledger on one GPU, before any sharding (only ``sharding`` reads the parallel fields). Its moments are
    every parallel layout's before ``gpu_moments``: sharding moves terms to the host or adds transients, never
    changes which activations are saved."""
    if s.optimizer_impl != "foreach":   # only the step's temporaries, the last terms, read the implementation
        twin = _single_gpu_ledger(replace(s, optimizer_impl="foreach"))
        terms = (*(t for t in twin.terms if t.key != "optimizer_temp"), *optimizer_temp_terms(s))
        by_key = {t.key: t for t in terms}
        return replace(twin, terms=terms, moments=gpu_moments(twin.moments, by_key, s))
    saved, transient = _activation_terms(s.keep(ACTIVATION_FIELDS))
    terms = (*base_terms(s), *trainable_terms(s), *saved, *transient, *optimizer_temp_terms(s))
    by_key = {t.key: t for t in terms}
    assert len(by_key) == len(terms), "duplicate term keys"
    return Ledger(terms=terms, moments=gpu_moments(_moments(by_key, s), by_key, s), definitions=tuple(definitions(s)))


@lru_cache(maxsize=4096)
def build_ledger(s: Structure) -> Ledger:
    """The ledger for one structure, built once and cached; the single-GPU ledger is shared by every parallel
    layout (ZeRO stage, offload, tensor and sequence parallel) of the same structure."""
    if not (s.zero or s.tensor_parallel or s.sequence_parallel or s.offload != "none"):
        return _single_gpu_ledger(s)
    if divides_only(s):
        ddp = build_ledger(replace(s, zero=0))
        return replace(ddp, terms=tuple(divide_terms(ddp.terms, s.zero)))
    single = _single_gpu_ledger(replace(s, zero=0, offload="none", tensor_parallel=False, sequence_parallel=False))
    terms = shard_terms(list(single.terms), s)  # per GPU: ZeRO / FSDP, tensor parallel, offload
    by_key = {t.key: t for t in terms}
    assert len(by_key) == len(terms), "duplicate term keys"
    return Ledger(terms=tuple(terms), moments=gpu_moments(single.moments, by_key, s),
                  definitions=single.definitions + shard_definitions(s))
