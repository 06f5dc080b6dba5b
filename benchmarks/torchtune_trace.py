"""torchtune's own model, chunked loss and optimizer step traced under FakeTensorMode (``--stack torchtune``).

torchtune is not a dependency of symvram: run this in a venv that has it (torchtune 0.6.1 needs torchao's
``dtypes.nf4tensor``, gone from torchao 0.18; torchao 0.10.0 has it), with this checkout on PYTHONPATH:

    PYTHONPATH=$PWD /work/venv-tt/bin/python benchmarks/torchtune_trace.py   # → benchmarks/results/torchtune_trace.json

(a venv made with ``python3 -m venv`` and ``pip install --no-deps torchtune==0.6.1 torchao==0.10.0 datasets
multiprocess pandas pyarrow dill xxhash omegaconf torchdata sentencepiece tiktoken blobfile kagglehub`` — what
``import torchtune`` imports — runs it with this project's venv's site-packages, torch among them, after ``$PWD`` on
PYTHONPATH)

(or name cases to print their rows only). tests/test_torchtune.py checks today's estimate against the stored rows.

Each case builds what ``recipes/lora_finetune_single_device.py`` (and the full recipe) builds, on the meta device then
as FakeTensors: the model under ``training.set_default_dtype(bf16)`` (:431, so LoRA's adapters are bf16 too),
``set_trainable_params(model, get_adapter_params(model))`` (:440-441), ``set_activation_checkpointing`` per
``TransformerSelfAttentionLayer`` (:446-449), ``model.set_num_output_chunks(8)`` (:302); each step is ``_loss_step``
(:640-661: the labels shifted by ``hstack`` with an ignore column, ``CEWithChunkedOutputLoss``, ``del logits``), the loss
scaled by the token count, ``backward()``, ``training.scale_grads``, ``optimizer.step()``, ``zero_grad(set_to_none=True)``
(the recipe's default ``optimizer: torch.optim.AdamW, fused: True``); with ``optimizer_in_bwd`` (the full recipe,
full_finetune_single_device.py:468-477) one AdamW per parameter stepped by ``training.register_optim_in_bwd_hooks``
and no step after the backward. With ``enable_activation_offloading: True`` (the recipes'
``training.get_act_offloading_ctx_manager(model, True)``, :484-486, entered around the model's forward only,
:643-644) torchtune's own ``OffloadActivations`` runs on the CPU (``offloading``: only its CUDA streams and pinned host
copies replaced; the row adds ``host_peak_bytes``, the most bytes its host copies held at once). The peak is measured
by symvram's own tracker (``symvram.validate.measure.PeakTracker``: MemTracker without module hooks, what
``max_memory_allocated`` reports).
"""
from __future__ import annotations

import contextlib
import sys
import types
import weakref

import torch

from program_trace import run_cases

CASES = (  # name, torchtune builder arguments, run settings
    ("tiny-lora", dict(vocab_size=1000, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, intermediate_dim=176,
                       max_seq_len=256), dict(method="lora", rank=8, batch=2, seq=64, checkpointing=False)),
    ("tiny-lora-ckpt", dict(vocab_size=1000, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64,
                            intermediate_dim=176, max_seq_len=256),
     dict(method="lora", rank=8, batch=2, seq=64, checkpointing=True)),
    ("tiny-full", dict(vocab_size=1000, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, intermediate_dim=176,
                       max_seq_len=256), dict(method="full", batch=2, seq=64, checkpointing=False)),
    # Llama 3.2 1B at real size (llama3_2/_model_builders.py:32-43), as recipes/configs/llama3_2/1B_lora_single_device.yaml
    ("llama3.2-1b-lora", dict(vocab_size=128_256, num_layers=16, num_heads=32, num_kv_heads=8, embed_dim=2048,
                              intermediate_dim=8192, max_seq_len=131072),
     dict(method="lora", rank=64, alpha=128, batch=4, seq=1024, checkpointing=False)),
    ("llama3.2-1b-lora-ckpt", dict(vocab_size=128_256, num_layers=16, num_heads=32, num_kv_heads=8, embed_dim=2048,
                                   intermediate_dim=8192, max_seq_len=131072),
     dict(method="lora", rank=64, alpha=128, batch=4, seq=1024, checkpointing=True)),
    # recipes/full_finetune_single_device.py with optimizer_in_bwd: True (:468-477), on an untied model (the ledger
    # refuses tied embeddings in backward) and torch's fused AdamW; Llama-3.1-8B as a 4-layer slice at real width
    ("tiny-full-inbwd", dict(vocab_size=1000, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64,
                             intermediate_dim=176, max_seq_len=256, tie_word_embeddings=False),
     dict(method="full", batch=2, seq=64, checkpointing=False, in_bwd=True)),
    ("llama3.1-8b-4layers-full-inbwd", dict(vocab_size=128_256, num_layers=4, num_heads=32, num_kv_heads=8,
                                            embed_dim=4096, intermediate_dim=14336, max_seq_len=131072,
                                            tie_word_embeddings=False),
     dict(method="full", batch=1, seq=1024, checkpointing=True, in_bwd=True)),
    ("llama3.2-1b-full", dict(vocab_size=128_256, num_layers=16, num_heads=32, num_kv_heads=8, embed_dim=2048,
                              intermediate_dim=8192, max_seq_len=131072),
     dict(method="full", batch=2, seq=1024, checkpointing=True)),
    # enable_activation_offloading: True (the recipes require activation checkpointing with it,
    # lora_finetune_single_device.py:167-175)
    ("tiny-lora-offload", dict(vocab_size=1000, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64,
                               intermediate_dim=176, max_seq_len=256),
     dict(method="lora", rank=8, batch=2, seq=64, checkpointing=True, offload=True)),
    ("tiny-full-offload", dict(vocab_size=1000, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64,
                               intermediate_dim=176, max_seq_len=256),
     dict(method="full", batch=2, seq=64, checkpointing=True, offload=True)),
    ("llama3.2-1b-lora-offload", dict(vocab_size=128_256, num_layers=16, num_heads=32, num_kv_heads=8, embed_dim=2048,
                                      intermediate_dim=8192, max_seq_len=131072),
     dict(method="lora", rank=64, alpha=128, batch=4, seq=1024, checkpointing=True, offload=True)),
    ("llama3.2-1b-full-offload", dict(vocab_size=128_256, num_layers=16, num_heads=32, num_kv_heads=8, embed_dim=2048,
                                      intermediate_dim=8192, max_seq_len=131072),
     dict(method="full", batch=2, seq=1024, checkpointing=True, offload=True)),
)
# cases the ledger does not match yet, and why (stored with the row, never dropped)
OPEN = {"llama3.1-8b-4layers-full-inbwd": (
    "the ledger is 15 % under this trace, and not because of torchtune: symvram's own validate shows the same gap "
    "for --loss-impl chunked with --optimizer-in-backward on transformers' Llama (tiny, V 8000, T 16: 2,240,520 B "
    "under, any AdamW implementation). Presumably the c chunk projections each make a V·h partial gradient of "
    "lm_head, summed before its one post-accumulate-grad step; the ledger's head_step moment holds one (not "
    "verified). Not resolved")}
