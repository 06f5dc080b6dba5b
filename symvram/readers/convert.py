"""Value converters for the mapping tables: a file's value → the value of a setting or a fact.

Each converter takes the value as the file holds it and returns the converted value, or raises
``WrongValue`` saying what it expected; the reader turns that into one line naming file and key.

>>> integer(4), boolean(True), choice({"cpu": "optimizer", "none": "none"})("cpu")
(4, True, 'optimizer')
>>> integer("four")
Traceback (most recent call last):
...
symvram.readers.convert.WrongValue: expected a positive integer, got 'four'
"""
from __future__ import annotations

import math

from ..errors import UserError, excerpt
from ..scenario import MODULES_TO_SAVE, parse_modules_to_save, parse_targets


class WrongValue(ValueError):
    """A value of the wrong type or outside what the key accepts (the message says what was expected)."""


def boolean(value) -> bool:
    """true or false (a YAML/JSON boolean; "true" as a string is refused, as the tools' own schemas do)."""
    if not isinstance(value, bool):
        raise WrongValue(f"expected true or false, got {excerpt(value)}")
    return value


MAX_INTEGER = 2**63 - 1  # the tools' own integer fields are 64-bit at most


def integer(value) -> int:
    """A positive integer (4 or 4.0; not "4", not true), at most MAX_INTEGER."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_INTEGER:
        raise WrongValue(f"expected a positive integer{' up to 2^63 - 1' * (isinstance(value, int) and value > 0)}, "
                         f"got {excerpt(value)}")
    return value


def number(value) -> float:
    """A finite real number (an int or a float, not a string, not NaN or infinity: no JSON holds those).

    >>> number(float("nan"))
    Traceback (most recent call last):
    ...
    symvram.readers.convert.WrongValue: expected a finite number, got nan
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise WrongValue(f"expected a finite number, got {excerpt(value)}")
    return value


def text(value) -> str:
    if not isinstance(value, str):
        raise WrongValue(f"expected a string, got {excerpt(value)}")
    return value


def reentrant(value) -> str:
    """``use_reentrant`` (true/false) as symvram's --checkpoint-impl."""
    return "reentrant" if boolean(value) else "non-reentrant"


def is_on(value) -> bool:
    """For keys the ledger does not model: does this value switch the feature on? (anything but off/empty)."""
    return value not in (None, False, 0, "", [], {}, "none", "None", "no", "NO", "disabled")


def nonempty(value) -> bool:
    """A list or comma string of module names: is any name given?"""
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, list):
        return bool(value)
    raise WrongValue(f"expected a list of module names, got {excerpt(value)}")


def _module_names(value) -> list[str]:
    if isinstance(value, str):
        return [n.strip().rsplit(".", 1)[-1] for n in value.split(",") if n.strip()]
    if isinstance(value, list) and all(isinstance(n, str) for n in value):
        return [n.strip().rsplit(".", 1)[-1] for n in value if n.strip()]
    raise WrongValue(f"expected a list of module names, got {excerpt(value)}")


def modules_to_save(value) -> tuple[str, ...]:
    """PEFT's modules_to_save (a list or a comma string; PEFT matches names by their last part): the modules
    symvram models, in canonical order (the others warn through ``other_modules``).

    >>> modules_to_save("model.embed_tokens,lm_head,score"), modules_to_save([])
    (('embed_tokens', 'lm_head'), ())
    """
    return parse_modules_to_save([n for n in _module_names(value) if n in MODULES_TO_SAVE])


def other_modules(value) -> bool:
    """Does a modules_to_save list name a module beyond the embedding and lm_head (not modelled)?"""
    return any(n not in MODULES_TO_SAVE for n in _module_names(value))


