"""Training stacks: the defaults a real run has, as data (``data/stacks.toml``), resolved in one place.

``resolve(model, kw)`` fills every setting the user did not give from the stack (``kw["stack"]``, else
``interview`` for the nominal presets 7b/13b/70b and ``hf`` for real models). ``Scenario.create`` and the
measurement spec (``validate.spec.normalize_spec``) both call it, so an estimate and a measurement of the
same flags describe the same run.

>>> from symvram.presets import load_model
>>> resolve(load_model("7b"), {})["adapter_dtype"], resolve(load_model("llama-2-7b"), {"method": "lora"})["adapter_dtype"]
('compute', 'fp32')
>>> resolve(load_model("llama-2-7b"), {"stack": "hf"})["autocast"]
'bf16'
>>> [resolve(load_model("llama-2-7b"), {"stack": "fsdp", **kw})["mp_policy"] for kw in ({}, {"dtype": "bf16"})]
['bf16', 'none']
"""
from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources

from .errors import UserError
from .versions import PACKAGES, applies, header

# the settings a stack decides (in the order the header names them)
STACK_SETTINGS = ("adapter_dtype", "autocast", "optimizer", "optimizer_impl", "state_dtype", "checkpoint_impl",
                  "loss_impl", "kbit_prep")

# settings only some stacks decide (the storage dtype, DeepSpeed's fp32 master, the ZeRO stage, FSDP2's
# mixed-precision policy, TRL's checkpointing default, Unsloth's and LitGPT's LoRA rank and dropout); the Scenario's
# own default otherwise (a stack's LoRA ``targets`` are read where Scenario.create parses them)
STACK_EXTRAS = ("dtype", "master", "zero", "mp_policy", "grad_checkpointing", "rank", "lora_dropout")

# what DeepSpeed ZeRO-Offload runs: its bf16 engine (the model cast to bf16, no autocast), its CPU Adam on the fp32
# master partition (fp32 moments: DeepSpeedCPUAdam(fp32_optimizer_states=True)), stepped after the backward;
# diagnose's remedy, with a ZeRO stage
ZERO_OFFLOAD = {"stack": "deepspeed", "offload": "optimizer", "optimizer": "adamw", "state_dtype": "fp32",
                "master": "fp32", "dtype": "bf16", "autocast": "none", "optimizer_in_backward": False}


@cache
def stacks() -> dict[str, dict]:
    return tomllib.loads(resources.files("symvram.data").joinpath("stacks.toml").read_text(encoding="utf-8"))


def runs_trainer(name: str) -> bool:
    """Whether transformers' Trainer runs the stack's loop (``trainer = true``: what the Trainer itself does, such as
    32-bit states for every nn.Embedding under a bitsandbytes 8-bit optimizer).

    >>> runs_trainer("hf"), runs_trainer("trl"), runs_trainer("torch")
    (True, True, False)
    """
    return bool(stacks().get(name, {}).get("trainer"))


def stack_names() -> tuple[str, ...]:
    return tuple(stacks())


def default_stack(model) -> str:
    """``interview`` for a nominal preset (P given: the reference answer's 7b/13b/70b), else ``hf``."""
    return "interview" if getattr(model, "params", None) is not None else "hf"


def check_stack(name: str) -> str:
    if name not in stacks():
        raise UserError(f"--stack must be one of {', '.join(stacks())}; got {name!r}")
    return name


