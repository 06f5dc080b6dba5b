"""Multi-GPU training as a transformation of the ledger's terms: per-GPU bytes over N and t.

``shard_terms(terms, s)`` takes the single-GPU terms of a structure and returns what one GPU holds:

* tensor parallelism (degree t, Megatron style) first: every rank keeps 1/t of each linear weight
  and of the embeddings (vocab-parallel), so P → (P − P_norm)/t + P_norm with the RMSNorm weights
  replicated; the attention and MLP activations are split by heads and d_ff (n_h, n_kv, d_ff, V → /t);
  the residual/norm activations stay whole unless sequence parallelism splits them along s too;
* then ZeRO over the N data-parallel ranks: stage 1 divides the optimizer states, the fp32 master
  and the optimizer's temporaries by N; stage 2 also the gradients; stage 3 (= FSDP FULL_SHARD) also
  the weights and the LoRA adapters, and adds FSDP2's working buffers (``fsdp_terms``: the root unit
  gathered for the whole forward and backward, a layer's unsharded parameters, the all-gather output,
  unsharded gradients and the reduce-scatter input), each alive in the phases it lives in, and the layer
  ends (the moments of ``terms.MOMENTS`` that need them follow). FSDP SHARD_GRAD_OP is stage 2.
* CPU offload then moves terms to the ``host`` block (reported apart, never part of the GPU peak):
  ``optimizer`` the gradients, states, master and step temporaries (the optimizer runs on the CPU,
  as DeepSpeed's CPU-Adam); ``optimizer+params`` also the weights and adapters.

>>> from symvram.ledger.structure import Structure
>>> from symvram.ledger.build import build_ledger
>>> led = build_ledger(Structure(method="full", params_given=True, zero=2))
>>> led.expand(led.block_expr("trainable"))
P*bytes_grad/gpus + P*bytes_state*states_per_param/gpus
>>> build_ledger(Structure(method="full", params_given=True, zero=3, offload="optimizer")).by_key["grads"].block
'host'
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import sympy as sp

from ..symbols import latex, sym
from .activations import ACTIVATION_FIELDS
from .architecture import L, V, f, f_e, h, nh, nkv
from .structure import Structure
from .terms import LAYER_END_NAMES, STAGE_NAMES, WHOLE_STEP, Phase, Place, Role, Term, span
from .functions import at_least
from .weights import (compute_adapter_bytes, compute_weight_bytes, kind_adapter_params, kind_kept_fp32_params,
                      layer_lora_params, quant_constant_bits)

N, t = sym("gpus"), sym("tp")
P, P_train, P_lora, P_quant, P_keep = (sym(n) for n in ("P", "P_train", "P_lora", "P_quant", "P_keep"))
b_w, b_c, b_g, q = (sym(n) for n in ("bytes_weight", "bytes_act", "bytes_grad", "quant_bits"))
b_32, T = sym("bytes_fp32"), sym("batch") * sym("seq")
A_saved = sym("A_saved")

# the layers whose backward end can be the peak: that moment is linear in the layer's index i (one layer's
# activations fewer, one layer's sharded gradients more per step down), so the largest is at an end of each
# stretch: i = L−1 (nothing reduced yet), L−2 (a reduce-scatter input beside it), 1, and 0 (no prefetch)
LAYER_ENDS = tuple(zip(LAYER_END_NAMES, (L - 1, L - 2, sp.Integer(1), sp.Integer(0))))
_LAYER_END_TEX = {which: latex(i) for which, i in LAYER_ENDS}   # L - 2 …: printed once, not per structure

# FSDP2's buffers are alive in the phases of the moments its accounting covers (the DoRA weight-norm moments, in
# the layers' forward and the recomputes, keep the single GPU's terms: FSDP2's buffers there are not modelled)
_P = Phase
_COVERED = (_P.FIRST_LAYER_FORWARD, _P.LOSS, _P.LOSS_BACKWARD, _P.FINAL_NORM_BACKWARD, _P.LAST_LAYER_BACKWARD,
            _P.LAYER_END, _P.FIRST_LAYER_BACKWARD)
ROOT_GATHERED = _COVERED                                          # from the root's pre-forward to the end of backward
LAYER_GATHERED = (_P.FIRST_LAYER_FORWARD, _P.LAST_LAYER_BACKWARD, _P.LAYER_END, _P.FIRST_LAYER_BACKWARD)
PREFETCHED = _COVERED[:5]   # an all-gather output: the next layer's in forward, the last layer's from the loss on
HEAD_UNSHARDED = _COVERED[3:]                                     # the root's gradients: from the final norm's backward


def norm_params(s: Structure) -> sp.Expr:
    """Norm weights: the layers' and the final one, replicated on every tensor-parallel rank."""
    return s.arch.over_layers(lambda k: k.norm_params_per_layer(s.options)) + h