def objective(tool: str, names: dict[str, str], refused: dict[str, str] | None = None):
    """A tool's training objective (axolotl ``rl``, LLaMA-Factory ``stage``) as symvram's ``--objective``: the
    names in ``names`` map to a modelled objective (SFT, the default, to nothing), any other is refused with what is
    modelled (and, from ``refused``, why that tool's implementation is not).

    >>> objective("axolotl", {"dpo": "dpo"})("dpo"), objective("axolotl", {"dpo": "dpo"})(None)
    ('dpo', None)
    >>> objective("axolotl", {"dpo": "dpo"})("grpo")
    Traceback (most recent call last):
    ...
    symvram.readers.convert.WrongValue: 'grpo': the objectives modelled are sft, dpo, kto, reward, grpo, orpo, cpo and simpo (TRL 1.16's DPOTrainer, KTOTrainer, RewardTrainer, GRPOTrainer, ORPOTrainer and CPOTrainer; axolotl's dpo); PPO is not yet
    """
    refused = refused or {}

    def convert(value):
        if value in (None, False, ""):
            return None
        name = str(value).strip().lower()
        if name in names:
            return None if names[name] == "sft" else names[name]
        if name in refused:
            raise WrongValue(f"{value!r}: {refused[name]}")
        from ..ledger.objectives import objectives

        *first, last = objectives()
        spelled = ", ".join(k for k, v in names.items() if v != "sft")
        raise WrongValue(f"{value!r}: the objectives modelled are {', '.join(first)} and {last} ({trainers()}; "
                         f"{tool}'s {spelled or 'none'}); PPO is not yet")

    return convert


def trainers() -> str:
    """The TRL trainers the objectives of ``data/objectives.toml`` model, named by their titles, in order.

    >>> trainers().split(", ")[0]
    "TRL 1.16's DPOTrainer"
    """
    import re

    from ..ledger.objectives import objectives

    names = list(dict.fromkeys(m.group(1) for e in objectives().values() if (m := re.search(r"(\w+Trainer)", e["title"]))))
    *first, last = names
    return f"TRL 1.16's {', '.join(first)} and {last}"


# TRL 1.16 DPOConfig.loss_type (trl/trainer/dpo_config.py:245-253; an unknown one raises at the first step,
# dpo_trainer.py:1506) and SFTConfig.loss_type (sft_config.py: nll, dft): every DPO loss works on per-sequence
# log-probabilities, so each has the same memory
DPO_LOSS_TYPES = ("sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot",
                  "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm")
SFT_LOSS_TYPES = ("nll", "dft")


def loss_type(value):
    """TRL's ``loss_type`` (one name or a list for DPO's combined losses), checked as TRL checks it (GRPO's names
    from ``data/objectives.toml``).

    >>> loss_type(["sigmoid", "sft"])
    'sigmoid, sft'
    >>> loss_type("sigmod")
    Traceback (most recent call last):
    ...
    symvram.readers.convert.WrongValue: 'sigmod' is not a TRL 1.16 loss type; DPO: sigmoid, hinge, ipo, exo_pair, nca_pair, robust, bco_pair, sppo_hard, aot, aot_unpaired, apo_zero, apo_down, discopop, sft, sigmoid_norm; SFT: nll, dft; GRPO: grpo, dr_grpo, dapo, bnpo, cispo, sapo, luspo, vespo; CPO: sigmoid, hinge, ipo, simpo, alphapo
    """
    from ..ledger.objectives import objectives

    grpo = tuple(objectives()["grpo"]["loss_types"])
    cpo = (*objectives()["cpo"]["loss_types"], *objectives()["simpo"]["loss_types"])   # CPOConfig (cpo_config.py:121-127)
    names = value if isinstance(value, list) else [value]
    for name in names:
        if name not in DPO_LOSS_TYPES + SFT_LOSS_TYPES + grpo + cpo:
            raise WrongValue(f"{name!r} is not a TRL 1.16 loss type; DPO: {', '.join(DPO_LOSS_TYPES)}; "
                             f"SFT: {', '.join(SFT_LOSS_TYPES)}; GRPO: {', '.join(grpo)}; CPO: {', '.join(cpo)}")
    return ", ".join(map(str, names))


def simpo_loss(value):
    """CPOConfig's ``loss_type`` simpo or alphapo names a SimPO run (cpo_config.py:175-179: alphapo is simpo with
    cpo_alpha = 0); any other names none.

    >>> simpo_loss("alphapo"), simpo_loss("sigmoid")
    ('simpo', None)
    """
    from ..ledger.objectives import objectives

    return "simpo" if value in objectives()["simpo"]["loss_types"] else None


