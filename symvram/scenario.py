"""A frozen set of inputs — model, method, recipe, batch, sequence … — checked, with defaults,
and turned into the ledger's Structure and the numbers to substitute.

>>> sc = Scenario.create("7b", method="lora", rank=16)
>>> sc.structure.targets[:2], sc.values()["rank"]
(('q_proj', 'k_proj'), 16)
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from importlib import resources

from .errors import UserError, did_you_mean, excerpt
from .ledger.architecture import Family, built, family, family_names
from .ledger.objectives import objectives
from .ledger.structure import BNB_OPTIM_BITS, Structure
from .ledger.towers import LOADERS
from .presets import MAX_DIM, ModelSpec, load_model
from .stacks import DEFAULT_SEQ, STACK_EXTRAS, STACK_SETTINGS, check_stack, concrete, resolve, runs_trainer, stacks
from .symbols import SYMBOLS, sym
from .versions import applies, parse_versions

METHODS = ("full", "lora", "qlora")
DTYPES = ("bf16", "fp16", "fp32")
STATE_DTYPES = ("fp32", "bf16", "int8")
BNB_STATE_DTYPES = {name: {8: "int8", 32: "fp32"}[bits] for name, bits in BNB_OPTIM_BITS.items()}  # by construction
BNB_OPTIMIZERS = tuple(BNB_STATE_DTYPES)
OPTIMIZERS = ("adamw", "sgd", "sgd-momentum", "lion", "adafactor", *BNB_OPTIMIZERS)
OPTIMIZER_IMPLS = ("foreach", "fused", "forloop")
ATTENTIONS = ("sdpa", "eager")
DEVICES = ("cuda", "cpu")
# --kernels: the Gated DeltaNet mixers' code path (Scenario.deltanet_kernels): auto (fla on CUDA, torch on the CPU),
# torch (transformers' fallback), fla (flash-linear-attention's and causal-conv1d's kernels)
KERNELS = ("auto", "torch", "fla")
CHECKPOINT_IMPLS = ("non-reentrant", "reentrant", "unsloth")
KBIT_PREPS = ("peft", "none")
ROUTINGS = ("balanced", "worst")   # MoE: the routing priced (worst: every token on the same k experts)
# the families and targets Unsloth's fused LoRA kernels are modelled for (Scenario.unsloth_kernels)
UNSLOTH_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
UNSLOTH_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LOSS_IMPLS = ("torch", "chunked", "liger", "cce", "trl", "unsloth")
OFFLOADS = ("none", "optimizer", "optimizer+params")
HALF_DTYPES = ("none", "bf16", "fp16")   # --autocast and --mp-policy: none or a 16-bit dtype
MAX_SEQ = 10_000_000
MAX_BATCH = 1_000_000
MAX_RANK = 1 << 20
MAX_GPUS = 1_000_000
# Largest value --set accepts, by symbol name, else by group: beyond these a number is a typo.
FIELD_SYMBOLS = {"batch", "seq", "rank", "gpus", "tp", "image_tokens"}  # symbols that are also Scenario fields
SET_LIMITS = {"P": 10**15, "model": MAX_DIM, "bytes": 64, "quant": 1 << 20, "zero": 10**13,
              "mfu": 1, "overlap": 1, "time": 10**18}


MODULES_TO_SAVE = ("embed_tokens", "lm_head")  # the modules PEFT's modules_to_save is modelled for
HEAD_TARGETS = ("embed_tokens", "lm_head")     # LoRA targets outside the layers: PEFT's lora.Embedding, lora.Linear
# LitGPT's LoRA switches (litgpt 0.5.13 lora.py:467-475 Config.lora_*) → the Llama modules each puts adapters on: q, k, v
# are the three parts of one fused LoRAQKVLinear (lora.py:535-546), lora_mlp all three LLaMAMLP linears
# (lora.py:619-621, create_lora_linear's use_r default :585), lora_head the lm_head (lora.py:489-495)
LITGPT_LORA = {"lora_query": ("q_proj",), "lora_key": ("k_proj",), "lora_value": ("v_proj",),
               "lora_projection": ("o_proj",), "lora_mlp": ("gate_proj", "up_proj", "down_proj"),
               "lora_head": ("lm_head",)}


def parse_modules_to_save(spec: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """PEFT's ``modules_to_save`` (a comma list or a list), in canonical order; only the embedding and lm_head
    are modelled (what recipes save when they add tokens).

    >>> parse_modules_to_save("lm_head, embed_tokens"), parse_modules_to_save([])
    (('embed_tokens', 'lm_head'), ())
    """
    names = {n.strip() for n in (spec.split(",") if isinstance(spec, str) else spec) if n.strip()}
    unknown = sorted(names - set(MODULES_TO_SAVE))
    if unknown:
        raise UserError(f"--modules-to-save: {', '.join(unknown)} not modelled; use {' or '.join(MODULES_TO_SAVE)}")
    return tuple(n for n in MODULES_TO_SAVE if n in names)


@cache
def recipes() -> dict:
    return tomllib.loads(resources.files("symvram.data").joinpath("recipes.toml").read_text(encoding="utf-8"))


@cache
def _defaults() -> dict[str, int | float]:
    """Every registry symbol's default value."""
    return {n: d.default for n, d in SYMBOLS.items() if d.default is not None}


# the GRPOConfig settings a Scenario holds (grpo_config.py); generation backends (grpo_trainer.py:1763-1877)
GRPO_SETTINGS = ("num_generations", "steps_per_generation", "gradient_accumulation_steps", "num_iterations", "beta",
                 "loss_type", "generation")
GENERATIONS = ("hf", "vllm-colocate", "vllm-server")
# settings Scenario.create reads that no field holds (it derives a field from them)
CREATE_SETTINGS = ("max_completion_length",)   # GRPO: seq = prompt + max_completion_length


def _grpo_seq(kw: dict) -> int:
    """GRPO's sequence from ``max_completion_length`` (removed from ``kw``): the prompt plus the completion.

    >>> _grpo_seq({"objective": "grpo", "prompt": 256, "max_completion_length": 768})
    1024
    """
    completion = kw.pop("max_completion_length")
    if kw.get("objective") != "grpo":
        raise UserError("--max-completion-length is a GRPO setting: use --objective grpo")
    if isinstance(completion, bool) or not isinstance(completion, int) or completion < 1:
        raise UserError(f"--max-completion-length must be a whole number of tokens >= 1; got {excerpt(completion)}")
    seq = int(kw.get("prompt") or 0) + completion
    if kw.get("seq") not in (None, seq):
        raise UserError(f"--seq {kw['seq']} contradicts --prompt {kw.get('prompt') or 0} + --max-completion-length "
                        f"{completion} = {seq}; give one of them")
    return seq


def _objective_defaults(kw: dict) -> dict:
    """What a preference objective decides before the stack fills the rest: TRL's stack (its config's bf16 and
    gradient checkpointing) unless one is given, and TRL's fused LM head, which its trainers always install.

    >>> _objective_defaults({"objective": "dpo"})["loss_impl"]
    'trl'
    """
    name = kw.get("objective", "sft")
    entry = objectives().get(name)
    if name == "sft" or entry is None:   # an unknown name is refused by _check_objective
        return kw
    kw = dict(kw)
    kw.setdefault("stack", entry["stack"])
    if "loss_impl" not in entry:   # a reward model's loss reads one score per sequence: no LM head to implement
        return kw
    if kw.get("loss_impl", entry["loss_impl"]) != entry["loss_impl"]:
        head = "TRL's own fused LM head" if entry["loss_impl"] == "trl" else "its loss on the model's logits"
        raise UserError(f"--objective {name} runs {head} (--loss-impl {entry['loss_impl']}); "
                        f"--loss-impl {kw['loss_impl']} contradicts it")
    kw["loss_impl"] = entry["loss_impl"]
    return kw


def parse_targets(spec: str | tuple[str, ...] | list[str], fam: Family | None = None) -> tuple[str, ...]:
    """A family's target group (``all-linear``, ``attention``, ``qv``, ``mlp``) or a comma list of its
    module names (``q_proj,v_proj`` or ``q,v``), in the family's module order, then ``embed_tokens`` and
    ``lm_head`` if named (PEFT's all-linear leaves lm_head out; ``Scenario`` keeps them as ``head_targets``).

    >>> parse_targets("qv"), parse_targets("qkv,o", family("phi3")), parse_targets("lm_head,q")
    (('q_proj', 'v_proj'), ('qkv_proj', 'o_proj'), ('q_proj', 'lm_head'))
    """
    fam = fam or family("llama")
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    chosen: set[str] = set()
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name in HEAD_TARGETS:
            chosen.add(name)
            continue
        if why := fam.extra("untargetable", {}).get(name):
            raise UserError(f"{name} of {fam.key} cannot be a LoRA target: {why}")
        if name in fam.target_sets:
            chosen.update(fam.target_sets[name])
        elif name == "linear-names":   # the tools' nn.Linear leaf names (mixtral.toml): all-linear where no group differs
            chosen.update(fam.target_sets["all-linear"])
        elif name in fam.target_map:
            chosen.add(name)
        elif f"{name}_proj" in fam.target_map:
            chosen.add(f"{name}_proj")
        elif aliases := [w for w, names in fam.extra("peft_target_modules", {}).items() if name in names]:
            chosen.update(aliases)  # PEFT's names for a fused expert weight (Mixtral w1/w3 → gate_up_proj)
        else:
            raise UserError(f"unknown LoRA target {excerpt(name)} for {fam.key}; use {', '.join(fam.target_sets)} or module "
                            f"names ({', '.join(fam.target_map)})")
    for name in fam.target_map:   # a group reaching a module PEFT refuses (all-linear on a Mamba model's out_proj)
        if name in chosen and (why := fam.extra("untargetable", {}).get(name)):
            raise UserError(f"{name} of {fam.key} cannot be a LoRA target (the targets {excerpt(spec)} reach it): {why}")
    if not chosen - set(HEAD_TARGETS):
        raise UserError("no LoRA target modules given" + (f" beside {', '.join(sorted(chosen))}: LoRA on the model's "
                        "embedding or lm_head alone is not modelled; add layer targets (e.g. all-linear,lm_head)"
                        if chosen else ""))
    return tuple(name for name in fam.target_map if name in chosen) + tuple(
        n for n in HEAD_TARGETS if n in chosen)


