"""torchtitan's op-level selective activation checkpointing (``SelectiveAC``), as the validate tracer runs it on the
decoder layers that transformers checkpoints (non-reentrant, ``context_fn``).

As in torchtitan ``torchtitan/distributed/activation_checkpoint.py`` at b5bcd76 (2026-08-21): the save set
``_get_default_save_ops`` (:31-94: torch's ``get_default_op_list().compute_intensive_ops``, torch 2.13
``_functorch/partitioners.py:2971-2983`` — mm, addmm, bmm, the CUDA SDPA flash/efficient ops … — plus cudnn/math
SDPA, ``aten.max``, ``aten.linear``, topk, reduce_scatter, all_to_all) and the policy of ``SelectiveAC._wrap_block``
(:245-270): each ``aten.mm`` (or ``aten.linear``) counts, the even-numbered ones are recomputed, every other op of the
save set is saved (``MUST_SAVE``), all else recomputed; ``early_stop=False`` (:277). The counter restarts for every
checkpointed call (one ``meta`` per ``context_fn`` call). The MoE router's forced recompute
(``force_recompute_mm_shapes_by_fqns``) matches no dense layer's linear and its rule that saves CUDA → CPU copies
(:249-256) meets none in a dense layer: both are left out (MoE is refused).

On a CPU, SDPA runs ``aten._scaled_dot_product_flash_attention_for_cpu`` (not in the save set); the tracer saves it
in place of the CUDA ``_scaled_dot_product_flash_attention`` it stands for (both return the output and the fp32
log-sum-exp of each query; the CUDA op's philox seed and offset are two 8-byte scalars the ledger leaves out —
modelled, not measured)."""
from __future__ import annotations

import torch

aten = torch.ops.aten
MM_OPS = (aten.mm.default, aten.linear.default)
SAVE_OPS = frozenset({
    aten.mm.default, aten.convolution.default, aten.convolution_backward.default, aten.bmm.default,
    aten.addmm.default, aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_efficient_attention.default, aten._flash_attention_forward.default,
    aten._efficient_attention_forward.default, aten.upsample_bilinear2d.default, aten._scaled_mm.default,
    aten._scaled_dot_product_cudnn_attention.default, aten._scaled_dot_product_attention_math.default,
    aten._scaled_dot_product_fused_attention_overrideable.default, aten.max.default, aten.linear.default,
    aten.topk.default, torch.ops._c10d_functional.reduce_scatter_tensor.default,
    torch.ops._c10d_functional.all_to_all_single.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,   # the CPU's stand-in for the CUDA flash op
})


def context_fn():
    """A fresh policy (its own mm counters) for one checkpointed call."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    meta = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func in MM_OPS:
            meta[mode] += 1
        if func in SAVE_OPS and not (func in MM_OPS and meta[mode] % 2 == 0):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def checkpoint_kwargs() -> dict:
    """``torch.utils.checkpoint.checkpoint``'s keywords for torchtitan's op-level policy (transformers passes them on,
    modeling_utils.py:3158-3170)."""
    return {"use_reentrant": False, "context_fn": context_fn, "early_stop": False}