def refuse(why: str):
    """A key whose mere presence names a run that is not modelled (a GRPO or KTO config): exit 2 with ``why``."""
    def convert(value):
        raise WrongValue(f"{excerpt(value)}: {why}")

    return convert


def plugin(name: str, value):
    """A list of plugin paths (axolotl's ``plugins``): ``value`` when one of them is the class ``name``.

    >>> plugin("CutCrossEntropyPlugin", "cce")(["axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"])
    'cce'
    """

    def convert(paths):
        if isinstance(paths, str):
            paths = [paths]
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise WrongValue(f"expected a list of plugin class paths, got {paths!r}")
        return value if any(p.rsplit(".", 1)[-1] == name for p in paths) else None

    return convert


def choice(mapping: dict):
    """A converter accepting the keys of ``mapping`` (strings compared case-insensitively)."""
    lowered = {(k.lower() if isinstance(k, str) else k): v for k, v in mapping.items()}

    def convert(value):
        key = value.lower() if isinstance(value, str) else value
        if isinstance(key, (bool, int, str)) or key is None:
            if key in lowered and (not isinstance(key, bool) or isinstance(value, bool)):
                return lowered[key]
        shown = ", ".join(str(k) for k in mapping if k is not None)
        raise WrongValue(f"expected one of {shown}, got {excerpt(value)}")

    convert.accepted = tuple(mapping)
    return convert


def targets(value) -> tuple[str, ...]:
    """LoRA target modules: a list, a comma string, PEFT's "all-linear" (the family's group, resolved with the model) or
    LLaMA-Factory's "all": the nn.Linear leaf names its find_all_linear_modules collects (the family's linear-names
    group, which on a fused-expert MoE leaves out what PEFT's literal all-linear adds: the router, Mixtral's experts).

    >>> targets("all"), targets("all-linear")
    (('linear-names',), ('all-linear',))
    """
    if isinstance(value, str) and value.strip().lower() in ("all", "all-linear"):
        return ("linear-names" if value.strip().lower() == "all" else "all-linear",)
    if not isinstance(value, (str, list)) or (isinstance(value, list) and not all(isinstance(v, str) for v in value)):
        raise WrongValue(f"expected a list of module names or all-linear, got {excerpt(value)}")
    try:
        return parse_targets(value)
    except UserError as e:
        raise WrongValue(str(e)) from None


def attention(value) -> str:
    """An attention implementation → the ledger's sdpa (no b·heads·s² scores kept) or eager."""
    names = {"eager": "eager", "sdpa": "sdpa", "flash_attention_2": "sdpa", "flash_attention_3": "sdpa",
             "flex_attention": "sdpa", "kernels-community/flash-attn": "sdpa", "kernels-community/flash-attn3": "sdpa",
             "kernels-community/vllm-flash-attn3": "sdpa"}
    return choice(names)(value)


# LLaMA-Factory's flash_attn (AttentionFunction): auto picks sdpa where it can, disabled is eager
LLAMAFACTORY_ATTENTION = choice({"auto": "sdpa", "disabled": "eager", "sdpa": "sdpa", "fa2": "sdpa", "fa3": "sdpa"})


def flag_attention(kind: str):
    """axolotl's flash_attention / sdp_attention / xformers_attention / eager_attention: true → kind."""

    def convert(value):
        return kind if boolean(value) else None

    return convert


def mixed(value) -> str | None:
    """bf16 / fp16 of axolotl, where "auto" means bf16 on Ampere or newer (the cards this estimates)."""
    if value == "auto":
        return True
    return boolean(value) if value is not None else None


def auto_or(convert):
    """DeepSpeed's "auto": the value comes from the training arguments — the key is skipped."""

    def wrapped(value):
        return None if value == "auto" else convert(value)

    return wrapped


def dtype_name(value) -> str:
    """torch dtype spelled as transformers writes it (``bfloat16``, ``torch.float16``, ``auto``)."""
    names = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
             "auto": "bf16"}  # auto: the checkpoint's dtype, bf16 for the models this estimates
    if not isinstance(value, str) or value.removeprefix("torch.").lower() not in names:
        raise WrongValue(f"expected a dtype (bfloat16, float16, float32, auto), got {excerpt(value)}")
    return names[value.removeprefix("torch.").lower()]


