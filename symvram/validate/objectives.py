"""Measure a preference-optimization step as TRL runs it (optional; needs torch and trl).

``measure_preference(spec)`` traces TRL 1.16's own ``DPOTrainer._compute_loss`` (trl/trainer/dpo_trainer.py:1285)
or ``KTOTrainer._compute_loss`` (kto_trainer.py:1370) — or, for ``objective: sft``, ``SFTTrainer.compute_loss``
(sft_trainer.py:1560) — on the fake-tensor model of ``validate.measure``, then
``loss.backward()``, ``optimizer.step()`` and ``zero_grad`` as transformers' Trainer runs them, for
``spec['steps']`` steps. The whole trainer cannot run under
FakeTensorMode (its ``__init__`` tokenizes a dataset and loads the reference from the Hub), so the trainer method is
called on a stand-in ``self`` carrying the attributes ``__init__`` sets from ``DPOConfig``'s defaults.

What the trace does that a GPU run does differently, and why it does not change the bytes:

* the batch is what ``DataCollatorForPreference`` (dpo_trainer.py:146) builds for ``batch`` pairs whose prompt has
  ``prompt`` tokens and whose chosen and rejected completions fill the rest of ``seq``: 2·batch rows, chosen first,
  no padding: the ``attention_mask`` is all ones, which transformers drops under SDPA as on the GPU (its
  ``is_tracing`` check, true for fake tensors, answers false, and the ``.all()`` test true);
* TRL's fused LM head takes its GPU path (trainer/utils.py:1642 ``compact``: only the labelled positions are
  projected): its two Triton kernels, which fold each tile in place and allocate nothing, are replaced by no-ops,
  and ``_addmm_fp32`` runs the CUDA branch (``torch.addmm(out_dtype=float32)``, kernels/chunked_logprob.py:60)
  instead of the CPU one that casts both operands to fp32 first;
* the fake mode cannot know how many entries of a boolean mask are true: ``nonzero`` answers from the batch built
  here (every mask over the sequence has the completion's positions true in each row), and the metrics' ``.item()``
  reads (logging only) answer 1.
"""
from __future__ import annotations

import contextlib
import time
import types

import torch

from .measure import (PeakTracker, _fakeify, _result, _untraced_packed_check, build_model, build_optimizer,
                      replayed)
from .spec import normalize_spec

# the trainers' settings _compute_loss reads, at their configs' defaults: DPOConfig (trl/trainer/dpo_config.py:245-311),
# KTOConfig (kto_config.py:198-220; loss_type kto estimates the KL term, kto_trainer.py:815); the MoE aux loss's two
# from the model's config (aux_settings)
TRAINER_DEFAULTS = {
    "dpo": dict(beta=0.1, loss_types=["sigmoid"], loss_weights=[1.0], ld_alpha=None, f_divergence_type="reverse_kl",
                f_alpha_divergence_coef=0.5, label_smoothing=0.0, use_weighting=False),
    "kto": dict(beta=0.1, loss_type="kto", calculate_KL=True, desirable_weight=1.0, undesirable_weight=1.0),
    "reward": {},   # RewardTrainer.compute_loss reads only args.center_rewards_coefficient (reward_config.py:160: None)
    # SFTTrainer.compute_loss (sft_trainer.py:1560-1629): no compute_loss_func, no label smoothing (SFTConfig's
    # defaults); the Trainer's num_items_in_batch is left None (a 0-d count)
    "sft": dict(compute_loss_func=None, label_smoother=None, current_gradient_accumulation_steps=1),
}


def _trainer(objective: str):
    """TRL's trainer class of the objective."""
    if objective == "kto":
        from trl.trainer.kto_trainer import KTOTrainer
        return KTOTrainer
    if objective == "reward":
        from trl.trainer.reward_trainer import RewardTrainer
        return RewardTrainer
    if objective == "sft":
        from trl.trainer.sft_trainer import SFTTrainer
        return SFTTrainer
    from trl.trainer.dpo_trainer import DPOTrainer
    return DPOTrainer


