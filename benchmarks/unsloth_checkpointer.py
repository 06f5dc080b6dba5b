"""Run unsloth_zoo's own offloaded gradient checkpointer (``UnslothCheckpointFunction``, plain torch) on the CPU and
report what it keeps where, for the ledger's ``--checkpoint-impl unsloth`` terms to be checked against.

The source is unsloth_zoo's wheel, unpacked (it is not a dependency: ``pip download unsloth_zoo==2026.10.9 --no-deps
-d /tmp/u && unzip /tmp/u/*.whl -d /tmp/u/src``). Only its CUDA plumbing is replaced: streams and events by no-ops
(the copies' overlap is not what is measured), the device staging buffers made on the CPU, the per-device tables read
at index 0 (a CPU tensor's device index is None), pinned memory off (UNSLOTH_DISABLE_PINNED_MEMORY=1: pageable
slots, same sizes) and ``torch.cuda.mem_get_info`` answering 80 GiB free (so double buffering turns on, as on a
roomy card). Every buffer size, slot lease, offload decision and the saved tensors are unsloth_zoo's own.

    python benchmarks/unsloth_checkpointer.py /tmp/u/src --layers 4 --tokens 2048 --hidden 1024
    python benchmarks/unsloth_checkpointer.py /tmp/u/src --cases   # rewrites results/unsloth_checkpointer.json
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import types
import weakref


def load(src: str):
    """unsloth_zoo/gradient_checkpointing.py as a module, its three sibling imports stubbed (device type: cuda)."""
    from packaging.version import Version

    pkg = types.ModuleType("unsloth_zoo")
    pkg.__path__ = []
    utils = types.ModuleType("unsloth_zoo.utils")
    utils._get_dtype, utils.Version, utils.is_distributed = (lambda d: d), Version, (lambda: False)
    integrated = types.ModuleType("unsloth_zoo.integrated_device")
    integrated._any_device_integrated = lambda: False
    device = types.ModuleType("unsloth_zoo.device_type")
    device.is_hip, device.get_device_type = (lambda: False), (lambda: "cuda")
    device.DEVICE_TYPE = device.DEVICE_TYPE_TORCH = "cuda"
    device.DEVICE_COUNT, device.ALLOW_PREQUANTIZED_MODELS = 1, True
    for module in (pkg, utils, integrated, device):
        sys.modules[module.__name__] = module
    spec = importlib.util.spec_from_file_location("unsloth_zoo.gradient_checkpointing",
                                                  os.path.join(src, "unsloth_zoo", "gradient_checkpointing.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


class _Stream:
    def wait_stream(self, stream): pass
    def wait_event(self, event): pass
    def record_event(self): return _Event()


class _Event:
    def record(self, stream=None): pass


class _AtZero(list):
    """A per-device table read at device 0 (a CPU tensor's device index is None)."""
    def __getitem__(self, i): return list.__getitem__(self, 0 if i is None else i)
    def __setitem__(self, i, v): list.__setitem__(self, 0 if i is None else i, v)


def trace(src: str, layers: int, tokens: int, hidden: int, lora: bool = True) -> dict:
    """Two micro-batches through ``layers`` checkpointed blocks (bf16, [1, tokens, hidden]); what the second one's
    forward leaves: which layer inputs are saved on the card, the staging buffers' and the host slots' bytes."""
    os.environ["UNSLOTH_DISABLE_PINNED_MEMORY"] = "1"
    import torch

    m = load(src)
    getitem = m._PerDeviceSlots.__getitem__
    m._PerDeviceSlots.__getitem__ = lambda self, i: getitem(self, 0 if i is None else i)
    m._new_gpu_buffer = lambda i: torch.empty(m.INITIAL_GPU_BUFFER_SIZE, dtype=m.GPU_BUFFER_DTYPE)
    m._new_extra_stream = m._main_stream = m._compute_stream = lambda i: _Stream()
    m._visible_device_count = lambda: 1
    m._double_buffer_event_ctor = lambda: _Event
    m.torch_gpu_stream = lambda stream: contextlib.nullcontext()
    torch.cuda.mem_get_info = lambda i=None: (80 << 30, 80 << 30)
    m.initialize_unsloth_gradient_checkpointing(torch.bfloat16)
    m.NEXT_BUFFER_SLOT = _AtZero(m.NEXT_BUFFER_SLOT)
    m.BUFFER_EVENTS_A, m.BUFFER_EVENTS_B = _AtZero(m.BUFFER_EVENTS_A), _AtZero(m.BUFFER_EVENTS_B)

    torch.manual_seed(0)
    weights = [torch.randn(hidden, hidden, dtype=torch.bfloat16) / hidden**0.5 for _ in range(layers)]
    scales = [torch.nn.Parameter(torch.zeros(hidden, dtype=torch.bfloat16)) for _ in range(layers)]
    embedding_scale = torch.nn.Parameter(torch.ones(hidden, dtype=torch.bfloat16))

    def block(i):
        return lambda x: (x @ weights[i]) * (1 + scales[i])

    report = {}
    for micro_batch in range(2):   # the first offloads every layer (FIRST_PASS); the second keeps the last
        embedding_output = torch.randn(1, tokens, hidden, dtype=torch.bfloat16)
        if lora:   # enable_input_require_grads: the frozen embedding's output, a leaf that requires grad
            embedding_output.requires_grad_(True)
        else:      # a trainable embedding: its output is computed from the weight, no leaf
            embedding_output = embedding_output * embedding_scale
        saved, inputs = [], []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: (saved.append(t), t)[1], lambda t: t):
            x = embedding_output
            for i in range(layers):
                inputs.append(weakref.ref(x))
                x = m.unsloth_checkpoint(block(i), x, use_reentrant=True, preserve_rng_state=False)
        del embedding_output
        if micro_batch == 1:
            alive = [i for i, ref in enumerate(inputs) if ref() is not None]
            report = {
                "saved_inputs": [i for i, ref in enumerate(inputs) if any(t is ref() for t in saved)],
                "alive_inputs": alive,   # saved, or kept by the graph (the leaf's AccumulateGrad node)
                "staging_bytes": sum(b.numel() * b.element_size() for slots in (m.GPU_BUFFERS, m.GPU_BUFFERS_B)
                                     for b in m._allocated_slots(slots)),
                "host_bytes": sum(b.numel() * b.element_size() for b in m.CPU_BUFFERS),
                "input_bytes": tokens * hidden * 2,
            }
        x.float().sum().backward()
    return report


# (layers, tokens, hidden, LoRA): offloaded (4 MiB inputs), at the 2 MiB floor (kept), one layer, a trainable embedding
CASES = [(4, 2048, 1024, True), (4, 1024, 1024, True), (1, 2048, 1024, True), (4, 2048, 1024, False),
         (3, 3000, 512, True)]
RESULTS = os.path.join(os.path.dirname(__file__), "results", "unsloth_checkpointer.json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="unsloth_zoo's wheel, unpacked")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--full", action="store_true", help="a trainable embedding: its output is no leaf")
    ap.add_argument("--cases", action="store_true", help=f"run CASES and write {os.path.relpath(RESULTS)}")
    a = ap.parse_args()
    if not a.cases:
        print(json.dumps(trace(a.src, a.layers, a.tokens, a.hidden, lora=not a.full)))
        return
    rows = [{"layers": n, "tokens": t, "hidden": w, "lora": lora, **trace(a.src, n, t, w, lora)}
            for n, t, w, lora in CASES]
    with open(RESULTS, "w", encoding="utf-8") as f:
        json.dump({"source": "unsloth_zoo 2026.10.9 gradient_checkpointing.py, run on the CPU", "rows": rows}, f,
                  indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
