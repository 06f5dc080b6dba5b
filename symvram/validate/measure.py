"""Measure the real peak of live tensor memory of fine-tuning steps (optional; needs torch).

Method (the one that produced ``shared/measurements/calibration.jsonl``):

* the model is built from a config on the ``meta`` device, PEFT LoRA applied there, then every
  parameter and buffer is replaced by a FakeTensor (CPU device) of the same shape and dtype;
* ``steps`` training steps run under ``FakeTensorMode``: forward with causal-LM loss (labels =
  input_ids, no attention mask), outputs dropped, ``loss.backward()``, ``optimizer.step()``,
  ``zero_grad(set_to_none=True)``;
* bytes are counted by ``torch.distributed._tools.mem_tracker.MemTracker`` (global peak only); the
  matmul-class FLOPs of each phase (``flops``: forward, backward — the recompute of checkpointed layers
  included —, optimizer, total of one step; see validate/flops.py) by ``FlopCounterMode`` in a second
  fake run (``count_flops``), since the counter changes the ops that the memory run must see;
* transformers' "is tracing" answer for fake tensors is patched so that the packed-sequence check
  behaves as in a real, unpacked run (no explicit 4D mask, no ``repeat_kv`` copies).

``measure(spec)`` returns a dict shaped like a calibration.jsonl line; ``measure(spec, flops=True)`` adds ``flops``.
"""

from __future__ import annotations

import contextlib
import sys
import time
import warnings
from typing import Any

import torch
from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType, _TOTAL_KEY, _UpdateType
from torch.distributed._tools.mod_tracker import ModTracker

from ..ledger.objectives import objectives
from ..ledger.structure import BNB_OPTIM_BITS
from . import grouped_mm
from .flops import PhaseFlops, flop_counter
from .spec import normalize_spec  # the one definition of a spec (torch-free)

grouped_mm.register()   # k-bit-prepared fp32 MoE experts: CUDA's per-group fallback (validate/grouped_mm.py)

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

# breakdown keys of calibration.jsonl, in order
BREAKDOWN_KEYS = (
    "params",
    "grads",
    "optimizer_state",
    "optimizer_step_temp",
    "activations",
    "backward_temp",
    "buffers",
    "inputs_other",
)
_REF_TO_KEY = {
    _MemRefType.PARAM: "params",
    _MemRefType.GRAD: "grads",
    _MemRefType.ACT: "activations",
    _MemRefType.TEMP: "backward_temp",
    _MemRefType.BUFFER: "buffers",
    _MemRefType.OTH: "inputs_other",
}


# --------------------------------------------------------------------------------------------
# model construction


def _config(arch: dict, attention: str):
    """The transformers config of ``arch`` (config.json keys; ``model_type`` picks the class; a multimodal config
    holds the decoder's keys as its ``text_config``)."""
    import transformers

    arch = dict(arch)
    model_type = arch.pop("model_type", "llama")
    for k in ("name", "model"):
        arch.pop(k, None)
    text = arch["text_config"] = dict(arch["text_config"]) if "text_config" in arch else arch
    if text.get("model_type", model_type) == "mistral":
        text.setdefault("sliding_window", None)
    if text.get("model_type", model_type) == "qwen2":
        text.pop("attention_bias", None)  # qwen2 always has q/k/v bias
    # training: no KV cache (with one, the forward would also hold the cache's copies of k/v;
    # the calibration set was measured without)
    text.setdefault("use_cache", False)
    if text is arch:
        del arch["text_config"]
    cfg = transformers.AutoConfig.for_model(model_type, **arch)
    for c in {id(cfg): cfg, id(cfg.get_text_config()): cfg.get_text_config()}.values():
        for key in ("pad_token_id", "bos_token_id", "eos_token_id"):  # a small test vocabulary lacks the defaults' ids
            if isinstance(getattr(c, key, None), int) and getattr(c, key) >= cfg.get_text_config().vocab_size:
                setattr(c, key, None)
    if cfg.get_text_config() is cfg:
        cfg._attn_implementation = attention
    else:   # a multimodal config: the language model's kernel; each tower keeps its own default (Gemma 4's audio
        cfg.get_text_config()._attn_implementation = attention   # conformer has no SDPA path and refuses one)
    return cfg


def peft_target_modules(spec: dict) -> list[str] | str:
    """The target_modules a user writes for these targets: a fused MoE expert weight is asked for by the
    names PEFT maps onto it (Mixtral w1 + w3 → gate_up_proj at rank 2r), as the family entry lists them."""
    from ..ledger.architecture import family
    from ..presets import decoder_family, spec_from_config

    known = decoder_family(spec["arch"])
    if "text_config" in spec["arch"] and known and family(known).is_all_linear(
            spec["targets"], spec_from_config(spec["arch"], "spec", "config", "spec").options):
        return "all-linear"  # a multimodal model: PEFT's all-linear also takes the tower's linears (ledger.towers)
    names = family(known).extra("peft_target_modules", {}) if known else {}
    return list(dict.fromkeys(n for t in spec["targets"] for n in names.get(t, [t])))