def resolve(model, kw: dict) -> dict:
    """``kw`` with the stack named and every stack setting the user left out filled in (``adapter_dtype``
    may stay ``"compute"`` and ``state_dtype`` ``"param"``: Scenario resolves those once the dtypes are
    known, see ``concrete``)."""
    kw = dict(kw)
    name = check_stack(kw.get("stack") or default_stack(model))
    kw["stack"] = name
    entry = stacks()[name]
    if kw.get("method") is None and "method" in entry:   # Unsloth loads in 4 bits unless told otherwise
        kw["method"] = entry["method"]
    if kw.get("method") == "qlora" and (kw.get("kbit_prep") or entry["kbit_prep"]) == "peft":
        for key in ("grad_checkpointing", "checkpoint_impl"):  # what prepare_model_for_kbit_training turns on
            if kw.get(key) is None and f"kbit_{key}" in entry:
                kw[key] = entry[f"kbit_{key}"]
    given = {key for key in STACK_SETTINGS if kw.get(key) is not None}
    adapter_given = "adapter_dtype" in given
    for key in STACK_SETTINGS:
        if kw.get(key) is None:
            kw[key] = entry[key]
    if not adapter_given and kw["adapter_dtype"] == "fp32" and kw.get("method") == "lora" \
            and applies("peft_adapters_follow_base", kw.get("versions", ())):
        kw["adapter_dtype"] = "weights"   # PEFT's default before 0.12: the base weight's dtype (symvram.versions)
    policy_given, master_given = kw.get("mp_policy") is not None, kw.get("master") is not None
    for key in STACK_EXTRAS:
        if kw.get(key) is None and key in entry:
            kw[key] = entry[key]
    if not policy_given and kw.get("mp_policy") not in (None, "none") and (
            (kw.get("dtype") or "bf16") != "fp32" or kw.get("zero") != 3):
        kw["mp_policy"] = "none"   # FSDP2 with 16-bit storage (or no ZeRO-3 asked for): no policy
    if not master_given and kw.get("dtype") == "fp32":
        kw["master"] = "none"      # DeepSpeed in fp32: the weights are their own master
    if name == "unsloth" and "checkpoint_impl" not in given and (kw.get("seq") or DEFAULT_SEQ) < UNSLOTH_OFFLOAD_FROM:
        kw["checkpoint_impl"] = "reentrant"   # unsloth models/_utils.py:502-511: plain (reentrant) checkpointing
    if kw["autocast"] == "weights16":
        kw["autocast"] = kw.get("dtype") if kw.get("dtype") in ("bf16", "fp16") else "bf16"
    return kw


def concrete(kw: dict, lora: bool) -> dict:
    """Replace the stack's relative dtypes by real ones: ``compute`` → the compute dtype, ``param`` → the
    trainable weights' dtype."""
    kw = dict(kw)
    dtype = kw.get("dtype") or "bf16"
    compute = kw["autocast"] if kw.get("autocast") not in (None, "none") else dtype
    if kw.get("adapter_dtype") == "compute":
        kw["adapter_dtype"] = compute
    elif kw.get("adapter_dtype") == "weights":  # FSDP2 all-gathers one dtype per unit: adapters as stored
        kw["adapter_dtype"] = dtype
    if kw.get("state_dtype") == "param":
        kw["state_dtype"] = kw["adapter_dtype"] if lora else dtype
    return kw


# Unsloth offloads its checkpoints from max_seq_length 512 on (below, plain checkpointing is faster)
UNSLOTH_OFFLOAD_FROM = 512
DEFAULT_SEQ = 2048   # the Scenario's seq default (Scenario.seq reads it), as Unsloth's max_seq_length's

IMPL_WORDS = {"foreach": "torch foreach", "fused": "torch fused", "forloop": "torch for-loop"}


def routing_words(sc) -> str | None:
    """What the routing a step sees changes, for an MoE model (``--routing``); None for a dense one. Every path the
    ledger models holds the same tensors under any routing, so the worst (every token of the micro-batch on the same
    k experts: the busiest expert T rows, not T·k/E) prices as balanced — ``symvram validate --routing worst``
    measures it with the router forced so.

    >>> from symvram.scenario import Scenario
    >>> routing_words(Scenario.create("qwen3-30b-a3b", routing="worst"))[:60]
    'routing worst (every token on the same k experts) = balanced'
    """
    routed = [k for _, k in sc.structure.arch.layer_kinds if k.moe]
    if not routed:
        return None
    why = []
    if any(not k.extra("experts_dense") for k in routed):   # the sorted pairs, gathered, grouped, scattered back
        why.append("grouped_mm runs the T·k token-expert pairs as tensors of T·k rows however they fall on the "
                   "experts (transformers integrations/moe.py:436-537)")
    if any(k.extra("experts_dense") for k in routed):        # Llama 4: every token through every expert
        why.append("Llama 4's experts run every token through all E experts (E·T rows, "
                   "models/llama4/modeling_llama4.py:159-169)")
    head = ("routing worst (every token on the same k experts) = balanced" if sc.routing == "worst" else
            "routing balanced (= worst, every token on the same k experts)")
    return f"{head}: {'; '.join(why)}"


