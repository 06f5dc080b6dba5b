"""Multi-GPU training as a transformation of the ledger's terms: per-GPU bytes over N and t.

``shard_terms(terms, s)`` takes the single-GPU terms of a structure and returns what one GPU holds:

* tensor parallelism (degree t, Megatron style) first: every rank keeps 1/t of each linear weight
  and of the embeddings (vocab-parallel), so P → (P − P_norm)/t + P_norm with the RMSNorm weights
  replicated; the attention and MLP activations are split by heads and d_ff (n_h, n_kv, d_ff, V → /t);
  the residual/norm activations stay whole unless sequence parallelism splits them along s too;
* then ZeRO over the N data-parallel ranks: stage 1 divides the optimizer states, the fp32 master
  and the optimizer's temporaries by N; stage 2 also the gradients; stage 3 (= FSDP FULL_SHARD) also
  the weights and the LoRA adapters, and adds ``gathered_params``: the all-gathered root unit
  (embeddings, lm_head, final norm) and two decoder layers (computing, prefetched), as FSDP2 wrapped
  per decoder layer holds them. FSDP SHARD_GRAD_OP is stage 2.
* CPU offload then moves terms to the ``host`` block (reported apart, never part of the GPU peak):
  ``optimizer`` the gradients, states, master and step temporaries (the optimizer runs on the CPU,
  as DeepSpeed's CPU-Adam); ``optimizer+params`` also the weights and adapters.

>>> from symvram.ledger.structure import Structure
>>> from symvram.ledger.build import build_ledger
>>> led = build_ledger(Structure(method="full", nominal=True, zero=2))
>>> led.expand(led.block_expr("trainable"))
P*bytes_grad/gpus + P*bytes_state*states_per_param/gpus
>>> build_ledger(Structure(method="full", nominal=True, zero=3, offload="optimizer")).by_key["grads"].block
'host'
"""
from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..symbols import sym
from .architecture import L, V, f, f_e, h, nh, nkv
from .structure import Structure
from .terms import Moment, Term
from .weights import quant_constant_bits

N, t = sym("gpus"), sym("tp")
P, P_train, P_lora, P_quant, P_keep = (sym(n) for n in ("P", "P_train", "P_lora", "P_quant", "P_keep"))
b_w, b_a, q = sym("bytes_weight"), sym("bytes_adapter"), sym("quant_bits")

WEIGHT_KEYS = ("weights", "weights_nf4", "quant_constants", "weights_16bit", "adapters", "saved_modules")
STATE_KEYS = ("master", "optimizer_states", "optimizer_temp")   # ZeRO-1 and up
GRAD_KEYS = ("grads", "grads_before_first_layer")               # ZeRO-2 and up: reduce-scattered as produced
GRAD_VIEWS = ("grads_before_first_layer",)                     # part of "grads" seen at one moment
OPTIMIZER_HOST_KEYS = ("grads", "master", "optimizer_states", "optimizer_steps", "optimizer_temp")
PARAM_SIDE = WEIGHT_KEYS + GRAD_KEYS + OPTIMIZER_HOST_KEYS + ("buffers",)
REPLICATED_ACTIVATIONS = ("act_rope", "act_tokens", "backward_tail")
GATHERED = "gathered_params"
STAGE_NAMES = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}


def norm_params(s: Structure) -> sp.Expr:
    """Norm weights: the layers' and the final one, replicated on every tensor-parallel rank."""
    return L * s.arch.norm_params_per_layer() + h


def _tp_params(s: Structure) -> dict[sp.Symbol, sp.Expr]:
    """Per-rank parameter counts under tensor parallelism of degree t."""
    R = norm_params(s)
    split = {P: (P - R) / t + R, P_lora: P_lora / t, P_quant: P_quant / t, P_keep: (P_keep - R) / t + R}
    split[P_train] = P_train / t if s.lora else (P_train - R) / t + R
    return split


TP_WIDTHS = {nh: nh / t, nkv: nkv / t, f: f / t, V: V / t, f_e: f_e / t}  # experts split like the dense MLP


def _tensor_parallel(term: Term, s: Structure) -> Term:
    if term.key in PARAM_SIDE:
        expr = term.expr.xreplace({**_tp_params(s), **TP_WIDTHS})
    elif term.key in REPLICATED_ACTIVATIONS:
        return term
    elif s.sequence_parallel and V not in term.expr.free_symbols:
        expr = term.expr / t
    else:
        expr = term.expr.xreplace(TP_WIDTHS)
    return replace(term, expr=expr, label=f"{term.label}^{{(t)}}",
                   why=term.why + " — per tensor-parallel rank")