def build_model(spec: dict):
    """The (PEFT-wrapped) model on the meta device, in train mode."""
    import transformers

    from ..ledger.towers import read_tower
    from .layout import causal_lm_auto

    cfg = _config(spec["arch"], spec["attention"])
    dtype = _DTYPES[spec["dtype"]]
    tower = read_tower(spec["arch"], "measurement spec", spec.get("loader", "causal-lm"))
    auto = (transformers.AutoModelForImageTextToText if tower and tower.loader not in
            transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()
            else causal_lm_auto(cfg))   # the class a user loads the model as (ledger.towers, validate.layout)
    score = objectives().get(spec.get("objective", "sft"), {}).get("head") == "score"
    if score:   # a reward model as TRL's RewardTrainer loads it (reward_trainer.py:396, :572): one label, a pad id
        auto, cfg.num_labels = transformers.AutoModelForSequenceClassification, 1
        cfg.get_text_config().pad_token_id = 0
    with torch.device("meta"):
        # a multimodal model: the kernel for its language model, each tower its own default (Gemma 4's audio
        # conformer has no SDPA path and refuses one)
        model = auto.from_config(
            cfg, dtype=dtype, attn_implementation={"text_config": spec["attention"]} if tower else spec["attention"]
        )
        # as loaded weights are: floating buffers (rotary inv_freq) in the weights' dtype too
        model.to(dtype)
        _keep_fp32(model, dtype)
    prepared = False
    if spec["method"] == "qlora" and spec.get("dora"):
        from ..errors import UserError

        raise UserError("DoRA on a 4-bit base cannot be measured here: PEFT's DoRA deep-copies each Linear4bit to "
                        "dequantize it for the magnitude's initial norm, and Params4bit's __deepcopy__ (set_data) fails "
                        "on the meta device; the estimate models it from PEFT's source")
    if spec["method"] == "qlora":
        _quantize_linears(model, dtype)
        if spec.get("kbit_prep", "peft") == "peft":
            prepared = _kbit_prepare(model, spec)
    if spec["method"] in ("lora", "qlora"):
        import peft

        lcfg = peft.LoraConfig(
            r=int(spec["rank"]),
            lora_alpha=spec["lora_alpha"],
            lora_dropout=spec["lora_dropout"],
            target_modules=peft_target_modules(spec),
            task_type="SEQ_CLS" if score else "CAUSAL_LM",
            use_dora=bool(spec.get("dora", False)),
            modules_to_save=list(spec.get("modules_to_save", [])) or None,
        )
        with warnings.catch_warnings():  # peft asks the deprecated is_gradient_checkpointing
            warnings.simplefilter("ignore", FutureWarning)
            model = peft.get_peft_model(
                model, lcfg, autocast_adapter_dtype=(spec["adapter_dtype"] == "fp32")
            )
    elif spec["method"] != "full":
        raise ValueError(f"unknown method {spec['method']!r}")
    if tower and spec.get("image_tokens") and not spec.get("train_vision"):   # the user's freeze of the tower
        for name in tower.modules:   # (its weights, or its LoRA adapters): it runs, and takes no gradient
            next(m for n, m in model.named_modules() if n.split(".")[-1] == name).requires_grad_(False)
    if spec["grad_checkpointing"] and not prepared:
        with warnings.catch_warnings():  # deprecated alias of activation_checkpointing_enable
            warnings.simplefilter("ignore", FutureWarning)
            reentrant = spec.get("checkpoint_impl", "non-reentrant") == "reentrant"
            if spec.get("checkpoint_ops"):   # torchtitan's op-level policy (validate.sac) on every layer
                from .sac import checkpoint_kwargs

                kwargs = checkpoint_kwargs()
            else:
                kwargs = {"use_reentrant": reentrant}
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs,
                                                every_n_layers=int(spec.get("checkpoint_every", 1)))
    model.train()
    return model


def _keep_fp32(model, dtype) -> None:
    """What from_pretrained keeps in fp32 under a 16-bit load (modeling_utils.py:3844-3858 _get_dtype_plan: the
    model's _keep_in_fp32_modules_strict, and _keep_in_fp32_modules under fp16), matched to parameter and buffer
    names as the loader matches checkpoint keys (core_model_loading.py:1880, 1919)."""
    from transformers.core_model_loading import build_glob_alternation

    plan = model._get_dtype_plan(dtype)
    if not plan:
        return
    pattern = build_glob_alternation(list(plan))[0]
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if pattern.search(name):
            t.data = t.data.to(torch.float32)


def _quantize_linears(model, dtype) -> None:
    """transformers' bitsandbytes 4-bit load on the meta device: every ``nn.Linear`` but the modules it keeps
    (``get_keys_to_not_convert``: lm_head, tied weights) becomes a ``Linear4bit`` (NF4, double quantization,
    compute dtype bf16, uint8 storage), frozen. Embeddings, norms and fused MoE experts (not nn.Linear) stay."""
    import bitsandbytes as bnb
    from transformers.quantizers.base import get_keys_to_not_convert

    skip = get_keys_to_not_convert(model)
    for name, mod in list(model.named_modules()):
        if type(mod) is torch.nn.Linear and not any(name == k or name.startswith(k + ".") for k in skip):
            new = bnb.nn.Linear4bit(mod.in_features, mod.out_features, mod.bias is not None,
                                    compute_dtype=torch.bfloat16, compress_statistics=True, quant_type="nf4",
                                    quant_storage=torch.uint8, device="meta")
            new.weight.data = new.weight.data.to(dtype)
            if mod.bias is not None:
                new.bias.data = new.bias.data.to(dtype)
            new.support_avx512bf16_for_cpu = False
            new.source_cls = torch.nn.Linear
            new.requires_grad_(False)
            model.set_submodule(name, new)
    model.is_loaded_in_4bit = True
    model.quantization_method = "bitsandbytes"


def _kbit_prepare(model, spec) -> bool:
    """peft.prepare_model_for_kbit_training as QLoRA recipes call it: 16-bit parameters (embeddings, lm_head,
    norms) cast to fp32, and — with checkpointing — its own gradient_checkpointing_enable: PEFT passes ``{}``,
    which torch reads as use_reentrant=True (--checkpoint-impl reentrant); the HF Trainer enables it again
    with transformers' default, use_reentrant=False (--checkpoint-impl non-reentrant)."""
    import peft

    reentrant = spec.get("checkpoint_impl", "non-reentrant") == "reentrant"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peft.prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=bool(spec["grad_checkpointing"]),
            gradient_checkpointing_kwargs=None if reentrant else {"use_reentrant": False})
    return bool(spec["grad_checkpointing"])


def _fakeify_4bit(model, fake_mode, device) -> int:
    """Quantize every (meta) Linear4bit weight from a fake 16-bit weight under the fake mode; returns the bytes
    of the quantization states (absmax, the nested absmax and code, offset, the NF4 code): GPU tensors for the
    whole run that are neither parameters nor buffers, so MemTracker does not see them.

    ``Params4bit`` cannot wrap a FakeTensor (``_make_subclass``): the packed weight is a plain Parameter
    carrying Params4bit's attributes. ``create_dynamic_map`` reads values (``.tolist()``): it is built real."""
    import bitsandbytes as bnb

    F = bnb.functional
    q4 = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    if not q4:
        return 0
    # double quantization reads bitsandbytes' process-wide map (functional.py name2qmap): a fake one for these
    # weights only, the real one put back after them (a later real 4-bit load would quantize with a FakeTensor)
    real = F.name2qmap.get("dynamic")
    F.name2qmap["dynamic"] = fake_mode.from_tensor(F.create_dynamic_map())
    try:
        return sum(_quantize_fake(m, fake_mode, device, F) for m in q4)
    finally:
        if real is None:
            F.name2qmap.pop("dynamic", None)
        else:
            F.name2qmap["dynamic"] = real