def _inputs(objective: str, b: int, s: int, prompt: int, V: int, precompute: bool) -> dict:
    """The batch the objective's collator builds (under the fake mode): DPO's 2b rows, chosen first; KTO's b
    completions (one desirable in two) and their b mismatched KL completions, of the same length; SFT's b rows of
    ids, labels and attention mask (DataCollatorForLanguageModeling, sft_trainer.py:168-229, no padding)."""
    rows = 2 * b if objective in ("dpo", "reward") else b
    if objective == "sft":
        ids = torch.randint(0, V, (rows, s))
        return {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones(rows, s, dtype=torch.long)}
    if objective == "reward":   # reward_trainer.py:203-229: input ids and attention mask, chosen rows first
        return {"input_ids": torch.randint(1, V, (rows, s)), "attention_mask": torch.ones(rows, s, dtype=torch.long)}
    completion_mask = torch.ones(rows, s, dtype=torch.long)
    if prompt:
        completion_mask[:, :prompt] = 0
    out = {"input_ids": torch.randint(0, V, (rows, s)), "attention_mask": torch.ones(rows, s, dtype=torch.long),
           "completion_mask": completion_mask}
    if objective == "kto":
        out.update(KL_input_ids=torch.randint(0, V, (rows, s)), KL_attention_mask=torch.ones(rows, s, dtype=torch.long),
                   KL_completion_mask=completion_mask.clone(), label=torch.arange(b) % 2 == 0)
        if precompute:
            out.update(ref_logps=torch.zeros(b), ref_KL_logps=torch.zeros(b))
    elif precompute:
        out.update(ref_chosen_logps=torch.zeros(b), ref_rejected_logps=torch.zeros(b))
    return out