def summary(sc) -> str:
    """One line naming the stack and what it implies for this scenario (every header prints it)."""
    parts = []
    if sc.objective != "sft":
        from .ledger.objectives import objectives
        reference = {"copy": "a second copy of the weights", "adapters": "the policy with its adapters disabled",
                     "precomputed": "precomputed log-probs, no reference model", "none": "none"}[sc.reference]
        parts.append(f"objective {sc.objective} ({objectives()[sc.objective]['title']}; reference: {reference}; "
                     + ("the time ledger counts the SFT step with its lm_head)" if sc.score_head else
                        "the time ledger counts the training step, not generation)" if sc.objective == "grpo" else
                        "the time ledger counts the SFT step)" if sc.reference == "none" else
                        "the time ledger counts the SFT step, not the reference forward)"))
    if sc.lora:
        parts.append(f"adapters {sc.adapter_dtype}")
    parts.append(f"autocast {sc.autocast}" if sc.autocast != "none" else "no autocast")
    impl = "bitsandbytes" if sc.structure.bnb else IMPL_WORDS.get(sc.optimizer_impl, sc.optimizer_impl)
    if sc.zero and sc.structure.zero_impl == "deepspeed":
        impl = "DeepSpeed's CPU Adam" if sc.offload != "none" else "DeepSpeed's ZeRO optimizer"
    states = f"{sc.optimizer} ({impl}), states {sc.state_dtype}"
    if sc.structure.paged:
        states += " (those of tensors ≥ 100k elements paged to CUDA unified memory: modelled, not measured)"
    v = sc.values()
    if sc.method == "full" and sc.master == "none" and sc.state_dtype == sc.dtype != "fp32" and v["states_per_param"]:
        # torch's optimizers keep their states in each parameter's dtype: not the textbook 12/16 B/param (fp32 states)
        held = "weights + states" if sc.optimizer_in_backward else "weights + gradients + states"
        per = v["bytes_weight"] + v["bytes_grad"] * (not sc.optimizer_in_backward) + v["states_per_param"] * v["bytes_state"]
        states += (f" (torch keeps {sc.optimizer}'s states in the parameters' {sc.dtype}: {held} "
                   f"= {per:g} B/param, where the 12 or 16 of the textbook answer assume fp32 states)")
    if sc.optimizer_in_backward:
        states += (", stepped in backward (one optimizer per parameter, run by its post-accumulate-grad hook: one "
                   "gradient alive at a time)")
    parts.append(states)
    if sc.master == "fp32":
        parts.append("fp32 master")
    parts.append(f"checkpointing {sc.checkpoint_impl}" + (f" of layers 0, {sc.checkpoint_every}, {2 * sc.checkpoint_every} …"
                                                           if sc.checkpoint_every > 1 else "")
                 + (" with torchtitan's op-level policy" if sc.checkpoint_ops else "")
                 if sc.grad_checkpointing else "no checkpointing")
    if sc.liger:
        parts.append("Liger's RMSNorm and SwiGLU/GeGLU kernels (liger-kernel 0.8.5; Triton: modelled, not measured)")
    if sc.packing:
        parts.append("packed samples under SDPA's block-diagonal mask (FlashAttention's varlen path, which keeps no "
                     "mask, is not modelled)")
    if sc.structure.offload_checkpoints:
        parts.append("Unsloth's offloaded checkpointing (unsloth_zoo 2026.10.9: layer inputs in pinned host memory, "
                     "two device staging buffers, measured by running its checkpointer on the CPU; the copy streams "
                     "modelled, not measured)")
    if sc.loss_impl == "unsloth":
        parts.append("Unsloth's fused linear cross-entropy (Triton: modelled, not measured)")
    if sc.unsloth_kernels:
        parts.append("Unsloth's fused LoRA QKV/O/MLP and RMSNorm kernels (what they save, their working sets and "
                     "LoRA_MLP's backward; Triton: modelled, not measured)")
    elif sc.stack == "unsloth" and sc.lora:
        parts.append("PEFT's eager LoRA layers (Unsloth's fused kernels are modelled for Llama, Mistral, Qwen2 and "
                     "Qwen3 with LoRA on all seven projections and no dropout)")
    if sc.structure.model_code == "torchtune":
        parts.append("torchtune 0.6.1's own Llama modules (LoRALinear, its fp32 RMSNorm, a RoPE cache of "
                     "max_position_embeddings positions, k and v expanded to every head; traced under FakeTensorMode "
                     "by benchmarks/torchtune_trace.py), compile: False (torch.compile is not modelled)")
    if sc.structure.model_code == "litgpt":
        parts.append("LitGPT 0.5.13's own GPT (its own lm_head, untied: a tied checkpoint's embedding is copied into it; "
                     "fused qkv, k and v repeated to every head, its fp32 RMSNorm, RoPE cos/sin "
                     "at the longest sample, chunked_cross_entropy on bf16 logits that fit() keeps through the step"
                     + ("; LoRAQKVLinear: one dropout and lora_A for q, k and v, zero_pad's saved source, the lm_head "
                        "in 128-position chunks" if sc.lora else "")
                     + "; traced under FakeTensorMode by benchmarks/litgpt_trace.py)")
    if sc.offload_activations and sc.structure.model_code == "torchtune":
        parts.append("torchtune's activation offloading (enable_activation_offloading: its own OffloadActivations traced "
                     "on the CPU over its model's forward; the copy streams' overlap and pinned host memory modelled, "
                     "not measured)")
    elif sc.offload_activations:
        parts.append("TRL's activation offloading (its rules traced on the CPU; the copy streams' overlap and pinned "
                     "host memory modelled, not measured)")
    if sc.structure.arch.has_deltanet:
        if sc.structure.kernels == "fla":
            parts.append("Gated DeltaNet on flash-linear-attention's and causal-conv1d's kernels (--kernels fla: "
                         "chunk_gated_delta_rule, causal_conv1d_fn; the gated RMSNorm stays transformers' torch module) "
                         "— what they save modelled from fla 0.6.0 source, not measured (Triton); the backward's "
                         "working set (the per-chunk states it recomputes) is not modelled")
        else:
            parts.append("Gated DeltaNet on transformers' torch path (torch_chunk_gated_delta_rule, run when "
                         "flash-linear-attention is not installed, --kernels torch; fla's kernels are --kernels fla"
                         + "; under checkpointing its backward's temporaries are not modelled" * sc.grad_checkpointing
                         + ")")
    if any(k.mamba for _, k in sc.structure.arch.layer_kinds):
        parts.append("Mamba-2 on transformers' torch path (mamba2_chunk_scan, run when mamba_ssm and causal_conv1d are "
                     "not installed; mamba_ssm's fused kernels' saved tensors are not modelled"
                     + "; under checkpointing the scan's backward temporaries are not either" * sc.grad_checkpointing + ")")
    if (routed := routing_words(sc)) is not None:
        parts.append(routed)
    parts.append("loss on one score per sequence" if sc.score_head else f"loss {sc.loss_impl}")
    if sc.method == "qlora" and sc.kbit_prep == "peft":
        parts.append("prepare_model_for_kbit_training" + (
            " (its fp32 fused experts on torch's per-group grouped_mm fallback on CUDA: modelled, not measured on "
            "CUDA)" if any(k.moe and not k.extra("experts_dense") for _, k in sc.structure.arch.layer_kinds) else ""))
    elif sc.method == "qlora":   # the preparation is also what turns checkpointing on in this stack: say it is gone
        turned_on = stacks()[sc.stack].get("kbit_grad_checkpointing") and not sc.grad_checkpointing
        parts.append("no kbit preparation" + (" (nor the checkpointing it turns on: add --grad-checkpointing)"
                                              if turned_on else ""))
    gpus = f"{sc.gpus} GPU" + "s" * (sc.gpus != 1)
    offload = {"none": "", "optimizer": ", the optimizer offloaded to the CPU",
               "optimizer+params": ", the optimizer and the parameters offloaded to the CPU"}[sc.offload]
    if sc.zero and sc.structure.zero_impl == "deepspeed":
        engine = "bf16" if sc.dtype == "bf16" else f"{sc.dtype} (bf16 off in its config)"
        parts.append(f"DeepSpeed ZeRO-{sc.zero} over {gpus}, {engine} engine{offload} (its buckets and step buffers "
                     "modelled from source, not measured)")
    elif sc.zero == 3:
        parts.append(f"FSDP2 fully_shard per decoder layer then the root over {gpus}, parameters stored "
                     + (f"{sc.dtype}, MixedPrecisionPolicy(param_dtype={sc.mp_policy}, reduce_dtype=fp32)"
                        if sc.mp_policy != "none" else f"and gathered in {sc.dtype}") + offload)
    elif sc.zero:
        parts.append(f"ZeRO-{sc.zero} over {gpus}{offload}")
    # a stack on its own model code (torchtune, LitGPT) runs neither transformers' modules nor PEFT nor TRL
    packages = PACKAGES if sc.model_code == "transformers" else ("torch", "bitsandbytes")
    return (f"stack {sc.stack} ({stacks()[sc.stack]['title']}): " + ", ".join(parts) + "; "
            + header(sc.versions, packages))