# every LoRA case is the recipes' targets: lora_attn_modules [q_proj, v_proj, output_proj], apply_lora_to_mlp True
LORA_ATTN = ["q_proj", "v_proj", "output_proj"]


def build(arch: dict, run: dict):
    from torchtune import modules, training
    from torchtune.models.llama3_2 import llama3_2, lora_llama3_2
    from torchtune.modules.peft import get_adapter_params, set_trainable_params

    with training.set_default_dtype(torch.bfloat16), torch.device("meta"):
        if run["method"] == "lora":
            model = lora_llama3_2(LORA_ATTN, apply_lora_to_mlp=True, lora_rank=run["rank"],
                                  lora_alpha=run.get("alpha", 2 * run["rank"]), **arch)
        else:
            model = llama3_2(**arch)
    if run["method"] == "lora":
        set_trainable_params(model, get_adapter_params(model))
    if run["checkpointing"]:
        training.set_activation_checkpointing(model, auto_wrap_policy={modules.TransformerSelfAttentionLayer})
    model.set_num_output_chunks(8)
    return model


class _Stream:   # a CUDA stream's and event's calls, as no-ops: the copies' overlap is not what is measured
    def wait_stream(self, stream): pass
    def wait_event(self, event): pass
    def record_event(self): return self


class _HostCopy:
    """What ``torch.empty_like(activation, pin_memory=True, device="cpu")`` makes (_activation_offloading.py:171-173):
    the shape and strides ``empty_like`` gives (a dense tensor's own strides, else contiguous ones) and the bytes,
    counted in ``host`` while it lives; ``.to("cuda")`` (:220, :275) is a new tensor of them on the traced device."""

    def __init__(self, t: torch.Tensor, host: dict):
        from torch._prims_common import is_non_overlapping_and_dense_or_false, make_contiguous_strides_for

        self.shape, self.dtype, self.device = tuple(t.shape), t.dtype, t.device
        dense = is_non_overlapping_and_dense_or_false(t)
        self.stride = tuple(t.stride()) if dense else make_contiguous_strides_for(t.shape)
        nbytes = t.numel() * t.element_size()
        host["now"] += nbytes
        host["peak"] = max(host["peak"], host["now"])
        weakref.finalize(self, lambda: host.update(now=host["now"] - nbytes))

    def copy_(self, src, non_blocking=False): return self

    def to(self, device, non_blocking=False):
        return torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device=self.device)


