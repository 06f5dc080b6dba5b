"""The training run read from the live objects — the model, the TrainingArguments, the optimizer, a batch —
into the Scenario the CLI builds for the same setup.

``from_training(model, args, optimizer, batch)`` reads what is really in memory: the model's config,
each parameter's dtype and device, the 4-bit modules bitsandbytes made, the modules PEFT really wrapped
(rank, alpha, dropout, DoRA, modules_to_save, target_parameters), whether checkpointing is on (and
reentrant), the attention implementation, the optimizer's class and options. The TrainingArguments
(``to_dict()``, what ``to_json_string()`` writes) go through the table that reads their JSON for
``--from`` (``readers.tools``), and what the objects say goes on top, as command-line flags do over a file:
so ``symvram estimate CONFIG --from args.json --method lora --rank 8 …`` and this reader give the same
Scenario. What it meets and does not model is named in ``unmodelled``, never dropped.

Duck-typed: this module imports no torch, transformers or peft (it reads attributes of the objects given).

>>> class Cfg:
...     model_type = "llama"; _attn_implementation = "sdpa"; name_or_path = "tiny"
...     def to_dict(self): return {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
...         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}
>>> class P:
...     def __init__(self, n, grad): self.dtype, self.device, self.requires_grad, self._n = "torch.bfloat16", Dev(), grad, n
...     def numel(self): return self._n
>>> class Dev: type = "cpu"
>>> class Model:
...     config = Cfg()
...     def named_modules(self): return iter([("", self)])
...     def named_parameters(self): return iter([("w", P(10, True))])
>>> t = from_training(Model(), batch={"input_ids": type("T", (), {"shape": (4, 128)})()})
>>> t.scenario.method, t.scenario.dtype, t.scenario.batch, t.scenario.seq, t.scenario.device
('full', 'bf16', 4, 128, 'cpu')
>>> t.settings["seq"].source
'batch input_ids.shape[1]'
"""
from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

from ..errors import UserError
from ..presets import ModelSpec, spec_from_config
from ..scenario import MODULES_TO_SAVE, Scenario, parse_targets
from . import convert as c
from .read import Reading, Value, read_mappings

TORCH_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}
MAX_SCAN = 100_000   # the longest tokenized sample is looked for in a dataset of at most this many rows
# torch.optim / bitsandbytes / transformers optimizer classes → symvram's optimizer (None: by its options)
OPTIMIZER_CLASSES = {"AdamW": "adamw", "Adam": "adamw", "SGD": None, "Adafactor": "adafactor", "Lion": "lion",
                     "AdamW8bit": "adamw8bit", "PagedAdamW8bit": "paged-adamw8bit", "PagedAdamW": "paged-adamw",
                     "PagedAdamW32bit": "paged-adamw", "AdamW32bit": "adamw", "FusedAdam": "adamw"}


@dataclass
class Training:
    """What ``from_training`` read: the Scenario, each setting with where it came from, what is not modelled.

    ``reading`` is the TrainingArguments' Reading (None without them); ``settings`` the live facts over it."""

    scenario: Scenario
    settings: dict[str, Value]
    unmodelled: list[str] = field(default_factory=list)
    reading: Reading | None = None
    tool: str = "torch"      # trainer | trl | torch (an accelerate or Lightning loop)

    def edits(self, changes: dict, batch_before: int = 1) -> list[str]:
        """A remedy's changes written as the Python the user edits (TrainingArguments, LoraConfig, …).

        >>> t = Training(Scenario.create("7b"), {}, tool="trainer")
        >>> t.edits({"grad_checkpointing": True, "batch": 1}, batch_before=4)
        ['TrainingArguments(gradient_checkpointing=True)', 'TrainingArguments(per_device_train_batch_size=1, gradient_accumulation_steps=4)']
        """
        from .edits import python_edits

        accum = 1
        if self.reading is not None:
            accum = next((v.value for k, v in self.reading.notes if k == "gradient_accumulation_steps"), 1)
        return python_edits(self.tool, changes, batch_before, accum)

    def rows(self) -> list[tuple[str, str, str]]:
        """(setting, value, source) of every setting read, for the report."""
        return [(k, _show(getattr(self.scenario, k)), v.source) for k, v in self.settings.items()]


def _show(value) -> str:
    return ",".join(value) if isinstance(value, tuple) else str(value).lower() if isinstance(value, bool) else str(value)