def _quantize_fake(m, fake_mode, device, F) -> int:
    """One Linear4bit's weight quantized under the fake mode; the bytes of its quantization state."""
    shape, dt = tuple(m.weight.shape), m.weight.dtype
    with fake_mode:
        w = torch.empty(shape, dtype=dt, device=device)
        packed, qs = F.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4",
                                     quant_storage=torch.uint8)
    p = torch.nn.Parameter(packed, requires_grad=False)
    for k, v in dict(quant_state=qs, blocksize=64, compress_statistics=True, quant_type="nf4",
                     quant_storage=torch.uint8, module=m, bnb_quantized=True).items():
        setattr(p, k, v)
    m._parameters["weight"] = p
    m.quant_state = qs
    return _state_bytes(qs)


def _state_bytes(qs) -> int:
    """Bytes of one 4-bit weight's quantization state: absmax, the NF4 code, and with double quantization the
    nested absmax, its code and the offset (bitsandbytes ``QuantState``)."""
    tensors = (qs.absmax, qs.code) + ((qs.state2.absmax, qs.state2.code, qs.offset) if qs.nested else ())
    return sum(t.numel() * t.element_size() for t in tensors)


def quant_state_bytes(model) -> int:
    """The quantization states of a model's 4-bit weights: device tensors for the whole run that are neither
    parameters nor buffers, so MemTracker does not see them (0 without bitsandbytes' Linear4bit)."""
    bnb = sys.modules.get("bitsandbytes")
    if bnb is None:
        return 0
    return sum(_state_bytes(m.weight.quant_state) for m in model.modules()
               if isinstance(m, bnb.nn.Linear4bit) and getattr(m.weight, "quant_state", None) is not None)


def _fakeify(model, fake_mode, device="cpu") -> None:
    """Replace every parameter and buffer by a FakeTensor of the same shape and dtype (4-bit weights:
    quantized under the fake mode; their quantization states' bytes in ``model._symvram_untracked``)."""
    model._symvram_untracked = 0

    bnb = sys.modules.get("bitsandbytes")  # imported by a 4-bit build only
    q4 = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)] if bnb is not None else []
    if q4:
        metas = {id(m): m._parameters.pop("weight") for m in q4}  # quantized below, not copied
        _fakeify_plain(model, fake_mode, device)
        for m in q4:
            m._parameters["weight"] = metas[id(m)]
        model._symvram_untracked = _fakeify_4bit(model, fake_mode, device)
        return
    _fakeify_plain(model, fake_mode, device)


def _fakeify_plain(model, fake_mode, device="cpu") -> None:
    def fake(t):
        with fake_mode:
            return torch.empty(t.shape, dtype=t.dtype, device=device)

    _replace_tensors(model, fake)


def _replace_tensors(model, make) -> None:
    """Every parameter and buffer replaced by ``make(meta tensor)``, once per tensor: tied weights stay tied
    (``Module.to_empty`` would give each module its own copy of a shared parameter)."""
    memo: dict[int, tuple] = {}  # id(meta tensor) -> (meta tensor, replacement)

    def replacement(t, param: bool):
        if id(t) not in memo:
            new = make(t)
            memo[id(t)] = (t, torch.nn.Parameter(new, requires_grad=t.requires_grad) if param else new)
        return memo[id(t)][1]

    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is not None:
                mod._parameters[name] = replacement(p, True)
        for name, b in list(mod._buffers.items()):
            if b is not None:
                mod._buffers[name] = replacement(b, False)


@contextlib.contextmanager
def _untraced_packed_check():
    """Make transformers answer the packed-sequence check as a real, unpacked run does.

    ``find_packed_sequence_indices`` treats FakeTensors as "tracing" and then returns the packed
    mask, which forces an explicit (b, 1, s, s) mask (and ``repeat_kv`` copies for GQA).  The
    replacement runs the same ops and, since position ids are ``arange`` (one sequence per row),
    answers ``None`` like a real run does.
    """
    from transformers import masking_utils

    orig = masking_utils.find_packed_sequence_indices

    def find_packed_sequence_indices(position_ids):
        first_dummy_value = position_ids[:, :1] - 1
        position_diff = torch.diff(position_ids, prepend=first_dummy_value, dim=-1)
        packed_sequence_mask = (position_diff != 1).cumsum(-1)
        _ = (packed_sequence_mask[:, -1] == 0).all()  # the real run reads this (True) and returns None
        return None

    masking_utils.find_packed_sequence_indices = find_packed_sequence_indices
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = orig


def _bnb_optimizer(spec: dict, params: list, model):
    """bitsandbytes' AdamW8bit / PagedAdamW8bit / PagedAdamW32bit (lazy import: bitsandbytes is optional). On the
    CPU the paged ones keep ordinary buffers (optim/optimizer.py:375 get_state_buffer), as the ledger does there.

    Its quantization maps are built with ``.tolist()`` (data-dependent, impossible under FakeTensorMode):
    they are built real and turned into fakes of the parameters' mode. Under the ``hf`` stack every
    nn.Embedding weight gets 32-bit states, as transformers' Trainer registers for 8-bit optimizers
    (trainer.py: ``register_module_override(module, "weight", {"optim_bits": 32})``)."""
    try:
        import bitsandbytes as bnb
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError(f"--optimizer {spec['optimizer']} needs bitsandbytes: pip install bitsandbytes") from e
    manager = bnb.optim.GlobalOptimManager.get_instance()
    manager.initialize()  # a process-wide singleton: overrides of an earlier measurement (by index) must not leak
    opt = bnb.optim.AdamW(params, lr=1e-4, optim_bits=BNB_OPTIM_BITS[spec["optimizer"]],
                          is_paged=spec["optimizer"].startswith("paged-"))
    fm = getattr(params[0], "fake_mode", None) if params else None
    if fm is not None:
        opt.name2qmap["dynamic"] = fm.from_tensor(bnb.functional.create_dynamic_map(signed=True))
        opt.name2qmap["udynamic"] = fm.from_tensor(bnb.functional.create_dynamic_map(signed=False))
    from ..stacks import runs_trainer

    if runs_trainer(spec.get("stack") or "torch") and model is not None:
        for mod in model.modules():
            if isinstance(mod, torch.nn.Embedding):
                manager.register_module_override(mod, "weight", {"optim_bits": 32})
    return opt