def _tp_params(s: Structure) -> dict[sp.Symbol, sp.Expr]:
    """Per-rank parameter counts under tensor parallelism of degree t."""
    R = norm_params(s)
    split = {P: (P - R) / t + R, P_lora: P_lora / t, P_quant: P_quant / t, P_keep: (P_keep - R) / t + R}
    split[P_train] = P_train / t if s.lora else (P_train - R) / t + R
    return split


TP_WIDTHS = {nh: nh / t, nkv: nkv / t, f: f / t, V: V / t, f_e: f_e / t}  # experts split like the dense MLP


def _tensor_parallel(term: Term, s: Structure) -> Term:
    """``term`` on one tensor-parallel rank, as its role's ``tp`` says."""
    if term.info.tp == "parameters":
        def per_rank(e):
            return e.xreplace({**_tp_params(s), **TP_WIDTHS})
    elif term.info.tp == "replicated":
        return term
    elif s.sequence_parallel and V not in term.expr.free_symbols:
        def per_rank(e):
            return e / t
    else:
        def per_rank(e):
            return e.xreplace(TP_WIDTHS)
    return replace(term, expr=per_rank(term.expr), label=f"{term.label}^{{(t)}}",
                   why=term.why + " — per tensor-parallel rank",
                   tensors=tuple((n, per_rank(size)) for n, size in term.tensors))


def layer_bytes(s: Structure) -> sp.Expr:
    """Bytes of one decoder layer as FSDP2 gathers it (with its adapters; NF4 and constants under QLoRA); for a
    family whose layers differ, the largest kind's.

    >>> layer_bytes(Structure(fsdp_mixed_precision=True)).free_symbols == {sym("bytes_act"), h, f, nh, nkv, sym("head_dim")}
    True
    """
    from .activations import largest_kind

    return largest_kind(s, _kind_layer_bytes) if s.arch.kinds else _kind_layer_bytes(s)


def all_layer_bytes(s: Structure) -> sp.Expr:
    """Bytes of every decoder layer as FSDP2 gathers them: L · ``layer_bytes``, or the sum over the layer kinds."""
    return sp.Add(*(n * _kind_layer_bytes(k) for n, k in s.layer_kinds)) if s.arch.kinds else L * layer_bytes(s)


def _kind_layer_bytes(s: Structure) -> sp.Expr:
    fam, b = s.arch, compute_weight_bytes(s)
    if s.method == "qlora":
        layer = fam.linear_params_per_layer() * (q + quant_constant_bits(s.double_quant)) / 8 + (
            fam.params_per_layer(s.options) - fam.linear_params_per_layer()) * b
    else:
        layer = fam.params_per_layer(s.options) * b
    if not s.fsdp_mixed_precision:
        # from_pretrained's fp32 routers are gathered as stored: a group of mixed dtypes is all-gathered as bytes
        # (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py:791-808, uint8), each at its own width; a
        # MixedPrecisionPolicy casts them with the rest to param_dtype (_fsdp_param.py:586-600)
        layer += (b_32 - b) * kind_kept_fp32_params(fam)
    if s.lora:
        layer += _layer_lora(s) * compute_adapter_bytes(s)
    return layer