def _dtype(t) -> str | None:
    return TORCH_DTYPES.get(str(t.dtype))


def _unwrap(model):
    """The PEFT model (if any) and the transformers model under DDP/FSDP/compile wrappers and PEFT."""
    while hasattr(model, "module") and not hasattr(model, "config"):   # DistributedDataParallel, accelerate
        model = model.module
    model = getattr(model, "_orig_mod", model)                          # torch.compile
    peft_model = model if hasattr(model, "peft_config") else None
    base = model
    if peft_model is not None and hasattr(model, "get_base_model"):
        base = model.get_base_model()
    return peft_model, base


def model_spec(base) -> ModelSpec:
    """The ModelSpec of a live transformers model (its config, as config.json holds it)."""
    cfg = base.config
    name = getattr(cfg, "name_or_path", "") or getattr(cfg, "model_type", "model")
    return spec_from_config(cfg.to_dict(), name=str(name).rstrip("/").rsplit("/", 1)[-1] or "model", kind="config",
                            source="model.config (live)")


class _Live:
    """Reads the objects into facts (Scenario keyword → Value) and names what it does not model."""

    def __init__(self):
        self.facts: dict[str, Value] = {}
        self.unmodelled: list[str] = []

    def put(self, key: str, value, source: str) -> None:
        self.facts[key] = Value(value, source)

    # ------------------------------------------------------------------ the model
    def model(self, model, spec: ModelSpec) -> None:
        peft_model, base = _unwrap(model)
        params = list(model.named_parameters())
        q4 = [n for n, m in base.named_modules() if type(m).__name__ in ("Linear4bit", "LinearNF4", "LinearFP4")]
        q8 = [n for n, m in base.named_modules() if type(m).__name__ == "Linear8bitLt"]
        if q8:
            self.unmodelled.append(f"{len(q8)} bitsandbytes 8-bit (LLM.int8) Linear8bitLt modules: an 8-bit base is "
                                   "not modelled; estimated as a 16-bit base")
        lora = self.peft(peft_model, base, spec) if peft_model is not None else False
        method = ("qlora" if q4 else "lora") if lora else "full"
        if q4 and not lora:
            self.unmodelled.append(f"{len(q4)} 4-bit modules without LoRA adapters: a 4-bit base trains only "
                                   "through adapters; estimated as full fine-tuning")
        self.put("method", method, "the model: " + ("PEFT LoRA layers" if lora else "no PEFT adapters")
                 + (f" on {len(q4)} bitsandbytes Linear4bit modules" if q4 and lora else ""))
        device = Counter(p.device.type for _, p in params).most_common(1)
        if device and device[0][0] in ("cpu", "cuda"):
            self.put("device", device[0][0], "the parameters' device")
        self.dtypes(params, method, q4, base)
        self.checkpointing(base)
        attn = getattr(base.config, "_attn_implementation", None)
        if attn:
            try:
                self.put("attention", c.attention(attn), f"model.config._attn_implementation = {attn}")
            except c.WrongValue:
                self.unmodelled.append(f"attention implementation {attn!r}: not modelled; estimated as sdpa")

    def dtypes(self, params, method: str, q4: list, base) -> None:
        """dtype: the frozen base's (LoRA) or the trained weights' (full); adapters; QLoRA's kbit preparation."""
        numel: dict[tuple[str, str], int] = Counter()   # (role, dtype) → parameters
        for name, p in params:
            d = _dtype(p)
            if d is None:
                continue   # the 4-bit weights (uint8 storage)
            role = "adapter" if method != "full" and "lora_" in name else "trained" if p.requires_grad else "frozen"
            numel[(role, d)] += p.numel()

        def most(role):
            found = [(n, d) for (r, d), n in numel.items() if r == role]
            return max(found)[1] if found else None

        if method == "full":
            dtype = most("trained") or most("frozen")
            mixed = {d for (r, d) in numel if r == "trained"}
            if len(mixed) > 1:
                self.unmodelled.append(f"trainable parameters in several dtypes ({', '.join(sorted(mixed))}): "
                                       f"estimated as {dtype}")
            if dtype:
                self.put("dtype", dtype, "the trainable parameters' dtype")
            return
        adapter = most("adapter")
        if adapter:
            self.put("adapter_dtype", adapter, "the LoRA weights' dtype")
        stored = most("frozen")
        if method == "qlora":
            qc = getattr(base.config, "quantization_config", None)
            compute = getattr(qc, "bnb_4bit_compute_dtype", None) if qc is not None and not isinstance(qc, dict) \
                else (qc or {}).get("bnb_4bit_compute_dtype")
            compute = TORCH_DTYPES.get(str(compute) if "torch" in str(compute) else f"torch.{compute}", None)
            prepared = stored == "fp32"
            self.put("kbit_prep", "peft" if prepared else "none",
                     "the non-quantized weights are fp32 (prepare_model_for_kbit_training)" if prepared
                     else f"the non-quantized weights are {stored}")
            dtype = compute if prepared else stored
            self.put("dtype", dtype or "bf16", "bnb_4bit_compute_dtype" if prepared else "the frozen weights' dtype")
            dq = getattr(qc, "bnb_4bit_use_double_quant", None) if qc is not None and not isinstance(qc, dict) \
                else (qc or {}).get("bnb_4bit_use_double_quant")
            if dq is not None:
                self.put("double_quant", bool(dq), "quantization_config.bnb_4bit_use_double_quant")
            return
        if stored:
            self.put("dtype", stored, "the frozen base weights' dtype")

    def peft(self, peft_model, base, spec: ModelSpec) -> bool:
        """The LoRA layers PEFT really made: targets, rank, alpha, dropout, DoRA, modules_to_save."""
        from ..ledger.architecture import family

        configs = getattr(peft_model, "peft_config", {}) or {}
        active = getattr(peft_model, "active_adapter", None) or next(iter(configs), "default")
        cfg = configs.get(active)
        kind = str(getattr(cfg, "peft_type", "")).rsplit(".", 1)[-1]
        if kind not in ("LORA",):
            self.unmodelled.append(f"PEFT {kind or type(cfg).__name__} adapters: only LoRA is modelled; estimated as "
                                   "full fine-tuning")
            return False
        names, ranks, alphas, drops, dora, params = [], set(), set(), set(), set(), []
        for name, m in base.named_modules():
            if type(m).__name__ == "ModulesToSaveWrapper" or not hasattr(m, "lora_A") or (
                    active not in m.lora_A and active not in getattr(m, "lora_embedding_A", {})):  # lora.Embedding's
                continue
            target = getattr(m, "parameter_name", None)   # target_parameters: a ParamWrapper per parameter
            (params if target else names).append(target or name.rsplit(".", 1)[-1])
            ranks.add(m.r[active])
            alphas.add(m.lora_alpha[active])
            drop = m.lora_dropout[active]
            drops.add(float(getattr(drop, "p", 0.0)))
            dora.add(bool(getattr(m, "use_dora", {}).get(active, False)))
        fam = family(spec.family)
        found = tuple(dict.fromkeys(names + params))
        try:
            targets = parse_targets(found, fam)
        except UserError as e:
            known = [n for n in found if n in fam.linear_map or any(n in v for v in
                                                                   fam.extra("peft_target_modules", {}).values())]
            self.unmodelled.append(f"LoRA on {', '.join(n for n in found if n not in known)}: {e}; estimated without")
            targets = parse_targets(known, fam) if known else ()
        if not targets:
            return False
        self.put("targets", targets, f"the {len(names) + len(params)} modules PEFT wrapped")
        self.put("rank", max(ranks), "the LoRA layers' r")
        if len(ranks) > 1:
            self.unmodelled.append(f"LoRA ranks differ by module ({', '.join(map(str, sorted(ranks)))}: rank_pattern); "
                                   f"estimated at the largest, {max(ranks)}")
        self.put("lora_dropout", max(drops), "the LoRA layers' dropout")
        self.put("dora", any(dora), "the LoRA layers' use_dora")
        saved = sorted({n.rsplit(".", 1)[-1] for n, m in base.named_modules() if type(m).__name__ == "ModulesToSaveWrapper"})
        self.put("modules_to_save", tuple(n for n in MODULES_TO_SAVE if n in saved), "PEFT's ModulesToSaveWrapper modules")
        if set(saved) - set(MODULES_TO_SAVE):
            self.unmodelled.append(f"modules_to_save {', '.join(sorted(set(saved) - set(MODULES_TO_SAVE)))}: their "
                                   "trainable copies are not modelled")
        if any(type(m).__name__ == "TrainableTokensWrapper" for _, m in base.named_modules()):
            self.unmodelled.append("PEFT trainable_token_indices (TrainableTokensWrapper): not modelled")
        return True

    def checkpointing(self, base) -> None:
        """On if a layer has ``gradient_checkpointing``; reentrant from its ``_gradient_checkpointing_func``."""
        layers = [m for _, m in base.named_modules()   # transformers' decoder layers (modeling_layers.py)
                  if any(k.__name__ == "GradientCheckpointingLayer" for k in type(m).__mro__)]
        on = [m for m in layers if getattr(m, "gradient_checkpointing", False)]
        if not on:
            return
        self.put("grad_checkpointing", True, "the decoder layers' gradient_checkpointing")
        func = getattr(on[0], "_gradient_checkpointing_func", None)
        kwargs = getattr(func, "keywords", {}) or {}
        reentrant = kwargs.get("use_reentrant", True)   # torch.utils.checkpoint: None or absent is reentrant
        self.put("checkpoint_impl", "reentrant" if reentrant in (None, True) else "non-reentrant",
                 f"the checkpoint function's use_reentrant = {reentrant}")
        if getattr(getattr(func, "func", None), "__name__", "") == "checkpoint_func":   # offload=True's wrapper
            self.unmodelled.append("activation checkpointing with offload=True: the saved activations in host memory "
                                   "are not modelled (estimated on the GPU)")
        if 0 < len(on) < len(layers):
            self.unmodelled.append(f"checkpointing on {len(on)} of {len(layers)} layers (every_n_layers): estimated "
                                   "as every layer checkpointed")

    # ------------------------------------------------------------------ the optimizer
    def optimizer(self, opt) -> None:
        opt = getattr(opt, "optimizer", opt)   # accelerate's AcceleratedOptimizer
        name = type(opt).__name__
        d = getattr(opt, "defaults", {}) or {}
        kind = OPTIMIZER_CLASSES.get(name, "unknown")
        if kind is None:   # SGD
            kind = "sgd-momentum" if d.get("momentum") else "sgd"
        # bitsandbytes keeps optim_bits in opt.args and is_paged on the optimizer (optim/optimizer.py:135, :480)
        bits = getattr(getattr(opt, "args", None), "optim_bits", d.get("optim_bits"))
        is_paged = getattr(opt, "is_paged", d.get("is_paged"))
        if name in ("AdamW", "Adam", "Lion") and bits == 8:   # bitsandbytes with optim_bits=8
            kind = "paged-adamw8bit" if is_paged else "adamw8bit" if name != "Lion" else "lion"
        elif name == "AdamW" and bits == 32 and is_paged:   # the Trainer's paged_adamw_32bit: bnb AdamW(is_paged=True)
            kind = "paged-adamw"
        if kind == "unknown":
            self.unmodelled.append(f"optimizer {type(opt).__module__}.{name}: not modelled; estimated as torch AdamW")
            kind = "adamw"
        if name.startswith("Paged") and kind == "adamw" or (name == "Lion" and is_paged):
            self.unmodelled.append(f"{name}: paged optimizer states may be evicted to host memory; estimated as "
                                   "resident on the GPU")
        self.put("optimizer", kind, f"the optimizer: {type(opt).__module__}.{name}")
        if type(opt).__module__.startswith("torch.optim"):
            params = [p for g in opt.param_groups for p in g["params"]]
            if d.get("fused"):
                impl, why = "fused", "fused=True"
            elif d.get("foreach") is not None:
                impl, why = ("foreach" if d["foreach"] else "forloop"), f"foreach={d['foreach']}"
            else:   # torch's _default_to_fused_or_foreach: foreach on CUDA tensors, the for-loop elsewhere
                on_cuda = bool(params) and all(p.device.type == "cuda" for p in params)
                impl, why = ("foreach" if on_cuda else "forloop"), "foreach=None on " + ("CUDA" if on_cuda else "CPU")
            self.put("optimizer_impl", impl, f"the optimizer's {why}")

    # ------------------------------------------------------------------ the data
    def data(self, batch, dataset, reading: Reading | None) -> None:
        ids = batch.get("input_ids") if isinstance(batch, dict) else batch
        shape = getattr(ids, "shape", None)
        if shape is not None and len(shape) == 2:
            self.put("batch", int(shape[0]), "batch input_ids.shape[0]")
            self.put("seq", int(shape[1]), "batch input_ids.shape[1]")
            return
        longest = longest_sample(dataset)
        if longest is not None:
            cap = reading.settings.get("seq") if reading is not None else None
            if cap is not None and cap.priority > 0 and cap.value < longest:
                return   # truncated to max_length: the file's key stands
            self.put("seq", longest, f"the longest tokenized sample of the {len(dataset)} in the dataset")