class InBackward:
    """Optimizer in backward, as torch's recipe (the ``register_post_accumulate_grad_hook`` tutorial) and torchtune's
    ``optimizer_in_bwd`` write it: one optimizer per trainable parameter, stepped and zeroed (set_to_none) by a hook
    as soon as that parameter's gradient is accumulated, so no two gradients need to exist at once. The loop's own
    ``step`` and ``zero_grad`` have nothing left to do. ``install`` registers the hooks (after a tracker's own
    gradient hooks, which must see each gradient before it is freed)."""

    def __init__(self, per_parameter: dict):
        self.per_parameter = per_parameter
        self._installed = False

    @property
    def state(self) -> dict:
        return {p: opt.state[p] for p, opt in self.per_parameter.items() if p in opt.state}

    def install(self) -> None:
        if self._installed:
            return
        for p, opt in self.per_parameter.items():
            def hook(param, _opt=opt):
                _opt.step()
                _opt.zero_grad(set_to_none=True)
            p.register_post_accumulate_grad_hook(hook)
        self._installed = True

    def step(self) -> None:   # every parameter was stepped by its hook
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:  # noqa: ARG002 - every gradient is gone already
        return None


def build_optimizer(spec: dict, params: list, model=None):
    if spec.get("optimizer_in_backward"):
        return InBackward({p: build_optimizer({**spec, "optimizer_in_backward": False}, [p], model) for p in params})
    if spec["optimizer"] in BNB_OPTIM_BITS:
        return _bnb_optimizer(spec, params, model)
    impl = spec["optimizer_impl"]
    kw: dict[str, Any] = {}
    if impl == "foreach":
        kw["foreach"] = True
    elif impl == "fused":
        kw["fused"] = True
    elif impl == "forloop":
        kw["foreach"] = False
    else:
        raise ValueError(f"unknown optimizer_impl {impl!r}")
    name = spec["optimizer"]
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, **kw)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4, **kw)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4, **kw)
    if name == "sgd-momentum" or name == "sgdm":
        return torch.optim.SGD(params, lr=1e-4, momentum=0.9, **kw)
    raise ValueError(f"unknown optimizer {name!r}")


# --------------------------------------------------------------------------------------------
# the tracker


class _ForwardModules(ModTracker):
    """The module names of the running forward (and of a checkpointed layer's recompute), without ModTracker's
    backward bookkeeping. ModTracker (torch/distributed/_tools/mod_tracker.py:215-248, ``_fw_pre_hook`` /
    ``_fw_post_hook``) registers a ``register_multi_grad_hook`` on every module's inputs and outputs to know when
    the module's backward starts and ends; with gradient checkpointing on a PEFT model some of those tensors never
    receive their gradient, and the hook's buffer keeps a gradient alive into the next step (one fp32
    batch × seq × hidden block per step, measured against torch.profiler's allocator events in
    tests/test_tracer.py). A run without a tracker has no such hooks, so the tracer must have none either.
    MemTracker's own module hooks are not registered (``register_user_hooks`` does nothing): the backward
    category comes from the autograd engine (``is_bw``: ``torch._C._current_graph_task_id() != -1``)."""

    def register_user_hooks(self, *hooks) -> None:  # noqa: ARG002 - no per-module statistics
        return None

    def _fw_pre_hook(self, mod, input):  # noqa: A002 - torch's signature
        self.parents.add(self._get_mod_name(mod))

    def _fw_post_hook(self, mod, input, output):  # noqa: A002
        self.parents.discard(self._get_mod_name(mod))