def _layer_lora(s: Structure) -> sp.Expr:
    """One layer's LoRA parameters: P_lora / L, or those of the layer's kind."""
    if ":" not in s.family:   # a family whose layers are all alike
        return layer_lora_params(s)
    return kind_adapter_params(s.arch, s.targets, s.dora)


def root_bytes(s: Structure) -> sp.Expr:
    """Bytes of the root unit as gathered: embeddings, lm_head (unless tied) and the final norm."""
    return root_params(s) * compute_weight_bytes(s)


def root_params(s: Structure) -> sp.Expr:
    return s.arch.embedding_params(s.tied, s.score_head) + h


def layer_trainable(s: Structure) -> sp.Expr:
    """Trainable elements of one decoder layer (its LoRA adapters, or all its weights)."""
    if s.arch.kinds:
        from .activations import largest_kind

        return largest_kind(s, layer_trainable)
    return _layer_lora(s) if s.lora else s.arch.params_per_layer(s.options)


def fsdp_terms(s: Structure) -> list[Term]:
    """FSDP2's buffers on one rank (torch/distributed/fsdp/_fully_shard), each alive in the phases its
    ``lifetime`` says (the moments of ``terms.MOMENTS`` follow). β_u = ``compute_weight_bytes`` (the unsharded
    dtype), β_g the reduce dtype (= the sharded gradients'), U = a layer's trainable elements.

    >>> from symvram.ledger.build import build_ledger
    >>> build_ledger(Structure(zero=3)).by_key["reduce_scatter_buffer"].expr.free_symbols >= {b_g, h, f}
    True
    """
    from .activations import residual_bytes

    bu, unit, layer = compute_weight_bytes(s), layer_trainable(s), layer_bytes(s)
    src = "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py"
    terms = [
        Term("gathered_root", Role.GATHERED_WEIGHT, root_bytes(s), r"M_{\mathrm{root}}",
             "the root unit (embeddings, lm_head, final norm) all-gathered at the start of forward and never "
             "resharded until the end of backward", "_fsdp_state.py _lazy_init: post_forward_mesh_info = None at the root",
             lifetime=ROOT_GATHERED),
        Term("allgather_root", Role.COMMUNICATION_BUFFER, root_bytes(s), r"M_{\mathrm{AG,root}}",
             "the root's all-gather output, kept (all_gather_state) until the first layer's copy-out returns",
             f"{src} wait_for_unshard", lifetime=(Phase.FIRST_LAYER_FORWARD,)),
        Term("gathered_layer", Role.GATHERED_WEIGHT, layer, r"M_{\mathrm{layer}}",
             "the computing layer's unsharded parameters (the all-gather's copy-out)", f"{src} wait_for_unshard",
             lifetime=LAYER_GATHERED),
        Term("allgather_buffer", Role.COMMUNICATION_BUFFER, layer, r"M_{\mathrm{AG}}",
             "an all-gather output, N × one layer's shard: in forward the computing layer's, kept until the next "
             "layer's copy-out returns; in backward the next layer's, prefetched (the root prefetches the last layer "
             "before the loss backward)", f"{src} wait_for_unshard (all_gather_state), _backward_prefetch",
             lifetime=PREFETCHED),
        Term("first_layer_input", Role.FORWARD_TEMPORARY, residual_bytes(s) * T * h, r"A_{\mathrm{emb}}",
             "the embedding's output entering the first layer", "transformers LlamaModel.forward",
             lifetime=(Phase.FIRST_LAYER_FORWARD,)),
        Term("layer_grads_unsharded", Role.UNSHARDED_GRADIENT, unit * bu, r"G_{\mathrm{layer}}",
             "the computing layer's unsharded gradients, until its post-backward copies them into the reduce-scatter "
             "input", f"{src} post_backward", lifetime=(Phase.LAYER_END,)),
        Term("input_norm_backward_temp", Role.BACKWARD_TEMPORARY, 5 * b_32 * T * h, r"M_{\mathrm{norm}'}",
             "a layer's input RMSNorm's backward holds five fp32 hidden-sized gradients at once, as the final norm's",
             "autograd of LlamaRMSNorm", lifetime=(Phase.LAYER_END,)),
        Term("reduce_scatter_buffer", Role.COMMUNICATION_BUFFER, unit * b_g, r"M_{\mathrm{RS}}",
             "the previous layer's reduce-scatter input (N × shard in the reduce dtype), kept until the next "
             "layer's post-backward", f"{src} post_backward (reduce_scatter_states)",
             lifetime=(Phase.BACKWARD_END,) if s.lora else ()),   # full: the root's reduce-scatter at the end
        Term("layer_end_temp", Role.BACKWARD_TEMPORARY, 3 * b_c * T * h, r"M_{\mathrm{norm}_0'}",
             "at a layer's input-norm backward (beside the norm's fp32 temporaries): its saved input and the gradients "
             "reaching the residual stream (measured)", "autograd of LlamaRMSNorm",
             lifetime=(Phase.LAYER_END,)),
    ]
    below = A_saved   # one layer's saved tensors: shard_definitions
    reduced = unit * b_g / N if s.offload == "none" else 0                        # offloaded: on the host
    for which, i in LAYER_ENDS:   # the end of layer i's backward: layers > i reduced, layers < i still saved
        i_tex = _LAYER_END_TEX[which]
        terms.append(Term(f"{which}_layer_end", Role.LAYER_END, i * below + (L - 1 - i) * reduced
                          + at_least(L - 1 - i, 1) * unit * b_g + at_least(i, 1) * layer,
                          rf"M_{{\mathrm{{end}},{i_tex}}}",
                          f"at the {which} layer's input norm: the saved tensors (checkpointed: the inputs) of the "
                          f"layers below it ({i_tex} of them), the sharded gradients of the layers above, the reduce-scatter "
                          "input of the layer above (until this layer's post-backward) and the layer below's "
                          "all-gather output (prefetched)",
                          f"{src} post_backward, _backward_prefetch",
                          lifetime=(Phase.LAYER_END,) if i != 0 else (Phase.LAYER_END, Phase.FIRST_LAYER_BACKWARD)))
    if not s.lora:
        terms += [
            Term("root_grads_unsharded", Role.UNSHARDED_GRADIENT, (V * h + h) * bu, r"G_{\mathrm{head}}",
                 "lm_head's and the final norm's unsharded gradients: the root reduce-scatters only at the end of "
                 "backward", f"{src} post_backward of the root (final callback)", lifetime=HEAD_UNSHARDED),
            Term("root_reduce", Role.COMMUNICATION_BUFFER, root_params(s) * b_g + sp.Max(
                root_params(s) * (bu - b_g / N), V * h * bu, evaluate=False), r"M_{\mathrm{RS,root}}",
                 "the root's reduce-scatter at the end of backward: its input (reduce dtype), and either every root "
                 "gradient (copy-in; its sharded output, counted in the gradients, not yet) or the embedding's "
                 "gradient the autograd engine still holds beside the output",
                 "_fsdp_collectives.py foreach_reduce", lifetime=(Phase.BACKWARD_END,)),
        ]
    if s.tensor_parallel:
        terms = [replace(x, expr=x.expr.xreplace(TP_WIDTHS)) for x in terms]
    return terms