def offloading(model) -> tuple:
    """torchtune's own ``get_act_offloading_ctx_manager(model, True)`` (_activation_offloading.py:373-449: an
    ``OffloadActivations()`` with its defaults, use_streams True, max_fwd_stash_size 5, min_offload_size 1024 B, and a
    ``NoOpManager`` entered around the output projection) run on the CPU: only its CUDA plumbing is replaced, in the
    module's own ``torch`` name — the streams by no-ops and the pinned host copy by a ``_HostCopy`` that counts its
    bytes (torchtune offloads any tensor, whatever its device: it has no device check, :150-153). Every pack, stash,
    unpack and free is torchtune's. Returns the context and the host byte counter."""
    from torchtune.training import _activation_offloading as ao

    host = {"now": 0, "peak": 0}
    cuda = types.SimpleNamespace(default_stream=_Stream, Stream=_Stream, stream=lambda s: contextlib.nullcontext())

    class _Torch(types.ModuleType):
        def __getattr__(self, name):
            return getattr(torch, name)

    shim = _Torch("torch")
    shim.cuda = cuda
    shim.empty_like = lambda t, pin_memory=False, device=None: _HostCopy(t, host)
    ao.torch = shim
    return ao.get_act_offloading_ctx_manager(model, True), host


def trace(arch: dict, run: dict, steps: int = 2) -> dict:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torchtune import training
    from torchtune.modules.loss import CEWithChunkedOutputLoss

    from symvram.validate.measure import PeakTracker, _counts, _fakeify_plain

    fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
    model = build(arch, run)
    for module in model.modules():   # RoPE skips its cache on the meta device (_position_embeddings.py:73-74)
        if hasattr(module, "rope_init") and not module.is_cache_built:
            module.rope_init()
    _fakeify_plain(model, fake_mode)
    trainable, total, params = _counts(model)
    offload, host = offloading(model) if run.get("offload") else (contextlib.nullcontext(), None)
    in_bwd = run.get("in_bwd", False)
    optimizers = {p: torch.optim.AdamW([p], lr=3e-4, weight_decay=0.01, fused=True) for p in params} if in_bwd else \
        {None: torch.optim.AdamW(params, lr=3e-4, weight_decay=0.01, fused=True)}
    loss_fn = CEWithChunkedOutputLoss()
    b, s = run["batch"], run["seq"]
    with fake_mode:
        tokens = torch.randint(0, arch["vocab_size"], (b, s))
        labels_in = tokens.clone()
        ignore = torch.full((b, 1), loss_fn.ignore_index)
    tracker = PeakTracker()
    tracker.track_external(model, *optimizers.values(), tokens, labels_in, ignore)
    if in_bwd:   # after the tracker's own gradient hooks, so that it sees each gradient before the step frees it
        training.register_optim_in_bwd_hooks(model, optimizers)
    with fake_mode, tracker:
        for step in range(1, steps + 1):
            tracker.set_phase(f"step{step}:forward")
            labels = torch.hstack((labels_in[..., 1:], ignore))
            with offload:   # the recipes' _loss_step: the model's forward only (lora_finetune_single_device.py:643-644)
                logits = model(tokens)
            loss = loss_fn(logits, labels)
            del logits
            num_tokens = (labels != loss_fn.ignore_index).sum()
            loss = loss * num_tokens
            tracker.set_phase(f"step{step}:backward")
            loss.backward()
            del loss, labels
            if in_bwd:   # every parameter was stepped by its hook (full_finetune_single_device.py:704-713)
                continue
            training.scale_grads(model, 1 / num_tokens)
            tracker.set_phase(f"step{step}:optimizer")
            optimizers[None].step()
            tracker.set_phase(f"step{step}:zero_grad")
            optimizers[None].zero_grad(set_to_none=True)
    row = {"trainable_params": trainable, "total_params": total, "peak_bytes": tracker.peak_bytes,
           "peak_phase": tracker.peak_phase}
    if host is not None:
        row["host_peak_bytes"] = host["peak"]
    return row


def config(arch: dict) -> dict:
    """The builder's arguments as the config.json symvram reads (the same model: torchtune's Llama 3.2 builders tie
    the embeddings, and its RoPE cache spans max_seq_len = max_position_embeddings)."""
    return {"model_type": "llama", "hidden_size": arch["embed_dim"], "intermediate_size": arch["intermediate_dim"],
            "num_hidden_layers": arch["num_layers"], "num_attention_heads": arch["num_heads"],
            "num_key_value_heads": arch["num_kv_heads"], "head_dim": arch["embed_dim"] // arch["num_heads"],
            "vocab_size": arch["vocab_size"], "tie_word_embeddings": arch.get("tie_word_embeddings", True),
            "max_position_embeddings": arch["max_seq_len"]}


def scenario(run: dict) -> dict:
    """The run as ``Scenario.create`` keywords under ``--stack torchtune`` (the recipes' LoRA targets in
    transformers' names: output_proj is o_proj, w1/w3/w2 are gate/up/down)."""
    kw = {"stack": "torchtune", "method": run["method"], "batch": run["batch"], "seq": run["seq"],
          "grad_checkpointing": run["checkpointing"], "optimizer_in_backward": run.get("in_bwd", False),
          "offload_activations": run.get("offload", False)}
    if run["method"] == "lora":
        kw.update(rank=run["rank"], targets="q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    return kw


def versions() -> dict:
    import torchao
    import torchtune

    return {"torch": torch.__version__, "torchtune": torchtune.__version__, "torchao": torchao.__version__}


def main(argv: list[str]) -> None:
    run_cases("torchtune_trace", CASES, argv, config=config, scenario=scenario, trace=trace, versions=versions, notes=OPEN)


if __name__ == "__main__":
    main(sys.argv[1:])
