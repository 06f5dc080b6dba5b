"""Measure GRPO steps as TRL 1.16's ``GRPOTrainer`` runs them with transformers' generation (optional; needs trl).

``measure_grpo(spec)`` traces, on the fake-tensor model of ``validate.measure``, what one optimizer step of
``GRPOTrainer`` allocates on the GPU, in TRL's own code where it can run under FakeTensorMode:

* **generation** (``step<n>:generation``), every ``steps_per_generation`` steps: ``model.generate`` on the
  generation batch (``batch × steps_per_generation`` prompts of ``prompt`` tokens, left-padded to the longest)
  under ``torch.no_grad`` with checkpointing disabled (TRL's ``disable_gradient_checkpointing``, the non-ZeRO-3
  path of ``unwrap_model_for_generation``, trl/models/utils.py:135-138, 397-414), outside autocast, with the
  ``GenerationConfig`` of grpo_trainer.py:1155-1173 (sampling, ``max_new_tokens = max_completion_length``).
  Every completion is generated to its full length: the fake mode cannot sample an end-of-sequence token, so
  transformers' ``StopCheck`` (generation/utils.py:393) answers from the length alone — the longest
  generation batch, which is the one that sets the peak;
* **scoring** (``step<n>:scoring``): the old policy's log-probabilities (when ``gradient_accumulation_steps`` is
  not a multiple of ``steps_per_generation · num_iterations``, grpo_trainer.py:2641-2655) and the reference's
  (``beta > 0``: the reference copy, or the PEFT policy under ``use_adapter(None)``, :2701-2737), each by TRL's
  ``_get_per_token_logps_and_entropies`` under no_grad in chunks of ``batch`` rows; the generation batch then
  shuffled and split by TRL's ``shuffle_sequence_dict`` and ``split_tensor_dict`` (:1538-1541) and buffered;
* **the training step**: TRL's ``GRPOTrainer._compute_loss`` (grpo_trainer.py:3020) on the buffered slice,
  ``loss.backward()``, ``optimizer.step()``, ``zero_grad`` as transformers' Trainer runs them.

The rewards (Python functions of the decoded text) and the advantages' arithmetic over a few floats per
completion are not traced: the advantages are a [generation batch] fp32 tensor as TRL returns them (:2780-2858).
The trainer cannot be built under FakeTensorMode (its ``__init__`` loads the tokenizer and the dataset), so its
methods run on a stand-in ``self`` carrying the attributes ``__init__`` sets from ``GRPOConfig``'s defaults.
"""
from __future__ import annotations

import contextlib
import types
from collections import defaultdict

import torch

from .measure import PeakTracker, _fakeify, _untraced_packed_check, build_model, build_optimizer
from .objectives import _gpu_fused_head, backward_and_step, reference_model, result, traced
from .spec import OPTIONAL, normalize_spec

# GRPOConfig's defaults that _compute_loss reads (trl/trainer/grpo_config.py:681-1000)
GRPO_DEFAULTS = dict(temperature=1.0, epsilon_low=0.2, epsilon_high=0.2, importance_sampling_level="token",
                     top_entropy_quantile=1.0, off_policy_mask_threshold=None, use_vllm=False,
                     vllm_importance_sampling_correction=True, aux_loss_enabled=False, _entropy_bonus_enabled=False,
                     entropy_coef=0.0, use_adaptive_entropy=False)


def _setting(spec: dict, name: str):
    """A GRPO setting of the canonical spec (absent at its default: validate.spec.OPTIONAL)."""
    return spec.get(name, OPTIONAL[name])


