"""The measurement spec (plain JSON, as in shared/measurements) and its two-way mapping to a Scenario.

Torch-free: the accuracy benchmark and ``symvram validate`` use it to ask the estimator and the
measurement the same question.

>>> spec = {"arch": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
...         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
...         "vocab_size": 1000}, "method": "lora", "rank": 8, "adapter_dtype": "peft-default",
...         "dtype_setup": "bf16", "optimizer": "adamw-foreach"}
>>> sc = to_scenario(spec)
>>> sc.method, sc.adapter_dtype, sc.state_dtype, sc.device
('lora', 'fp32', 'fp32', 'cpu')
"""
from __future__ import annotations

from typing import Any

from ..errors import UserError
from ..presets import spec_from_config
from ..scenario import BNB_OPTIMIZERS, Scenario
from ..stacks import check_stack, stacks

ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
_DTYPES = ("bf16", "fp16", "fp32")
# calibration.jsonl's spellings of the settings that Scenario names otherwise (read, never written)
ALIASES = {"gradient_checkpointing": "grad_checkpointing", "attn_impl": "attention"}
# A spec without "stack" is a plain PyTorch loop (the torch stack): the settings it leaves out take that
# stack's values. Keys in OPTIONAL appear in the canonical spec only when they differ from their default, so
# the keys (hashes) of earlier measurements stay the same.
OPTIONAL: dict[str, Any] = {"stack": "torch", "checkpoint_impl": "non-reentrant", "loss_impl": "torch",
                            "kbit_prep": "peft", "dora": False, "modules_to_save": [], "mp_policy": "none",
                            "optimizer_in_backward": False, "checkpoint_every": 1, "checkpoint_ops": False, "offload_activations": False, "packing": 0, "objective": "sft", "prompt": 0, "precompute_ref": False,
                            "num_generations": 8, "steps_per_generation": 1, "gradient_accumulation_steps": 1,
                            "num_iterations": 1, "beta": 0.0, "loss_type": "dapo", "generation": "hf",
                            "routing": "balanced", "cpo_alpha": 1.0, "router_aux_loss_coef": None,
                            "image_tokens": 0, "train_vision": False, "loader": "causal-lm",
                            # the Gated DeltaNet path a CUDA run took (measure._check_kernels): torch, or fla where
                            # flash-linear-attention and causal-conv1d are installed (benchmarks/gpu_session.sh)
                            "kernels": "torch"}


def _stack_values(name: str, dtype: str) -> dict[str, Any]:
    """The spec's spelling of a stack's defaults (symvram.stacks: the one place they are resolved)."""
    e = stacks()[check_stack(name)]
    autocast = {"none": None, "weights16": dtype if dtype in ("bf16", "fp16") else "bf16"}.get(e["autocast"], e["autocast"])
    adapter = "base" if e["adapter_dtype"] in ("compute", "weights") and autocast is None else e["adapter_dtype"]
    return {"adapter_dtype": adapter, "optimizer": e["optimizer"], "optimizer_impl": e["optimizer_impl"],
            "autocast": autocast, "checkpoint_impl": e["checkpoint_impl"], "loss_impl": e["loss_impl"],
            "kbit_prep": e["kbit_prep"]}


DEFAULTS: dict[str, Any] = {
    "method": "lora",
    "rank": 16,
    "targets": ALL_LINEAR,
    "lora_alpha": None,  # None: 2 * rank
    "lora_dropout": 0.0,
    "adapter_dtype": "fp32",
    "batch": 1,
    "seq": 2048,
    "dtype": "bf16",
    "autocast": None,
    "optimizer": "adamw",
    "optimizer_impl": "foreach",
    "grad_checkpointing": False,
    "attention": None,  # None: the family's default kernel (sdpa; eager for Gemma 2)
    "steps": 2,
    "device": "fake",
}


def normalize_spec(spec: dict) -> dict:
    """The canonical spec: ``arch`` plus the keys of DEFAULTS, defaults filled in.

    Setting names are Scenario's (``grad_checkpointing``, ``attention``); also accepts the calibration.jsonl
    spellings (``gradient_checkpointing``, ``attn_impl``, ``dtype_setup``, ``optimizer: adamw-foreach``,
    ``adapter_dtype: peft-default``).  Other keys (``name``, ``model``, ...) are dropped.
    """
    if "arch" not in spec:
        raise UserError("spec needs 'arch' (a dict of HF config keys)")
    spec = {ALIASES.get(k, k): v for k, v in spec.items()}
    s = dict(DEFAULTS)
    stack = spec.get("stack") or OPTIONAL["stack"]
    s.update({**OPTIONAL, **_stack_values(stack, spec.get("dtype") or DEFAULTS["dtype"]), "stack": stack})
    s.update({k: spec[k] for k in (*DEFAULTS, *OPTIONAL) if k in spec and (spec[k] is not None or k == "autocast")})
    s["arch"] = dict(spec["arch"])
    if "loss_impl" not in spec:   # an objective's trainer decides its LM head (ORPO, CPO: the model's logits)
        from ..ledger.objectives import objectives
        s["loss_impl"] = objectives().get(s["objective"], {}).get("loss_impl", s["loss_impl"])
    setup = spec.get("dtype_setup")
    if setup:
        s["dtype"], s["autocast"] = {
            "bf16": ("bf16", None),
            "fp16": ("fp16", None),
            "fp32": ("fp32", None),
            "bf16-autocast": ("bf16", "bf16"),
            "fp32-autocast-bf16": ("fp32", "bf16"),
            "fp32-autocast-fp16": ("fp32", "fp16"),
        }[setup]
    opt = s["optimizer"]
    if opt not in BNB_OPTIMIZERS and "-" in opt and opt.rsplit("-", 1)[1] in ("foreach", "fused", "forloop"):
        s["optimizer"], s["optimizer_impl"] = opt.rsplit("-", 1)
    if s["adapter_dtype"] == "peft-default":
        s["adapter_dtype"] = "fp32"
    if s["dtype"] not in _DTYPES or (s["autocast"] is not None and s["autocast"] not in _DTYPES):
        raise UserError(f"dtype/autocast must be one of {sorted(_DTYPES)}")
    if s["attention"] is None:
        from ..ledger.architecture import family
        from ..presets import decoder_family

        known = decoder_family(s["arch"])
        s["attention"] = family(known).default_attention if known else "sdpa"
    if s["attention"] not in ("sdpa", "eager"):
        raise UserError("attention must be 'sdpa' or 'eager'")
    if s["method"] == "full":
        for k in ("rank", "targets", "lora_alpha", "lora_dropout", "adapter_dtype"):
            s[k] = None
    elif s["method"] in ("lora", "qlora"):
        s["rank"] = int(s["rank"])
        s["targets"] = list(s["targets"])
        s["lora_dropout"] = float(s["lora_dropout"] or 0.0)
        if s["lora_alpha"] is None:
            s["lora_alpha"] = 2 * s["rank"]
        s["modules_to_save"] = sorted(s["modules_to_save"])
        if s["adapter_dtype"] not in ("fp32", "base"):
            raise UserError("adapter_dtype must be 'fp32' (PEFT default) or 'base'")
    else:
        raise UserError(f"unknown method {s['method']!r}")
    for key, default in OPTIONAL.items():
        if s[key] == default:
            del s[key]
    return s


