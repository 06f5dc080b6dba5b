"""TRL's activation offloading, run on the CPU under FakeTensorMode (``measure`` uses it for
``offload_activations``).

TRL 1.16's ``OffloadActivations`` (trl/models/activation_offloading.py, copied from torchtune's
``torchtune/training/_activation_offloading.py``) is a ``torch.autograd.graph.saved_tensors_hooks`` around the
Trainer's ``training_step`` (sft_trainer.py:1190-1193, :1691-1693). This class applies the same rules to the
same saved tensors, with the host copy kept as a byte count instead of a pinned CPU tensor (on this machine
the "device" is the CPU; TRL would skip CPU tensors, :228):

* a saved tensor is copied to the host unless it is under 1024 bytes (:233), a Parameter or buffer or a view
  of a parameter's storage (:238-262), or its storage is already offloaded and still in the forward stash: then
  the device tensor is kept as it is (:217-225, with streams);
* with streams (the default) the last 5 offloaded tensors stay on the device in the forward stash; each new
  offload frees those 5 or more behind it (:281-291, ``max_fwd_stash_size=5``);
* in backward an offloaded tensor is brought back as a new device tensor (:434-447) — or taken from the forward
  stash (:429-432) — and kept in the backward stash until the autograd node after the one that unpacked it
  finishes (:471-522; a node whose output is a view of it frees it at its own end, :497-502);
* lm_head runs under a no-op hook (:717-720): what it saves stays on the device.

The streams' timing (the copies overlapping compute) is not traced: each offload is taken as done when the
next 5 are issued, as the stash's events make it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.autograd.graph import saved_tensors_hooks

MIN_OFFLOAD_BYTES = 1024   # OffloadActivations(min_offload_size=1024)
FORWARD_STASH = 5          # OffloadActivations(max_fwd_stash_size=5)


@dataclass
class _Saved:
    tensor: torch.Tensor | None       # the device tensor kept (not offloaded), or None
    host_bytes: int = 0               # bytes of its pinned host copy (0: not offloaded)
    shape: tuple = ()
    stride: tuple = ()
    dtype: torch.dtype | None = None


def _storage_key(t: torch.Tensor) -> tuple:
    """TRL's ``_get_unique_tensor_key`` (:53-80): the storage and offset, and the dtype."""
    return (t.untyped_storage()._cdata, t.storage_offset(), t.dtype)


class OffloadedActivations(saved_tensors_hooks):
    """TRL's ``OffloadActivations(use_streams=True)`` over fake tensors; ``host_peak`` is the most host bytes
    the pinned copies held at once."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.param_storages = {p.untyped_storage()._cdata for p in model.parameters()}
        self.tracker: dict[int, _Saved] = {}
        self.fwd_stash: dict[int, torch.Tensor] = {}
        self.bwd_stash: dict[int, torch.Tensor] = {}
        self.storage_ids: dict[tuple, int] = {}
        self.key_of: dict[int, tuple] = {}
        self.next_id = 0
        self.node = None
        self.host = self.host_peak = 0
        super().__init__(self._pack, self._unpack)

    def _release(self, tid: int) -> None:
        key = self.key_of.pop(tid, None)
        if key is not None and self.storage_ids.get(key) == tid:
            del self.storage_ids[key]

    def _pack(self, t: torch.Tensor) -> int:
        self.next_id += 1
        tid = self.next_id
        key = _storage_key(t)
        if key in self.storage_ids:   # its storage was offloaded and is still stashed: kept on the device (:221)
            self.tracker[tid] = _Saved(t)
            self.storage_ids[key], self.key_of[tid] = tid, key
            return tid
        if (t.numel() * t.element_size() < MIN_OFFLOAD_BYTES or isinstance(t, torch.nn.Parameter)
                or t.untyped_storage()._cdata in self.param_storages):
            self.tracker[tid] = _Saved(t)
            return tid
        if 0 not in t.stride() and (not t.is_contiguous() or t.storage_offset() != 0):
            t = t.clone(memory_format=torch.contiguous_format)   # :274-278
        for old in list(self.fwd_stash):   # :282-291
            if old > tid - FORWARD_STASH:
                break
            del self.fwd_stash[old]
            self._release(old)
        nbytes = t.untyped_storage().nbytes() if 0 in t.stride() else t.numel() * t.element_size()
        self.tracker[tid] = _Saved(None, nbytes, tuple(t.shape), tuple(t.stride()), t.dtype)
        self.host += nbytes
        self.host_peak = max(self.host_peak, self.host)
        self.fwd_stash[tid] = t
        self.storage_ids[key], self.key_of[tid] = tid, key
        return tid

    def _unpack(self, tid: int) -> torch.Tensor:
        saved = self.tracker.pop(tid)
        self._release(tid)
        if saved.tensor is not None:
            return saved.tensor
        self.host -= saved.host_bytes
        node = torch._C._current_autograd_node()
        previous = []
        if node is not None and node is not self.node:   # a new node: the previous node's tensors go after it (:424-427)
            self.node = node
            previous = list(self.bwd_stash)
        from_host = tid not in self.fwd_stash
        if from_host:   # brought back, kept until the node after this one ends (:434-447)
            back = torch.empty_strided(saved.shape, saved.stride, dtype=saved.dtype)
            self.bwd_stash[tid] = back
            uses = torch._C._storage_Use_Count(back.untyped_storage()._cdata)
        else:           # still on the device in the forward stash (:429-432)
            back = self.fwd_stash[tid]

        def hook(outputs, inputs):  # noqa: ARG001 - autograd's post-hook signature
            if from_host and tid in self.bwd_stash and torch._C._storage_Use_Count(
                    self.bwd_stash[tid].untyped_storage()._cdata) > uses:
                del self.bwd_stash[tid]    # a view outlives the node: record_stream, dropped now (:497-502)
            for old in list(self.fwd_stash):   # in backward now (:508-512)
                del self.fwd_stash[old]
                self._release(old)
            for old in previous:   # :515-522
                self.bwd_stash.pop(old, None)

        if node is not None:
            node.register_hook(hook)
        return back

    def __exit__(self, *args):
        self.bwd_stash.clear()
        self.fwd_stash.clear()
        return super().__exit__(*args)


class NoOffload(saved_tensors_hooks):
    """TRL's ``NoOpManager`` (:624-637): saved tensors stay as they are (lm_head's forward)."""

    def __init__(self) -> None:
        super().__init__(lambda t: t, lambda t: t)


def keep_head_on_device(model: torch.nn.Module) -> None:
    """``get_act_offloading_ctx_manager``'s hooks on lm_head (:717-720; a PEFT model's base model's)."""
    base = model.base_model if hasattr(model, "peft_config") else model
    head = base.model.lm_head if hasattr(model, "peft_config") else base.lm_head
    noop = NoOffload()
    head.register_forward_pre_hook(lambda *a: noop.__enter__())
    head.register_forward_hook(lambda *a: noop.__exit__(), always_call=True)
