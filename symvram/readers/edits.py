"""A remedy's setting changes (from ``analysis.diagnose``) written as edits to the user's own file.

Each Scenario setting a remedy changes has a key in each tool; the edit goes to the file the
setting was read from when that tool has the key, else to the training file. A change no key
expresses is written as the command-line flag.

>>> import pathlib, tempfile
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "run.yml").write_text("base_model: llama-3-8b\\nmicro_batch_size: 4\\n")
>>> from .read import read_files
>>> r = read_files([str(d / "run.yml")])
>>> [e.split(": ", 1)[1] for e in edits(r, {"grad_checkpointing": True, "batch": 1}, batch_before=4)]
['gradient_checkpointing: true', 'micro_batch_size: 1', 'gradient_accumulation_steps: 4']
"""
from __future__ import annotations

import json

from ..stacks import ZERO_OFFLOAD
from .read import Reading

# tool → Scenario setting (or "accum", "optim") → key in that tool's file
KEYS = {
    "axolotl": {"seq": "sequence_len", "batch": "micro_batch_size", "grad_checkpointing": "gradient_checkpointing",
                "optim": "optimizer", "accum": "gradient_accumulation_steps", "dora": "peft_use_dora",
                "modules_to_save": "lora_modules_to_save", "targets": "lora_target_modules",
                "offload_activations": "activation_offloading"},
    "llamafactory": {"seq": "cutoff_len", "batch": "per_device_train_batch_size",
                     "grad_checkpointing": "disable_gradient_checkpointing", "optim": "optim",
                     "accum": "gradient_accumulation_steps", "dora": "use_dora", "modules_to_save": "additional_target",
                     "targets": "lora_target"},
    "trl": {"seq": "max_length", "batch": "per_device_train_batch_size", "grad_checkpointing": "gradient_checkpointing",
            "optim": "optim", "accum": "gradient_accumulation_steps", "dora": "use_dora",
            "modules_to_save": "lora_modules_to_save", "targets": "lora_target_modules",
            "checkpoint_every": "gradient_checkpointing_kwargs.every_n_layers",
            "offload_activations": "activation_offloading"},
    "trainer": {"batch": "per_device_train_batch_size", "grad_checkpointing": "gradient_checkpointing",
                "optim": "optim", "accum": "gradient_accumulation_steps",
                "checkpoint_every": "gradient_checkpointing_kwargs.every_n_layers"},
    "deepspeed": {"batch": "train_micro_batch_size_per_gpu", "accum": "gradient_accumulation_steps"},
    "torchtune": {"seq": "tokenizer.max_seq_len", "batch": "batch_size",
                  "grad_checkpointing": "enable_activation_checkpointing", "accum": "gradient_accumulation_steps",
                  "optimizer_in_backward": "optimizer_in_bwd", "offload_activations": "enable_activation_offloading"},
    "litgpt": {"seq": "train.max_seq_length", "batch": "train.micro_batch_size"},   # args.py TrainArgs
}
NEGATED = {("llamafactory", "grad_checkpointing")}   # disable_gradient_checkpointing: false turns it on
QLORA = {"axolotl": {"adapter": "qlora", "load_in_4bit": True},
         "llamafactory": {"finetuning_type": "lora", "quantization_bit": 4},
         "trl": {"model_init_kwargs.quantization_config.load_in_4bit": True}}
EIGHT_BIT = "adamw_bnb_8bit"
# --loss-impl as each tool switches it on (axolotl through its integration plugins; TRL 1.16's SFTTrainer turns
# Liger's fused cross-entropy off in favour of its own fused LM head, which the trl stack already has)
LOSS = {"axolotl": {"liger": {"plugins": "[axolotl.integrations.liger.LigerPlugin]",
                              "liger_fused_linear_cross_entropy": True},
                    "cce": {"plugins": "[axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin]",
                            "cut_cross_entropy": True},
                    "chunked": {"chunked_cross_entropy": True}},
        "llamafactory": {"liger": {"enable_liger_kernel": True}},
        "trainer": {"liger": {"use_liger_kernel": True}}}


# --liger as each tool switches Liger's layer kernels on (axolotl through its Liger plugin)
LIGER = {"axolotl": {"plugins": "[axolotl.integrations.liger.LigerPlugin]", "liger_rms_norm": True,
                     "liger_glu_activation": True, "liger_rope": True},
         "llamafactory": {"enable_liger_kernel": True}, "trainer": {"use_liger_kernel": True},
         "trl": {"use_liger_kernel": True}}


def _line(file: str, key: str, value) -> str:
    """``file: key: value`` in the file's own syntax (JSON or YAML), a dotted key as nested mappings.

    >>> _line("args.json", "model_init_kwargs.quantization_config.load_in_4bit", True)
    'args.json: "model_init_kwargs": {"quantization_config": {"load_in_4bit": true}}'
    >>> _line("run.yml", "gradient_checkpointing", True)
    'run.yml: gradient_checkpointing: true'
    """
    parts = key.split(".")
    if file.split(":")[0].lower().endswith(".json"):
        nested = value
        for part in reversed(parts):
            nested = {part: nested}
        return f"{file}: {json.dumps(nested)[1:-1]}"
    body = str(value).lower() if isinstance(value, bool) else str(value)
    for part in reversed(parts[1:]):
        body = f"{{{part}: {body}}}"
    return f"{file}: {parts[0]}: {body}"


