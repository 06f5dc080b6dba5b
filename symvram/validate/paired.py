"""Measure an ORPO or CPO/SimPO step as TRL runs it (optional; needs torch and trl).

TRL 1.16's ``ORPOTrainer`` (trl/experimental/orpo/orpo_trainer.py) and ``CPOTrainer`` (experimental/cpo/
cpo_trainer.py) have no reference model and no fused LM head: ``concatenated_forward`` runs the chosen and rejected
rows as one forward of 2·batch rows and keeps the model's logits. ``run_paired`` calls the trainer's own
``compute_loss`` on a stand-in ``self`` (the trainer's ``__init__`` tokenizes a dataset), then ``loss.backward()``,
``optimizer.step()`` and ``zero_grad`` as transformers' Trainer runs them. What the trace does as the GPU does:

* the model's forward is wrapped as accelerate's ``prepare_model`` wraps it under bf16/fp16 mixed precision
  (accelerate accelerator.py:1824-1835): autocast around the forward only, then ``convert_outputs_to_fp32``, so
  the logits the loss reads are an fp32 copy of the lm_head's 16-bit output;
* ``selective_log_softmax`` (trl trainer/utils.py:538-601) takes its GPU branch, TRL's Triton log-prob/entropy
  kernel (kernels/logprob_entropy.py:146-246: four fp32 [2b, s-1] outputs, the logits saved, an fp32 gradient of
  the logits' shape in the backward); triton is absent here, so the module is loaded with a stand-in ``triton``
  whose kernel launches allocate nothing (they write into buffers that exist);
* the batch is what ``DPODataCollatorWithPadding`` (experimental/utils.py) builds: prompt ids and mask [b, p],
  chosen and rejected ids, masks and labels [b, s], no padding: the all-ones attention mask is dropped under SDPA
  as on the GPU (transformers' ``is_tracing``, true for fake tensors, answers false); the metrics' ``.item()``
  reads answer 1.
"""
from __future__ import annotations

import contextlib
import importlib
import sys
import types
from collections import defaultdict

import torch

from .measure import PeakTracker, _fakeify, _untraced_packed_check, build_model, build_optimizer
from .objectives import backward_and_step, traced

# the settings compute_loss reads, at ORPOConfig's (orpo_config.py:86-95) and CPOConfig's (cpo_config.py:108-145)
# defaults; SimPO is CPOTrainer with loss_type simpo (cpo_trainer.py:715-722)
TRAINER_DEFAULTS = {
    "orpo": dict(beta=0.1),
    "cpo": dict(beta=0.1, loss_type="sigmoid", label_smoothing=0.0, alpha=0.0),
    "simpo": dict(beta=0.1, loss_type="simpo", label_smoothing=0.0, alpha=0.0, simpo_gamma=0.5),
}


def _trainer(objective: str):
    if objective == "orpo":
        from trl.experimental.orpo.orpo_trainer import ORPOTrainer
        return ORPOTrainer
    from trl.experimental.cpo.cpo_trainer import CPOTrainer
    return CPOTrainer


def _inputs(b: int, s: int, prompt: int, V: int) -> dict:
    """DPODataCollatorWithPadding's batch: the prompt's ids and mask, the chosen and rejected ids, masks and labels
    (the prompt's positions -100), all int64."""
    labels = torch.randint(0, V, (b, s))
    labels[:, :prompt] = -100
    out = {"prompt_input_ids": torch.randint(0, V, (b, prompt)), "prompt_attention_mask": torch.ones(b, prompt,
                                                                                                    dtype=torch.long)}
    for side in ("chosen", "rejected"):
        out.update({f"{side}_input_ids": torch.randint(0, V, (b, s)),
                    f"{side}_attention_mask": torch.ones(b, s, dtype=torch.long), f"{side}_labels": labels.clone()})
    return out


def _stand_in(objective: str, model, spec: dict):
    """The ``self`` compute_loss reads: the trainer's class without its ``__init__``, the attributes it sets."""
    trainer = _trainer(objective).__new__(_trainer(objective))
    attrs = dict(accelerator=types.SimpleNamespace(device=torch.device("cpu"), gather_for_metrics=lambda x: x),
                 args=types.SimpleNamespace(device=torch.device("cpu")), _peft_has_been_casted_to_bf16=False,
                 is_encoder_decoder=False, padding_value=0, pad_token_id=0, aux_loss_enabled=False,
                 _stored_metrics=defaultdict(lambda: defaultdict(list)), **TRAINER_DEFAULTS[objective])
    if objective != "orpo":
        attrs["cpo_alpha"] = float(spec.get("cpo_alpha", 1.0))
    trainer.__dict__.update(attrs)
    return trainer