def zero_stage(value) -> int:
    if isinstance(value, bool) or value not in (0, 1, 2, 3):
        raise WrongValue(f"expected a ZeRO stage 0, 1, 2 or 3, got {excerpt(value)}")
    return value


# torch FSDP's ShardingStrategy (by name or accelerate's 1-based number) → the ZeRO stage it equals
FSDP_STRATEGY = choice({"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0, "HYBRID_SHARD": 3,
                        "HYBRID_SHARD_ZERO2": 2, 1: 3, 2: 2, 3: 0, 4: 3, 5: 2})


def reshard(value) -> int:
    """FSDP2's reshard_after_forward: true is FULL_SHARD (stage 3), false SHARD_GRAD_OP (stage 2)."""
    return 3 if boolean(value) else 2


def trainer_fsdp(value) -> int | None:
    """TrainingArguments.fsdp: "full_shard auto_wrap offload", a list of those words, true, or empty."""
    if value in (None, False, "", []):
        return None
    if value is True:
        return 3
    words = value.split() if isinstance(value, str) else value
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise WrongValue(f"expected FSDP options such as 'full_shard auto_wrap', got {excerpt(value)}")
    stages = {"full_shard": 3, "shard_grad_op": 2, "hybrid_shard": 3, "hybrid_shard_zero2": 2, "no_shard": 0}
    found = [stages[w.lower()] for w in words if w.lower() in stages]
    return found[0] if found else 3


def trainer_fsdp_offload(value) -> bool | None:
    words = value.split() if isinstance(value, str) else value if isinstance(value, list) else []
    return True if any(isinstance(w, str) and w.lower() == "offload" for w in words) else None


def offload_device(value) -> bool:
    """DeepSpeed offload device: cpu or nvme moves it off the GPU; none keeps it."""
    return choice({"none": False, "cpu": True, "nvme": True, None: False})(value)


# torchtune 0.6.1's Llama builders (torchtune/models/llama2, llama3, llama3_1, llama3_2 _model_builders.py) → presets
TORCHTUNE_MODELS = {"llama2_7b": "llama-2-7b", "llama2_13b": "llama-2-13b", "llama2_70b": "llama-2-70b",
                    "llama3_8b": "llama-3-8b", "llama3_70b": "llama-3-70b", "llama3_1_8b": "llama-3.1-8b",
                    "llama3_1_70b": "llama-3.1-70b", "llama3_1_405b": "llama-3.1-405b",
                    "llama3_2_1b": "llama-3.2-1b", "llama3_2_3b": "llama-3.2-3b"}


def _torchtune_builder(value) -> tuple[str, str]:
    """A torchtune model ``_component_`` → (the method its prefix says, the base builder's name).

    >>> _torchtune_builder("torchtune.models.llama3_2.lora_llama3_2_1b")
    ('lora', 'llama3_2_1b')
    """
    name = text(value).rsplit(".", 1)[-1]
    for prefix, method in (("qlora_", "qlora"), ("lora_", "lora")):
        if name.startswith(prefix):
            return method, name[len(prefix):]
    return "full", name


def torchtune_model(value) -> str:
    """The preset of a torchtune model builder (its Llama builders; another is refused, naming them).

    >>> torchtune_model("torchtune.models.llama3_1.lora_llama3_1_8b")
    'llama-3.1-8b'
    """
    builder = _torchtune_builder(value)[1]
    if builder not in TORCHTUNE_MODELS:
        raise WrongValue(f"torchtune's {builder} builder is not modelled (its Llama builders are: "
                         f"{', '.join(TORCHTUNE_MODELS)})")
    return TORCHTUNE_MODELS[builder]


def torchtune_method(value) -> str:
    return _torchtune_builder(value)[0]


# torchtune's LoRA module names (lora_attn_modules; apply_lora_to_mlp's w1, w2, w3) → transformers' names
TORCHTUNE_ATTN = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}
TORCHTUNE_MLP = ("gate_proj", "up_proj", "down_proj")   # w1, w3, w2 (models/llama3/_component_builders.py:240-248)