# every field fsdp_terms reads (the layer's and the root's weights, the residual stream's dtype): its cache key,
# guarded by tests/test_cache_keys.py
FSDP_FIELDS = ("method", "family", "options", "tied", "double_quant", "kbit_prepared", "fsdp_mixed_precision", "offload",
               "tensor_parallel", "head_targets", "score_head", "targets", "dora")   # a layer kind's adapters: its targets


def shard_definitions(s: Structure) -> tuple[tuple[sp.Symbol, sp.Expr], ...]:
    """The derived quantities the per-GPU terms add to the ledger's: under FSDP2's ZeRO-3, one layer's saved
    bytes, which the layer ends count once per layer below (a symbol there, defined once).

    >>> shard_definitions(Structure(zero=3, grad_checkpointing=True))
    ((A_saved, batch*bytes_weight*hidden*seq),)
    """
    return _saved_definition(s.keep(ACTIVATION_FIELDS)) if s.zero == 3 and s.zero_impl == "fsdp2" else ()


@lru_cache(maxsize=256)
def _saved_definition(s: Structure) -> tuple[tuple[sp.Symbol, sp.Expr], ...]:
    from .activations import saved_per_layer

    return ((A_saved, saved_per_layer(s)),)


@lru_cache(maxsize=256)
def _fsdp_terms(s: Structure) -> tuple[Term, ...]:
    """``fsdp_terms`` built once per ``FSDP_FIELDS`` (the page's layouts differ mostly elsewhere)."""
    return tuple(fsdp_terms(s))