class PeakTracker(MemTracker):
    """MemTracker keeping only the global peak, plus per-phase peaks.

    * no module hooks (``_ForwardModules``): MemTracker's ModTracker keeps tensors of a checkpointed PEFT model
      alive from one step into the next, which a real run does not; the tracker counts what the program holds;
    * per-module peak bookkeeping is skipped (it makes a 7B case take minutes);
    * gradient hooks are installed only on parameters that require grad (frozen base weights
      would raise);
    * at every new global peak inside ``optimizer.step()`` the bytes held by ``optimizer.state``
      are recorded, so optimizer states and step temporaries can be told apart.
    * ``on_peak`` (optional) is called at every new global peak (used by explain_peak).
    """

    def __init__(self, optimizer=None, on_peak=None, on_op=None) -> None:
        super().__init__()
        self._mod_tracker = _ForwardModules()
        self.phase = "setup"
        self.phase_peak: dict[str, int] = {}
        self.peak_phase: str | None = None
        self.peak_opt_state_bytes = 0
        self._optimizer = optimizer
        self._on_peak = on_peak
        self._on_op = on_op
        self.op_index = 0
        # every storage MemTracker sees, allocated and freed in program order: the caching allocator's schedule
        self.schedule: list[tuple[str, int, int]] = []
        self._storage_ids: dict[int, int] = {}

    def _update_snap(self, u_type, winfo, old_mem_consumed=None, old_reftype=None) -> None:
        super()._update_snap(u_type, winfo, old_mem_consumed, old_reftype)
        key = id(winfo)
        if u_type in (_UpdateType.DEL, _UpdateType.SIZE) and key in self._storage_ids:
            self.schedule.append(("free", self._storage_ids.pop(key), 0))
        if u_type in (_UpdateType.ADD, _UpdateType.SIZE) and winfo.mem_consumed > 0:
            self._storage_ids[key] = len(self.schedule)
            self.schedule.append(("alloc", len(self.schedule), winfo.mem_consumed))

    def _total(self) -> int:
        return sum(s[_TOTAL_KEY] for s in self._curr_mem_snap.values())

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.phase_peak[phase] = max(self.phase_peak.get(phase, 0), self._total())

    def _update_peak_stats(self, peak_state) -> None:  # noqa: ARG002 - global only
        self.op_index += 1
        total = self._total()
        if total > self.phase_peak.get(self.phase, -1):
            self.phase_peak[self.phase] = total
        if self._on_op is not None:
            self._on_op(self, total)
        for dev, dev_snap in self._curr_mem_snap.items():
            if self._peak_mem.get(dev, 0) < dev_snap[_TOTAL_KEY]:
                self._peak_mem[dev] = dev_snap[_TOTAL_KEY]
                self._peak_mem_snap[dev] = dict(dev_snap)
                self.peak_phase = self.phase
                self.peak_opt_state_bytes = (
                    self.optimizer_state_bytes() if self._in_opt else None
                )
                if self._on_peak is not None:
                    self._on_peak(self)

    def optimizer_state_bytes(self) -> int:
        if self._optimizer is None:
            return 0
        seen = set()
        total = 0
        for st in self._optimizer.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor):
                    s = v.untyped_storage()
                    if id(s) not in seen:  # storages are per tensor here
                        seen.add(id(s))
                        total += s.nbytes()
        return total

    def track_external(self, *external) -> None:
        """As MemTracker's, and each module's trainable parameters get their gradient hooks now: MemTracker
        installs them from its module pre-forward hook, which this tracker does not register."""
        super().track_external(*external)
        for obj in external:
            if isinstance(obj, torch.nn.Module):
                self._track_module_params_and_buffers(obj, install_grad_hooks=True)

    def _track_module_params_and_buffers(self, module, install_grad_hooks: bool = True):
        def _grad_hook(grad):
            self._update_and_maybe_create_winfos(grad, _MemRefType.GRAD)

        param_memory = 0
        for param in module.parameters():
            winfos = self._update_and_maybe_create_winfos(param, _MemRefType.PARAM)
            param_memory += sum(w.mem_consumed for w in winfos)
            if param.grad is not None:
                self._update_and_maybe_create_winfos(param.grad, _MemRefType.GRAD)
            if (
                install_grad_hooks
                and param.requires_grad
                and self._param_to_grad_hook_handles.get(param, None) is None
            ):
                h1 = param.register_hook(_grad_hook)
                h2 = param.register_post_accumulate_grad_hook(lambda p: _grad_hook(p.grad))
                self._param_to_grad_hook_handles[param] = (h1, h2)
        buffer_memory = 0
        for buffer in module.buffers():
            winfos = self._update_and_maybe_create_winfos(buffer, _MemRefType.BUFFER)
            buffer_memory += sum(w.mem_consumed for w in winfos)
        return param_memory, buffer_memory

    def breakdown(self) -> dict[str, int]:
        out = dict.fromkeys(BREAKDOWN_KEYS, 0)
        for dev_snap in self._peak_mem_snap.values():
            for ref, key in _REF_TO_KEY.items():
                out[key] += int(dev_snap.get(ref, 0))
            opt = int(dev_snap.get(_MemRefType.OPT, 0))
            state = opt if self.peak_opt_state_bytes is None else self.peak_opt_state_bytes
            out["optimizer_state"] += state
            out["optimizer_step_temp"] += opt - state
        # everything but the weights, their gradients and the optimizer states
        out["activations_and_other"] = (
            self.peak_bytes - out["params"] - out["grads"] - out["optimizer_state"]
        )
        return out

    @property
    def peak_bytes(self) -> int:
        return int(sum(self._peak_mem.values()))


# --------------------------------------------------------------------------------------------
# the training steps


def _train_steps(spec, model, optimizer, input_ids, labels, tracker=None, on_phase=None):
    ac = spec["autocast"]
    offload = _offloading(spec, model)
    dev_type = input_ids.device.type if input_ids.device.type != "meta" else "cpu"
    images = image_inputs(spec, model, input_ids)   # the batch's pixel_values and grids, alive the whole run
    for step in range(1, int(spec["steps"]) + 1):

        def phase(name, _step=step):
            if on_phase is not None:
                on_phase(f"step{_step}:{name}")

        if isinstance(optimizer, InBackward):
            optimizer.install()
        phase("forward")
        ctx = (
            torch.autocast(device_type=dev_type, dtype=_DTYPES[ac])
            if ac
            else contextlib.nullcontext()
        )
        with offload:   # TRL: around the Trainer's training_step, forward and backward
            with ctx:
                if spec.get("loss_impl", "torch") == "chunked":
                    loss = _chunked_loss(model, input_ids, labels)
                else:
                    out = model(input_ids=input_ids, labels=labels, **_packed_positions(spec, input_ids), **images)
                    loss = out.loss
                    del out  # the HF Trainer drops the outputs (logits) before backward
            phase("backward")
            loss.backward()
            del loss
        phase("optimizer")
        optimizer.step()
        phase("zero_grad")
        optimizer.zero_grad(set_to_none=True)
        if tracker is not None:
            tracker.reset_mod_stats()


def image_inputs(spec, model, input_ids) -> dict:
    """``image_tokens`` N per sample: one image per sample whose grid is (1, m, m·N) patches (m the spatial merge
    size: N·m² patches, N image tokens after the merger), as Qwen3-VL's processor hands them to the model: the
    flattened patches (Σ patches, C·t·p²) in fp32 (as the image processor returns them), image_grid_thw, and mm_token_type_ids marking the
    N placeholder tokens ``image_placeholders`` wrote into input_ids (modeling_qwen3_vl.py:1139-1150, :1200-1208);
    nothing for a text-only run."""
    n = int(spec.get("image_tokens", 0))
    if not n:
        return {}
    v = model.config.vision_config
    b, m = input_ids.shape[0], v.spatial_merge_size
    width = v.in_channels * v.temporal_patch_size * v.patch_size ** 2
    pixels = torch.randn(b * n * m * m, width, device=input_ids.device)   # fp32, as the image processor returns them
    grid = torch.tensor([[1, m, m * n]] * b, device=input_ids.device)
    return {"pixel_values": pixels, "image_grid_thw": grid,
            "mm_token_type_ids": (input_ids == model.config.image_token_id).long()}