@contextlib.contextmanager
def _gpu_fused_head(labelled_per_row: int):
    """TRL's fused LM head as it runs on a GPU, under the fake mode (see the module docstring)."""
    from torch._subclasses import fake_impls
    import trl.kernels.chunked_logprob as kernels
    import trl.trainer.utils as utils
    from transformers import masking_utils

    class _NoAlloc:  # a Triton launch: kernel[grid](...) writes into buffers that exist
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    def addmm_fp32(acc, a, b):  # the CUDA branch of _addmm_fp32
        torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)

    def nonzero(fake_mode, func, arg):  # every row of a mask over the sequence holds the completion's positions;
        if arg.dim() == 1:                # KTO's labels: one desirable example in every two
            k = arg.numel() // 2
            return arg.new_empty_strided((k, 1), (1, k), dtype=torch.int64)
        rows = arg.numel() // arg.shape[-1]
        k = rows * min(labelled_per_row, arg.shape[-1])
        return arg.new_empty_strided((k, arg.dim()), (1, k), dtype=torch.int64)

    def scalar(fake_mode, func, arg):  # a metric's .item() or truth test
        return True if arg.dtype == torch.bool else (1 if not arg.dtype.is_floating_point else 1.0)

    impls = fake_impls.op_implementations_dict
    ops = {torch.ops.aten.nonzero.default: nonzero, torch.ops.aten._local_scalar_dense.default: scalar}
    patched = {(utils, "_use_triton"): lambda device: True, (kernels, "_use_triton"): lambda device: True,
               (kernels, "_forward_kernel"): _NoAlloc(), (kernels, "_backward_kernel"): _NoAlloc(),
               (kernels, "_addmm_fp32"): addmm_fp32, (masking_utils, "is_tracing"): lambda tensor=None: False,
               (kernels, "triton"): types.SimpleNamespace(cdiv=lambda a, b: -(-a // b))}
    saved_ops = {op: impls[op] for op in ops}
    saved = {key: getattr(*key, None) for key in patched}
    impls.update(ops)
    for (mod, name), value in patched.items():
        setattr(mod, name, value)
    try:
        yield
    finally:
        impls.update(saved_ops)
        for (mod, name), value in saved.items():
            setattr(mod, name, value)


def aux_settings(model, coef=None) -> dict:
    """The MoE load-balancing loss as DPOTrainer, KTOTrainer and SFTTrainer set it up (dpo_trainer.py:895-905,
    kto_trainer.py:906-916, sft_trainer.py:1195-1205): the trainer's router_aux_loss_coef (``coef``; the configs'
    default None), else the config's own, and the loss enabled when the config has ``output_router_logits`` (a MoE
    model) and a non-zero coefficient.

    >>> from types import SimpleNamespace as NS
    >>> cfg = NS(output_router_logits=False, router_aux_loss_coef=0.001)
    >>> aux_settings(NS(config=NS(get_text_config=lambda: cfg)))
    {'router_aux_loss_coef': 0.001, 'aux_loss_enabled': True}
    >>> aux_settings(NS(config=NS(get_text_config=lambda: cfg)), coef=0.0)
    {'router_aux_loss_coef': 0.0, 'aux_loss_enabled': False}
    """
    text_config = model.config.get_text_config()
    coef = getattr(text_config, "router_aux_loss_coef", 0.0) if coef is None else coef
    return {"router_aux_loss_coef": coef, "aux_loss_enabled": hasattr(text_config, "output_router_logits") and coef != 0.0}


def _sync_aux_config(model, aux: dict) -> None:
    """SFTTrainer writes its decision into the config the fused forward reads (sft_trainer.py:1206-1211)."""
    text_config = model.config.get_text_config()
    if hasattr(text_config, "router_aux_loss_coef"):
        text_config.output_router_logits = aux["aux_loss_enabled"]
        text_config.router_aux_loss_coef = aux["router_aux_loss_coef"]


def _stand_in(model, ref_model, spec):
    """The ``self`` the trainer's _compute_loss reads: its model, reference, accelerator and its config's settings."""
    accelerator = types.SimpleNamespace(device=torch.device("cpu"), unwrap_model=lambda m: m,
                                        gather_for_metrics=lambda x: x, gather=lambda x: x, parallelism_config=None)
    args = types.SimpleNamespace(gradient_checkpointing_kwargs={"use_reentrant": False}, discopop_tau=0.05,
                                 center_rewards_coefficient=None, loss_type="nll", average_tokens_across_devices=True)
    aux = aux_settings(model, spec.get("router_aux_loss_coef"))
    if spec["objective"] == "sft":
        _sync_aux_config(model, aux)
    from collections import defaultdict
    trainer = types.SimpleNamespace(model=model, ref_model=ref_model, accelerator=accelerator, args=args,
                                    precompute_ref_logps=bool(spec.get("precompute_ref", False)),
                                    _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
                                    _total_train_tokens=0, _tp_size=1, **TRAINER_DEFAULTS[spec["objective"]],
                                    **aux)
    if spec["objective"] == "kto":   # the KL forwards (kto_trainer.py:1337) are a method of the trainer too
        trainer._compute_kl_logps = types.MethodType(_trainer("kto")._compute_kl_logps, trainer)
    return trainer


@contextlib.contextmanager
def _reference_phase(tracker, model, ref_model):
    """The reference forward as a phase of its own: ``step<n>:reference`` while TRL runs it (the separate model's
    forward, or the policy's under ``use_adapter``, dpo_trainer.py:1328-1338), then ``step<n>:loss``."""
    import trl.trainer.dpo_trainer as dpo
    import trl.trainer.kto_trainer as kto

    def enter():
        tracker.set_phase(tracker.phase.split(":")[0] + ":reference")

    def leave():
        tracker.set_phase(tracker.phase.split(":")[0] + ":loss")

    original_use_adapter, original_forward = dpo.use_adapter, getattr(ref_model, "forward", None)

    @contextlib.contextmanager
    def use_adapter(*args, **kwargs):
        with original_use_adapter(*args, **kwargs):
            enter()
            yield
        leave()

    def forward(*args, **kwargs):
        enter()
        try:
            return original_forward(*args, **kwargs)
        finally:
            leave()

    dpo.use_adapter = kto.use_adapter = use_adapter
    if ref_model is not None:
        ref_model.forward = forward
    try:
        yield
    finally:
        dpo.use_adapter = kto.use_adapter = original_use_adapter
        if ref_model is not None:
            del ref_model.forward


def run_preference(spec: dict, tracker_factory=PeakTracker):
    """Trace ``spec['steps']`` steps of the objective's trainer; returns (tracker, model, optimizer, trainable,
    total)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from trl.trainer.utils import add_fused_lm_head

    from ..ledger.objectives import objectives

    objective = spec["objective"]
    trainer_class = _trainer(objective)

    b, s, prompt = int(spec["batch"]), int(spec["seq"]), int(spec.get("prompt", 0))
    fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
    model = build_model(spec)
    lora = spec["method"] in ("lora", "qlora")
    score = objectives()[objective].get("head") == "score"   # a reward model: no LM head, no reference
    if not score:
        add_fused_lm_head(model.get_base_model() if lora else model, outputs=tuple(objectives()[objective]["outputs"]))
    _fakeify(model, fake_mode)
    ref_model = None
    if objective != "sft" and not lora and not score and not spec.get("precompute_ref", False):
        # dpo_trainer.py:908-927 (kto :918-940): model.dtype
        ref_model = reference_model(spec, fake_mode)
    params = [p for p in {id(p): p for p in model.parameters()}.values() if p.requires_grad]
    optimizer = build_optimizer(spec, params, model)
    V = int(model.config.vocab_size)
    with fake_mode:
        inputs = _inputs(objective, b, s, prompt, V, bool(spec.get("precompute_ref", False)))
    trainer = _stand_in(model, ref_model, spec)
    tracker = tracker_factory(optimizer)
    tracker.track_external(model, optimizer, *inputs.values(), *([ref_model] if ref_model is not None else []))
    ac = spec["autocast"]
    labelled = s - max(prompt, 1)  # labels[:, 1:] != -100: the completion's positions after the first token
    with _gpu_fused_head(labelled), _reference_phase(tracker, model, ref_model), _untraced_packed_check(), \
            fake_mode, tracker:
        for step in range(1, int(spec["steps"]) + 1):
            tracker.set_phase(f"step{step}:forward")
            with torch.autocast("cpu", dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[ac]) if ac \
                    else contextlib.nullcontext():
                compute = trainer_class.compute_loss if score or objective == "sft" else trainer_class._compute_loss
                loss = compute(trainer, model, dict(inputs), False)
            backward_and_step(tracker, f"step{step}", loss, optimizer)
            del loss
    return traced(tracker, model, optimizer, params)


def reference_model(spec: dict, fake_mode):
    """A trainer's reference as TRL builds it for full fine-tuning: a second model in the policy's dtype, in eval
    mode, frozen, without checkpointing, with its own fused LM head (log-probs only), on fake tensors."""
    from trl.trainer.utils import add_fused_lm_head

    ref_model = build_model({**spec, "grad_checkpointing": False}).eval()
    ref_model.requires_grad_(False)
    add_fused_lm_head(ref_model)
    _fakeify(ref_model, fake_mode)
    return ref_model


def backward_and_step(tracker, label: str, loss, optimizer) -> None:
    """The rest of a training step as transformers' Trainer runs it, each part a phase: ``loss.backward()``,
    ``optimizer.step()``, ``zero_grad(set_to_none=True)``."""
    tracker.set_phase(f"{label}:backward")
    loss.backward()
    tracker.set_phase(f"{label}:optimizer")
    optimizer.step()
    tracker.set_phase(f"{label}:zero_grad")
    optimizer.zero_grad(set_to_none=True)
    tracker.reset_mod_stats()


def traced(tracker, model, optimizer, params) -> tuple:
    """(tracker, model, optimizer, trainable, total): what a trace returns for ``result``."""
    total = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    return tracker, model, optimizer, sum(p.numel() for p in params), total


def result(spec: dict, run) -> dict:
    """``run(spec)``'s trace as a dict shaped like ``measure``'s, with the allocator replay."""
    t0 = time.perf_counter()
    tracker, model, optimizer, trainable, total = run(spec)
    out = _result(spec, model, optimizer, trainable, total, tracker.peak_bytes, tracker.peak_phase,
                  dict(tracker.phase_peak), tracker.breakdown(), time.perf_counter() - t0)
    out["allocator"] = replayed(tracker.schedule)
    return out


def measure_preference(spec: dict) -> dict:
    """The peak of live tensor bytes of ``spec['steps']`` DPO, KTO, reward or (TRL's SFTTrainer) SFT steps (a dict
    shaped like ``measure``'s; no FLOPs:
    FlopCounterMode cannot count the ``addmm`` overload with ``out_dtype`` the fused head's backward runs)."""
    spec = {"objective": "sft", **normalize_spec(spec)}   # (normalize_spec drops a default's key)
    if spec["objective"] == "grpo":   # generation before the step (validate.grpo)
        from .grpo import measure_grpo
        return measure_grpo(spec)
    from ..ledger.objectives import objectives
    if objectives()[spec["objective"]].get("logits"):   # ORPO, CPO, SimPO: the model's logits (validate.paired)
        from .paired import run_paired
        return result(spec, run_paired)
    return result(spec, run_preference)