@cache
def smallest_target_side(family_name: str, targets: tuple[str, ...], dims: tuple[tuple[str, int], ...]) -> int:
    """min(d_in, d_out) over the targeted matrices: the largest rank LoRA can have (computed once per shape)."""
    fam, values = family(family_name), {SYMBOLS[n].symbol: v for n, v in dims}
    # not the E-wide router (a bare parameter, or Gemma 4's nn.Linear), nor a gate of one output or one per head
    # (Qwen2-MoE's shared_expert_gate, a Gated DeltaNet's in_proj_b and in_proj_a: PEFT adapts them at any rank)
    weights = fam.target_map

    def gate(m) -> bool:
        return m.d_out == 1 or (m.d_out.is_Symbol and SYMBOLS[m.d_out.name].unit in ("heads", "experts"))

    linear = [t for t in targets if not weights[t].count.free_symbols and weights[t] not in fam.moe_weights
              and not gate(weights[t])] or targets
    return min(int(side.xreplace(values)) for t in linear for side in (weights[t].d_in, weights[t].d_out))


def _packed_row(kw: dict) -> None:
    """``packing = N``: TRL's padding-free collator flattens the micro-batch into one row of N tokens (trl 1.16
    trainer/sft_trainer.py:187-192), so batch is 1 and seq is N; a batch or seq that says otherwise is refused."""
    n = kw["packing"]
    _positive_int(n, "--packing", MAX_SEQ)
    for name, want in (("batch", 1), ("seq", n)):
        if kw.get(name, want) != want:
            raise UserError(f"--packing {n} is one padding-free row of {n} tokens (batch 1, seq {n}); "
                            f"--{name} {kw[name]} contradicts it (drop it; --packing counts the tokens of all "
                            "the micro-batch's rows)")
        kw[name] = want


