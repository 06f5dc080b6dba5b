"""torch._grouped_mm on fp32 and fp16 operands under FakeTensorMode, as CUDA's per-group fallback allocates.

PEFT's ``prepare_model_for_kbit_training`` casts the fused MoE experts (3-D parameters, not bitsandbytes'
Linear4bit) to fp32, and transformers passes them to ``torch.nn.functional.grouped_mm`` on any CUDA card of SM 8.0
or newer (integrations/moe.py:302-352 ``_can_use_grouped_mm``: the dtype matters only under torch.compile) — with
the input cast to the weights' fp32 (moe.py:379): grouped_mm is no autocast op (torch 2.13
include/ATen/autocast_mode.h:820 ``AT_FORALL_LOWER_PRECISION_FP`` does not list it). torch's CUDA kernel
(aten/src/ATen/native/cuda/GroupedBlas.cpp ``_grouped_mm_cuda``) takes its CUTLASS fast path for bf16 only; for
fp32 it allocates the output as it always does (include/ATen/native/GroupedMMUtils.h:39-78
``create_grouped_gemm_output_tensor``: one empty_strided tensor, its last dimension padded to 16 bytes) and fills it
by ``_grouped_mm_fallback`` (GroupedMMUtils.h:124-173): one ``at::mm_out`` per group into a slice of that output,
on views of the operands — no other device tensor (the offsets are copied to the host). Autograd's formulas
(torch/csrc/autograd/FunctionsManual.cpp ``_grouped_mm_mat1_backward`` / ``_mat2_backward``) call _grouped_mm again
on transposed views, so the backward allocates the input's gradient and, for trainable experts only, the weight's.

torch's meta kernel (torch/_meta_registrations.py:8645, ``_meta_grouped_mm_common``) accepts bf16 only, so a
FakeTensor trace of the k-bit-prepared MoE step stops there. ``register()`` adds a fake implementation for fp32 and
fp16 operands that makes exactly the CUDA output tensor (bf16 still goes to torch's meta kernel). Modelled from the
source, not measured on CUDA: whether cuBLAS' mm_out on those slices needs workspace beyond the process's usual one
is not traced.

>>> import torch
>>> from torch._subclasses.fake_tensor import FakeTensorMode
>>> register()
>>> with FakeTensorMode():
...     a, w = torch.empty(10, 8), torch.empty(3, 8, 6)
...     out = torch._grouped_mm(a, w, offs=torch.tensor([3, 7, 10], dtype=torch.int32))
>>> tuple(out.shape), out.stride(), out.dtype
((10, 6), (8, 1), torch.float32)
"""
from __future__ import annotations

import torch

_WIDER = (torch.float32, torch.float16)


def output_layout(a: torch.Tensor, b: torch.Tensor, offs, dtype: torch.dtype) -> tuple[list[int], list[int]]:
    """The (size, stride) of CUDA's grouped-mm output (GroupedMMUtils.h:39-78): 2-D × 3-D gives (M, N), 2-D × 2-D
    one (G, M, N) block per group, the last dimension's stride padded to a multiple of 16 bytes.

    >>> output_layout(torch.empty(10, 8), torch.empty(3, 8, 6), torch.empty(3), torch.float32)
    ([10, 6], [8, 1])
    >>> output_layout(torch.empty(6, 10), torch.empty(10, 8), torch.empty(3), torch.float32)
    ([3, 6, 8], [48, 8, 1])
    """
    if a.dim() == 2:
        size = [offs.size(0), a.size(0), b.size(1)] if b.dim() == 2 else [a.size(0), b.size(-1)]
    else:
        size = [a.size(1), b.size(1)] if b.dim() == 2 else [a.size(0), a.size(1), b.size(-1)]
    align = 16 // dtype.itemsize
    padded = -(-size[-1] // align) * align
    stride = [padded, 1] if (a.dim() == 2) != (b.dim() == 2) else [size[1] * padded, padded, 1]
    return size, stride


def _fake_grouped_mm(fake_mode, func, mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """CUDA's fp32/fp16 grouped mm as a FakeTensor: its one output tensor; bf16 is left to torch's meta kernel."""
    if mat_a.dtype not in _WIDER or bias is not None:
        return NotImplemented
    from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager

    if (out_dtype or mat_a.dtype) != mat_a.dtype or mat_b.dtype != mat_a.dtype:
        raise RuntimeError(f"grouped mm: mat_a {mat_a.dtype}, mat_b {mat_b.dtype}, out {out_dtype}: the CUDA "
                           "fallback needs one dtype (GroupedMMUtils.h:115-121)")
    size, stride = output_layout(mat_a, mat_b, offs, mat_a.dtype)
    with in_kernel_invocation_manager(fake_mode):
        out = torch.empty_strided(size, stride, dtype=mat_a.dtype, device="meta")
    return FakeTensor(fake_mode, out, mat_a.device)


def register() -> None:
    """Add the fp32/fp16 fake implementation of aten._grouped_mm (once per process)."""
    from torch._subclasses.fake_impls import op_implementations_dict

    op = torch.ops.aten._grouped_mm.default
    if op_implementations_dict.get(op) is not _fake_grouped_mm:
        op_implementations_dict[op] = _fake_grouped_mm