def _target(reading: Reading, setting: str, name: str) -> tuple[str, str] | None:
    """(file, tool) that should hold ``name``: where ``setting`` was read, else the training file."""
    tools = dict(reading.files)
    got = reading.settings.get(setting)
    if got is not None and got.file in tools and name in KEYS.get(tools[got.file], {}):
        return got.file, tools[got.file]
    primary = reading.primary
    if primary and name in KEYS.get(primary[1], {}):
        return primary
    return None


def _flag(setting: str, value) -> str:
    if setting == "checkpoint_every":
        return f"--selective-checkpointing every:{value}"
    if setting == "checkpoint_ops":
        return "--selective-checkpointing op" if value else "--grad-checkpointing (without --selective-checkpointing op)"
    flag = "--" + setting.replace("_", "-")
    return flag if value is True else f"{flag} {value}"


def _offload_edits(reading: Reading, stage: int) -> list[str]:
    """ZeRO-Offload as edits: the DeepSpeed file read, else a new one that the training file names.

    >>> import pathlib, tempfile
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "run.yml").write_text("base_model: llama-3-8b\\n")
    >>> from .read import read_files
    >>> [e.split(": ", 1)[1] for e in _offload_edits(read_files([str(d / "run.yml")]), 2)]
    ['deepspeed: ds_offload.json', '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}']
    """
    zero = {"stage": stage, "offload_optimizer": {"device": "cpu"}}
    ds = next((f for f, tool in reading.files if tool == "deepspeed"), None)
    if ds is not None:
        return [_line(ds, "zero_optimization", json.dumps(zero))]
    config = "ds_offload.json: " + json.dumps({"bf16": {"enabled": True}, "zero_optimization": zero})
    if reading.primary and reading.primary[1] in ("axolotl", "llamafactory", "trl", "trainer"):
        return [_line(reading.primary[0], "deepspeed", "ds_offload.json"), config]
    return [config, "and launch with deepspeed (or TrainingArguments(deepspeed=\"ds_offload.json\"))"]


def edits(reading: Reading, changes: dict, batch_before: int = 1) -> list[str]:
    """The lines to change in the user's files for ``changes`` (Scenario settings → new values)."""
    out = []
    if changes.get("offload") == "optimizer":   # ZeRO-Offload: the DeepSpeed config says every setting it implies
        out += _offload_edits(reading, changes.get("zero", 2))
        changes = {k: v for k, v in changes.items() if k not in (*ZERO_OFFLOAD, "zero", "optimizer_impl")}
    for setting, value in changes.items():
        if setting == "optimizer_impl" and changes.get("state_dtype") == "int8":
            continue   # bitsandbytes' 8-bit AdamW is one fused kernel: the optim edit says it
        if setting == "method" and value == "qlora" and reading.primary and reading.primary[1] in QLORA:
            file, tool = reading.primary
            out += [_line(file, k, v) for k, v in QLORA[tool].items()]
            continue
        if setting == "loss_impl" and reading.primary and value in LOSS.get(reading.primary[1], {}):
            file, tool = reading.primary
            out += [_line(file, k, v) for k, v in LOSS[tool][value].items()]
            continue
        if setting == "liger" and value and reading.primary and reading.primary[1] in LIGER:
            file, tool = reading.primary
            out += [_line(file, k, v) for k, v in LIGER[tool].items()]
            continue
        if setting == "state_dtype" and value == "int8":
            where = _target(reading, "optimizer", "optim")
            if where:
                out.append(_line(where[0], KEYS[where[1]]["optim"], EIGHT_BIT))
                continue
        if setting == "master" and value == "none" and any(t == "deepspeed" for _, t in reading.files):
            out.append("(DeepSpeed's bf16/fp16 engine always keeps the fp32 master: no key drops it)")
            continue
        if setting == "head_targets" and "targets" in changes:
            continue   # the targets' edit lists the modules that stay
        where = _target(reading, setting, setting)
        if where is None:
            out.append(_flag(setting, ",".join(value) if isinstance(value, tuple) else value))
            continue
        file, tool = where
        key = KEYS[tool][setting]
        if isinstance(value, tuple) and not file.lower().endswith(".json"):   # a module list in the tool's spelling
            value = (",".join(value) or "null") if tool == "llamafactory" else f"[{', '.join(value)}]"
        out.append(_line(file, key, (not value) if (tool, setting) in NEGATED else value))
        if setting == "batch":
            accum = next((v.value for k, v in reading.notes if k.endswith("gradient_accumulation_steps")
                          and isinstance(v.value, int)), 1)
            steps = accum * batch_before // value
            where = _target(reading, "batch", "accum") or where
            out.append(_line(where[0], KEYS[where[1]]["accum"], steps))
    return out


