"""The mapping, as data: for each training tool, file key → setting, value converter, tool default.

A ``Row`` names where its value goes:

- a Scenario setting (``batch``, ``seq``, ``rank`` …): used as it is;
- a fact (``FACTS``) that a rule in ``readers.read`` combines with others (``bf16`` + ``fp16`` +
  the adapter → dtype, autocast, adapter dtype, master, state dtype);
- a pending setting (``PENDING``): memory-relevant, not in the ledger yet — a value other than the
  default gives one warning line and the estimate assumes the default;
- ``None``: memory-relevant and not modelled; the converter says whether the value switches it on
  (then one warning line);
- ``INFO``: shown in the scenario read, no effect on the estimate (LoRA alpha, packing …);
- ``=symbol``: the value of one of the ledger's symbols (DeepSpeed's ``reduce_bucket_size``), as ``--set``;
- ``@deepspeed`` / ``@fsdp``: another file (or an inline mapping) read with that tool's table.

Adding a setting is one row. The defaults are the tools' own, from the versions named in ``Tool.title``:

>>> row = next(r for r in TOOLS["axolotl"].rows if r.key == "sequence_len")
>>> row.setting, row.convert(4096), row.default
('seq', 4096, 512)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import convert as c

NO_DEFAULT = object()


@dataclass(frozen=True)
class Row:
    key: str                              # dotted path in the file: "zero_optimization.stage"
    setting: str | None                   # Scenario setting, fact, pending setting, INFO, @tool or None
    convert: Callable = lambda v: v
    default: object = NO_DEFAULT          # the tool's own default when the file is silent
    why: str = ""                         # for None / pending rows: what the ledger does not hold
    priority: int = 2                     # a lower priority yields to a higher one for the same setting


@dataclass(frozen=True)
class Tool:
    name: str
    title: str                            # the tool and the version whose defaults and keys this follows
    rows: tuple[Row, ...]
    harmless: frozenset[str] = field(default_factory=frozenset)  # keys (or key prefixes) known not to change memory
    markers: frozenset[str] = field(default_factory=frozenset)   # keys that identify the format


INFO = "info"
SYMBOL = "="   # a Row setting "=name": the value of the ledger's symbol ``name`` (as --set name=VALUE)
# Facts a rule combines into Scenario settings (see readers.read)
FACTS = ("model", "adapter", "quant", "bf16", "fp16", "pure_bf16", "model_dtype", "optim", "target_linear",
         "packing_on", "padding_free", "packing_strategy", "use_unsloth",
         "ds_stage", "ds_offload_optimizer", "ds_offload_param", "fsdp", "fsdp_offload", "distributed",
         "lora_attn_modules", "lora_mlp", "optim_fused", "optim_foreach", "precision",
         "lora_query", "lora_key", "lora_value", "lora_projection", "lora_head", "vision_trains",
         "projector_trains")
# Memory-relevant settings the ledger does not hold yet: the default it assumes, and what a change does
PENDING = {
    "offloaded_checkpointing": (False, "axolotl's offloaded gradient checkpointing (Unsloth's recipe) keeps the "
                                       "checkpointed hidden states in host memory; not modelled: the estimate keeps "
                                       "them on the GPU"),
    "paged_optimizer": (False, "paged optimizer states may be evicted to host memory under pressure"),
}

NOT_YET = ("{}'s {} is not modelled yet (symvram models SFT and TRL 1.16's DPOTrainer, KTOTrainer and RewardTrainer: "
           "--objective dpo, kto, reward); its memory differs, so it is refused rather than estimated as SFT")
SAVE_OTHERS = "modules_to_save beyond embed_tokens and lm_head (their trainable copies)"
BOOL = c.boolean
# TRL 1.16 GRPOConfig's keys that change memory, as TRL reads them and as axolotl passes them (its `trl:` section)
GRPO_KEYS = (("num_generations", "num_generations", c.integer), ("max_completion_length", "max_completion_length", c.integer),
             ("beta", "beta", c.number), ("num_iterations", "num_iterations", c.integer),
             ("loss_type", "loss_type", c.loss_type),
             ("use_vllm", "generation", lambda v: "vllm-colocate" if BOOL(v) else "hf"))
ATTN = c.attention

# ---------------------------------------------------------------- axolotl 0.19.0 (utils/schemas/*.py)
AXOLOTL = Tool("axolotl", "axolotl 0.19", (
    Row("base_model", "model", c.text),
    Row("adapter", "adapter", c.choice({"lora": "lora", "qlora": "qlora", None: "full"}), default="full"),
    Row("load_in_4bit", "quant", lambda v: 4 if BOOL(v) else None),
    Row("load_in_8bit", "quant", lambda v: 8 if BOOL(v) else None),
    Row("lora_r", "rank", c.integer, default=8),                       # PEFT LoraConfig.r
    Row("lora_alpha", INFO, c.number, default=8),                      # PEFT LoraConfig.lora_alpha
    Row("lora_dropout", "lora_dropout", c.number, default=0.0),
    Row("lora_target_modules", "targets", c.targets, default=("q_proj", "v_proj")),  # PEFT's llama default
    Row("lora_target_linear", "target_linear", BOOL),
    Row("lora_modules_to_save", "modules_to_save", c.modules_to_save),
    Row("lora_modules_to_save", None, c.other_modules, why=SAVE_OTHERS),
    Row("peft_use_dora", "dora", BOOL),
    Row("bnb_config_kwargs.bnb_4bit_use_double_quant", "double_quant", BOOL, default=True),
    Row("sequence_len", "seq", c.integer, default=512),
    Row("micro_batch_size", "batch", c.integer, default=1),
    Row("gradient_accumulation_steps", INFO, c.integer, default=1),
    Row("gradient_checkpointing", "grad_checkpointing",
        c.choice({True: True, False: False, "offload": True, "offload_disk": True, None: False}), default=False),
    Row("gradient_checkpointing", "offloaded_checkpointing", lambda v: v in ("offload", "offload_disk")),
    Row("gradient_checkpointing_kwargs.use_reentrant", "checkpoint_impl", c.reentrant),
    # activation_offloading: true: ActivationOffloadingMixin enters TRL's offloading context around training_step and
    # ac_wrap_hf_model checkpoints every GradientCheckpointingLayer (core/trainers/mixins/activation_checkpointing.py)
    Row("activation_offloading", "offload_activations", lambda v: v is True),
    Row("activation_offloading", "grad_checkpointing", lambda v: True if v is True else None, priority=1),
    Row("optimizer", "optim", c.text, default="adamw_torch_fused"),
    Row("bf16", "bf16", c.mixed, default=True),                        # "auto": bf16 on Ampere or newer
    Row("fp16", "fp16", BOOL),
    Row("bfloat16", "pure_bf16", BOOL),                                # bf16 without AMP
    Row("float16", None, c.is_on, why="fp16 weights without AMP"),
    Row("fp8", None, c.is_on, why="fp8 training"),
    Row("flash_attention", "attention", c.flag_attention("sdpa")),
    Row("sdp_attention", "attention", c.flag_attention("sdpa")),
    Row("xformers_attention", "attention", c.flag_attention("sdpa")),
    Row("flex_attention", "attention", c.flag_attention("sdpa")),
    Row("eager_attention", "attention", c.flag_attention("eager")),
    Row("attn_implementation", "attention", ATTN, default="sdpa"),     # transformers' default where torch has SDPA
    Row("sample_packing", INFO, BOOL, default=False),
    Row("deepspeed", "@deepspeed"),
    Row("fsdp", "fsdp", lambda v: c.trainer_fsdp(v)),
    Row("fsdp", "fsdp_offload", c.trainer_fsdp_offload),
    Row("fsdp_config", "@fsdp"),
    Row("fsdp_version", INFO, c.integer),
    Row("tensor_parallel_size", "tp", c.integer),
    Row("context_parallel_size", None, lambda v: c.integer(v) > 1, why="context parallelism splits the sequence"),
    Row("sequence_parallel_degree", None, lambda v: c.integer(v) > 1, why="sequence parallelism splits the sequence"),
    Row("liger_rms_norm", "liger", c.is_on),
    Row("liger_glu_activation", "liger", c.is_on),
    Row("liger_rope", "liger", c.is_on),
    Row("liger_layer_norm", "liger", c.is_on),
    Row("liger_fused_linear_cross_entropy", "loss_impl", lambda v: "liger" if BOOL(v) else "torch"),
    Row("liger_cross_entropy", None, c.is_on, why="Liger's (unfused) cross-entropy kernel"),
    Row("cut_cross_entropy", "loss_impl", lambda v: "cce" if BOOL(v) else "torch"),
    # the plugin's CutCrossEntropyArgs.cut_cross_entropy defaults to True (integrations/cut_cross_entropy/args.py)
    Row("plugins", "loss_impl", c.plugin("CutCrossEntropyPlugin", "cce"), priority=1),
    Row("chunked_cross_entropy", "loss_impl", lambda v: "chunked" if BOOL(v) else "torch"),
    Row("torch_compile", None, c.is_on, why="torch.compile fuses kernels and changes what is saved"),
    Row("unfrozen_parameters", None, c.nonempty, why="training a subset of parameters"),
    # axolotl's AxolotlDPOTrainer subclasses TRL's DPOTrainer; ipo is DPO with loss_type ipo (the same memory)
    # (and AxolotlKTOTrainer TRL's KTOTrainer)
    # rl: orpo runs AxolotlORPOTrainer (TRL's ORPOTrainer), rl: simpo AxolotlCPOTrainer with loss_type simpo and
    # the config's cpo_alpha (TRL's CPOTrainer)
    Row("rl", "objective", c.objective("axolotl", {"dpo": "dpo", "ipo": "dpo", "kto": "kto", "grpo": "grpo",
                                                   "orpo": "orpo", "simpo": "simpo"})),
    Row("cpo_alpha", "cpo_alpha", c.number),
    # axolotl's AxolotlGRPOTrainer subclasses TRL's GRPOTrainer; its `trl:` section holds GRPOConfig's keys
    *[Row(f"trl.{key}", setting, read) for key, setting, read in GRPO_KEYS],
    Row("relora", None, c.is_on, why="ReLoRA"),
), harmless=frozenset({
    "base_model_config", "model_type", "tokenizer_type", "tokenizer_config", "trust_remote_code", "revision_of_model",
    "datasets", "test_datasets", "dataset_prepared_path", "val_set_size", "output_dir", "num_epochs", "max_steps",
    "learning_rate", "lr_scheduler", "warmup_steps", "warmup_ratio", "weight_decay", "logging_steps", "save_steps",
    "saves_per_epoch", "evals_per_epoch", "eval_steps", "save_strategy", "eval_strategy", "wandb_project",
    "wandb_entity", "wandb_name", "wandb_log_model", "wandb_watch", "hub_model_id", "special_tokens", "chat_template",
    "train_on_inputs", "group_by_length", "pad_to_sequence_len", "tf32", "seed", "strict", "resume_from_checkpoint",
    "local_rank", "early_stopping_patience", "max_grad_norm", "adam_beta1", "adam_beta2", "adam_epsilon",
    "lora_model_dir", "lora_fan_in_fan_out", "debug", "logging_dir", "save_total_limit",
    "eval_sample_packing", "remove_unused_columns", "shuffle_merged_datasets", "dataset_processes", "lora_on_cpu",
    "save_safetensors", "save_first_step", "gc_steps", "optim_args", "lr_scheduler_kwargs", "cosine_min_lr_ratio",
    "auto_resume_from_checkpoints", "flash_attn_cross_entropy", "flash_attn_rms_norm", "flash_attn_fuse_mlp",
    "eval_table_size", "eval_max_new_tokens", "load_best_model_at_end", "metric_for_best_model", "type_of_model",
}), markers=frozenset({"base_model", "sequence_len", "micro_batch_size", "lora_target_linear", "adapter",
                       "num_epochs", "load_in_4bit"}))

# ------------------------------------------- LLaMA-Factory 0.9.5 (hparams/*_args.py; Trainer's own keys too)
LLAMAFACTORY = Tool("llamafactory", "LLaMA-Factory 0.9.5", (
    Row("model_name_or_path", "model", c.text),
    Row("finetuning_type", "adapter", c.choice({"lora": "lora", "full": "full", "freeze": "full", "oft": "lora"}),
        default="lora"),
    Row("finetuning_type", None, lambda v: v in ("freeze", "oft"),
        why="freeze (a subset of layers) and OFT are estimated as full and LoRA"),
    Row("quantization_bit", "quant", c.choice({4: 4, 8: 8, None: None})),
    Row("quantization_method", None, lambda v: str(v).lower() not in ("bnb", "bitsandbytes"),
        why="only bitsandbytes NF4 is modelled"),
    Row("double_quantization", "double_quant", BOOL, default=True),
    Row("lora_rank", "rank", c.integer, default=8),
    Row("lora_alpha", INFO, c.number, default="2 × lora_rank"),
    Row("lora_dropout", "lora_dropout", c.number, default=0.0),
    Row("lora_target", "targets", c.targets, default=c.targets("all")),
    Row("additional_target", "modules_to_save", c.modules_to_save),
    Row("additional_target", None, c.other_modules, why=SAVE_OTHERS),
    Row("use_dora", "dora", BOOL),
    Row("cutoff_len", "seq", c.integer, default=2048),
    # a multimodal model's parts (hparams/finetuning_args.py:527-538; model_utils/visual.py:392-406 for Qwen3-VL: the
    # tower is visual.pos_embed, patch_embed, blocks and deepstack_merger_list, the projector visual.merger)
    Row("freeze_vision_tower", "vision_trains", lambda v: not BOOL(v), default=False),
    Row("freeze_multi_modal_projector", "projector_trains", lambda v: not BOOL(v), default=False),
    Row("freeze_language_model", None, c.is_on, why="a frozen language model (only the vision tower trains)"),
    Row("per_device_train_batch_size", "batch", c.integer, default=8),  # the Trainer's
    Row("gradient_accumulation_steps", INFO, c.integer, default=1),
    Row("disable_gradient_checkpointing", "grad_checkpointing", lambda v: not BOOL(v), default=True),
    Row("use_reentrant_gc", "checkpoint_impl", c.reentrant),
    Row("optim", "optim", c.text, default="adamw_torch_fused"),         # transformers 5.24 with torch >= 2.8
    Row("bf16", "bf16", BOOL),
    Row("fp16", "fp16", BOOL),
    Row("pure_bf16", "pure_bf16", BOOL),
    Row("flash_attn", "attention", c.LLAMAFACTORY_ATTENTION, default="sdpa"),
    Row("packing", INFO, BOOL, default=False),
    Row("neat_packing", INFO, BOOL),
    Row("enable_liger_kernel", "liger", c.is_on),
    # model_args.py:141-144; model/model_utils/moe.py:160-199: non-zero on a Mixtral or Qwen3-MoE config sets its
    # output_router_logits and router_aux_loss_coef, so transformers' forward adds the load-balancing loss
    Row("moe_aux_loss_coef", "router_aux_loss_coef", lambda v: None if v is None else c.number(v)),
    Row("enable_liger_kernel", "loss_impl", lambda v: "liger" if BOOL(v) else "torch"),
    Row("deepspeed", "@deepspeed"),
    Row("use_unsloth", "use_unsloth", BOOL),   # model_utils/unsloth.py: FastLanguageModel, "unsloth" checkpointing
    Row("use_unsloth_gc", None, c.is_on, why="Unsloth's offloaded checkpointing"),
    Row("use_galore", None, c.is_on, why="GaLore's projected optimizer states"),
    Row("use_apollo", None, c.is_on, why="APOLLO's optimizer states"),
    Row("use_badam", None, c.is_on, why="BAdam trains one block at a time"),
    Row("use_adam_mini", None, c.is_on, why="Adam-mini's reduced states"),
    Row("use_muon", None, c.is_on, why="Muon's optimizer states"),
    Row("upcast_layernorm", None, c.is_on, why="fp32 norm weights"),
    Row("upcast_lmhead_output", None, c.is_on, why="fp32 lm_head output"),
    Row("shift_attn", None, c.is_on, why="shift short attention"),
    Row("mixture_of_depths", None, c.is_on, why="mixture of depths"),
    # exit 2 on dpo, kto, ppo, rm: LLaMA-Factory's CustomDPOTrainer computes the full logits in fp32 in its own
    # concatenated_forward, not TRL 1.16's fused LM head, which is what --objective dpo models
    Row("stage", "objective", c.objective("LLaMA-Factory", {"sft": "sft", "pt": "sft"}, {
        "dpo": "LLaMA-Factory's DPO (CustomDPOTrainer, pref_loss orpo and simpo too) keeps the full fp32 logits of "
               "its own concatenated_forward and log-probs; symvram's --objective dpo models TRL 1.16's DPOTrainer (a "
               "fused LM head, no logits) and --objective orpo / simpo TRL's ORPOTrainer / CPOTrainer: not the same "
               "memory, so it is refused",
        "rm": "LLaMA-Factory's reward modelling loads the causal LM with a value head (train/rm/workflow.py: "
              "load_model(..., add_valuehead=True)), whose forward still computes the vocabulary logits; symvram's "
              "--objective reward models TRL 1.16's RewardTrainer (a sequence-classification model, no logits): not "
              "the same memory, so it is refused",
        "kto": "LLaMA-Factory's KTO (CustomKTOTrainer, train/kto/trainer.py) subclasses TRL's KTOTrainer with its own "
               "forward over the full logits (get_batch_logps); symvram's --objective kto models TRL 1.16's KTOTrainer "
               "(a fused LM head, no logits): not the same memory, so it is refused",
        "ppo": "LLaMA-Factory's PPO (CustomPPOTrainer: the policy with a value head, a reward model and generation on "
               "the card) is not modelled"})),
    Row("torch_compile", None, c.is_on, why="torch.compile fuses kernels and changes what is saved"),
), harmless=frozenset({
    "template", "dataset", "dataset_dir", "eval_dataset", "output_dir", "overwrite_output_dir", "overwrite_cache",
    "preprocessing_num_workers", "dataloader_num_workers", "max_samples", "logging_steps", "save_steps", "plot_loss",
    "learning_rate", "num_train_epochs", "lr_scheduler_type", "warmup_ratio", "warmup_steps", "ddp_timeout",
    "report_to", "val_size", "per_device_eval_batch_size", "eval_strategy", "eval_steps", "do_train", "do_eval",
    "trust_remote_code", "resume_from_checkpoint", "save_only_model", "adapter_name_or_path", "train_on_prompt",
    "mask_history", "max_grad_norm", "weight_decay", "seed", "run_name", "logging_dir", "save_total_limit",
    "tokenized_path", "streaming", "buffer_size", "mix_strategy", "create_new_adapter", "pissa_init", "loraplus_lr_ratio",
    "use_rslora", "max_steps", "adam_beta1", "adam_beta2", "infer_backend", "enable_thinking", "default_system",
    "quantization_type", "save_strategy", "new_special_tokens", "resize_vocab", "rope_scaling",
}), markers=frozenset({"finetuning_type", "cutoff_len", "stage", "template", "lora_target", "quantization_bit"}))

# --------------------- transformers 5.24 TrainingArguments / TRL 1.16 SFTConfig, as to_json_string() writes them
_TRAINER_ROWS = (
    Row("per_device_train_batch_size", "batch", c.integer, default=8),
    Row("gradient_accumulation_steps", INFO, c.integer, default=1),
    Row("gradient_checkpointing", "grad_checkpointing", lambda v: v is not None and BOOL(v), default=False),
    Row("activation_checkpointing", "grad_checkpointing", lambda v: None if v is None else BOOL(v)),
    Row("gradient_checkpointing_kwargs.use_reentrant", "checkpoint_impl", c.reentrant),
    Row("activation_checkpointing_kwargs.use_reentrant", "checkpoint_impl", c.reentrant),
    # trainer.py:1508: every_n_layers goes to activation_checkpointing_enable (layers 0, k, 2k … checkpointed)
    Row("gradient_checkpointing_kwargs.every_n_layers", "checkpoint_every", c.integer),
    Row("activation_checkpointing_kwargs.every_n_layers", "checkpoint_every", c.integer),
    Row("optim", "optim", c.text, default="adamw_torch_fused"),        # torch >= 2.8
    Row("bf16", "bf16", lambda v: None if v is None else BOOL(v)),
    Row("fp16", "fp16", BOOL),
    Row("deepspeed", "@deepspeed"),
    Row("fsdp", "fsdp", c.trainer_fsdp),
    Row("fsdp", "fsdp_offload", c.trainer_fsdp_offload),
    Row("fsdp_config", "@fsdp"),
    Row("use_liger_kernel", "liger", c.is_on),
    Row("use_liger_kernel", "loss_impl", lambda v: "liger" if BOOL(v) else "torch"),
    Row("torch_compile", None, c.is_on, why="torch.compile fuses kernels and changes what is saved"),
    Row("auto_find_batch_size", None, c.is_on, why="auto_find_batch_size halves the batch after each OOM"),
    Row("parallelism_config", None, c.is_on, why="tensor/context parallelism from parallelism_config"),
    Row("ddp_bucket_cap_mb", None, c.is_on, why="DDP's gradient buckets"),
)
_TRAINER_HARMLESS = frozenset({
    "output_dir", "overwrite_output_dir", "do_train", "do_eval", "do_predict", "eval_strategy", "prediction_loss_only",
    "per_device_eval_batch_size", "eval_accumulation_steps", "eval_delay", "torch_empty_cache_steps", "learning_rate",
    "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "num_train_epochs", "max_steps",
    "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_ratio", "warmup_steps", "log_level", "log_level_replica",
    "log_on_each_node", "logging_dir", "logging_strategy", "logging_first_step", "logging_steps", "logging_nan_inf_filter",
    "save_strategy", "save_steps", "save_total_limit", "save_safetensors", "save_on_each_node", "save_only_model",
    "seed", "data_seed", "run_name", "report_to", "dataloader_num_workers", "dataloader_pin_memory", "remove_unused_columns",
    "label_names", "load_best_model_at_end", "metric_for_best_model", "greater_is_better", "push_to_hub", "hub_model_id",
    "hub_strategy", "hub_token", "hub_private_repo", "resume_from_checkpoint", "disable_tqdm", "eval_steps", "local_rank",
    "ddp_backend", "ddp_timeout", "ddp_find_unused_parameters", "dataloader_drop_last", "group_by_length",
    "length_column_name", "include_for_metrics", "optim_args", "neftune_noise_alpha", "full_determinism",
    "use_cpu", "logging_steps", "project", "trackio_space_id", "average_tokens_across_devices", "dataset_text_field",
    "dataset_kwargs", "dataset_num_proc", "eos_token", "pad_token", "truncation_mode", "shuffle_dataset",
    "packing_strategy", "pad_to_multiple_of", "eval_packing", "completion_only_loss", "assistant_only_loss", "loss_type",
    "chat_template_path", "trust_remote_code", "restore_callback_states_from_checkpoint", "accelerator_config",
    "batch_eval_metrics", "eval_on_start", "use_liger_kernel_kwargs", "ignore_data_skip", "skip_memory_metrics",
    "past_index", "jit_mode_eval", "bf16_full_eval", "fp16_full_eval", "half_precision_backend", "tf32",
    "dataloader_prefetch_count", "dataloader_persistent_workers", "debug", "disable_tqdm",
    "model_init_kwargs.revision", "model_init_kwargs.trust_remote_code", "model_init_kwargs.device_map",
    "optim_target_modules", "label_smoothing_factor", "torch_compile_backend", "torch_compile_mode",
    "liger_kernel_config", "include_num_input_tokens_seen", "trackio_bucket_id", "trackio_static_space_id",
    "eval_do_concat_batches", "eval_use_gather_object", "enable_jit_checkpoint", "hub_always_push", "hub_revision",
    "dataloader_prefetch_factor", "dataloader_multiprocessing_context", "dataloader_in_order",
    "train_sampling_strategy", "ddp_broadcast_buffers", "ddp_static_graph", "use_cache",
})
TRAINER = Tool("trainer", "transformers 5.24 Trainer", _TRAINER_ROWS, harmless=_TRAINER_HARMLESS,
               markers=frozenset({"per_device_train_batch_size", "output_dir", "optim", "learning_rate"}))
_LABELLED_ONLY = ("only the completion's tokens are labelled and TRL's fused LM head projects those alone (the "
                  "estimate counts every token: an upper bound for the loss's terms)")
TRL = Tool("trl", "TRL 1.16 SFTConfig", (
    # use_liger_kernel applies Liger's layer kernels only: SFTTrainer turns its fused cross-entropy off (the trl stack's
    # own fused LM head decides the loss)
    *[r for r in _TRAINER_ROWS if r.key not in ("gradient_checkpointing", "bf16")
      and (r.key, r.setting) != ("use_liger_kernel", "loss_impl")],
    Row("gradient_checkpointing", "grad_checkpointing", BOOL, default=True),   # SFTConfig's default differs
    Row("bf16", "bf16", lambda v: None if v is None else BOOL(v), default=True),  # True unless fp16
    Row("max_length", "seq", lambda v: None if v is None else c.integer(v), default=1024),
    Row("max_seq_length", "seq", c.integer),                           # TRL < 0.20
    Row("packing", "packing_on", BOOL, default=False),
    Row("padding_free", "padding_free", BOOL, default=False),
    Row("packing_strategy", "packing_strategy", c.text, default="bfd"),
    Row("model_init_kwargs.dtype", "model_dtype", c.dtype_name, default="fp32"),  # SFTTrainer loads fp32 unless told
    Row("model_init_kwargs.torch_dtype", "model_dtype", c.dtype_name),
    Row("model_init_kwargs.attn_implementation", "attention", ATTN, default="sdpa"),
    Row("model_init_kwargs.quantization_config.load_in_4bit", "quant", lambda v: 4 if BOOL(v) else None),
    Row("model_init_kwargs.quantization_config.load_in_8bit", "quant", lambda v: 8 if BOOL(v) else None),
    Row("model_init_kwargs.quantization_config.bnb_4bit_use_double_quant", "double_quant", BOOL),
    Row("model_init_kwargs.use_kernels", "liger", c.is_on),
    # TRL's ModelConfig (trl sft --config, trl/trainer/model_config.py; trl/scripts/sft.py passes model_name_or_path
    # to SFTTrainer and dtype / attn_implementation into model_init_kwargs, which the file's own model_init_kwargs
    # update: priority 1 here) and PEFT's LoraConfig from the same file
    Row("model_name_or_path", "model", c.text),
    Row("dtype", "model_dtype", c.dtype_name, priority=1),
    Row("torch_dtype", "model_dtype", c.dtype_name, priority=1),           # the name before transformers 4.56
    Row("attn_implementation", "attention", ATTN, priority=1),
    Row("use_peft", "adapter", lambda v: "lora" if BOOL(v) else "full"),
    Row("load_in_4bit", "quant", lambda v: 4 if BOOL(v) else None),
    Row("load_in_8bit", "quant", lambda v: 8 if BOOL(v) else None),
    Row("use_bnb_nested_quant", "double_quant", BOOL),
    Row("lora_r", "rank", c.integer),
    Row("lora_dropout", "lora_dropout", c.number),
    Row("lora_target_modules", "targets", c.targets),
    Row("lora_modules_to_save", "modules_to_save", c.modules_to_save),
    Row("lora_modules_to_save", None, c.other_modules, why=SAVE_OTHERS),
    Row("use_dora", "dora", BOOL),
    Row("activation_offloading", "offload_activations", BOOL),   # sft_config.py:291, sft_trainer.py:1190-1193
    # SFTConfig / DPOConfig / KTOConfig (sft_config.py:161-168): the MoE load-balancing loss's weight, None: the model
    # config's (sft_trainer.py:1197-1211); 0 turns the loss off
    Row("router_aux_loss_coef", "router_aux_loss_coef", lambda v: None if v is None else c.number(v)),
    *[Row(k, None, c.is_on, why=_LABELLED_ONLY) for k in ("completion_only_loss", "assistant_only_loss")],
    # TRL 1.16 DPOConfig (trl/trainer/dpo_config.py): keys SFTConfig does not have make the file a DPO run
    *[Row(k, "objective", lambda v: "dpo") for k in ("precompute_ref_log_probs", "f_divergence_type")],
    Row("precompute_ref_log_probs", "precompute_ref", BOOL),
    Row("use_weighting", None, c.is_on, why="WPO weighting: the fused LM head also computes log(sum p^2) per token"),
    # GRPOConfig and KTOConfig: not modelled yet, refused rather than estimated as SFT
    # TRL 1.16 KTOConfig (kto_config.py:212-220): its weights name a KTO run, over DPOConfig's shared keys
    *[Row(k, "objective", lambda v: "kto", priority=3) for k in ("desirable_weight", "undesirable_weight")],
    # TRL 1.16 CPOConfig (cpo_config.py:132-139): cpo_alpha names a CPO run, loss_type simpo / alphapo a SimPO one
    # (alphapo: cpo_alpha = 0, cpo_config.py:175-179); an ORPOConfig has no key of its own (give --objective orpo)
    Row("cpo_alpha", "objective", lambda v: "cpo", priority=3),
    Row("cpo_alpha", "cpo_alpha", c.number),
    Row("loss_type", "objective", c.simpo_loss, priority=4),
    Row("loss_type", "cpo_alpha", lambda v: 0.0 if v == "alphapo" else None, priority=4),
    # TRL 1.16 RewardConfig (reward_config.py:160): the one key of its own names a reward-model run
    Row("center_rewards_coefficient", "objective", lambda v: "reward", priority=3),
    # TRL 1.16 GRPOConfig (grpo_config.py): its generation keys name a GRPO run (the prompt length is the data's:
    # --prompt); beta and loss_type reach the scenario only for GRPO (DPO's change no memory)
    *[Row(k, "objective", lambda v: "grpo", priority=3) for k in ("num_generations", "max_completion_length",
                                                                    "steps_per_generation")],
    *[Row(key, setting, read) for key, setting, read in GRPO_KEYS],
    Row("steps_per_generation", "steps_per_generation", c.integer),
    Row("generation_batch_size", None, c.is_on, why="the generation batch given directly (give "
        "--steps-per-generation: generation_batch_size / (batch x GPUs))"),
), harmless=_TRAINER_HARMLESS - {"loss_type"} | { "label_smoothing", "loss_weights", "ld_alpha", "f_alpha_divergence_coef", "discopop_tau", "sync_ref_model",
    "ref_model_mixup_alpha", "ref_model_sync_steps", "precompute_ref_batch_size", "disable_dropout", "simpo_gamma",
    "padding_value", "generate_during_eval", "is_encoder_decoder",
    "dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split", "dataset_streaming", "datasets",
    "model_revision", "lora_alpha", "lora_task_type", "use_rslora", "bnb_4bit_quant_type", "bnb_4bit_quant_storage",
    "lora_target_parameters", "ignore_bias_buffers"},
    markers=frozenset({"dataset_text_field", "max_length", "packing", "completion_only_loss", "assistant_only_loss",
                       "dataset_name", "use_peft", "precompute_ref_log_probs", "f_divergence_type", "num_generations",
                       "desirable_weight", "center_rewards_coefficient", "cpo_alpha", "simpo_gamma"}))

# ------------------------------------------------------- DeepSpeed 0.19 config JSON (runtime/zero/config.py)
# the ZeRO sizes the ledger holds as symbols (ledger/sharding.py): the file's value is that symbol's value
BUCKET_SYMBOLS = {"reduce_bucket_size": "ds_reduce_bucket", "sub_group_size": "ds_sub_group",
                  "stage3_max_live_parameters": "ds_max_live"}
# the sizes the ledger does not hold, each with what it sizes (stage_1_and_2.py: allgather_bucket_size chunks the
# all-gather of the updated partitions; stage3.py: the prefetched and persistent parameters)
_BUCKETS = {"allgather_bucket_size": "ZeRO-1/2's chunks of the updated weights' all-gather",
            **dict.fromkeys(("stage3_prefetch_bucket_size", "stage3_max_reuse_distance",
                             "stage3_param_persistence_threshold"), "ZeRO-3's prefetch and persistence buffers")}
DEEPSPEED = Tool("deepspeed", "DeepSpeed 0.19 config", (
    Row("zero_optimization.stage", "ds_stage", c.zero_stage, default=0),
    Row("zero_optimization.offload_optimizer.device", "ds_offload_optimizer", c.offload_device),
    Row("zero_optimization.offload_param.device", "ds_offload_param", c.offload_device),
    Row("bf16.enabled", "bf16", c.auto_or(BOOL)),
    Row("fp16.enabled", "fp16", c.auto_or(BOOL)),
    Row("train_micro_batch_size_per_gpu", "batch", c.auto_or(c.integer)),
    Row("gradient_accumulation_steps", INFO, c.auto_or(c.integer)),
    Row("optimizer.type", "optim", lambda v: "ds_" + c.text(v).lower()),
    Row("activation_checkpointing.partition_activations", None, c.is_on,
        why="partitioned checkpoints split the saved activations across GPUs"),
    Row("activation_checkpointing.cpu_checkpointing", None, c.is_on, why="checkpoints kept in host memory"),
    *[Row(f"zero_optimization.{k}", SYMBOL + name, c.auto_or(c.number)) for k, name in BUCKET_SYMBOLS.items()],
    *[Row(f"zero_optimization.{k}", None, lambda v: v is not None, why=why) for k, why in _BUCKETS.items()],
), harmless=frozenset({
    "train_batch_size", "gradient_clipping", "steps_per_print", "wall_clock_breakdown", "scheduler",
    "optimizer.params", "zero_allow_untested_optimizer", "communication_data_type", "prescale_gradients",
    "zero_optimization.overlap_comm", "zero_optimization.contiguous_gradients", "zero_optimization.allgather_partitions",
    "zero_optimization.reduce_scatter", "zero_optimization.round_robin_gradients",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save", "zero_optimization.offload_optimizer.pin_memory",
    "zero_optimization.offload_param.pin_memory", "fp16.loss_scale", "fp16.loss_scale_window", "fp16.initial_scale_power",
    "fp16.hysteresis", "fp16.min_loss_scale", "fp16.auto_cast", "flops_profiler", "tensorboard", "wandb", "csv_monitor",
    "zero_optimization.offload_optimizer.buffer_count", "zero_optimization.offload_param.buffer_count",
    "zero_optimization.offload_optimizer.nvme_path", "zero_optimization.offload_param.nvme_path",
    "zero_optimization.offload_param.buffer_size", "zero_optimization.offload_param.max_in_cpu",
    "zero_optimization.offload_optimizer.fast_init", "zero_optimization.offload_optimizer.ratio",
    "zero_optimization.stage3_gather_fp16_weights_on_model_save", "zero_optimization.ignore_unused_parameters",
    "zero_optimization.memory_efficient_linear", "zero_force_ds_cpu_optimizer", "bf16.immediate_grad_update",
    "activation_checkpointing.contiguous_memory_optimization", "activation_checkpointing.number_checkpoints",
    "activation_checkpointing.synchronize_checkpoint_boundary", "activation_checkpointing.profile", "dump_state",
}), markers=frozenset({"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size", "zero_allow_untested_optimizer"}))

# ---------------------------------- FSDP options (TrainingArguments.fsdp_config, axolotl fsdp_config, accelerate)
_FSDP_ROWS = []
for _prefix in ("", "fsdp_"):
    _FSDP_ROWS += [
        Row(f"{_prefix}sharding_strategy", "fsdp", c.FSDP_STRATEGY),
        Row(f"{_prefix}reshard_after_forward", "fsdp", c.reshard),
        Row(f"{_prefix}offload_params", "fsdp_offload", BOOL),
        Row(f"{_prefix}activation_checkpointing", "grad_checkpointing", BOOL),
        Row(f"{_prefix}version", INFO, c.integer),
    ]
FSDP = Tool("fsdp", "torch FSDP options (accelerate 1.15 names)", tuple(_FSDP_ROWS), harmless=frozenset(
    f"{p}{k}" for p in ("", "fsdp_") for k in (
        "auto_wrap_policy", "transformer_layer_cls_to_wrap", "backward_prefetch", "forward_prefetch",
        "state_dict_type", "final_state_dict_type", "sync_module_states", "use_orig_params", "cpu_ram_efficient_loading",
        "min_num_params", "cpu_offload_pin_memory", "limit_all_gathers", "mixed_precision_policy", "xla",
        "xla_fsdp_grad_ckpt", "xla_fsdp_v2")))

# --------------------------------------------------- accelerate 1.15 config YAML (accelerate config)
ACCELERATE = Tool("accelerate", "accelerate 1.15 config", (
    Row("num_processes", "gpus", c.integer, default=1),
    Row("distributed_type", "distributed", c.choice({k: k for k in (
        "NO", "MULTI_GPU", "DEEPSPEED", "FSDP", "MULTI_CPU", "MULTI_XPU", "MULTI_NPU", "MULTI_MLU", "MULTI_HPU",
        "MULTI_SDAA", "MULTI_MUSA", "XLA", "MEGATRON_LM")})),
    Row("mixed_precision", "bf16", c.choice({"bf16": True, "fp16": False, "no": False, "fp8": False}), priority=1),
    Row("mixed_precision", "fp16", c.choice({"fp16": True, "bf16": False, "no": False, "fp8": False}), priority=1),
    Row("mixed_precision", None, lambda v: v == "fp8", why="fp8 training"),
    Row("fsdp_config", "@fsdp"),
    Row("deepspeed_config.zero_stage", "ds_stage", c.zero_stage),
    Row("deepspeed_config.offload_optimizer_device", "ds_offload_optimizer", c.offload_device),
    Row("deepspeed_config.offload_param_device", "ds_offload_param", c.offload_device),
    Row("deepspeed_config.deepspeed_config_file", "@deepspeed"),
    Row("deepspeed_config.gradient_accumulation_steps", INFO, c.integer),
    Row("dynamo_config.dynamo_backend", None, lambda v: str(v).upper() != "NO",
        why="torch.compile fuses kernels and changes what is saved"),
), harmless=frozenset({
    "compute_environment", "debug", "downcast_bf16", "enable_cpu_affinity", "gpu_ids", "machine_rank",
    "main_process_ip", "main_process_port", "main_training_function", "num_machines", "rdzv_backend", "same_network",
    "tpu_env", "tpu_use_cluster", "tpu_use_sudo", "use_cpu", "deepspeed_config.zero3_init_flag",
    "deepspeed_config.zero3_save_16bit_model", "deepspeed_config.gradient_clipping", "deepspeed_config.deepspeed_multinode_launcher",
}), markers=frozenset({"distributed_type", "compute_environment", "num_processes", "mixed_precision", "machine_rank"}))

# ---------------------------------------------------------------- torchtune 0.6.1 recipes/configs (single device)
# the defaults are recipes/lora_finetune_single_device.py's and full_finetune_single_device.py's cfg.get(...) and
# the builders' (models/llama3_2/_model_builders.py:71-81: lora_rank 8, lora_dropout 0.0)
TORCHTUNE = Tool("torchtune", "torchtune 0.6.1", (
    Row("model._component_", "model", c.torchtune_model),
    Row("model._component_", "adapter", c.torchtune_method),
    Row("model.lora_rank", "rank", c.integer, default=8),
    Row("model.lora_alpha", INFO, c.number, default=16),
    Row("model.lora_dropout", "lora_dropout", c.number, default=0.0),
    Row("model.lora_attn_modules", "lora_attn_modules", c.torchtune_attn_modules),
    Row("model.apply_lora_to_mlp", "lora_mlp", BOOL, default=False),
    Row("model.apply_lora_to_output", None, c.is_on, why="LoRA on the output projection"),
    Row("model.use_dora", "dora", BOOL),
    Row("model.quantize_base", None, c.is_on, why="torchao's NF4 base weights"),
    Row("model.tie_word_embeddings", None, lambda v: v is False, why="untied embeddings on a tied builder"),
    Row("batch_size", "batch", c.integer),
    Row("tokenizer.max_seq_len", "seq", c.integer),
    Row("dtype", "model_dtype", c.choice({"bf16": "bf16", "fp32": "fp32"})),
    Row("optimizer._component_", "optim", c.torchtune_optimizer),
    Row("optimizer.fused", "optim_fused", BOOL),
    Row("optimizer.foreach", "optim_foreach", BOOL),
    Row("optimizer_in_bwd", "optimizer_in_backward", BOOL, default=False),
    Row("enable_activation_checkpointing", "grad_checkpointing", BOOL, default=False),
    # the recipes refuse it without activation checkpointing (lora_finetune_single_device.py:167-175)
    Row("enable_activation_offloading", "offload_activations", BOOL, default=False),
    Row("ac_mode", None, c.is_on, why="torchtune's selective activation checkpointing"),
    Row("ac_option", None, c.is_on, why="torchtune's selective activation checkpointing"),
    Row("loss._component_", "loss_impl", c.torchtune_loss),
    Row("loss.num_output_chunks", "=loss_chunks", c.integer),
    Row("compile", None, c.is_on, why="torch.compile fuses kernels and changes what is saved"),
    # datasets/_packed.py PackedDataset: rows of max_seq_len tokens with input_pos; on a CUDA card of capability >= 7.5
    # a BlockMask and torch.compile'd flex_attention (modules/attention_utils.py:151-179, :195-225), elsewhere SDPA
    # with a dense [b, s, s] block-causal mask (:95-130, :245-260); RoPE gathers cache[input_pos]
    # (models/llama3_1/_position_embeddings.py:164-166), a new fp32 tensor for q and for k in every layer
    Row("dataset.packed", None, c.is_on, why="torchtune's packed samples (PackedDataset: its compiled flex_attention "
                                             "with a BlockMask on CUDA, and RoPE gathered at input_pos)"),
    Row("gradient_accumulation_steps", INFO, c.integer, default=1),
    Row("clip_grad_norm", INFO),
), harmless=frozenset({
    "output_dir", "tokenizer._component_", "tokenizer.path", "tokenizer.merges_file", "tokenizer.prompt_template",
    "checkpointer", "resume_from_checkpoint", "save_adapter_weights_only", "dataset._component_", "dataset.source",
    "dataset.split", "dataset.data_files", "dataset.column_map", "dataset.train_on_input", "seed", "shuffle",
    "optimizer.lr", "optimizer.weight_decay", "optimizer.betas", "optimizer.eps", "lr_scheduler", "epochs",
    "max_steps_per_epoch", "metric_logger", "log_every_n_steps", "log_peak_memory_stats", "log_level", "device",
    "profiler", "run_val_every_n_steps", "dataset_val",
}), markers=frozenset({"enable_activation_checkpointing", "enable_activation_offloading", "optimizer_in_bwd",
                       "log_peak_memory_stats", "checkpointer", "metric_logger", "max_steps_per_epoch"}))

# ------------------------------------- LitGPT 0.5.13 finetune YAML (litgpt finetune lora|full --config FILE)
# the keys are finetune/lora.py:49-82 setup()'s (finetune/full.py's the same but the LoRA ones), the defaults its own;
# train.* is args.py TrainArgs. A file with any lora_* key is a LoRA run (the config hub's lora.yaml files write them
# all), without one finetune full's; the switches become the targets (scenario.LITGPT_LORA) in readers.read._litgpt
LITGPT = Tool("litgpt", "LitGPT 0.5.13 finetune", (
    Row("checkpoint_dir", "model", c.litgpt_checkpoint),
    *[Row(k, "adapter", lambda v: "lora") for k in ("lora_query", "lora_key", "lora_value", "lora_projection",
                                                    "lora_mlp", "lora_head", "lora_alpha", "lora_dropout", "lora_r")],
    Row("lora_r", "rank", c.integer, default=8),
    Row("lora_alpha", INFO, c.number, default=16),
    Row("lora_dropout", "lora_dropout", c.number, default=0.05),
    *[Row(f"lora_{k}", f"lora_{k}", BOOL, default=on) for k, on in (
        ("query", True), ("key", False), ("value", True), ("projection", False), ("mlp", False), ("head", False))],
    Row("precision", "precision", c.LITGPT_PRECISION, default=("fp32", "bf16")),  # None: bf16-mixed (utils.py:363-380)
    # quantize: bnb.nf4 and the rest (finetune/lora.py:141-150) replace each linear with bitsandbytes' Linear4bit or
    # Linear8bitLt under Fabric's BitsandbytesPrecision: not modelled on LitGPT's own model code, so refused
    Row("quantize", "quant", c.refuse("LitGPT's quantized base (Fabric's BitsandbytesPrecision, finetune/lora.py:141-150) "
                                      "is not modelled under --stack litgpt; remove quantize (or estimate QLoRA on "
                                      "another stack)")),
    Row("devices", "gpus", c.litgpt_devices, default=1),
    Row("num_nodes", None, lambda v: c.integer(v) > 1, why="several nodes (ModelParallelStrategy's data parallelism)"),
    Row("train.micro_batch_size", "batch", c.integer, default=1),
    Row("train.max_seq_length", "seq", c.integer),
    Row("train.global_batch_size", INFO, c.integer, default=16),
    Row("optimizer", "optim", c.litgpt_optimizer, default="adamw_torch"),   # "AdamW": torch.optim.AdamW
    Row("optimizer.init_args.fused", "optim_fused", BOOL),
    Row("optimizer.init_args.foreach", "optim_foreach", BOOL),
), harmless=frozenset({
    "out_dir", "data", "eval", "log", "logger_name", "seed", "access_token", "resume", "train.save_interval",
    "train.log_interval", "train.lr_warmup_steps", "train.lr_warmup_fraction", "train.epochs", "train.max_tokens",
    "train.max_steps", "train.max_time", "train.tie_embeddings", "train.max_norm", "train.min_lr",
}), markers=frozenset({"checkpoint_dir", "lora_query", "lora_key", "lora_value", "lora_projection", "lora_head",
                       "quantize", "precision"}))

TOOLS = {t.name: t for t in (AXOLOTL, LLAMAFACTORY, TRL, TRAINER, DEEPSPEED, FSDP, ACCELERATE, TORCHTUNE, LITGPT)}
# The order in which a file's format is recognised (the first whose markers it holds)
DETECT = ("deepspeed", "accelerate", "llamafactory", "axolotl", "torchtune", "litgpt", "trl", "trainer")

# torch / bitsandbytes optimizer names (TrainingArguments.optim, axolotl's optimizer) and DeepSpeed's
# optimizer.type → (optimizer, implementation, 8-bit states, paged). Absent names are not modelled.
OPTIMIZERS = {
    "adamw_torch": ("adamw", "foreach", False, False), "adamw_torch_fused": ("adamw", "fused", False, False),
    "adamw_hf": ("adamw", "foreach", False, False), "adamw_apex_fused": ("adamw", "fused", False, False),
    "adamw_torch_xla": ("adamw", "foreach", False, False), "adamw_torch_npu_fused": ("adamw", "fused", False, False),
    "adamw_bnb_8bit": ("adamw", "fused", True, False), "adamw_8bit": ("adamw", "fused", True, False),
    "adamw_torch_8bit": ("adamw", "fused", True, False), "paged_adamw_8bit": ("adamw", "fused", True, True),
    "paged_adamw_32bit": ("adamw", "fused", False, True), "ao_adamw_8bit": ("adamw", "fused", True, False),
    "optimi_adamw": ("adamw", "foreach", False, False),
    "adafactor": ("adafactor", "foreach", False, False), "sgd": ("sgd", "foreach", False, False),
    "lion_32bit": ("lion", "foreach", False, False), "lion_8bit": ("lion", "foreach", True, False),
    "paged_lion_32bit": ("lion", "foreach", False, True), "paged_lion_8bit": ("lion", "foreach", True, True),
    "ds_adam": ("adamw", "fused", False, False), "ds_adamw": ("adamw", "fused", False, False),
    "ds_lion": ("lion", "foreach", False, False),
}
