"""Counting the FLOPs of a real (fake-tensor) training step with ``torch.utils.flop_counter``.

``FlopCounterMode`` counts matmul-class ops only (mm, addmm, bmm, baddbmm, convolutions, the SDPA
kernels it knows): elementwise work (norms, activations, softmax, the loss, the optimizer's update,
embedding lookups and their backward) is not counted, and neither is causal masking (attention is
counted as the full s×s score matrix, as the counter's own formulas do).

Two kernels that the training steps run have no formula in torch 2.13, so the counter silently drops
them; they are registered here with the counter's own conventions:

* ``aten._scaled_dot_product_flash_attention_for_cpu`` (and its backward): the CPU SDPA kernel, same
  shapes and same FLOPs as the CUDA flash kernel (forward QKᵀ and AV; backward the score recompute
  plus four matmuls);
* ``aten._grouped_mm``: the MoE experts' grouped matmul (2·M·K·N over all groups).

>>> counter = flop_counter()
>>> isinstance(counter, __import__("torch").utils.flop_counter.FlopCounterMode)
True
"""
from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten


def _shape(t):
    return tuple(t.shape) if isinstance(t, torch.Tensor) else t


def cpu_sdpa_flop(query, key, value, *args, out_val=None, **kwargs) -> int:
    """The CPU flash kernel: as the counter's ``aten._scaled_dot_product_flash_attention`` (not causal-discounted)."""
    return sdpa_flop_count(_shape(query), _shape(key), _shape(value))


def cpu_sdpa_backward_flop(grad_out, query, key, value, *args, out_val=None, **kwargs) -> int:
    return sdpa_backward_flop_count(_shape(grad_out), _shape(query), _shape(key), _shape(value))


def grouped_mm_flop(a, b, *args, out_val=None, **kwargs) -> int:
    """2·M·K·N summed over the groups: a 2-D × 3-D product (tokens × per-expert weights), a 2-D × 2-D one
    split along the inner dimension by offsets (the weight gradient), or a batched 3-D × 3-D one."""
    sa, sb = _shape(a), _shape(b)
    if len(sa) == 2 and len(sb) == 3:    # (M, K) × (G, K, N) → (M, N)
        return 2 * sa[0] * sa[1] * sb[2]
    if len(sa) == 2 and len(sb) == 2:    # (M, K_total) × (K_total, N) → (G, M, N): the groups split K
        return 2 * sa[0] * sa[1] * sb[1]
    if len(sa) == 3 and len(sb) == 2:    # (G, M, K) × (K, N_total) → (M, N_total)
        return 2 * sa[1] * sa[2] * sb[1]
    return 2 * sa[0] * sa[1] * sa[2] * sb[2]  # (G, M, K) × (G, K, N)


def _raw(fn):
    fn._get_raw = True  # the counter passes tensors; the functions above read the shapes themselves
    return fn


CUSTOM = {
    aten._scaled_dot_product_flash_attention_for_cpu: _raw(cpu_sdpa_flop),
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _raw(cpu_sdpa_backward_flop),
    aten._grouped_mm: _raw(grouped_mm_flop),
}


class _GlobalOnly:
    """Stands in for FlopCounterMode's ModuleTracker: only the global count is read, so its module hooks
    (forward and backward, on every module) would be work for nothing."""

    parents = frozenset({"Global"})

    def __enter__(self):
        return self

    def __exit__(self, *args):
        return None


def flop_counter() -> FlopCounterMode:
    """A FlopCounterMode that also counts the CPU SDPA kernels and the grouped expert matmul, without
    per-module attribution. Never run it where memory is measured: it decomposes the ops it has no formula
    for (see validate.measure.count_flops)."""
    counter = FlopCounterMode(display=False, custom_mapping=CUSTOM)
    counter.mod_tracker = _GlobalOnly()
    return counter


class PhaseFlops:
    """Reads the counter at each phase change of the training steps: FLOPs of forward and backward
    (the recompute of checkpointed layers happens inside backward), per step, from the last step."""

    def __init__(self, counter: FlopCounterMode) -> None:
        self.counter = counter
        self.marks: list[tuple[str, int]] = []

    def __call__(self, phase: str | None) -> None:
        self.marks.append((phase or "end", self.counter.get_total_flops()))

    def last_step(self) -> dict[str, int]:
        """{forward, backward, optimizer, total} of the last step (the first step's are equal)."""
        self("end")
        out: dict[str, int] = {}
        for (name, start), (_, stop) in zip(self.marks, self.marks[1:]):
            if ":" in name:
                out[name.split(":", 1)[1]] = stop - start  # later steps overwrite earlier ones
        out.pop("zero_grad", None)
        out["total"] = out.get("forward", 0) + out.get("backward", 0) + out.get("optimizer", 0)
        return out