def image_placeholders(spec, config, input_ids) -> None:
    """The N image tokens of each sample written into its input_ids after its first token (the processor expands
    an image's placeholder into as many tokens as the merger makes); other positions never hold the image token."""
    n = int(spec.get("image_tokens", 0))
    if n:
        token = config.image_token_id
        input_ids[input_ids == token] = 0
        input_ids[:, 1:1 + n] = token


PACKED_SAMPLES = 4   # samples per packed row: the block-diagonal mask is (s, s) whatever their number


def _packed_positions(spec, input_ids) -> dict:
    """A packed row's position ids, restarting at each of PACKED_SAMPLES samples (TRL's padding-free collator,
    sft_trainer.py:179-192); nothing for an unpacked run."""
    if not spec.get("packing"):
        return {}
    s = input_ids.shape[1]
    return {"position_ids": torch.arange(s, device=input_ids.device).remainder(-(-s // PACKED_SAMPLES)).unsqueeze(0)}


def _offloading(spec, model):
    """TRL's activation offloading context (validate.offload) when the spec asks for it, else a null context; the
    model remembers it (``_symvram_offload``) so the host bytes can be read after the steps."""
    if not spec.get("offload_activations"):
        return contextlib.nullcontext()
    if getattr(model, "_symvram_offload", None) is None:
        from .offload import OffloadedActivations, keep_head_on_device

        keep_head_on_device(model)
        model._symvram_offload = OffloadedActivations(model)
    return model._symvram_offload


CHUNKS = 8  # torchtune CEWithChunkedOutputLoss(num_output_chunks=8), the recipes' default


def _chunked_loss(model, input_ids, labels):
    """torchtune 0.6's chunked output and loss on the Hugging Face model: the decoder's last hidden state is
    split along the sequence into 8 chunks, each projected by lm_head (``TransformerDecoder.chunked_output``:
    the list of 16-bit chunks lives until the loss returns), then ``CEWithChunkedOutputLoss`` sums
    ``cross_entropy(chunk.float(), labels, reduction="sum")`` over the chunks and divides by the token count.
    lm_head is applied with F.linear (MemTracker refuses a module called twice in one step)."""
    import torch.nn.functional as F

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = base.model(input_ids=input_ids).last_hidden_state
    weight = base.lm_head.weight
    logits = [F.linear(chunk, weight) for chunk in hidden.chunk(CHUNKS, dim=1)]
    del hidden
    total = (labels != -100).sum()
    targets = [chunk.reshape(-1) for chunk in labels.chunk(CHUNKS, dim=1)]
    loss = 0.0
    for i in range(len(logits)):
        loss = loss + F.cross_entropy(logits[i].reshape(-1, logits[i].size(-1)).float(), targets[i],
                                      ignore_index=-100, reduction="sum")
    del logits, targets
    return loss / total


def _versions() -> dict:
    import peft
    import transformers

    out = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}
    if "bitsandbytes" in sys.modules:  # imported only by a run that uses it
        out["bitsandbytes"] = sys.modules["bitsandbytes"].__version__
    return out


def _counts(model) -> tuple[int, int, list]:
    seen = set()
    trainable = total = 0
    tparams = []
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        if p.requires_grad:
            trainable += p.numel()
            tparams.append(p)
    return trainable, total, tparams


def _materialize(model, device: str) -> None:
    """Real random parameters on ``device``; every 4-bit weight quantized there as bitsandbytes does when a
    model is loaded (``Params4bit._quantize``: the 16-bit weight packed to NF4 with its quantization state,
    the 16-bit copy freed)."""
    bnb = sys.modules.get("bitsandbytes")  # imported by a 4-bit build only
    q4 = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)] if bnb is not None else []
    metas = {id(m): m._parameters.pop("weight") for m in q4}  # quantized below, not allocated in 16 bits
    if q4 and getattr(bnb.functional.name2qmap.get("dynamic"), "fake_mode", None) is not None:
        del bnb.functional.name2qmap["dynamic"]  # a fake measurement's map: bitsandbytes builds a real one again

    def random(t):
        new = torch.empty(t.shape, dtype=t.dtype, device=device)
        return new.normal_(0, 0.02) if new.is_floating_point() else new

    with torch.no_grad():
        _replace_tensors(model, random)
        for m in q4:
            meta = metas[id(m)]
            w = torch.empty(meta.shape, dtype=meta.dtype, device=device).normal_(0, 0.02)
            m.weight = bnb.nn.Params4bit(w, requires_grad=False, blocksize=64, compress_statistics=True,
                                         quant_type="nf4", quant_storage=torch.uint8, module=m)._quantize(device)


def force_worst_routing(model) -> int:
    """Route every token of the step to experts 0 … k−1 (``--routing worst``): each experts module of transformers'
    experts interface (``use_experts_implementation``, integrations/moe.py:582-641, the grouped_mm path's and the
    per-expert loop's) gets its ``top_k_index`` overwritten in place with 0 … k−1 in every row (fill, cumsum, minus
    one: in-place ops, no tensor of their own, so the step allocates nothing more; through ``.data``, so that
    autograd's saved copies of it see no version change). The router, its softmax and its top-k run as they do; only
    where the pairs go changes. Needs real tensors (a FakeTensor has no values to route by). Returns the number of
    experts modules.

    >>> import transformers
    >>> cfg = transformers.Qwen3MoeConfig(hidden_size=16, intermediate_size=32, moe_intermediate_size=8,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, num_experts=4, num_experts_per_tok=2,
    ...     vocab_size=32)
    >>> m = transformers.AutoModelForCausalLM.from_config(cfg)
    >>> force_worst_routing(m)
    1
    >>> seen = []
    >>> h = m.model.layers[0].mlp.experts.register_forward_pre_hook(lambda mod, a: seen.append(a[1]))
    >>> _ = m(torch.randint(0, 32, (1, 5)))
    >>> seen[0].tolist() == [[0, 1]] * 5
    True
    """
    from ..errors import UserError

    experts = [m for m in model.modules() if hasattr(m, "_is_expert_parallel") and hasattr(m, "has_gate")]
    if not experts:
        raise UserError("--routing worst: no experts module of transformers' experts interface to route (Llama 4's "
                        "experts run every token through all E experts: nothing depends on the routing)")

    def forced(mod, args):
        index = args[1].data   # (T, k): experts(hidden_states, top_k_index, top_k_weights)
        index.fill_(1).cumsum_(-1).sub_(1)

    for m in experts:
        m.register_forward_pre_hook(forced)
    return len(experts)