def _choice(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise UserError(f"{what} must be one of {', '.join(allowed)}; got {excerpt(value)}")
    return value


def _positive_int(value, what: str, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise UserError(f"{what} must be a positive integer; got {excerpt(value)}")
    if value <= 0:
        raise UserError(f"{what} must be a positive integer; got {excerpt(value)}")
    if value > limit:
        raise UserError(f"{what} = {excerpt(value)} is beyond any real training run (limit {limit})")
    return value


def _set_value(name: str, value):
    """A ``--set`` value: a positive, finite number (NaN and infinity are not; the JSON could not hold them).

    >>> _set_value("rank", float("nan"))
    Traceback (most recent call last):
    ...
    symvram.errors.UserError: --set rank: value must be a positive number; got nan
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UserError(f"--set {name}: value must be a positive number; got {excerpt(value)}")
    return value


# MoE block features whose no-grad working set is not derived for --objective dpo, kto, reward (families' extras)
MOE_UNMODELLED = ("shared_expert", "router_fp32", "router_topk_softmax", "expert_biases", "experts_dense",
                  "router_compute_dtype")


@dataclass(frozen=True)
class Scenario:
    """Every input of one estimate. Build it with ``Scenario.create`` (which checks and resolves)."""

    model: ModelSpec
    stack: str = "interview"        # create() picks the model's default stack (hf for real models)
    method: str = "full"
    rank: int = 64
    targets: tuple[str, ...] = ()   # resolved by create: the family's all-linear unless given (the layers' modules)
    head_targets: tuple[str, ...] = ()  # LoRA on embed_tokens / lm_head too (given in targets; create splits them off)
    dtype: str = "bf16"
    master: str = "none"
    state_dtype: str = "fp32"
    optimizer: str = "adamw"
    optimizer_impl: str = "foreach"
    adapter_dtype: str = "bf16"
    autocast: str = "none"
    batch: int = 1
    seq: int = DEFAULT_SEQ
    grad_checkpointing: bool = False
    attention: str = "sdpa"
    lora_dropout: float = 0.0
    device: str = "cuda"
    kernels: str = "auto"           # the Gated DeltaNet path: auto | torch | fla (Scenario.deltanet_kernels)
    double_quant: bool = True
    gpus: int = 1
    zero: int = 0
    offload: str = "none"
    tp: int = 1
    sequence_parallel: bool = False
    checkpoint_impl: str = "non-reentrant"
    loss_impl: str = "torch"
    dora: bool = False              # PEFT LoraConfig(use_dora=True)
    modules_to_save: tuple[str, ...] = ()  # PEFT LoraConfig(modules_to_save=...): embed_tokens, lm_head
    kbit_prep: str = "none"         # QLoRA: peft's prepare_model_for_kbit_training (fp32 non-quantized weights)
    routing: str = "balanced"       # MoE: balanced, or worst (every token of the micro-batch on the same k experts)
    mp_policy: str = "none"         # FSDP2 MixedPrecisionPolicy(param_dtype=this, reduce_dtype=fp32) on fp32 storage
    optimizer_in_backward: bool = False  # one optimizer per parameter, stepped by its post-accumulate-grad hook
    checkpoint_every: int = 1       # checkpointing of layers 0, k, 2k … only (transformers' every_n_layers = k)
    checkpoint_ops: bool = False    # torchtitan's op-level selective checkpointing of every layer (validate.sac)
    offload_activations: bool = False  # TRL's activation_offloading: saved tensors to pinned host memory
    liger: bool = False             # Liger's layer kernels (RMSNorm, SwiGLU / GeGLU, RoPE): apply_liger_kernel_to_*
    packing: int = 0                # padding-free packing: one row of this many tokens, position ids restarting per sample
    objective: str = "sft"          # sft | dpo (data/objectives.toml)
    prompt: int = 0                 # DPO: prompt tokens per sequence (not scored by TRL's fused LM head)
    precompute_ref: bool = False    # DPO: DPOConfig(precompute_ref_log_probs=True): no reference during training
    # GRPO (GRPOConfig, trl 1.16 grpo_config.py; seq = prompt + max_completion_length, prompt = the longest prompt)
    num_generations: int = 8        # completions per prompt
    steps_per_generation: int = 1   # micro-steps one generation batch is split over (GRPOConfig: = accumulation)
    gradient_accumulation_steps: int = 1  # micro-steps per optimizer step (decides whether old log-probs exist)
    num_iterations: int = 1         # optimization passes over each generation batch
    beta: float = 0.0               # the KL coefficient: 0 (TRL's default) loads no reference
    loss_type: str = "dapo"         # GRPOConfig.loss_type
    generation: str = "hf"          # hf (transformers' generate) | vllm-colocate | vllm-server
    cpo_alpha: float = 1.0          # CPO/SimPO: CPOConfig.cpo_alpha, the weight of the chosen rows' NLL (0: not computed)
    router_aux_loss_coef: float | None = None  # the MoE load-balancing loss's weight: TRL's SFT/DPO/KTO configs' (None:
    # the model config's), LLaMA-Factory's moe_aux_loss_coef (non-zero: the model's forward computes the loss)
    loader: str = "causal-lm"       # a multimodal checkpoint: the Auto class it is loaded by (ModelSpec.loaded_as)
    image_tokens: int = 0           # a multimodal checkpoint: image tokens per sample, within seq (one image each)
    train_vision: bool = False      # the vision tower takes gradients (its weights under full, its adapters under LoRA all-linear)
    overrides: tuple[tuple[str, float], ...] = field(default=())
    versions: tuple[tuple[str, str], ...] = ()   # --versions: library versions asked for (symvram.versions)
    # the settings given (not filled by the stack): with_changes keeps them and lets the stack fill the rest again
    given: frozenset = field(default=frozenset(), compare=False, repr=False)

    @classmethod
    def create(cls, model: str | ModelSpec, **kw) -> "Scenario":
        """Check every input and fill the defaults: a setting not given (or None) takes the value of the stack
        (``stack``, else the model's default stack: see symvram.stacks)."""
        spec = model if isinstance(model, ModelSpec) else load_model(model)
        kw = {k: v for k, v in kw.items() if v is not None and k != "given"}
        if "loader" in kw:   # AutoModelForImageTextToText: Qwen3.5's and Llama 4's class with their vision tower
            spec = spec.loaded_as(kw["loader"])
        kw["loader"] = spec.loader
        if "max_completion_length" in kw:   # GRPO: the sequence is the prompt and the longest completion
            kw["seq"] = _grpo_seq(kw)
        unknown = sorted(set(kw) - set(cls.__dataclass_fields__))
        if unknown:
            raise UserError(f"unknown scenario setting {', '.join(unknown)}; settings are "
                            f"{', '.join(k for k in cls.__dataclass_fields__ if k not in ('model', 'given'))}")
        fam = family(spec.family)
        # a stack's own default targets (LitGPT's q and v), else a family whose all-linear PEFT refuses (Nemotron-H:
        # out_proj) names the group it defaults to
        targets = parse_targets(kw.get("targets", stacks().get(kw.get("stack"), {}).get(
            "targets", fam.extra("default_targets", "all-linear"))), fam)
        heads = set(targets) | set(kw.get("head_targets", ()))
        if unknown := sorted(heads - set(targets) - set(HEAD_TARGETS)):
            raise UserError(f"head_targets: {', '.join(unknown)} unknown; use {' or '.join(HEAD_TARGETS)}")
        # a module under a config switch that is off (Gemma 4's per-layer-input gate without per-layer embeddings)
        # is not in the model: a group naming it leaves it out
        kw["targets"] = tuple(t for t in targets if t not in HEAD_TARGETS
                              and built(fam.target_map[t], spec.options))
        kw["head_targets"] = tuple(t for t in HEAD_TARGETS if t in heads)
        kw["modules_to_save"] = parse_modules_to_save(kw.get("modules_to_save", ()))
        kw.setdefault("attention", fam.default_attention)
        if "versions" in kw:
            kw["versions"] = parse_versions(kw["versions"])
        if "overrides" in kw:
            overrides = dict(kw["overrides"])
            for name in FIELD_SYMBOLS & set(overrides):  # --set tp=2 is --tp 2: checked, and in the structure
                value = _set_value(name, overrides.pop(name))
                kw[name] = int(value) if isinstance(value, float) and value.is_integer() else value
            kw["overrides"] = tuple(sorted(overrides.items()))
        if isinstance(kw.get("checkpoint_every"), int) and kw["checkpoint_every"] > 1:
            kw.setdefault("grad_checkpointing", True)   # every_n_layers is a setting of checkpointing
        if kw.get("checkpoint_ops"):
            kw.setdefault("grad_checkpointing", True)   # so is the op-level policy
        if kw.get("packing"):
            _packed_row(kw)
        state_given = kw.get("state_dtype")
        given = frozenset(kw) - {"targets", "head_targets"}
        kw = _objective_defaults(kw)
        kw = resolve(spec, kw)
        if stacks()[kw["stack"]].get("model_code") == "litgpt" and spec.params is None:
            # LitGPT's GPT has its own lm_head: a tied checkpoint's embedding is copied into it
            # (litgpt 0.5.13 scripts/convert_hf_checkpoint.py:273-274), so the model it trains is untied
            spec = replace(spec, tied=False)
        kw = concrete(kw, kw.get("method", "full") in ("lora", "qlora"))
        if (bnb_states := BNB_STATE_DTYPES.get(kw.get("optimizer"))) is not None:
            if state_given not in (None, bnb_states):
                bits = "8 bits" if bnb_states == "int8" else "32 bits"
                raise UserError(f"--optimizer {kw['optimizer']} keeps its states in {bits} (bitsandbytes); "
                                f"--state-dtype {state_given} contradicts it")
            kw["state_dtype"] = bnb_states
        sc = cls(model=spec, **kw, given=given)
        sc._check()
        return sc

    @property
    def reference(self) -> str:
        """Where a preference objective's reference log-probs come from: ``copy`` (a second model, full
        fine-tuning), ``adapters`` (the PEFT policy with its adapters disabled), ``precomputed``, or ``none`` (SFT)."""
        if (self.objective == "sft" or self.score_head or (self.objective == "grpo" and self.beta == 0)
                or objectives()[self.objective].get("reference") == "none"):
            return "none"
        return "precomputed" if self.precompute_ref else ("adapters" if self.lora else "copy")

    @property
    def score_head(self) -> bool:
        """The objective trains a sequence-classification model (reward modelling: a score head, no lm_head)."""
        return objectives()[self.objective].get("head") == "score"

    @property
    def model_code(self) -> str:
        """Whose model code the stack trains: transformers' modules, or torchtune's or LitGPT's own."""
        return stacks()[self.stack].get("model_code", "transformers")

    @property
    def nll(self) -> bool:
        """The trainer computes the chosen rows' NLL on the logits: ORPO always, CPO/SimPO unless cpo_alpha = 0
        (trl 1.16 experimental/cpo/cpo_trainer.py:842-845)."""
        rule = objectives()[self.objective].get("nll", False)
        return self.cpo_alpha != 0 if rule == "cpo_alpha" else bool(rule)

    @property
    def saved_modules(self) -> tuple[str, ...]:
        """PEFT's modules_to_save as PEFT builds them: the ones asked for, and a LoRA reward model's score head,
        which PEFT's SEQ_CLS task adds (peft 0.21.2 peft_model.py:1830-1836)."""
        return self.modules_to_save + (("score",) if self.score_head and self.lora else ())

    def with_changes(self, **kw) -> "Scenario":
        """A copy with some inputs changed, checked again. A shorter sequence that a preference objective's prompt
        no longer fits in (diagnose's probe, a curve over seq) keeps the prompt's share of it:

        >>> sc = Scenario.create("7b", method="lora", objective="dpo", seq=2048, prompt=512)
        >>> sc.with_changes(seq=1024).prompt, sc.with_changes(seq=256).prompt
        (512, 64)
        """
        implied = (*STACK_SETTINGS, *STACK_EXTRAS)  # what the stack fills in, it fills in again
        merged = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("model", "given")
                  and (k not in implied or k in self.given)}
        merged.update({k: v for k, v in kw.items() if v is not None})
        if merged.get("grad_checkpointing") is False:   # offloading and the selective policies are its settings
            for name, off in (("offload_activations", False), ("checkpoint_ops", False), ("checkpoint_every", 1)):
                if name not in kw:
                    merged[name] = off
        if self.packing and "packing" not in kw:   # a new length or batch (a probe, a curve, --set seq=…)
            asked = {**dict(kw.get("overrides") or ()), **{k: v for k, v in kw.items() if v is not None}}
            if "seq" in asked or "batch" in asked:
                rows = asked.get("batch", 1)
                merged["packing"] = int(asked.get("seq", self.seq)) if rows == 1 else 0
        seq = merged["seq"]
        if "prompt" not in kw and isinstance(seq, int) and not isinstance(seq, bool) and 0 < seq <= self.prompt:
            merged["prompt"] = max(self.prompt * seq // self.seq, 1 if self.objective == "grpo" else 0)
        # so do the image tokens (counted within seq): a sequence shorter than them keeps their share of it
        if "image_tokens" not in kw and isinstance(seq, int) and not isinstance(seq, bool) and 0 < seq < self.image_tokens:
            merged["image_tokens"] = max(self.image_tokens * seq // self.seq, 1)
        if self.objective == "grpo" and "steps_per_generation" not in kw and merged["batch"] != self.batch:
            merged["steps_per_generation"] = self._steps_for(merged["batch"])
        return Scenario.create(self.model, **merged)

    def _steps_for(self, batch) -> int:
        """GRPO at another per-device batch: the same steps per generation while the generation batch still holds
        whole prompt groups (TRL's divisibility by num_generations), else those that keep the generation batch when
        ``batch`` divides it, else the fewest that hold whole groups — what GRPO's docs advise: fewer completions
        per device, more steps per generation.

        >>> sc = Scenario.create("7b", objective="grpo", method="lora", prompt=64, seq=512, batch=8)
        >>> sc.with_changes(batch=2).steps_per_generation, sc.with_changes(batch=3).steps_per_generation
        (4, 8)
        """
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            return self.steps_per_generation   # refused by the check
        if self.generation_batch(batch) % self.num_generations == 0:
            return self.steps_per_generation
        rows = self.batch * self.steps_per_generation
        if rows % batch == 0:
            return rows // batch
        return self.num_generations // math.gcd(batch * self.gpus, self.num_generations)

    def generation_batch(self, batch: int | None = None) -> int:
        """GRPO's generation batch (GRPOConfig.generation_batch_size): the per-device batch (``batch``, else this
        scenario's) on each of the data-parallel ranks (``gpus``) for ``steps_per_generation`` micro-steps.

        >>> Scenario.create("7b", objective="grpo", method="lora", prompt=64, seq=512, batch=8).generation_batch(2)
        2
        """
        return (self.batch if batch is None else batch) * self.gpus * self.steps_per_generation

    @property
    def kbit_prepared(self) -> bool:
        """QLoRA through peft.prepare_model_for_kbit_training: every weight that is not 4-bit is cast to fp32."""
        return self.method == "qlora" and self.kbit_prep == "peft"

    @property
    def states_follow_param(self) -> bool:
        """torch's optimizers keep each state in its parameter's dtype: the stack says so (``state_dtype =
        "param"``) and no other state dtype was asked for."""
        return stacks()[self.stack]["state_dtype"] == "param" and self.state_dtype in (self.adapter_dtype, self.dtype)

    @property
    def compute_dtype(self) -> str:
        """The dtype of the activations the step keeps (what is saved, the residual stream)."""
        if self.kbit_prepared:  # the fp32 embedding makes the residual stream, and what is saved, fp32
            return "fp32"
        return self.matmul_dtype

    @property
    def matmul_dtype(self) -> str:
        """The dtype the matmuls run in, whose peak FLOP/s a step time uses. k-bit preparation's fp32 residual
        stream does not change it: autocast casts each linear's input (and bitsandbytes' Linear4bit computes in
        its bnb_4bit_compute_dtype)."""
        if self.mp_policy != "none":  # FSDP2 all-gathers the parameters in param_dtype: modules compute in it
            return self.mp_policy
        return self.autocast if self.autocast != "none" else self.dtype

    @property
    def lora(self) -> bool:
        return self.method in ("lora", "qlora")

    def _check(self) -> None:
        check_stack(self.stack)
        _choice(self.method, METHODS, "--method")
        _choice(self.checkpoint_impl, CHECKPOINT_IMPLS, "--checkpoint-impl")
        _choice(self.loss_impl, LOSS_IMPLS, "--loss-impl")
        _choice(self.kbit_prep, KBIT_PREPS, "--kbit-prep")
        _choice(self.dtype, DTYPES, "--dtype")
        _choice(self.master, ("none", "fp32"), "--master")
        _choice(self.state_dtype, STATE_DTYPES, "--state-dtype")
        _choice(self.optimizer, OPTIMIZERS, "--optimizer")
        _choice(self.optimizer_impl, OPTIMIZER_IMPLS, "--optimizer-impl")
        _choice(self.adapter_dtype, DTYPES, "--adapter-dtype")
        _choice(self.autocast, HALF_DTYPES, "--autocast")
        _choice(self.mp_policy, HALF_DTYPES, "--mp-policy")
        _choice(self.attention, ATTENTIONS, "--attention")
        _choice(self.loader, LOADERS, "--loader")
        tower = self.model.tower
        if tower is not None and tower.forward_refused:
            raise UserError(f"{self.model.name} loaded as {tower.loader}: {tower.forward_refused}")
        if self.lora and tower is not None and not family(self.model.family).is_all_linear(self.targets, self.model.options) \
                and (hit := [t for t in self.targets if t in tower.unsupported_targets]):
            raise UserError(f"LoRA targets {', '.join(hit)} on a multimodal {tower.model_type} checkpoint: "
                            f"{tower.unsupported_why}")
        fam = family(self.model.family)
        if (self.zero == 3 and stacks()[self.stack].get("zero_impl", "fsdp2") == "fsdp2" and not self.lora
                and self.dtype != "fp32" and any(k.moe and k.extra("router_kept_fp32") for _, k in fam.layer_kinds)):
            raise UserError(f"--zero 3 full fine-tuning of {self.model.name} in {self.dtype}: from_pretrained keeps "
                            "the routers' gate.weight in fp32 (_keep_in_fp32_modules_strict) and FSDP2 refuses a layer "
                            "whose trainable parameters mix dtypes (torch _fsdp_param_group.py:279-285, 'FSDP expects "
                            "uniform original parameter dtype'); store it in fp32 with --mp-policy bf16 (--stack "
                            "fsdp; accelerate's FSDP2 upcasts the trainable parameters so, fsdp_utils.py:813-820), or "
                            "train LoRA adapters")
        _choice(self.routing, ROUTINGS, "--routing")
        if self.routing != "balanced" and not self._moe_layers():
            raise UserError(f"--routing {self.routing}: {self.model.name} ({fam.key}) has no routed experts")
        if self.attention not in fam.attention_kernels:
            raise UserError(f"--attention {self.attention}: {fam.attention_why or fam.key + ' runs ' + ', '.join(fam.attention_kernels)}")
        _choice(self.device, DEVICES, "--device")
        _choice(self.kernels, KERNELS, "--kernels")
        if self.kernels == "fla":
            self._check_fla()
        _choice(self.offload, OFFLOADS, "--offload")
        _positive_int(self.batch, "--batch", MAX_BATCH)
        _positive_int(self.seq, "--seq", MAX_SEQ)
        if self.packing:
            self._check_packing()
        self._check_images()
        _positive_int(self.gpus, "--gpus", MAX_GPUS)
        _positive_int(self.tp, "--tp", 1024)
        if isinstance(self.zero, bool) or self.zero not in (0, 1, 2, 3):
            raise UserError(f"--zero must be 0, 1, 2 or 3; got {excerpt(self.zero)}")
        for flag in ("grad_checkpointing", "double_quant", "sequence_parallel", "dora", "optimizer_in_backward",
                     "offload_activations", "liger"):
            if not isinstance(getattr(self, flag), bool):  # "false" is a non-empty string: it would switch it on
                raise UserError(f"{flag} must be True or False; got {excerpt(getattr(self, flag))}")
        self._check_objective()
        self._check_overrides()  # first: the checks below compute with the --set values
        self._check_parallel()
        if not (isinstance(self.lora_dropout, (int, float)) and 0 <= self.lora_dropout < 1):
            raise UserError(f"--lora-dropout must be in [0, 1); got {excerpt(self.lora_dropout)}")
        experts = [t for t in self.targets if family(self.model.family).target_map[t].count != 1] if self.lora else []
        if experts and self.lora_dropout:
            raise UserError(f"LoRA on the fused experts ({', '.join(experts)}) goes through PEFT's target_parameters, "
                            "which needs --lora-dropout 0")
        if self.autocast != "none" and self.dtype != "fp32" and self.autocast != self.dtype:
            raise UserError(f"--autocast {self.autocast} with {self.dtype} weights mixes two 16-bit formats; "
                            f"use --dtype fp32 (HF Trainer's mixed precision) or --autocast {self.dtype}")
        trainable_dtype = self.adapter_dtype if self.lora else self.dtype
        if trainable_dtype == "fp16" and self.master == "none" and self.autocast == "none":
            raise UserError("fp16 trainable weights need --master fp32: fp16's 5-bit exponent has too little range "
                            "(gradients underflow below 6e-8, hence loss scaling, and the optimizer's update must be "
                            "applied to an fp32 copy); bf16 has fp32's 8-bit exponent, so it can drop the master copy, "
                            "at a price: its 8 significant bits (fp16 has 11) round away updates smaller than about "
                            "2^-8 of a weight, fp16 only below 2^-11 (w + dw == w)")
        if self.master == "fp32" and trainable_dtype == "fp32":
            raise UserError("--master fp32 duplicates weights that are already fp32; drop --master "
                            "(fp32 weights are their own master copy)")
        if self.modules_to_save and not self.lora:
            raise UserError("--modules-to-save trains full copies of modules beside LoRA adapters: use --method lora "
                            "(or qlora); full fine-tuning trains them anyway")
        if self.lora and self.head_targets and self.model_code == "transformers":   # the own-code stacks' checks say theirs
            self._check_head_targets()
        if self.optimizer_in_backward:
            self._check_in_backward()
        _positive_int(self.checkpoint_every, "--selective-checkpointing every:K", 1 << 20)
        if self.checkpoint_every > 1:
            self._check_every_n_layers()
        if self.checkpoint_ops:
            self._check_checkpoint_ops()
        if self.offload_activations:
            self._check_offloading()
        if self.liger:
            self._check_liger()
        if self.model_code == "torchtune":
            self._check_torchtune()
        if self.model_code == "litgpt":
            self._check_litgpt()
        if self.checkpoint_impl == "unsloth" and self.grad_checkpointing:
            self._check_unsloth_checkpointing()
        if self.dora and not self.lora:
            raise UserError("--dora is a LoRA variant: use --method lora (or qlora)")
        if self.dora and any(family(self.model.family).target_map[t].count != 1 for t in self.targets):
            raise UserError("--dora on fused MoE experts: PEFT's target_parameters does not support DoRA")
        capped = fam.extra("final_logit_softcapping") or "final_logit_softcapping" in self.model.options
        if self.loss_impl not in ("torch", "trl") and capped:   # TRL's fused head caps inside its tiles
            raise UserError(f"--loss-impl {self.loss_impl} with {fam.key}'s final-logit soft-capping is not modelled")
        if self.loss_impl == "unsloth" and not self.lora:
            raise UserError("--loss-impl unsloth with full fine-tuning (a trainable lm_head: its fp32 head-gradient "
                            "accumulation) is not modelled; Unsloth's fused loss is modelled for a frozen head (pass --loss-impl torch or liger)")
        if self.loss_impl == "cce" and self.compute_dtype == "fp32":
            raise UserError("--loss-impl cce: Cut Cross-Entropy asserts 16-bit hidden states (bf16/fp16); these are "
                            "fp32" + (" (prepare_model_for_kbit_training casts them)" if self.kbit_prepared else ""))
        if self.mp_policy != "none" and (self.zero != 3 or self.dtype != "fp32" or self.autocast != "none"):
            raise UserError(f"--mp-policy {self.mp_policy} is FSDP2's MixedPrecisionPolicy: it needs --zero 3 and "
                            "parameters stored in fp32 (--dtype fp32), without --autocast")
        if self.method == "qlora" and self.dtype == "fp32":
            raise UserError("QLoRA stores the base in 4-bit and computes in 16-bit: use --dtype bf16 or fp16")
        vals = {**self.model.dims, **dict(self.overrides)}  # what --set changes is checked like the rest
        if vals["heads"] % vals["kv_heads"]:
            raise UserError(f"heads = {vals['heads']} is not a multiple of kv_heads = {vals['kv_heads']} "
                            "(each key/value head serves a whole group of query heads)")
        _positive_int(self.rank, "--rank", MAX_RANK)  # beside full fine-tuning too: it is in every JSON
        if self.lora:
            smallest = smallest_target_side(self.model.family, self.targets,
                                            tuple(sorted((n, v) for n, v in vals.items() if SYMBOLS[n].group == "model")))
            if self.rank > smallest:
                raise UserError(f"--rank {self.rank} is larger than min(d, k) = {smallest} of the targeted matrices; "
                                "a LoRA update of that rank is no longer low-rank")

    def _check_head_targets(self) -> None:
        """LoRA on lm_head needs transformers' own loss: TRL's SFTTrainer refuses it (trl 1.16
        trainer/sft_trainer.py:1066: its fused LM head multiplies by ``lm_head.weight``), and the other fused losses
        read ``lm_head.weight`` too, which would leave the adapter out of the loss."""
        if self.objective != "sft":
            raise UserError(f"LoRA on {', '.join(self.head_targets)} with --objective {self.objective} is not modelled")
        both = sorted(set(self.head_targets) & set(self.modules_to_save))
        if both:
            raise UserError(f"{', '.join(both)}: a LoRA target and in --modules-to-save at once; PEFT adapts a "
                            "module or trains a copy of it, not both")
        if "lm_head" in self.head_targets and self.loss_impl != "torch":
            raise UserError(f"LoRA on lm_head with --loss-impl {self.loss_impl}: the fused loss multiplies by "
                            "lm_head.weight and would leave the adapter out (TRL's SFTTrainer refuses it, "
                            "sft_trainer.py:1066); outside TRL use --loss-impl torch")
        if self.zero == 3 and stacks()[self.stack].get("zero_impl", "fsdp2") == "fsdp2":
            raise UserError(f"LoRA on {', '.join(self.head_targets)} under FSDP2 is not modelled (the root unit's "
                            "adapters, their unsharded gradients and reduce-scatter); use --zero 1 or 2, or DeepSpeed")
        if self.dora:
            raise UserError(f"--dora on {', '.join(self.head_targets)} is not modelled (DoRA is modelled on the "
                            "layers' linear targets)")

    def _check_every_n_layers(self) -> None:
        """Checkpointing every k-th layer (transformers' every_n_layers) is modelled for one GPU's plain layers."""
        fam = family(self.model.family)
        why = ("it needs gradient checkpointing on" if not self.grad_checkpointing else
               "--checkpoint-impl reentrant" if self.checkpoint_impl == "reentrant" else
               "k-bit preparation (it checkpoints every layer itself)" if self.kbit_prepared else
               "--dora" if self.dora else "--zero 3" if self.zero == 3 else
               f"{fam.key}'s layers of several kinds" if fam.kinds else
               f"{fam.key}'s sliding-window layers" if fam.dim("window", 0) != 0 else
               f"--objective {self.objective}" if self.objective != "sft" else None)
        if why:
            raise UserError(f"--selective-checkpointing every:{self.checkpoint_every} with {why} is not modelled")

    def _check_checkpoint_ops(self) -> None:
        """torchtitan's op-level policy (ledger.activations.sac_matmuls) is modelled, and traced, with non-reentrant
        checkpointing of every plain attention + MLP layer of transformers' model code on one GPU, under SDPA, each
        linear one ``aten.mm`` (or, with a bias, ``aten.addmm``, which the policy saves without counting); a sliding
        layer's mask, or a packed row's, is a checkpoint input, and what SDPA makes of it is recomputed (traced: Gemma 3,
        OLMo 3, packed Llama and Gemma 3 rows); under TRL's activation offloading the policy's cache stays on the
        device (ledger.activations.sac_terms)."""
        fam = family(self.model.family)
        why = ("without gradient checkpointing (--no-grad-checkpointing)" if not self.grad_checkpointing else
               f"--checkpoint-impl {self.checkpoint_impl}" if self.checkpoint_impl != "non-reentrant" else
               "every:K (one policy at a time)" if self.checkpoint_every > 1 else
               "--method qlora (bitsandbytes' 4-bit matmuls)" if self.method == "qlora" else
               "--dora" if self.dora else
               "several GPUs (FSDP2's and DeepSpeed's collectives)" if self.zero or self.gpus > 1 or self.tp > 1 else
               f"--stack {self.stack} (its own model code)" if self.model_code != "transformers" else
               "--stack unsloth's kernels" if self.unsloth_kernels else
               f"--attention {self.attention}" if self.attention != "sdpa" else
               f"{fam.key}'s layers of several kinds" if fam.kinds else
               f"{fam.key}'s MoE layers" if fam.has_moe else
               f"{fam.key}'s {fam.mixer} mixer" if fam.mixer != "attention" else
               f"{fam.key}'s latent attention" if fam.latent_attention else
               f"{fam.key}'s attention sinks" if fam.extra("attention_sinks") else
               f"{fam.key}'s shared K/V" if fam.extra("kv_shared") or fam.extra("stored_kv") else
               f"{fam.key}'s fused linears" if any(m.count != 1 for m in fam.linears) else
               "--liger" if self.liger else
               f"--objective {self.objective}" if self.objective != "sft" else None)
        if why:
            raise UserError(f"--selective-checkpointing op {why if why.startswith('without') else 'with ' + why} is "
                            "not modelled; torchtitan's op-level policy "
                            "is modelled with non-reentrant checkpointing of every layer on one GPU")

    def _check_liger(self) -> None:
        """Liger's layer kernels are modelled for dense decoders with RMSNorm and a gated MLP (the families
        apply_liger_kernel_to_* patches), not for MoE, linear or latent attention."""
        fam = family(self.model.family)
        why = ("MoE layers" if fam.moe else "layers of several kinds" if fam.kinds else
               "latent attention" if fam.latent_attention else
               f"{fam.norm} norms" if fam.norm not in ("rms", "rms_fp32_weight", "gemma_rms") else
               f"a {fam.activation} MLP" if fam.activation not in ("silu", "gelu_tanh") else None)
        if why:
            raise UserError(f"--liger on {fam.key} ({why}) is not modelled; Liger's RMSNorm and SwiGLU/GeGLU kernels "
                            "are modelled for dense RMSNorm families")

    def _own_code_unmodelled(self) -> tuple[tuple[str, bool], ...]:
        """What neither torchtune's nor LitGPT's model code is modelled with, as (what, whether set) pairs: packed
        samples, Liger's kernels, several GPUs, an objective but SFT, an attention but SDPA."""
        return (("packed samples", bool(self.packing)), ("Liger's kernels", self.liger),
                ("several GPUs", self.gpus > 1 or self.zero > 0),
                (f"--objective {self.objective}", self.objective != "sft"),
                (f"--attention {self.attention}", self.attention != "sdpa"))

    def _check_torchtune(self) -> None:
        """torchtune's own model code is modelled for its Llama builders (torchtune 0.6.1 models/llama2, llama3,
        llama3_1, llama3_2) on one GPU, SFT, LoRA or full fine-tuning: not its QLoRA (torchao NF4), DoRA, packed
        samples, activation offloading, LoRA on the output projection, nor another program's kernels on top."""
        fam = family(self.model.family)
        why = (f"the {fam.key} family (its Llama builders are modelled)" if fam.key != "llama" else
               "no max_position_embeddings (its RoPE cache spans the builder's max_seq_len)"
               if not self.model.max_position or self.model.max_position >= 1 << 40 else
               next((what for what, on in (
                   ("QLoRA (torchao's NF4)", self.method == "qlora"), ("DoRA", self.dora),
                   ("LoRA on the output projection or embeddings", bool(self.head_targets or self.modules_to_save)),
                   *self._own_code_unmodelled(),
                   # the forward stash at the loss counts the final norm's packs: bf16's fp32 upcast beside the bf16
                   # scale takes torch's composite rms_norm (four saved tensors, on CUDA too: mismatched dtypes cannot
                   # dispatch to the fused kernel); an fp32 model's matching dtypes may take CUDA's fused one (not traced)
                   (f"activation offloading with --dtype {self.dtype} (traced with bf16)",
                    self.offload_activations and self.dtype != "bf16"),
                   (f"--checkpoint-impl {self.checkpoint_impl}", self.grad_checkpointing
                    and self.checkpoint_impl != "non-reentrant")) if on), None))
        if why:
            raise UserError(f"--stack torchtune with {why} is not modelled; torchtune 0.6.1's single-device LoRA and "
                            "full recipes on its Llama builders are")

    def _check_litgpt(self) -> None:
        """LitGPT's own model code is modelled for ``litgpt finetune full`` and ``finetune lora`` on its Llama configs
        on one device, bf16-true (traced: benchmarks/litgpt_trace.py): LoRA's targets are what its switches put
        adapters on (``LITGPT_LORA``, lm_head included), not its quantized bases (``--quantize bnb.*``), DoRA nor
        modules_to_save."""
        fam = family(self.model.family)
        switched = {t for group in LITGPT_LORA.values() for t in group}
        partial = next((", ".join(g) for g in LITGPT_LORA.values() if 0 < len(set(g) & set(self.targets)) < len(g)),
                       None)
        why = next((what for what, on in (
            (f"the {fam.key} family (its Llama configs are modelled)", fam.key != "llama"),
            ("a nominal preset (its parameter count given, not its dimensions)", self.model.params is not None),
            ("--method qlora (its --quantize bnb.nf4 base: bitsandbytes' Linear4bit under Fabric's "
             "BitsandbytesPrecision)", self.method == "qlora"),
            ("DoRA", self.lora and self.dora), ("modules_to_save", self.lora and bool(self.modules_to_save)),
            ("LoRA on embed_tokens (no lora_* switch adapts it)", self.lora and "embed_tokens" in self.head_targets),
            (f"LoRA targets {', '.join(sorted(set(self.targets) - switched))} (its switches are lora_query, lora_key, "
             "lora_value, lora_projection and lora_mlp)", self.lora and bool(set(self.targets) - switched)),
            (f"LoRA on part of {partial} (lora_mlp adapts all three)", self.lora and partial is not None),
            ("gradient checkpointing", self.grad_checkpointing), ("activation offloading", self.offload_activations),
            *self._own_code_unmodelled(),
            ("--optimizer-in-backward", self.optimizer_in_backward),
            (f"--dtype {self.dtype} (bf16-true is modelled)", self.dtype != "bf16")) if on), None)
        if why:
            raise UserError(f"--stack litgpt with {why} is not modelled; LitGPT 0.5.13's finetune full and finetune "
                            "lora on its Llama configs are (its traces: benchmarks/results/litgpt_trace.json)")

    def _check_images(self) -> None:
        """--image-tokens N and --train-vision: modelled for a tower whose image forward towers.toml describes
        (Qwen3-VL's), one image per sample, its N tokens within --seq, on one GPU under the plain recipe."""
        if not isinstance(self.train_vision, bool):
            raise UserError(f"train_vision must be True or False; got {excerpt(self.train_vision)}")
        if self.image_tokens == 0 and not self.train_vision:
            return
        if self.image_tokens != 0:
            _positive_int(self.image_tokens, "--image-tokens", MAX_SEQ)
        tower = self.model.tower
        if self.train_vision and not self.image_tokens:
            raise UserError("--train-vision: the tower takes gradients only from images; give --image-tokens N "
                            "(on a text-only batch it never runs and its memory is the frozen tower's)")
        if tower is not None and tower.images_refused:
            raise UserError(f"--image-tokens: {self.model.name}'s {tower.model_type} config is not modelled: "
                            f"{tower.images_refused}")
        if tower is None or tower.images is None:
            what = (f"{tower.model_type}'s tower ({tower.description})" if tower is not None else
                    f"{self.model.name} loads no vision tower")
            raise UserError(f"--image-tokens/--train-vision: {what}: only Qwen3-VL's image forward is modelled "
                            "(qwen3_vl, qwen3_vl_moe)")
        if self.image_tokens > self.seq:
            raise UserError(f"--image-tokens {self.image_tokens} exceeds --seq {self.seq}: the image tokens are "
                            "counted within the sequence the decoder sees (the processor expands each image's "
                            "placeholder in input_ids)")
        unmodelled = [name for name, on in (
            ("--gpus/--zero/--tp", self.gpus > 1 or self.zero or self.tp > 1), ("--packing", self.packing),
            (f"--objective {self.objective}", self.objective != "sft"), ("--method qlora", self.method == "qlora"),
            ("--dora", self.dora), ("--offload-activations", self.offload_activations), ("--liger", self.liger),
            ("--stack unsloth", self.unsloth_kernels), (f"--loss-impl {self.loss_impl}", self.loss_impl != "torch"),
            (f"--stack {self.stack}", self.model_code != "transformers"), ("--offload", self.offload != "none"),
            ("--modules-to-save", bool(self.modules_to_save))) if on]
        if unmodelled:
            raise UserError(f"--image-tokens with {', '.join(unmodelled)} is not modelled (images are modelled on "
                            "one GPU for SFT, full fine-tuning or LoRA, transformers' loss)")
        unmodelled = [name for name, on in (
            ("--grad-checkpointing", self.grad_checkpointing), (f"--autocast {self.autocast}", self.autocast != "none"),
            ("--lora-dropout", self.lora and self.lora_dropout > 0)) if on]
        if self.train_vision and unmodelled:
            raise UserError(f"--train-vision with {', '.join(unmodelled)} is not modelled (a trainable tower is "
                            "modelled without checkpointing, autocast or LoRA dropout: --stack torch)")
        if self.train_vision and self.lora and not family(self.model.family).is_all_linear(self.targets, self.model.options):
            raise UserError(f"--train-vision with LoRA targets {', '.join(self.targets)}: modelled for all-linear, which "
                            f"adapts every linear of {tower.model_type}'s tower (PEFT matches no other target name in it)")

    def _check_packing(self) -> None:
        """Packing is modelled on SDPA, where transformers turns restarting position ids into a block-diagonal mask."""
        if self.attention != "sdpa":
            raise UserError(f"--packing with --attention {self.attention} is not modelled (packing is modelled with "
                            "SDPA's block-diagonal mask)")
        if self.objective != "sft":
            raise UserError(f"--packing with --objective {self.objective} is not modelled (packing is modelled for SFT)")

    def _check_offloading(self) -> None:
        """TRL's activation offloading (and torchtune's, which it is copied from: torchtune 0.6.1's recipes refuse it
        without activation checkpointing, recipes/lora_finetune_single_device.py:167-175) is modelled with
        non-reentrant checkpointing of every layer on one GPU, where the saved tensors outside the checkpointed layers
        are each layer's input (torch/utils/checkpoint.py:842-847)."""
        fam = family(self.model.family)
        why = ("without gradient checkpointing (add --grad-checkpointing; without it every saved tensor would move)"
               if not self.grad_checkpointing else
               "--checkpoint-impl reentrant" if self.checkpoint_impl == "reentrant" else
               "--selective-checkpointing" if self.checkpoint_every > 1 else
               "several GPUs" if self.zero or self.gpus > 1 or self.tp > 1 else
               "--dora" if self.dora else
               "trainable head modules (modules_to_save, LoRA on lm_head / embed_tokens)"
               if self.modules_to_save or self.head_targets else
               f"{fam.key}'s layers of several kinds" if fam.kinds else
               f"--objective {self.objective}" if self.objective != "sft" else
               "--optimizer-in-backward" if self.optimizer_in_backward else None)
        if why:
            raise UserError(f"--offload-activations {why} is not modelled; it is modelled with non-reentrant "
                            "checkpointing of every layer on one GPU (TRL's activation_offloading with "
                            "gradient_checkpointing, torchtune's enable_activation_offloading with "
                            "enable_activation_checkpointing)")

    def _check_unsloth_checkpointing(self) -> None:
        """Unsloth's offloaded checkpointer is modelled on one GPU for every layer, without TRL's offloading on top."""
        why = ("--offload-activations (TRL's hooks over Unsloth's offloaded checkpoints)" if self.offload_activations else
               "--selective-checkpointing (Unsloth checkpoints every layer)" if self.checkpoint_every > 1 else
               "several GPUs" if self.zero or self.gpus > 1 or self.tp > 1 else
               f"--objective {self.objective}" if self.objective != "sft" else None)
        if why:
            raise UserError(f"--checkpoint-impl unsloth with {why} is not modelled; Unsloth's offloaded gradient "
                            "checkpointing is modelled for every layer on one GPU")

    def _check_in_backward(self) -> None:
        """Optimizer in backward is modelled for torch's own optimizers on one GPU, one gradient at a time."""
        why = None
        if self.optimizer not in ("adamw", "sgd", "sgd-momentum"):
            why = f"--optimizer {self.optimizer}"
        elif self.gpus > 1 or self.tp > 1:
            why = "several GPUs (a gradient is reduced before its step)"
        elif self.zero:
            why = f"ZeRO-{self.zero} (its optimizer steps each partition after the backward)"
        elif self.master != "none":
            why = "an fp32 master copy"
        elif self.method == "full" and self.model.tied:
            why = "tied embeddings (lm_head's gradient waits in autograd's buffer for the embedding's)"
        elif self.modules_to_save or self.head_targets:
            why = "trainable head modules (modules_to_save, LoRA on lm_head / embed_tokens)"
        elif self.objective != "sft":
            why = f"--objective {self.objective}"
        if why:
            raise UserError(f"--optimizer-in-backward with {why} is not modelled; it is modelled for torch's AdamW and "
                            "SGD on one GPU (torch's register_post_accumulate_grad_hook recipe, torchtune's "
                            "optimizer_in_bwd)")

    def _check_grpo(self) -> None:
        """GRPO's settings only with --objective grpo, checked as GRPOConfig.__post_init__ checks them
        (trl 1.16 grpo_config.py:1099-1146), and what is not modelled refused by name."""
        defaults = {n: f.default for n, f in self.__dataclass_fields__.items() if n in GRPO_SETTINGS}
        if self.objective != "grpo":
            if given := [n for n in GRPO_SETTINGS if getattr(self, n) != defaults[n]]:
                raise UserError(f"--{given[0].replace('_', '-')} is a GRPO setting: use --objective grpo")
            return
        for name in ("num_generations", "steps_per_generation", "gradient_accumulation_steps", "num_iterations"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"--{name.replace('_', '-')} must be a whole number >= 1; got {excerpt(value)}")
        if isinstance(self.beta, bool) or not isinstance(self.beta, (int, float)) or not self.beta >= 0:
            raise UserError(f"--beta must be a number >= 0 (the KL coefficient); got {excerpt(self.beta)}")
        entry = objectives()["grpo"]
        if self.loss_type not in entry["loss_types"]:
            raise UserError(f"--loss-type {excerpt(self.loss_type)} is not a TRL 1.16 GRPO loss type; use one of "
                            f"{', '.join(entry['loss_types'])}")
        if self.loss_type not in entry["modelled_loss_types"]:
            raise UserError(f"--loss-type {self.loss_type} is not modelled (its loss keeps other tensors); modelled: "
                            f"{', '.join(entry['modelled_loss_types'])}")
        _choice(self.generation, GENERATIONS, "--generation")
        if self.generation != "hf":
            raise UserError(f"--generation {self.generation} is not modelled: vLLM's engine (its weights copy, KV "
                            "cache and CUDA graphs in vllm_gpu_memory_utilization of the card) cannot be traced "
                            "here; use --generation hf (transformers' generate)")
        if self.prompt < 1:
            raise UserError("--objective grpo generates from a prompt: give --prompt P (the longest prompt, tokens; "
                            "--seq is P + max_completion_length)")
        if (generation_batch := self.generation_batch()) % self.num_generations:   # grpo_config.py:1135-1140
            raise UserError(f"generation_batch_size ({generation_batch} = batch {self.batch} x {self.gpus} GPUs x "
                            f"steps_per_generation {self.steps_per_generation}) must be divisible by num_generations "
                            f"({self.num_generations}), as TRL's GRPOConfig requires; change --num-generations, --batch or "
                            "--steps-per-generation")
        if self.num_generations < 2:   # grpo_config.py:1142-1146
            raise UserError(f"GRPO requires at least 2 generations per prompt to calculate the advantages; got "
                            f"--num-generations {self.num_generations}")
        if (self.steps_per_generation * self.num_iterations) % self.gradient_accumulation_steps:
            raise UserError("generation in the middle of gradient accumulation (steps_per_generation x "
                            "num_iterations not a multiple of gradient_accumulation_steps) keeps the gradients "
                            "alive through generate: not modelled")
        if self.method == "qlora" or self.zero or self.tp > 1 or self.precompute_ref:
            what = ("--method qlora" if self.method == "qlora" else "--precompute-ref" if self.precompute_ref
                    else "--zero" if self.zero else "--tp")
            raise UserError(f"--objective grpo with {what} is not modelled (generation is modelled for a 16-bit "
                            "policy on each data-parallel GPU)")

    def _check_cpo(self) -> None:
        """cpo_alpha only where the objective's NLL follows it (CPO, SimPO), a finite number."""
        if objectives()[self.objective].get("nll") != "cpo_alpha":
            if self.cpo_alpha != 1.0:
                raise UserError("--cpo-alpha is a CPOTrainer setting: use --objective cpo or simpo")
            return
        if isinstance(self.cpo_alpha, bool) or not isinstance(self.cpo_alpha, (int, float)) or not math.isfinite(
                self.cpo_alpha):
            raise UserError(f"--cpo-alpha must be a number (the NLL's weight); got {excerpt(self.cpo_alpha)}")

    def _check_aux_coef(self) -> None:
        """The load-balancing loss's weight, where given: a number; a non-zero one on a model that returns no router
        logits is TRL's ValueError (sft_trainer.py:1200-1204, dpo_trainer.py:900-904, kto_trainer.py:911-915), and
        the loss it turns on is modelled where the family's config has the coefficient (its
        ``router_aux_loss_coef`` option: Mixtral, Qwen2-MoE, Qwen3-MoE, Qwen3.5-MoE, Qwen3-Next, gpt-oss)."""
        coef = self.router_aux_loss_coef
        if coef is None:
            return
        if isinstance(coef, bool) or not isinstance(coef, (int, float)) or not math.isfinite(coef):
            raise UserError(f"--router-aux-loss-coef must be a number (the load-balancing loss's weight); got "
                            f"{excerpt(coef)}")
        if coef == 0:
            return
        if not self._moe_layers():
            raise UserError(f"--router-aux-loss-coef {coef}: {self.model.name} is not a Mixture-of-Experts model that "
                            "returns its router logits, so there is no auxiliary loss to weight (TRL's trainers raise "
                            "ValueError)")
        if "router_aux_loss_coef" not in dict(family(self.model.family).options):
            raise UserError(f"--router-aux-loss-coef {coef} on {self.model.family} is not modelled: the load-balancing "
                            "loss's tensors are derived for the families whose config has router_aux_loss_coef "
                            f"({', '.join(n for n in family_names() if 'router_aux_loss_coef' in dict(family(n).options))})")

    @property
    def trl_trainer(self) -> bool:
        """A TRL trainer runs the step: SFT under its SFTTrainer (TRL's fused LM head), every other objective."""
        return self.objective != "sft" or self.loss_impl == "trl"

    @property
    def _options(self) -> tuple[str, ...]:
        """The family's switches that are on, ``router_aux_loss_coef`` meaning that the load-balancing loss is
        computed: TRL's trainers (SFT under its SFTTrainer, the preference objectives) weigh it by their own
        router_aux_loss_coef, else the config's (trl 1.16 sft_trainer.py:1197-1205); transformers' forward computes
        it only when the config's output_router_logits is on (modeling_mixtral.py:600-632; False by default,
        configuration_mixtral.py:86), which LLaMA-Factory's non-zero moe_aux_loss_coef sets (0.9.5
        model/model_utils/moe.py:160-199) — the coefficient given here."""
        coef = self.router_aux_loss_coef
        aux = (self.trl_trainer and "router_aux_loss_coef" in self.model.options) if coef is None else coef != 0
        on = {o for o in self.model.options if o != "router_aux_loss_coef"} | ({"router_aux_loss_coef"} if aux else set())
        return tuple(o for o, _ in family(self.model.family).options if o in on)

    def _check_objective(self) -> None:
        """A known objective; DPO's prompt inside the sequence, its reference settings only with it."""
        if self.objective == "ppo":
            raise UserError("--objective ppo is not modelled: PPO trains a value model beside the policy and scores "
                            "with a reward model, which symvram does not build (TRL 1.16 ships no PPOTrainer)")
        _choice(self.objective, tuple(objectives()), "--objective")
        if not isinstance(self.precompute_ref, bool):
            raise UserError(f"precompute_ref must be True or False; got {excerpt(self.precompute_ref)}")
        if self.objective == "sft" and (self.prompt or self.precompute_ref):
            raise UserError("--prompt and --precompute-ref describe a preference objective's batch and reference: "
                            "use --objective dpo or kto")
        if isinstance(self.prompt, bool) or not isinstance(self.prompt, int) or not 0 <= self.prompt < self.seq:
            raise UserError(f"--prompt must be a whole number of tokens from 0 to seq - 1 = {self.seq - 1} (the "
                            f"completion needs at least one); got {excerpt(self.prompt)}")
        if self.precompute_ref and objectives()[self.objective].get("reference") == "none":
            raise UserError(f"--objective {self.objective} has no reference model: --precompute-ref does not apply")
        if self.score_head and (self.prompt or self.precompute_ref):
            raise UserError("--objective reward scores whole sequences with no reference model: --prompt and "
                            "--precompute-ref do not apply")
        if self.score_head and (self.method == "qlora" or "lm_head" in self.modules_to_save + self.head_targets):
            raise UserError(f"--objective reward with {'--method qlora' if self.method == 'qlora' else 'lm_head'} "
                            "is not modelled: a reward model has a score head and no lm_head (full and lora are)")
        self._check_grpo()
        self._check_cpo()
        self._check_aux_coef()
        self._check_moe_objective()

    def _check_moe_objective(self) -> None:
        """A preference objective or a reward model on a MoE model: the routed experts' block (top-k router,
        transformers' grouped_mm experts) is modelled for the reference forward and the load-balancing loss; shared
        experts, fp32 or top-k-softmax routers, biased or dense experts and hybrid layer kinds are not yet."""
        fam = family(self.model.family)
        if self.objective == "sft" or not self._moe_layers():
            return
        if self.objective == "grpo":
            raise UserError("--objective grpo on a mixture-of-experts model is not modelled: generation's forward is "
                            "derived for dense MLPs")
        if not objectives()[self.objective].get("moe"):
            modelled = ", ".join(name for name, entry in objectives().items() if entry.get("moe"))
            raise UserError(f"--objective {self.objective} on a mixture-of-experts model is not modelled (the MoE "
                            f"blocks are modelled for {modelled})")
        unmodelled = [name for name in MOE_UNMODELLED if fam.extra(name)] + ["layer kinds"] * bool(fam.kinds)
        if unmodelled:
            raise UserError(f"--objective {self.objective} on {fam.key} is not modelled: the reference forward's and "
                            f"the load-balancing loss's working sets are derived for routed experts without "
                            f"{', '.join(unmodelled)} (Mixtral's and Qwen3-MoE's blocks)")

    @property
    def deltanet_kernels(self) -> str:
        """Which code runs a Gated DeltaNet mixer: ``fla`` (flash-linear-attention's chunk_gated_delta_rule and
        causal-conv1d's causal_conv1d_fn, which transformers 5.24 imports when they are installed:
        integrations/hub_kernels.py:990-1020, models/qwen3_5/modeling_qwen3_5.py:255, :286) or ``torch`` (its
        fallback). ``--kernels auto`` takes fla on CUDA (a GPU user installs them) and torch on the CPU, where fla's
        Triton kernels do not run (and where validate traces: every stored case follows the torch path); a model
        without Gated DeltaNet layers follows neither (torch)."""
        if self.kernels != "auto":
            return self.kernels
        return "fla" if family(self.model.family).has_deltanet and self.device == "cuda" else "torch"

    def _check_fla(self) -> None:
        """``--kernels fla`` is modelled for the Gated DeltaNet mixers on CUDA (ledger.activations._fla_deltanet)."""
        fam = family(self.model.family)
        why = ("--device cpu (fla's kernels are Triton GPU kernels)" if self.device == "cpu" else
               f"{fam.key}'s Mamba-2 layers (they run mamba_ssm's fused kernels, not fla's)"
               if fam.mamba or any(k.mamba for _, k in fam.layer_kinds) else
               f"{fam.key}, which has no Gated DeltaNet layers" if not fam.has_deltanet else
               f"--stack {self.stack} (its own model code)" if self.model_code != "transformers" else None)
        if why:
            raise UserError(f"--kernels fla with {why} is not modelled; fla's kernels are modelled for the Gated "
                            "DeltaNet layers of transformers' Qwen3.5, Qwen3-Next and OLMo Hybrid on CUDA")

    def _moe_layers(self) -> bool:
        """Whether the model has MoE layers: a layer kind of the family that is an MoE block and has layers here
        (Gemma 4's only under enable_moe_block)."""
        fam, dims = family(self.model.family), {sym(k): v for k, v in self.model.dims.items()}
        return any(k.moe and n.xreplace(dims) > 0 for n, k in fam.layer_kinds)

    def _check_overrides(self) -> None:
        """``--set`` names a registered leaf symbol and a positive, finite, plausible number."""
        for name, value in self.overrides:
            if name not in SYMBOLS or SYMBOLS[name].group == "derived":
                leaves = [n for n, d in SYMBOLS.items() if d.group != "derived"]
                raise UserError(f"--set: unknown symbol {excerpt(name)}{did_you_mean(name, leaves)}")
            _set_value(name, value)
            if SYMBOLS[name].integer and not float(value).is_integer():
                raise UserError(f"--set {name}: {SYMBOLS[name].meaning} must be an integer; got {excerpt(value)}")
            limit = SET_LIMITS.get(name) or SET_LIMITS[SYMBOLS[name].group]
            if value > limit:
                raise UserError(f"--set {name} = {value:g} is not plausible (limit {limit:g} {SYMBOLS[name].unit})")

    def _check_parallel(self) -> None:
        """Offload needs ZeRO (parameters only at stage 3); t must split the heads and d_ff evenly."""
        if self.offload != "none" and self.zero == 0:
            raise UserError("--offload needs --zero 1, 2 or 3: offloading moves each GPU's shard of the "
                            "optimizer (DeepSpeed ZeRO-Offload)")
        if self.offload == "optimizer+params" and self.zero != 3:
            raise UserError("--offload optimizer+params needs --zero 3: only stage 3 shards the parameters "
                            "it moves to the CPU")
        if self.sequence_parallel and self.tp == 1:
            raise UserError("--sequence-parallel splits the norm/residual activations across the tensor-parallel "
                            "ranks: it needs --tp 2 or more")
        dims = {**self.model.dims, **dict(self.overrides)}
        for name in ("heads", "kv_heads", "intermediate", "moe_intermediate"):
            if name in dims and dims[name] % self.tp:
                raise UserError(f"--tp {self.tp} does not divide {name} = {dims[name]}: tensor parallelism "
                                f"gives every rank the same share of the heads and of d_ff")

    @property
    def unsloth_kernels(self) -> bool:
        """Whether Unsloth's fused LoRA kernels run: FastLlamaModel.patch_peft_model (unsloth 2026.10.9
        models/llama.py:5252-5273, 5333-5410) patches the Llama, Mistral, Qwen2 and Qwen3 layers whose q, k, v, o,
        gate, up and down projections all carry LoRA, without dropout (the other families load through
        transformers' modules, not modelled apart; a partial target set falls back to PEFT's eager path)."""
        return (self.stack == "unsloth" and self.lora and self.lora_dropout == 0 and not self.dora
                and self.model.family in UNSLOTH_FAMILIES and set(UNSLOTH_TARGETS) <= set(self.targets))

    @cached_property
    def structure(self) -> Structure:
        """The discrete choices of the ledger (built once per Scenario: the Scenario is frozen)."""
        return Structure(
            method=self.method, params_given=self.model.params is not None, family=self.model.family,
            first_kind=self._layer_zero[1], lead_kinds=self._layer_zero[0], kind_depths=self._kind_depths,
            tied=self.model.tied, options=self._options, targets=self.targets if self.lora else (),
            head_targets=self.head_targets if self.lora else (),
            master=self.master == "fp32", optimizer=self.optimizer, optimizer_impl=self.optimizer_impl,
            embed_states_fp32=self.optimizer in BNB_OPTIMIZERS and runs_trainer(self.stack)
            and (not self.lora or "embed_tokens" in self.modules_to_save),
            param_states=bool(self.saved_modules) and self.states_follow_param,
            compute_fp32=self.compute_dtype == "fp32",
            adapter_upcast=self.lora and self.mp_policy == "none"
            and self.adapter_dtype != (self.autocast if self.autocast != "none" else self.compute_dtype),
            autocast=self.autocast != "none", weight_casts=self.autocast != "none" and self.dtype == "fp32",
            dropout=self.lora and self.lora_dropout > 0 and not objectives()[self.objective].get("disable_dropout"),
            device=self.device, kernels=self.deltanet_kernels, objective=self.objective, reference=self.reference, score_head=self.score_head,
            nll=self.nll,
            old_logps=self.objective == "grpo"
            and self.gradient_accumulation_steps % (self.steps_per_generation * self.num_iterations) != 0,
            attention=self.attention, grad_checkpointing=self.grad_checkpointing,
            double_quant=self.double_quant, kbit_prepared=self.kbit_prepared,
            loss_impl=self.loss_impl, dora=self.lora and self.dora, modules_to_save=self.saved_modules, zero=self.zero, offload=self.offload,
            sequence_parallel=self.sequence_parallel, tensor_parallel=self.tp > 1,
            fsdp_mixed_precision=self.mp_policy != "none", zero_impl=stacks()[self.stack].get("zero_impl", "fsdp2"),
            params_cast=bool(self.zero) and stacks()[self.stack].get("zero_impl") == "deepspeed" and self.dtype != "fp32",
            model_code=self.model_code,
            bnb_input_saved=self.method == "qlora" and applies("bnb_input_saved", self.versions)
            and not self.unsloth_kernels,
            optimizer_in_backward=self.optimizer_in_backward,
            checkpoint_every=self.checkpoint_every if self.grad_checkpointing else 1,
            checkpoint_ops=self.grad_checkpointing and self.checkpoint_ops,
            offload_activations=self.offload_activations,
            offload_checkpoints=self.grad_checkpointing and self.checkpoint_impl == "unsloth",
            packed=self.packing > 0, liger=self.liger, unsloth_kernels=self.unsloth_kernels,
            shift_logits_copy=self.loss_impl == "torch" and applies("hf_shift_logits_copy", self.versions),
            forward_logits_upcast=self.loss_impl == "torch" and applies("hf_forward_logits_upcast", self.versions),
            tower=self.model.tower, images=self.image_tokens > 0, train_vision=self.train_vision,
            pixel_cast=self.image_tokens > 0 and self.dtype != "fp32",
        )

    @cached_property
    def _layer_zero(self) -> tuple[tuple[str, ...], str]:
        """(the kinds of the layers before the first whose input needs a gradient, that layer's kind): under LoRA
        with a frozen embedding and no checkpointing, the first layer holding a target (``Family.leading_kinds``),
        else layer 0."""
        fam = family(self.model.family)
        embedding_trains = "embed_tokens" in self.modules_to_save or "embed_tokens" in self.head_targets
        if not self.lora or self.grad_checkpointing or embedding_trains or not fam.kinds:
            return (), fam.first_kind(self.model.dims, self.model.layer_pattern)
        return fam.leading_kinds(self.model.dims, self.targets, self.model.layer_pattern)

    @cached_property
    def _kind_depths(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Under checkpointing, for a family whose layers differ: each layer kind the model has, with the kinds of
        the layers below its lowest one (Family.model_kinds, layer 0 up), in the order the backward reaches them
        last: the gradients made when the backward reaches a kind's lowest layer are all but those layers' and its
        own (Llama 4: a dense layer 0 below the first MoE layer)."""
        fam = family(self.model.family)
        if not self.grad_checkpointing or not fam.kinds:
            return ()
        kinds = fam.model_kinds(self.model.dims, self.model.layer_pattern)
        return tuple((name, kinds[:kinds.index(name)]) for name in dict.fromkeys(kinds))

    def values(self) -> dict[str, int | float]:
        """Numbers for every leaf symbol: registry defaults, model dims, run settings, dtypes, overrides."""
        sizes = recipes()["dtypes"]
        vals = dict(_defaults())
        vals.update(self.model.dims)
        trainable_dtype = self.adapter_dtype if self.lora else self.dtype
        vals.update(
            batch=self.batch, seq=self.seq, rank=self.rank, gpus=self.gpus, tp=self.tp, prompt=self.prompt,
            image_tokens=self.image_tokens,
            steps_per_generation=self.steps_per_generation,
            bytes_weight=sizes[self.dtype], bytes_act=sizes[self.compute_dtype],
            bytes_grad=sizes[trainable_dtype], bytes_adapter=sizes[self.adapter_dtype],
            bytes_state=sizes[self.state_dtype], bytes_autocast=sizes[self.autocast] if self.autocast != "none" else 2,
            states_per_param=recipes()["optimizers"][self.optimizer]["states"],
        )
        if self.structure.model_code in ("torchtune", "litgpt"):   # torchtune's RoPE cache spans the builder's
            vals["rope_cache_len"] = self.model.max_position          # max_seq_len; LitGPT's its block_size at init
        vals.update(dict(self.overrides))
        return vals

    def inputs(self) -> dict:
        """Every resolved setting (defaults included), JSON-ready."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("model", "overrides", "given")}
        out["targets"] = list(self.targets) if self.lora else []
        out["head_targets"] = list(self.head_targets) if self.lora else []
        out["modules_to_save"] = list(self.modules_to_save)
        out["model"] = self.model.name
        out["model_kind"] = self.model.kind
        out["overrides"] = dict(self.overrides)
        out["versions"] = dict(self.versions)
        return out