def to_scenario(spec: dict) -> Scenario:
    """The Scenario that asks the estimator what ``measure(spec)`` measures.

    torch's AdamW keeps its states in the parameter's dtype, so the state dtype follows the
    trainable weights (fp32 adapters → fp32 states); a fake-tensor or CPU run takes the CPU paths.
    """
    s = normalize_spec(spec)
    arch = {"model_type": "llama", **s["arch"]}
    model = spec_from_config(arch, name=spec.get("model") or spec.get("name") or "spec", kind="config",
                             source="measurement spec")
    lora = s["method"] in ("lora", "qlora")
    if lora:
        adapter = "fp32" if s["adapter_dtype"] == "fp32" else s["dtype"]
        trainable = adapter
    else:
        adapter, trainable = None, s["dtype"]
    return Scenario.create(
        model, method=s["method"], rank=s["rank"] if lora else None, targets=s["targets"] if lora else None,
        lora_dropout=s["lora_dropout"] if lora else None, adapter_dtype=adapter, dtype=s["dtype"],
        autocast=s["autocast"] or "none", state_dtype=None if s["optimizer"] in BNB_OPTIMIZERS else trainable,
        optimizer=s["optimizer"],
        optimizer_impl=s["optimizer_impl"], batch=s["batch"], seq=s["seq"],
        **{k: s.get(k, v) for k, v in OPTIONAL.items() if k != "modules_to_save"},
        modules_to_save=s.get("modules_to_save", []),
        grad_checkpointing=s["grad_checkpointing"], attention=s["attention"],
        device="cuda" if s["device"] == "cuda" else "cpu")


def from_scenario(sc: Scenario) -> dict:
    """The measurement spec of a Scenario (``symvram validate``): same model, method and recipe."""
    if sc.liger:
        raise UserError("--liger: validate does not apply Liger's kernels (Triton, GPU only); the estimate models "
                        "them from liger-kernel's source (modelled, not measured)")
    if sc.unsloth_kernels:
        raise UserError("--stack unsloth: validate does not run Unsloth's fused LoRA kernels (Triton, GPU only); the "
                        "estimate models them from Unsloth's source (modelled, not measured)")
    if sc.grad_checkpointing and sc.checkpoint_impl == "unsloth":
        raise UserError("--checkpoint-impl unsloth: validate runs torch's checkpointing; Unsloth's offloaded "
                        "checkpointer is run on its own by benchmarks/unsloth_checkpointer.py (its CUDA streams "
                        "stubbed), whose figures the estimate equals")
    spec = {"arch": sc.model.config(), "method": sc.method, "batch": sc.batch, "seq": sc.seq,
            "dtype": sc.dtype, "autocast": None if sc.autocast == "none" else sc.autocast,
            "optimizer": sc.optimizer, "optimizer_impl": sc.optimizer_impl,
            "grad_checkpointing": sc.grad_checkpointing, "attention": sc.attention,
            **{k: getattr(sc, k) for k, v in OPTIONAL.items() if k not in ("modules_to_save", "kernels")
               and getattr(sc, k) != v},
            # the Gated DeltaNet path resolved (auto: fla on CUDA, torch on the CPU, where validate traces)
            **({"kernels": sc.structure.kernels} if sc.structure.kernels != OPTIONAL["kernels"] else {})}
    if sc.router_aux_loss_coef and not sc.trl_trainer:   # LLaMA-Factory's configure_moe (model_utils/moe.py:160-199)
        spec["arch"].update(output_router_logits=True, router_aux_loss_coef=sc.router_aux_loss_coef)
    if sc.lora:
        spec.update(rank=sc.rank, targets=[*sc.targets, *sc.head_targets], lora_dropout=sc.lora_dropout,
                    adapter_dtype="fp32" if sc.adapter_dtype == "fp32" else "base")
        if sc.modules_to_save:
            spec["modules_to_save"] = list(sc.modules_to_save)
    return spec