def layer_bytes(s: Structure) -> sp.Expr:
    """Stored bytes of one decoder layer (with its adapters; NF4 and constants under QLoRA)."""
    fam = s.arch
    if s.method == "qlora":
        layer = fam.linear_params_per_layer() * (q + quant_constant_bits(s.double_quant)) / 8 + (
            fam.params_per_layer(s.options) - fam.linear_params_per_layer()) * b_w
    else:
        layer = fam.params_per_layer(s.options) * b_w
    if s.lora:
        layer += P_lora / L * b_a
    return layer


def root_bytes(s: Structure) -> sp.Expr:
    """Stored bytes of the root unit: embeddings, lm_head (unless tied) and the final norm."""
    return (s.arch.embedding_params(s.tied) + h) * b_w


def gathered_bytes(s: Structure) -> sp.Expr:
    """ZeRO-3's working set with one unit per decoder layer (FSDP2 ``fully_shard`` per layer, then
    the root): the root stays gathered from the start of forward to the end of backward, plus the
    layer computing and the next one prefetched."""
    return root_bytes(s) + 2 * layer_bytes(s)


def _divide(term: Term, stage: int) -> Term:
    return replace(term, expr=term.expr / N, label=f"{term.label}/N",
                   why=f"{term.why} — sharded over N GPUs ({STAGE_NAMES[stage]})")


def shard_terms(terms: list[Term], s: Structure) -> list[Term]:
    """Per-GPU terms (and ``host`` terms for offload) of a single-GPU term list; identity for DDP."""
    out = [_tensor_parallel(term, s) if s.tensor_parallel else term for term in terms]
    sharded = STATE_KEYS * (s.zero >= 1) + GRAD_KEYS * (s.zero >= 2) + WEIGHT_KEYS * (s.zero >= 3)
    out = [_divide(term, s.zero) if term.key in sharded else term for term in out]
    if s.zero == 3:
        gathered = gathered_bytes(s)
        out.append(Term(GATHERED, "transient", gathered.xreplace(TP_WIDTHS) if s.tensor_parallel else gathered,
                        r"M_{\mathrm{gather}}",
                        "all-gathered weights: the root unit (embeddings, lm_head, final norm) for the whole "
                        "forward and backward, the layer computing and the next one prefetched",
                        "torch FSDP2 fully_shard per decoder layer (ZeRO-3 / FULL_SHARD)"))
    if s.offload == "none":
        return out
    host = OPTIMIZER_HOST_KEYS + WEIGHT_KEYS * (s.offload == "optimizer+params")
    return [replace(term, block="host", why=term.why + " — offloaded to CPU memory") if term.key in host else term
            for term in out if term.key not in GRAD_VIEWS]


def gpu_moments(moments: tuple[Moment, ...], terms: dict[str, Term]) -> tuple[Moment, ...]:
    """Moments of one GPU: host terms leave every moment; under ZeRO-3 the gathered working set is
    live in forward and backward (parameters are resharded before the optimizer step). A gradient
    view dropped by offload (the gradients live on the host) leaves its moments too."""
    out = []
    for m in moments:
        keys = tuple(k for k in m.terms if k in terms and terms[k].block != "host")
        if GATHERED in terms and m.key != "optimizer_step":
            keys += (GATHERED,)
        out.append(replace(m, terms=keys))
    return tuple(out)


def notes(s: Structure, gpus: int) -> list[str]:
    """Plain-language remarks about a parallel setup that is allowed but probably not meant.

    >>> notes(Structure(zero=3), 1)[0][:40]
    'ZeRO-3 on one GPU shards nothing: every '
    """
    out = []
    if s.zero == 3 and gpus == 1:
        out.append("ZeRO-3 on one GPU shards nothing: every parameter is still gathered into a working buffer, "
                   "so it costs the gathered working set on top of plain training; it only pays with --offload")
    elif s.zero and gpus == 1:
        out.append(f"ZeRO-{s.zero} on one GPU divides by N = 1: the same memory as plain training")
    if s.arch.moe:
        out.append("MoE: transformers' grouped_mm experts hold every token-expert pair (T·k_E rows), so the memory "
                   "does not depend on how evenly the router spreads tokens (measured: identical for any routing)")
    return out


__all__ = ["shard_terms", "gpu_moments", "gathered_bytes", "layer_bytes", "root_bytes", "norm_params", "notes",
           "GATHERED"]