DS = "deepspeed/runtime/zero/"   # DeepSpeed 0.19.8, read from its source (needs CUDA: not measured here)


def deepspeed_terms(s: Structure) -> list[Term]:
    """DeepSpeed ZeRO's own buffers with bf16 (``zero_impl = "deepspeed"``), modelled from its source, not
    measured. The fp32 master and Adam states partitioned over N, the bf16 gradients (whole at stage 1,
    partitioned from stage 2) are the ledger's ``master``, ``optimizer_states`` and ``grads``; beside them:

    >>> from symvram.ledger.build import build_ledger
    >>> build_ledger(Structure(zero=2, zero_impl="deepspeed", master=True)).by_key["ds_reduce_bucket"].expr
    bytes_grad*ds_reduce_bucket
    """
    why = " — modelled from DeepSpeed's source, not measured"
    bucket = ("stage3.py:782 (contiguous_gradients: one bucket per dtype at init)" if s.zero == 3 else
              "stage_1_and_2.py:3266 setup_buckets (a second only with overlap_comm, off below stage 3: config.py:386)")
    terms = [Term("ds_reduce_bucket", Role.COMMUNICATION_BUFFER, sym("ds_reduce_bucket") * b_g, r"M_{\mathrm{bucket}}",
                  "the gradient reduction bucket: reduce_bucket_size elements of the gradient dtype, allocated whole "
                  "whatever the model's size" + why, DS + bucket, lifetime=WHOLE_STEP)]
    if s.zero == 3:
        step = sp.Min(P_train / N, sym("ds_sub_group"))
        terms += [
            Term("ds_gathered", Role.GATHERED_WEIGHT, b_w * sp.Min(P, sym("ds_max_live")), r"M_{\mathrm{live}}",
                 "gathered parameters: a parameter reused within stage3_max_reuse_distance (1e9 elements) is not "
                 "released, stage3_max_live_parameters (1e9) caps the resident set — the bound, held in forward and "
                 "backward" + why, DS + "partitioned_param_coordinator.py (max_available_parameters_in_numel), config.py:245",
                 lifetime=span(Phase.FORWARD, Phase.BACKWARD_END)),
            Term("ds_step_grad", Role.OPTIMIZER_STEP_TEMPORARY, step * (b_32 + b_g), r"M_{\mathrm{step}}",
                 "the step's fp32 gradient of one sub-group (sub_group_size elements at most) beside its flattened "
                 "bf16 gradients" + why, DS + "stage3.py:2686 _prepare_fp32_grad_for_sub_group"),
        ]
    else:
        terms.append(Term("ds_step_grad", Role.OPTIMIZER_STEP_TEMPORARY, P_train * (b_32 + b_g) / N, r"M_{\mathrm{step}}",
                          "the step's fp32 copy of this rank's gradient partition beside its flattened bf16 gradients"
                          + why, DS + "stage_1_and_2.py:3112-3118 (flatten, .to(fp32))"))
    return terms