# A remedy's setting → the Python that makes it, for a run read from live objects (readers.live): per loop
# (trainer: transformers' TrainingArguments; trl: TRL's SFTConfig; torch: a plain / accelerate / Lightning loop).
# {args} is the loop's arguments class; {v} the new value.
_LOAD = "AutoModelForCausalLM.from_pretrained(..., {})"
PYTHON = {
    "grad_checkpointing": {"args": "{args}(gradient_checkpointing=True)",
                           "torch": "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs="
                                    "{{'use_reentrant': False}})"},
    "checkpoint_impl": {"args": "{args}(gradient_checkpointing_kwargs={{'use_reentrant': {reentrant}}})",
                        "torch": "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs="
                                 "{{'use_reentrant': {reentrant}}})"},
    "optimizer_impl": {"args": "{args}(optim='adamw_torch_fused')", "torch": "torch.optim.AdamW(..., fused=True)"},
    "state_dtype": {"args": "{args}(optim='adamw_bnb_8bit')", "torch": "bitsandbytes.optim.AdamW8bit(...)"},
    "loss_impl": {"args": "{args}(use_liger_kernel=True)",
                  "torch": "liger_kernel.transformers.apply_liger_kernel_to_<family>(fused_linear_cross_entropy=True)"},
    "attention": {"any": _LOAD.format("attn_implementation='{v}'")},
    "optimizer_in_backward": {"any": "opts = {{p: torch.optim.AdamW([p], ...) for p in model.parameters() if "
                                     "p.requires_grad}}; p.register_post_accumulate_grad_hook(lambda p: "
                                     "(opts[p].step(), opts[p].zero_grad())) for each p (torchtune: "
                                     "optimizer_in_bwd: True)"},
    "liger": {"any": "liger_kernel.transformers.apply_liger_kernel_to_<family>(rms_norm=True, swiglu=True, rope=True) "
                     "before the model is built"},
    "offload_activations": {"trl": "SFTConfig(activation_offloading=True)",
                            "any": "with trl.models.get_act_offloading_ctx_manager(model): loss = ...; loss.backward()"},
    "seq": {"trl": "SFTConfig(max_length={v})", "any": "truncate the tokenized samples to {v} tokens"},
    "rank": {"any": "LoraConfig(r={v})"},
    "method": {"any": "{method}"},
    "gpus": {"any": "accelerate launch --num_processes {v} …"},
    "zero": {"any": "DeepSpeed ZeRO-{v} (a deepspeed config with zero_optimization.stage {v})"},
    "offload": {"any": "DeepSpeed offload_optimizer.device cpu"},
    "tp": {"any": "tensor parallelism over {v} GPUs (TrainingArguments(parallelism_config=…))"},
    "master": {"any": "no fp32 master copy (bf16 weights and optimizer)"},
}
_METHODS = {"lora": "get_peft_model(model, LoraConfig(r=…, target_modules='all-linear'))",
            "qlora": _LOAD.format("quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="
                                  "'nf4', bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)")
            + " + get_peft_model(model, LoraConfig(...))"}
ARGS_CLASS = {"trainer": "TrainingArguments", "trl": "SFTConfig"}


def python_edits(tool: str, changes: dict, batch_before: int = 1, accum: int = 1) -> list[str]:
    """``changes`` (Scenario settings → new values) as the edits of a training script: ``tool`` is trainer, trl
    or torch (a plain, accelerate or Lightning loop).

    >>> python_edits("trl", {"batch": 1, "seq": 1024}, batch_before=8)
    ['SFTConfig(per_device_train_batch_size=1, gradient_accumulation_steps=8)', 'SFTConfig(max_length=1024)']
    >>> python_edits("torch", {"optimizer_impl": "fused", "batch": 2}, batch_before=4, accum=2)
    ['torch.optim.AdamW(..., fused=True)', 'DataLoader(batch_size=2) and 4 accumulation steps (Accelerator(gradient_accumulation_steps=4))']
    """
    args = ARGS_CLASS.get(tool)
    out = []
    for setting, value in changes.items():
        if setting == "batch":
            steps = accum * batch_before // value
            out.append(f"{args}(per_device_train_batch_size={value}, gradient_accumulation_steps={steps})" if args else
                       f"DataLoader(batch_size={value}) and {steps} accumulation steps "
                       f"(Accelerator(gradient_accumulation_steps={steps}))")
            continue
        if setting == "optimizer_impl" and changes.get("state_dtype") == "int8":
            continue   # bitsandbytes' 8-bit AdamW is one fused kernel: the edit below says it
        ways = PYTHON.get(setting)
        if ways is None:
            out.append(f"{setting} = {value}")
            continue
        line = ways.get(tool) or ways.get("args" if args else "torch") or ways["any"]
        out.append(line.format(args=args, v=value, reentrant=value == "reentrant", method=_METHODS.get(value, value)))
    return out