def _stand_in(model, ref_model, spec):
    """The ``self`` GRPOTrainer's methods read: the models, an accelerator, the config's settings."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    ac = spec["autocast"]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(ac)
    accelerator = types.SimpleNamespace(
        device=torch.device("cpu"), num_processes=1, sync_gradients=True, unwrap_model=lambda m: m,
        gather=lambda x: x, gather_for_metrics=lambda x: x, reduce=lambda x, reduction="sum": x,
        autocast=lambda: torch.autocast("cpu", dtype=dtype) if dtype else contextlib.nullcontext())
    args = types.SimpleNamespace(gradient_checkpointing_kwargs={"use_reentrant": False}, delta=None,
                                 use_bias_correction_kl=True, steps_per_generation=int(_setting(spec, "steps_per_generation")),
                                 per_device_train_batch_size=int(spec["batch"]))
    trainer = types.SimpleNamespace(
        model=model, ref_model=ref_model, accelerator=accelerator, args=args, beta=float(_setting(spec, "beta")),
        loss_type=_setting(spec, "loss_type"), max_completion_length=int(spec["seq"]) - int(_setting(spec, "prompt")),
        current_gradient_accumulation_steps=int(_setting(spec, "gradient_accumulation_steps")),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, **GRPO_DEFAULTS)
    trainer._get_per_token_logps_and_entropies = types.MethodType(
        GRPOTrainer._get_per_token_logps_and_entropies.__wrapped__, trainer)   # without the profiling decorator
    return trainer


@contextlib.contextmanager
def _fixed_length_generation():
    """transformers' stop check answered from the length alone (the fake mode holds no token values): every
    completion runs to ``max_new_tokens``."""
    from transformers.generation import utils

    original = utils.StopCheck.__call__
    utils.StopCheck.__call__ = lambda self, unfinished, tokens, length: length >= self._symvram_max_length
    try:
        yield lambda max_length: setattr(utils.StopCheck, "_symvram_max_length", max_length)
    finally:
        utils.StopCheck.__call__ = original


def _generate(trainer, model, spec):
    """grpo_trainer.py:1816-1877: the left-padded prompts (int64 ids and mask) through ``model.generate``; returns
    the generated completion ids (right-padded to the longest: here every row is full)."""
    from transformers import GenerationConfig
    from trl.models.utils import disable_gradient_checkpointing

    rows = int(spec["batch"]) * int(_setting(spec, "steps_per_generation"))
    prompt, completion = int(_setting(spec, "prompt")), int(spec["seq"]) - int(_setting(spec, "prompt"))
    V = int(model.config.get_text_config().vocab_size)
    config = GenerationConfig(max_new_tokens=completion, do_sample=True, pad_token_id=0, bos_token_id=None,
                              eos_token_id=None, temperature=1.0, top_p=1.0, top_k=0, min_p=None,
                              repetition_penalty=1.0, cache_implementation=None, disable_compile=True)
    ids = torch.randint(1, V, (rows, prompt))
    mask = torch.ones(rows, prompt, dtype=torch.long)
    with torch.no_grad(), disable_gradient_checkpointing(model, trainer.args.gradient_checkpointing_kwargs):
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    return ids, mask, out[:, prompt:]


def run_grpo(spec: dict, tracker_factory=PeakTracker):
    """Trace ``spec['steps']`` GRPO steps; returns (tracker, model, optimizer, trainable, total)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from trl.models.utils import disable_gradient_checkpointing
    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.utils import add_fused_lm_head, shuffle_sequence_dict, split_tensor_dict, use_adapter

    b, s, prompt = int(spec["batch"]), int(spec["seq"]), int(_setting(spec, "prompt"))
    k, iterations = int(_setting(spec, "steps_per_generation")), int(_setting(spec, "num_iterations"))
    fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
    model = build_model(spec)
    lora = spec["method"] in ("lora", "qlora")
    # grpo_trainer.py:1068-1077: the policy's fused head returns log-probs and entropy, the reference's log-probs
    add_fused_lm_head(model.get_base_model() if lora else model, outputs=("log_probs", "entropy"))
    _fakeify(model, fake_mode)
    # a checkpoint's config caches keys and values (config.json's use_cache; validate's training configs turn it
    # off): generation decodes with a DynamicCache, the fused head's training forwards run without (utils.py:1612)
    base = model.get_base_model() if lora else model
    base.config.use_cache = base.generation_config.use_cache = True
    ref_model = None
    if float(_setting(spec, "beta")) != 0.0 and not lora:   # grpo_trainer.py:983-1003: a second model in the policy's dtype
        ref_model = reference_model(spec, fake_mode)
    params = [p for p in {id(p): p for p in model.parameters()}.values() if p.requires_grad]
    optimizer = build_optimizer(spec, params, model)
    trainer = _stand_in(model, ref_model, spec)
    tracker = tracker_factory(optimizer)
    tracker.track_external(model, optimizer, *([ref_model] if ref_model is not None else []))
    completion = s - prompt
    old_logps = int(_setting(spec, "gradient_accumulation_steps")) % (k * iterations) != 0   # grpo_trainer.py:2641-2646
    buffered = None
    with _gpu_fused_head(completion), _untraced_packed_check(), _fixed_length_generation() as set_length, \
            fake_mode, tracker:
        set_length(s)
        for step in range(int(spec["steps"])):
            label = f"step{step + 1}"
            if step % (k * iterations) == 0:   # _prepare_inputs, grpo_trainer.py:1535-1541
                tracker.set_phase(f"{label}:generation")
                prompt_ids, prompt_mask, completion_ids = _generate(trainer, model, spec)
                completion_mask = torch.ones_like(completion_ids)
                tracker.set_phase(f"{label}:scoring")
                ids = torch.cat([prompt_ids, completion_ids], dim=1)
                mask = torch.cat([prompt_mask, completion_mask], dim=1)
                batch = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
                         "completion_mask": completion_mask, "advantages": torch.zeros(ids.shape[0]),
                         "num_items_in_batch": completion_mask.sum()}
                with torch.no_grad(), disable_gradient_checkpointing(model, trainer.args.gradient_checkpointing_kwargs):
                    if old_logps:
                        batch["old_per_token_logps"] = trainer._get_per_token_logps_and_entropies(
                            model, ids, mask, completion, batch_size=b)[0]
                    if trainer.beta != 0.0:
                        with (contextlib.nullcontext() if ref_model is not None else use_adapter(model, None)):
                            batch["ref_per_token_logps"] = trainer._get_per_token_logps_and_entropies(
                                ref_model if ref_model is not None else model, ids, mask, completion, batch_size=b)[0]
                del ids, mask, prompt_ids, prompt_mask, completion_ids, completion_mask
                buffered = split_tensor_dict(shuffle_sequence_dict(batch), k)
                del batch
            tracker.set_phase(f"{label}:forward")
            loss = GRPOTrainer._compute_loss(trainer, model, dict(buffered[step % k]))
            backward_and_step(tracker, label, loss, optimizer)
            del loss
    return traced(tracker, model, optimizer, params)


def measure_grpo(spec: dict) -> dict:
    """The peak of live tensor bytes of ``spec['steps']`` GRPO steps, with each phase's peak (generation,
    scoring, forward, backward …), shaped like ``measure``'s result."""
    return result(normalize_spec(spec), run_grpo)