def longest_sample(dataset) -> int | None:
    """The longest ``input_ids`` of a small dataset (a list or a map-style dataset of rows), else None.

    >>> longest_sample([{"input_ids": [1, 2, 3]}, {"input_ids": [4]}]), longest_sample(None)
    (3, None)
    """
    try:
        n = len(dataset)
    except TypeError:
        return None
    if not n or n > MAX_SCAN:
        return None
    column = None
    if hasattr(dataset, "column_names") and "input_ids" in (dataset.column_names or ()):
        column = dataset["input_ids"]   # datasets.Dataset: the column at once
    rows = column if column is not None else (dataset[i] for i in range(n))
    best = 0
    for row in rows:
        ids = row.get("input_ids") if isinstance(row, dict) else row if column is not None else None
        if ids is None:
            return None
        best = max(best, len(ids))
    return best or None


def _tool_of(args) -> str:
    """trl for TRL's configs (SFTConfig …), trainer for transformers' TrainingArguments."""
    return "trl" if type(args).__module__.split(".")[0] == "trl" else "trainer"


def from_training(model, args=None, optimizer=None, batch=None, dataset=None, gpus: int | None = None,
                  stack: str | None = None, **given) -> Training:
    """The Scenario of a live training setup (see the module docstring).

    ``args``: TrainingArguments or a TRL config; ``batch``: a batch as the collator makes it (its
    ``input_ids`` shape gives the batch and the sequence); ``dataset``: rows with ``input_ids``, scanned for
    the longest when no batch is given; ``gpus``: the world size (default: ``args.world_size``, else 1);
    ``stack``: default ``hf`` with TrainingArguments, ``trl`` with TRL's, ``torch`` without (a plain loop);
    ``given``: Scenario settings the objects do not hold (an accelerate loop's ``autocast``), over everything read.
    """
    _, base = _unwrap(model)
    if getattr(base, "config", None) is None or not hasattr(base.config, "to_dict"):
        raise UserError(f"from_training reads a transformers model (one with a .config); got {type(model).__name__}")
    spec = model_spec(base)
    live = _Live()
    live.model(model, spec)
    if optimizer is not None:
        live.optimizer(optimizer)
    tool = _tool_of(args) if args is not None else "torch"
    reading = None
    if args is not None:
        with warnings.catch_warnings():   # to_dict reads the deprecated aliases (gradient_checkpointing …) too
            warnings.simplefilter("ignore", FutureWarning)
            doc = {k: v for k, v in args.to_dict().items() if v is not None}
        master = read_mappings([(type(args).__name__, doc, tool)]).settings.get("master")
        if master is not None and master.value == "fp32":
            # DeepSpeed's bf16/fp16 engine casts the model to 16 bits when it starts and keeps the fp32 master
            # (readers.read._precision): the dtypes the objects hold before trainer.train() are not the run's
            for key in ("dtype", "adapter_dtype"):
                live.facts.pop(key, None)
        reading = read_mappings([(type(args).__name__, doc, tool)], {k: v.value for k, v in live.facts.items()})
        live.unmodelled += reading.warnings
    live.data(batch, dataset, reading)
    world = gpus if gpus is not None else getattr(args, "world_size", 1) if args is not None else 1
    live.put("gpus", int(world or 1), "gpus=" if gpus is not None else "args.world_size" if args is not None else
             "one process")
    if stack is not None:
        live.put("stack", stack, "the loop")
    elif args is None:
        live.put("stack", "torch", "a plain PyTorch loop (no TrainingArguments)")
    for key, value in given.items():
        live.put(key, value, f"{key}= given")
    settings = {**(reading.settings if reading is not None else {}), **live.facts}
    if "seq" not in settings:
        live.unmodelled.append("the sequence length: no batch, no small dataset with input_ids, no max_length; "
                               "estimated at symvram's default (pass batch= or seq=)")
    kwargs = {k: v.value for k, v in settings.items()}
    if kwargs.get("method") == "full":
        for k in ("rank", "targets", "lora_dropout", "dora", "modules_to_save", "adapter_dtype"):
            kwargs.pop(k, None)
            settings.pop(k, None)
    sc = Scenario.create(spec, **kwargs)
    return Training(sc, settings, live.unmodelled, reading, tool)