def zero_divides(term: Term, stage: int) -> bool:
    """Whether ZeRO stage ``stage`` divides ``term`` over the N data-parallel ranks (its role's ``zero_stage``).

    >>> from symvram.ledger.build import build_ledger
    >>> [t.key for t in build_ledger(Structure(master=True)).terms if zero_divides(t, 2)]
    ['grads', 'master', 'optimizer_states', 'grads_before_first_layer', 'optimizer_temp']
    """
    first = term.info.zero_stage
    return first is not None and stage >= first


def divides_only(s: Structure) -> bool:
    """Whether the per-GPU ledger of ``s`` is its DDP ledger (``zero=0``) with the terms ``zero_divides`` divided
    (``divide``) and nothing else, the moments unchanged: FSDP2's stages 1 and 2 without offload. Stage 3 adds
    FSDP2's buffers and moments, DeepSpeed its buckets, offload moves terms to the host.

    >>> divides_only(Structure(zero=2)), divides_only(Structure(zero=3)), divides_only(Structure(zero=0))
    (True, False, False)
    """
    return s.zero in (1, 2) and s.zero_impl == "fsdp2" and s.offload == "none"


@lru_cache(maxsize=1024)
def divide(term: Term, stage: int) -> Term:   # cached: structures share most of their single-GPU terms
    """``term`` sharded over the N GPUs by ZeRO stage ``stage``."""
    return replace(term, expr=term.expr / N, label=f"{term.label}/N",
                   why=f"{term.why} — sharded over N GPUs ({STAGE_NAMES[stage]})",
                   tensors=tuple((n, size / N) for n, size in term.tensors))


def divide_terms(terms, stage: int) -> list[Term]:
    """``terms`` with the ones ZeRO stage ``stage`` shards divided (``zero_divides``, ``divide``), in order."""
    return [divide(term, stage) if zero_divides(term, stage) else term for term in terms]


def _under_fsdp2(term: Term) -> Term:
    """A single-GPU term under FSDP2's ZeRO-3: the gradients made before the first layer's backward are sharded
    by then (the first layer end counts them), and the end of backward is FSDP2's reduce-scatter (the root's holds
    the embedding's gradient), not the single GPU's temporaries.

    >>> from symvram.ledger.build import build_ledger
    >>> [p.name for p in _under_fsdp2(build_ledger(Structure()).by_key["grads_before_first_layer"]).phases]
    ['FIRST_LAYER_RECOMPUTE']
    """
    gone = {Phase.BACKWARD_END} if term.block == "transient" else set()
    if term.role is Role.GRADIENTS_SO_FAR:
        gone.add(Phase.FIRST_LAYER_BACKWARD)
    phases = tuple(p for p in term.phases if p not in gone)
    return term if phases == term.phases else replace(term, lifetime=phases)


def shard_terms(terms: list[Term], s: Structure) -> list[Term]:
    """Per-GPU terms (and ``host`` terms for offload) of a single-GPU term list; identity for DDP."""
    out = divide_terms([_tensor_parallel(term, s) if s.tensor_parallel else term for term in terms], s.zero)
    if s.zero == 3 and s.zero_impl == "fsdp2":
        out = [_under_fsdp2(term) for term in out] + list(_fsdp_terms(s.keep(FSDP_FIELDS)))
    if s.zero and s.zero_impl == "deepspeed":
        out += deepspeed_terms(s)
    if s.offload == "none":
        return out
    moved = ("optimizer", "params") if s.offload == "optimizer+params" else ("optimizer",)
    return [replace(term, place=Place.HOST, why=term.why + " — offloaded to CPU memory")
            if term.info.offload in moved else term for term in out if term.info.offload != "dropped"]


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
    return out


__all__ = ["zero_divides", "shard_terms", "fsdp_terms", "deepspeed_terms", "layer_bytes", "root_bytes",
           "norm_params", "notes"]