def _fake_triton() -> types.ModuleType:
    """A ``triton`` with what logprob_entropy.py touches at import and at launch (``jit``, ``language.constexpr``,
    ``cdiv``): the kernels are replaced before they are launched."""
    tl = types.ModuleType("triton.language")
    tl.constexpr = object
    triton = types.ModuleType("triton")
    triton.jit, triton.language, triton.cdiv = (lambda fn: fn), tl, (lambda a, b: -(-a // b))
    return triton


@contextlib.contextmanager
def gpu_logprob_kernel():
    """TRL's Triton log-prob/entropy kernel as ``selective_log_softmax`` runs it on a GPU, under the fake mode."""
    from torch._subclasses import fake_impls
    import trl.trainer.utils as utils
    from transformers import masking_utils

    saved_modules = {n: sys.modules.get(n) for n in ("triton", "triton.language", "trl.kernels.logprob_entropy")}
    triton = _fake_triton()
    sys.modules.update({"triton": triton, "triton.language": triton.language})
    sys.modules.pop("trl.kernels.logprob_entropy", None)
    kernel = importlib.import_module("trl.kernels.logprob_entropy")

    class _NoAlloc:  # a Triton launch: kernel[grid](...) writes into buffers that exist
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    def supported(logits, index=None, row_mask=None):   # utils.py:510-535 without its device test
        return logits.dtype in (torch.float16, torch.bfloat16, torch.float32) and logits.stride(-1) == 1 and (
            index is None or index.shape == logits.shape[:-1])

    def scalar(fake_mode, func, arg):  # a metric's .item()
        return True if arg.dtype == torch.bool else (1 if not arg.dtype.is_floating_point else 1.0)

    impls = fake_impls.op_implementations_dict
    saved_op = impls.get(torch.ops.aten._local_scalar_dense.default)
    impls[torch.ops.aten._local_scalar_dense.default] = scalar
    patched = {(utils, "is_triton_available"): lambda: True, (utils, "_supports_trl_loss_kernel"): supported,
               (utils, "_fused_logprob_entropy"): kernel.selective_log_softmax_and_entropy,
               (kernel, "_forward_kernel"): _NoAlloc(), (kernel, "_backward_kernel"): _NoAlloc(),
               (masking_utils, "is_tracing"): lambda tensor=None: False}   # an all-ones mask dropped, as on a GPU
    saved = {key: getattr(*key, None) for key in patched}
    for (mod, name), value in patched.items():
        setattr(mod, name, value)
    try:
        yield
    finally:
        for (mod, name), value in saved.items():
            setattr(mod, name, value)
        if saved_op is None:
            impls.pop(torch.ops.aten._local_scalar_dense.default, None)
        else:
            impls[torch.ops.aten._local_scalar_dense.default] = saved_op
        for name, module in saved_modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _mixed_precision_forward(model, autocast: str | None) -> None:
    """accelerate's ``prepare_model`` under mixed precision (accelerator.py:1824-1835): autocast around the forward,
    its 16-bit outputs converted to fp32 (utils/operations.py:889-948 ``convert_outputs_to_fp32``)."""
    if not autocast:
        return
    from accelerate.utils.operations import convert_outputs_to_fp32

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[autocast]
    forward = model.forward.__func__

    def autocast_forward(self, *args, **kwargs):
        with torch.autocast("cpu", dtype=dtype):
            return forward(self, *args, **kwargs)

    model.forward = types.MethodType(convert_outputs_to_fp32(autocast_forward), model)


def run_paired(spec: dict, tracker_factory=PeakTracker):
    """Trace ``spec['steps']`` steps of ORPOTrainer's or CPOTrainer's ``compute_loss``; returns (tracker, model,
    optimizer, trainable, total)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    objective = spec["objective"]
    b, s, prompt = int(spec["batch"]), int(spec["seq"]), int(spec.get("prompt", 0))
    fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
    model = build_model(spec)
    _fakeify(model, fake_mode)
    _mixed_precision_forward(model, spec["autocast"])
    params = [p for p in {id(p): p for p in model.parameters()}.values() if p.requires_grad]
    optimizer = build_optimizer(spec, params, model)
    with fake_mode:
        inputs = _inputs(b, s, prompt, int(model.config.vocab_size))
    trainer = _stand_in(objective, model, spec)
    tracker = tracker_factory(optimizer)
    tracker.track_external(model, optimizer, *inputs.values())
    with gpu_logprob_kernel(), _untraced_packed_check(), fake_mode, tracker:
        for step in range(1, int(spec["steps"]) + 1):
            tracker.set_phase(f"step{step}:forward")
            loss = trainer.compute_loss(model, dict(inputs))
            backward_and_step(tracker, f"step{step}", loss, optimizer)
            del loss
    return traced(tracker, model, optimizer, params)