def prepare(spec: dict, fake_mode=None, device: str = "cpu"):
    """Build the model, optimizer and inputs (fake unless fake_mode is None)."""
    model = build_model(spec)
    if fake_mode is not None:
        _fakeify(model, fake_mode, device)
    else:
        _materialize(model, device)
    trainable, total, tparams = _counts(model)
    optimizer = build_optimizer(spec, tparams, model)
    b, s, V = int(spec["batch"]), int(spec["seq"]), int(model.config.get_text_config().vocab_size)
    ctx = fake_mode if fake_mode is not None else contextlib.nullcontext()
    with ctx:
        input_ids = torch.randint(0, V, (b, s), device=device)
        image_placeholders(spec, model.config, input_ids)
        labels = input_ids.clone()
    return model, optimizer, input_ids, labels, trainable, total


def _check_kernels(spec: dict) -> None:
    """A spec's ``kernels`` is the Gated DeltaNet path the run takes: transformers 5.24 imports fla's
    chunk_gated_delta_rule and causal-conv1d's causal_conv1d_fn whenever the packages are installed
    (integrations/hub_kernels.py:1008-1020), so on CUDA the spec must say which ones are; FakeTensorMode and the
    CPU run the torch path only (fla's kernels are Triton)."""
    import importlib.util

    from ..errors import UserError
    from ..ledger.architecture import family
    from ..presets import decoder_family

    known = decoder_family(spec["arch"])
    if not known or not family(known).has_deltanet:
        if spec.get("kernels", "torch") != "torch":
            raise UserError(f"kernels {spec['kernels']}: the model has no Gated DeltaNet layers")
        return
    installed = [m for m in ("fla", "causal_conv1d") if importlib.util.find_spec(m) is not None]
    ran = "fla" if spec.get("device") == "cuda" and len(installed) == 2 else "torch"
    if spec.get("device") == "cuda" and len(installed) == 1:
        raise UserError(f"only {installed[0]} of flash-linear-attention and causal-conv1d is installed: transformers "
                        "would mix their kernels with its torch code, a path not modelled")
    if spec.get("kernels", "torch") != ran:
        raise UserError(f"kernels {spec.get('kernels', 'torch')}: this run takes the {ran} path for the Gated "
                        "DeltaNet layers (" + ("flash-linear-attention and causal-conv1d are installed" if ran == "fla"
                                               else "fla's kernels need CUDA and both packages")
                        + f"); --kernels {ran} estimates that path")


def measure(spec: dict, flops: bool = False) -> dict:
    """Measure the peak of live tensor bytes of ``spec['steps']`` training steps.

    Returns a dict shaped like a line of calibration.jsonl (see module docstring). With ``flops`` it also
    holds the matmul-class FLOPs of one step (``count_flops``), counted in a fake run of their own.
    """
    spec = normalize_spec(spec)
    _check_kernels(spec)
    if spec.get("device") == "cuda":
        return _measure_cuda(spec)
    from torch._subclasses.fake_tensor import FakeTensorMode

    t0 = time.perf_counter()
    # a router forced to experts 0..k-1, or images (Qwen3-VL's grids and mRoPE positions are read as Python ints,
    # modeling_qwen3_vl.py:304, :962-983), need real values: real CPU tensors
    forced = spec.get("routing") == "worst" or bool(spec.get("image_tokens"))
    fake_mode = None if forced else FakeTensorMode(allow_non_fake_inputs=False)
    model, optimizer, input_ids, labels, trainable, total = prepare(spec, fake_mode)
    if spec.get("routing") == "worst":
        force_worst_routing(model)
    tracker = PeakTracker(optimizer)
    tracker.track_external(model, *getattr(optimizer, "per_parameter", {None: optimizer}).values(), input_ids, labels)
    packed_check = contextlib.nullcontext() if spec.get("packing") or forced else _untraced_packed_check()
    with packed_check, fake_mode or contextlib.nullcontext(), tracker:
        _train_steps(spec, model, optimizer, input_ids, labels, tracker, tracker.set_phase)
    # the 4-bit quantization states live on the GPU for the whole run; MemTracker does not see them
    untracked = quant_state_bytes(model) if forced else int(getattr(model, "_symvram_untracked", 0))
    breakdown = tracker.breakdown()
    if untracked:
        breakdown["params"] += untracked
        breakdown["quant_state"] = untracked
    result = _result(spec, model, optimizer, trainable, total, tracker.peak_bytes + untracked,
                     tracker.peak_phase, {k: v + untracked for k, v in tracker.phase_peak.items()}, breakdown,
                     time.perf_counter() - t0)
    result["allocator"] = replayed(tracker.schedule, untracked)
    if getattr(model, "_symvram_offload", None) is not None:   # the pinned host copies' most bytes at once
        result["host_peak_bytes"] = model._symvram_offload.host_peak
    if flops:
        result["flops"] = count_flops(spec)
    return result