def torchtune_attn_modules(value) -> tuple[str, ...]:
    """lora_attn_modules → the ledger's names.

    >>> torchtune_attn_modules(["q_proj", "v_proj", "output_proj"])
    ('q_proj', 'v_proj', 'o_proj')
    """
    if not isinstance(value, list) or not all(isinstance(v, str) and v in TORCHTUNE_ATTN for v in value):
        raise WrongValue(f"expected a list of {', '.join(TORCHTUNE_ATTN)}, got {excerpt(value)}")
    return tuple(TORCHTUNE_ATTN[v] for v in value)


# torchtune's optimizer._component_ and LitGPT's optimizer class path → the Trainer's optim name the readers already
# map (OPTIMIZERS); a torch optimizer's implementation comes from its fused / foreach keys
TORCHTUNE_OPTIMIZERS = {"torch.optim.AdamW": "adamw_torch", "torch.optim.Adam": "adamw_torch",
                        "torch.optim.SGD": "sgd", "bitsandbytes.optim.AdamW8bit": "adamw_bnb_8bit",
                        "bitsandbytes.optim.PagedAdamW8bit": "paged_adamw_8bit",
                        "bitsandbytes.optim.PagedAdamW": "paged_adamw_32bit",
                        "bitsandbytes.optim.PagedAdamW32bit": "paged_adamw_32bit"}


def torchtune_optimizer(value) -> str:
    return choice(TORCHTUNE_OPTIMIZERS)(value)


def torchtune_loss(value) -> str:
    """loss._component_: CEWithChunkedOutputLoss is the chunked loss; another is refused (a plain
    torch.nn.CrossEntropyLoss takes the bf16 logits whole, without transformers' fp32 upcast: not modelled)."""
    return choice({"torchtune.modules.loss.CEWithChunkedOutputLoss": "chunked"})(value)


# ------------------------------------------------- LitGPT 0.5.13 (finetune/lora.py, finetune/full.py setup arguments)
def litgpt_checkpoint(value) -> str:
    """checkpoint_dir: a folder that exists as it is, else litgpt download's layout ``checkpoints/<org>/<name>``
    (scripts/download.py: ``checkpoint_dir / repo_id``) names the Hub id.

    >>> litgpt_checkpoint("checkpoints/meta-llama/Llama-3.2-1B")
    'meta-llama/Llama-3.2-1B'
    """
    from pathlib import Path

    path = text(value)
    parts = path.strip("/").split("/")
    try:
        here = Path(path).exists()
    except (OSError, ValueError):
        here = False
    return "/".join(parts[1:]) if not here and len(parts) == 3 and parts[0] == "checkpoints" else path


# precision → (storage dtype, autocast): Fabric's "-true" precisions convert the module, "-mixed" autocast fp32 weights
LITGPT_PRECISION = choice({"bf16-true": ("bf16", "none"), "bf16-mixed": ("fp32", "bf16"), "32-true": ("fp32", "none"),
                           "16-true": ("fp16", "none"), "16-mixed": ("fp32", "fp16")})


def litgpt_devices(value) -> int:
    """devices: a count (parse_devices, utils.py); "auto" and -1 mean every GPU of the machine, which a file cannot say."""
    if value in ("auto", -1):
        raise WrongValue(f"{excerpt(value)} is every GPU of the machine that runs it; give a count (devices: 1)")
    return integer(value)


def litgpt_optimizer(value) -> str:
    """optimizer: a name ("AdamW": torch.optim's) or a class path, or a mapping with ``class_path``
    (utils.py:636-664 instantiate_torch_optimizer) → the Trainer's optim name the readers map.

    >>> litgpt_optimizer("AdamW"), litgpt_optimizer({"class_path": "torch.optim.AdamW", "init_args": {"lr": 2e-4}})
    ('adamw_torch', 'adamw_torch')
    """
    path = value.get("class_path") if isinstance(value, dict) else value
    path = text(path)
    return torchtune_optimizer(path if "." in path else f"torch.optim.{path}")