def count_flops(spec: dict) -> dict[str, int]:
    """The matmul-class FLOPs of one training step of ``spec`` ({forward, backward, optimizer, total}),
    counted by FlopCounterMode (validate/flops.py) in a fake run of their own.

    Never in the memory-measuring run: the counter decomposes every op it has no formula for (torch 2.13
    torch/utils/flop_counter.py:1050-1054, ``func.decompose``), so SiLU's backward runs as sigmoid, empty_like
    and four muls alive together instead of the fused ``silu_backward`` — the bytes measured with it inflate
    the backward's temporaries (+10 % on a tiny backward-bound Qwen2). One step: the counted FLOPs of every
    step are equal.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    spec = {**normalize_spec(spec), "steps": 1}
    real = bool(spec.get("image_tokens"))   # images: real CPU tensors, as measure runs them
    fake_mode = None if real else FakeTensorMode(allow_non_fake_inputs=False)
    model, optimizer, input_ids, labels, *_ = prepare(spec, fake_mode)
    counter = flop_counter()
    phases = PhaseFlops(counter)
    with (contextlib.nullcontext() if real else _untraced_packed_check()), fake_mode or contextlib.nullcontext(), counter:
        _train_steps(spec, model, optimizer, input_ids, labels, on_phase=phases)
    return phases.last_step()


def replayed(schedule: list, untracked: int = 0) -> dict:
    """The traced schedule through the caching-allocator replay (symvram.allocator: modelled, not measured):
    the reserved peak with the default allocator and with expandable segments, beside the allocated one. The
    4-bit quantization states MemTracker does not see are allocated first, as loading the model does."""
    from ..allocator import AllocatorConfig, replay

    events = ([("alloc", -1, untracked)] if untracked else []) + list(schedule)
    out = {"events": len(events)}
    for name, config in (("default", AllocatorConfig()), ("expandable", AllocatorConfig(expandable_segments=True))):
        r = replay(events, config)
        out[name] = {"allocated_peak": r.peak_allocated, "reserved_peak": r.peak_reserved}
    return out


def _result(spec, model, optimizer, trainable, total, peak, peak_phase, by_phase, breakdown, secs):
    b, s, V = int(spec["batch"]), int(spec["seq"]), int(model.config.get_text_config().vocab_size)
    state_dtypes = sorted(
        {f"{k}:{str(v.dtype).replace('torch.', '')}"
         for st in optimizer.state.values() for k, v in st.items()
         if isinstance(v, torch.Tensor) and v.dim() > 0}
    )
    pdtypes = {str(p.dtype).replace("torch.", "") for p in model.parameters() if not p.requires_grad}
    if not pdtypes:
        pdtypes = {str(p.dtype).replace("torch.", "") for p in model.parameters()}
    return {
        "spec": spec,
        "arch": spec["arch"],
        "method": spec["method"],
        "rank": spec["rank"],
        "targets": spec["targets"],
        "lora_dropout": spec["lora_dropout"],
        "adapter_dtype": spec["adapter_dtype"],
        "batch": b,
        "seq": s,
        "dtype": spec["dtype"],
        "autocast": spec["autocast"],
        "param_dtype": sorted(pdtypes)[0] if len(pdtypes) == 1 else sorted(pdtypes),
        "optimizer": f"{spec['optimizer']}-{spec['optimizer_impl']}",
        "optimizer_state_dtypes": state_dtypes,
        "gradient_checkpointing": bool(spec["grad_checkpointing"]),  # calibration.jsonl's spelling
        "attn_impl": spec["attention"],
        "steps": int(spec["steps"]),
        "trainable_params": trainable,
        "total_params": total,
        "peak_bytes": int(peak),
        "peak_phase": peak_phase,
        "peak_bytes_by_phase": {k: int(v) for k, v in by_phase.items() if k != "setup"},
        "breakdown_at_peak": breakdown,
        "logits_bytes": {"bf16": b * s * V * 2, "fp32": b * s * V * 4},
        "device": spec.get("device", "fake"),
        "seconds": round(secs, 2),
        "versions": _versions(),
    }


def warm_up_cuda() -> int:
    """Allocate what a CUDA process keeps after its first training step before measuring several cases in one
    process: the cuBLAS and cuBLASLt workspaces of the forward's thread and of autograd's (a matmul with a bias,
    forward and backward). The first case then starts where the others do. Returns the bytes left allocated.

    (The first GPU session measured without it; each of its two runs had its largest miss in its first case.)"""
    dev = torch.device("cuda")
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(64, 64, device=dev, dtype=dtype, requires_grad=True)
        w = torch.randn(64, 64, device=dev, dtype=dtype, requires_grad=True)
        torch.nn.functional.linear(x, w, torch.zeros(64, device=dev, dtype=dtype)).sum().backward()
        del x, w
    torch.cuda.synchronize(dev)
    return torch.cuda.memory_allocated(dev)


def _measure_cuda(spec: dict) -> dict:
    """Real tensors on a CUDA device; torch.cuda.max_memory_allocated() per phase.

    Beyond what the fake path counts, the peak holds the allocator's rounding (512-byte blocks), the cuBLAS
    workspaces (allocated at the first matmul of each thread, the forward's and autograd's, and kept by the
    process) and the GPU kernels' own saved tensors (flash or cuDNN attention, fused dropout masks). Several
    cases may run in one process: ``baseline_bytes`` is what was still allocated when this case began (the
    workspaces of earlier cases, which a fresh process would allocate in its first step anyway: the peak
    includes them either way) and ``persistent_bytes`` what stays after it is freed.
    """
    import gc

    if not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' asked for, but torch.cuda.is_available() is False")
    t0 = time.perf_counter()
    dev = torch.device("cuda")
    gc.collect()
    torch.cuda.empty_cache()
    baseline = torch.cuda.memory_allocated(dev)
    model, optimizer, input_ids, labels, trainable, total = prepare(spec, None, "cuda")
    if spec.get("routing") == "worst":
        force_worst_routing(model)
    torch.cuda.synchronize()
    by_phase: dict[str, int] = {}
    requested: dict[str, int] = {}  # the same peak without the allocator's rounding
    current = {"phase": None}

    def on_phase(name):
        torch.cuda.synchronize(dev)
        if current["phase"] is not None:
            by_phase[current["phase"]] = torch.cuda.max_memory_allocated(dev)
            requested[current["phase"]] = torch.cuda.memory_stats(dev).get("requested_bytes.all.peak", 0)
        torch.cuda.reset_peak_memory_stats(dev)
        current["phase"] = name

    _train_steps(spec, model, optimizer, input_ids, labels, None, on_phase)
    on_phase(None)
    peak_phase = max(by_phase, key=by_phase.get)
    params = sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())
    result = _result(spec, model, optimizer, trainable, total, by_phase[peak_phase], peak_phase,
                     by_phase, {"params": params}, time.perf_counter() - t0)
    del model, optimizer, input_ids, labels
    bnb = sys.modules.get("bitsandbytes")
    if bnb is not None:  # its process-wide manager keeps the modules it was told about (hf stack: embeddings)
        bnb.optim.GlobalOptimManager.get_instance().initialize()
    gc.collect()
    torch.cuda.empty_cache()
    result.update(tied_weights_kept=True, requested_peak_bytes=max(requested.values()), baseline_bytes=baseline,
                  persistent_bytes=torch.cuda.memory_allocated(dev), gpu=torch.cuda.get_device_name(dev))
    return result
