"""Arguments shared by the commands that describe one scenario, and their conversion to a Scenario."""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from ..api import objectives
from ..errors import EXCERPT, UserError, excerpt, one_line
from ..scenario import (ATTENTIONS, CHECKPOINT_IMPLS, DEVICES, DTYPES, HALF_DTYPES, KERNELS, LOADERS, LOSS_IMPLS,
                        METHODS, OFFLOADS, OPTIMIZER_IMPLS, OPTIMIZERS, ROUTINGS, STATE_DTYPES, Scenario)
from ..stacks import stack_names, stacks
from ..units import UNITS


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {excerpt(text)}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {excerpt(text)}")
    return value


def every_k(text: str) -> int | str:
    """``--selective-checkpointing every:K`` → K; ``op`` → "op" (torchtitan's op-level policy, ``cli_settings``)."""
    if text == "op":
        return text
    kind, _, k = text.partition(":")
    if kind != "every" or not k.isdigit() or int(k) < 1:
        raise argparse.ArgumentTypeError(f"expected every:K (checkpoint layers 0, K, 2K …, K ≥ 1) or op (torchtitan's "
                                         f"op-level policy), got {excerpt(text)}")
    return int(k)


def parse_set(text: str) -> tuple[str, float]:
    """``SYMBOL=VALUE`` for --set."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--set takes SYMBOL=VALUE, got {excerpt(text)}")
    name, _, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--set {name}: {excerpt(value)} is not a number") from None
    if math.isinf(number) and "inf" not in value.lower():  # 1e400, a 5000-digit integer: beyond any float
        raise argparse.ArgumentTypeError(f"--set {name}: {excerpt(value.strip())} is too large to be a number here")
    return name.strip(), int(number) if number.is_integer() else number


def add_model_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?",
                   help="a preset (7b, 13b, 70b, llama-2-7b, llama-3-8b, mistral-7b, qwen2.5-7b …), a Hugging Face "
                        "config.json / model folder, or a Hub id org/name (a preset of that name, the local HF "
                        "cache, else config.json alone is downloaded with the hub extra); optional with --from "
                        "when the file names its base model")


def add_scenario_arguments(p: argparse.ArgumentParser) -> None:
    """The inputs of one scenario; defaults are the reference answer's modern recipe.

    Every flag defaults to None (``--set`` to []): a value that is not None was given on the command
    line, and wins over the --from files. Every command has the same default method (Scenario's)."""
    g = p.add_argument_group("your training config")
    g.add_argument("--from", dest="from_files", action="append", default=[], metavar="FILE",
                   help="read the run from a training config: axolotl or LLaMA-Factory YAML, TRL SFTConfig / "
                        "TrainingArguments JSON, a torchtune recipe or LitGPT finetune YAML, DeepSpeed JSON, "
                        "accelerate config YAML; repeatable; files it "
                        "names (deepspeed: ds.json) are read too; flags given here win over the files")
    g.add_argument("--verbose", action="store_true", help="with --from: also list the keys not read "
                                                          "(not known to change memory)")
    g.add_argument("--stack", choices=stack_names(),
                   help="the training stack whose defaults fill every setting not given: "
                        + "; ".join(f"{k} = {v['title']} ({v['about']})" for k, v in stacks().items())
                        + ". Default: interview for the nominal presets 7b/13b/70b, hf for real models")
    g = p.add_argument_group("objective")
    g.add_argument("--objective", choices=(*objectives(), "ppo"),
                   help="what one step optimizes: sft (default: next-token cross-entropy), dpo (TRL 1.16's "
                        "DPOTrainer: chosen and rejected run as one forward of 2 x --batch rows, the reference's "
                        "forward under no_grad — a second weight copy for full fine-tuning, the adapters disabled "
                        "for LoRA —, TRL's fused LM head), grpo (TRL 1.16's GRPOTrainer with transformers' generation: --prompt P "
                        "and --max-completion-length C; the step's peak is the larger of generation and training), kto (TRL 1.16's KTOTrainer: --batch unpaired "
                        "completions, and no-grad forwards of the mismatched KL completions by the policy and the "
                        "reference), orpo (TRL 1.16's ORPOTrainer), cpo and simpo (its CPOTrainer, loss_type sigmoid "
                        "/ hinge / ipo and simpo): chosen and rejected in one forward of 2 x --batch rows, no "
                        "reference, the model's logits in fp32 and the chosen rows' NLL; the preference objectives "
                        "take the trl stack unless --stack is given")
    g.add_argument("--cpo-alpha", type=float, help="cpo, simpo: CPOConfig.cpo_alpha, the chosen rows' NLL weight "
                                                   "(default 1.0; 0: the NLL is not computed)")
    g.add_argument("--router-aux-loss-coef", type=float, metavar="W",
                   help="MoE models: the load-balancing loss's weight; TRL's SFTConfig / DPOConfig / KTOConfig "
                        "router_aux_loss_coef (default: the model config's, which TRL's trainers compute the loss "
                        "with; 0 turns it off), or LLaMA-Factory's moe_aux_loss_coef (non-zero: transformers' "
                        "forward computes it)")
    g.add_argument("--prompt", type=int, help="dpo, kto, orpo, cpo, simpo: prompt tokens per sequence, which the fused LM head does not "
                                              "score (default 0: every position after the first)")
    g.add_argument("--precompute-ref", action="store_true", default=None,
                   help="dpo, kto: precompute_ref_log_probs=True: the reference log-probs come with the "
                        "batch, so no reference model and no reference forward during training")
    g.add_argument("--max-completion-length", type=positive_int, metavar="C",
                   help="grpo: GRPOConfig.max_completion_length, the tokens generated per completion; --seq is then "
                        "--prompt + C (every completion at full length: the longest generation batch)")
    g.add_argument("--num-generations", type=int, help="grpo: completions per prompt (GRPOConfig default 8); must "
                                                      "divide batch x GPUs x --steps-per-generation, as TRL checks")
    g.add_argument("--steps-per-generation", type=int,
                   help="grpo: micro-steps one generation batch is split over (default 1): generate runs on batch x "
                        "this many completions at once")
    g.add_argument("--gradient-accumulation-steps", type=int,
                   help="grpo: micro-steps per optimizer step (default 1); when it is not a multiple of "
                        "--steps-per-generation x --num-iterations the old policy's log-probs are computed and kept")
    g.add_argument("--num-iterations", type=int, help="grpo: passes over each generation batch (default 1)")
    g.add_argument("--beta", type=float, help="grpo: the KL coefficient (default 0: no reference model; > 0: a "
                                              "reference copy for full fine-tuning, the adapters disabled for LoRA)")
    g.add_argument("--loss-type", help="grpo: GRPOConfig.loss_type (default dapo; grpo, dr_grpo, bnpo modelled)")
    g.add_argument("--generation", help="grpo: who generates: hf (default, transformers' generate); vllm-colocate "
                                        "and vllm-server are refused (not modelled)")
    g = p.add_argument_group("method")
    g.add_argument("--method", choices=METHODS,
                   help="full fine-tuning, LoRA (frozen 16-bit base) or QLoRA (frozen NF4 base)")
    g.add_argument("--rank", type=positive_int, help="LoRA rank r (default 64)")
    g.add_argument("--targets", help="LoRA targets: all-linear (default), attention, qv, mlp, or a comma list "
                                     "of modules (q_proj,v_proj or q,v); add lm_head and/or embed_tokens for LoRA on "
                                     "the head (PEFT's all-linear leaves lm_head out)")
    g.add_argument("--lora-dropout", type=float, help="LoRA dropout p (default 0); p > 0 keeps a dropped copy "
                                                      "of each target's input and a mask")
    g.add_argument("--dora", action="store_true", default=None,
                   help="DoRA (PEFT use_dora): a magnitude vector per target; per forward the LoRA and base results "
                        "kept for its gradient, and the weight norm's weight-sized temporaries (eye(d_in), ΔW, W in "
                        "fp32), which checkpointing brings into backward")
    g.add_argument("--modules-to-save", metavar="MODULES",
                   help="PEFT modules_to_save beside LoRA: embed_tokens, lm_head or both (comma list) — a trainable "
                        "full copy of each, with its gradient and optimizer states, beside the frozen original")
    g.add_argument("--kbit-prep", choices=("peft", "none"),
                   help="QLoRA: peft's prepare_model_for_kbit_training (peft: embeddings, lm_head and norms cast to "
                        "fp32, so every activation is fp32) or none (default: the stack's — peft under torch and hf)")
    g.add_argument("--no-double-quant", dest="double_quant", action="store_false", default=None,
                   help="QLoRA: absmax constants in fp32 (0.5 bit/param) instead of double-quantized (0.127)")
    g = p.add_argument_group("precision and optimizer")
    g.add_argument("--dtype", choices=DTYPES, help="dtype the weights are stored in (default bf16)")
    g.add_argument("--master", choices=("none", "fp32"), help="keep an fp32 master copy of the trainable weights "
                                                            "(default none: 12 B/param; fp32: 16 B/param)")
    g.add_argument("--state-dtype", choices=STATE_DTYPES, help="optimizer-state dtype (default: the stack's — fp32 "
                                                               "under interview; torch's AdamW keeps states in the "
                                                               "parameter's dtype)")
    g.add_argument("--optimizer", choices=OPTIMIZERS, help="default adamw (two states per parameter)")
    g.add_argument("--optimizer-impl", choices=OPTIMIZER_IMPLS,
                   help="torch AdamW implementation: foreach (one state-sized temporary), fused (none; the HF "
                        "Trainer's adamw_torch_fused), forloop (two temporaries of the largest parameter); "
                        "default: the stack's")
    g.add_argument("--optimizer-in-backward", action="store_true", default=None,
                   help="one optimizer per parameter, stepped by its post-accumulate-grad hook as its gradient is "
                        "made (torch's recipe, torchtune's optimizer_in_bwd): one gradient at a time instead of all")
    g.add_argument("--adapter-dtype", choices=DTYPES, help="LoRA adapter dtype (default: the stack's — fp32 as PEFT "
                                                           "keeps them under torch and hf, the compute dtype under "
                                                           "interview)")
    g.add_argument("--autocast", choices=HALF_DTYPES,
                   help="torch.autocast compute dtype (default: the stack's — the HF Trainer's bf16=True autocasts "
                        "under hf; none under torch and interview)")
    g = p.add_argument_group("activations")
    g.add_argument("--batch", type=positive_int, help="micro-batch size per GPU (default 1)")
    g.add_argument("--seq", type=positive_int, help="sequence length in tokens (default 2048)")
    g.add_argument("--grad-checkpointing", action=argparse.BooleanOptionalAction, default=None,
                   help="activation checkpointing of each decoder layer (far less memory; one more forward per step: "
                        "its price is in estimate's time line); "
                        "default off, but on for QLoRA under torch and hf (prepare_model_for_kbit_training turns it on)")
    g.add_argument("--selective-checkpointing", metavar="every:K|op", dest="checkpoint_every", type=every_k,
                   help="every:K checkpoints only layers 0, K, 2K … (transformers' every_n_layers: TrainingArguments("
                        "gradient_checkpointing_kwargs={'every_n_layers': K})); the other layers keep their "
                        "activations. op: torchtitan's op-level policy on every layer (selective_ac_option 'op'): "
                        "each layer keeps every second matmul's output and SDPA's, and recomputes the rest. Both "
                        "imply --grad-checkpointing")
    g.add_argument("--liger", action="store_true", default=None,
                   help="Liger's layer kernels (liger_kernel.transformers.apply_liger_kernel_to_<family>: RMSNorm, "
                        "SwiGLU/GeGLU, RoPE): each norm keeps its 16-bit input and fp32 1/rms, the MLP its two "
                        "gated inputs; modelled, not measured (Triton). The fused loss is --loss-impl liger")
    g.add_argument("--packing", metavar="TOKENS", type=positive_int,
                   help="padding-free packing: the micro-batch is one row of TOKENS tokens whose position ids restart "
                        "at each sample (TRL's packing / padding_free collator: per_device_train_batch_size × "
                        "max_length); under SDPA transformers builds a block-diagonal mask from them: each layer "
                        "saves a 16-bit s² mask and k, v repeated to every head; sets --batch 1 --seq TOKENS")
    g.add_argument("--loader", choices=LOADERS,
                   help="a multimodal checkpoint: the Auto class that loads it — causal-lm (AutoModelForCausalLM, "
                        "default: Qwen3.5's and Llama 4's text-only ForCausalLM, no tower) or image-text-to-text "
                        "(AutoModelForImageTextToText: their ForConditionalGeneration, the vision tower on the card "
                        "too); a model_type only one of them builds (Qwen3-VL, Mistral 3) is read as that one")
    g.add_argument("--image-tokens", metavar="N", type=positive_int,
                   help="a multimodal checkpoint (Qwen3-VL): N image tokens per sample, one image of N·merge² "
                        "patches, counted within --seq (the processor expands the image placeholder in input_ids, as "
                        "the tools' max_length counts it); the batch carries the fp32 pixel_values and the tower runs: "
                        "frozen, it saves nothing (a transient in the forward)")
    g.add_argument("--train-vision", action="store_true", default=None,
                   help="with --image-tokens: the vision tower trains too — under full fine-tuning its weights "
                        "(gradients, optimizer states, master copies), under LoRA all-linear the adapters PEFT puts on "
                        "its linears — and saves its blocks' and mergers' activations; LLaMA-Factory's "
                        "freeze_vision_tower and freeze_multi_modal_projector: false. Default: the tower frozen "
                        "(requires_grad off: it runs and saves nothing)")
    g.add_argument("--offload-activations", action="store_true", default=None,
                   help="TRL's activation_offloading (SFTConfig(activation_offloading=True)) with checkpointing: each "
                        "layer's checkpointed input is copied to pinned host memory in the forward and brought back "
                        "for its recompute; the host bytes are shown beside the GPU's")
    g.add_argument("--checkpoint-impl", choices=CHECKPOINT_IMPLS,
                   help="with --grad-checkpointing: torch.utils.checkpoint's non-reentrant (transformers' default) or "
                        "reentrant implementation, or unsloth (Unsloth's offloaded checkpointer: layer inputs in pinned "
                        "host memory, two staging buffers on the card; modelled, not measured) (default: the stack's)")
    g.add_argument("--loss-impl", choices=LOSS_IMPLS,
                   help="cross-entropy: torch (transformers' loss: fp32 logits and vocabulary-sized gradients), "
                        "chunked (torchtune's CEWithChunkedOutputLoss, 8 chunks), liger (Liger's fused linear "
                        "cross-entropy), cce (Cut Cross-Entropy), trl (TRL's SFTTrainer: its own fused LM head, "
                        "always on) or unsloth (Unsloth's fused linear cross-entropy); liger, cce, trl and unsloth are modelled from their source, not measured here (default: the "
                        "stack's)")
    g.add_argument("--attention", choices=ATTENTIONS, help="sdpa (default; flash/memory-efficient kernel) or "
                                                           "eager (materialises b·heads·seq² scores)")
    g.add_argument("--routing", choices=ROUTINGS,
                   help="MoE: the routing priced — balanced (default) or worst (every token of the micro-batch on the "
                        "same k experts); transformers' grouped_mm experts hold the T·k token-expert pairs in buffers "
                        "of T·k rows however they fall, so both price the same there and the header says so")
    g.add_argument("--device", choices=DEVICES, help="cuda (default) or cpu: which tensors dropout keeps")
    g.add_argument("--kernels", choices=KERNELS,
                   help="Gated DeltaNet layers (Qwen3.5, Qwen3-Next, OLMo Hybrid): fla (flash-linear-attention's and "
                        "causal-conv1d's kernels, installed), torch (transformers' fallback without them) or auto "
                        "(default: fla on cuda, torch on cpu)")
    g = p.add_argument_group("several GPUs (per-GPU bytes; offloaded bytes reported as host memory)")
    g.add_argument("--gpus", type=positive_int, help="data-parallel GPUs N, the ZeRO/FSDP shard degree (default 1)")
    g.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="ZeRO stage: 0 = DDP (default), 1 = optimizer "
                   "states / N, 2 = + gradients (FSDP SHARD_GRAD_OP), 3 = + parameters (FSDP FULL_SHARD)")
    g.add_argument("--offload", choices=OFFLOADS, help="CPU offload: none (default), optimizer (gradients, states, "
                                                       "master; ZeRO >= 1), optimizer+params (ZeRO-3)")
    g.add_argument("--mp-policy", choices=HALF_DTYPES,
                   help="FSDP2 MixedPrecisionPolicy(param_dtype=this, reduce_dtype=fp32) on fp32 parameters (ZeRO-3): "
                        "all-gathers and computes in it, reduces gradients in fp32 (default: the stack's — bf16 under "
                        "fsdp with fp32 storage, else none)")
    g.add_argument("--tp", type=positive_int, help="tensor-parallel degree t (Megatron; must divide the heads)")
    g.add_argument("--sequence-parallel", action="store_true", default=None,
                   help="with --tp: also split the norm/residual activations along the sequence")
    g = p.add_argument_group("overrides")
    g.add_argument("--set", action="append", type=parse_set, default=[], metavar="SYMBOL=VALUE",
                   help="override any symbol (hidden=5120, bytes_state=1, layers=40 …); repeatable")
    g.add_argument("--versions", metavar="PKG=VERSION,...",
                   help="library versions to follow instead of the installed ones (torch, transformers, peft, "
                        "bitsandbytes, trl), e.g. bitsandbytes=0.42.0: where a version changes what is saved, "
                        "its mechanism applies (bitsandbytes < 0.43.3 keeps each 4-bit linear's input)")
    g = p.add_argument_group("output")
    g.add_argument("--units", choices=tuple(UNITS), default="GiB", help="GiB (2^30, default; card sizes) or GB (10^9)")


def add_output_arguments(p: argparse.ArgumentParser, required: bool = False,
                         help: str = "write to this file instead of stdout") -> None:
    """-o/--output and --force: a file is never overwritten without --force."""
    p.add_argument("-o", "--output", required=required, help=help)
    p.add_argument("--force", action="store_true", help="overwrite --output if it exists")


SCENARIO_FLAGS = ("stack", "checkpoint_every", "offload_activations", "packing", "loader", "image_tokens", "train_vision", "liger", "checkpoint_impl", "loss_impl", "kbit_prep", "routing", "dora", "modules_to_save", "optimizer_in_backward", "method", "rank", "targets", "lora_dropout", "double_quant", "dtype", "master", "state_dtype",
                  "optimizer", "optimizer_impl", "adapter_dtype", "autocast", "batch", "seq", "grad_checkpointing",
                  "attention", "device", "kernels", "gpus", "zero", "offload", "mp_policy", "tp", "sequence_parallel", "versions",
                  "objective", "prompt", "precompute_ref", "max_completion_length", "num_generations",
                  "steps_per_generation", "gradient_accumulation_steps", "num_iterations", "beta", "loss_type",
                  "generation", "cpo_alpha", "router_aux_loss_coef")


def cli_settings(args: argparse.Namespace) -> dict:
    """The scenario settings given on the command line (every flag's default is None)."""
    kw = {k: getattr(args, k) for k in SCENARIO_FLAGS if getattr(args, k, None) is not None}
    if kw.get("checkpoint_every") == "op":   # --selective-checkpointing op
        del kw["checkpoint_every"]
        kw["checkpoint_ops"] = True
    if getattr(args, "set", None):
        kw["overrides"] = dict(args.set)
    return kw


def reading(args: argparse.Namespace):
    """The --from files read once, or None without --from (their warnings wait for ``announce``)."""
    if not getattr(args, "from_files", None):
        return None
    if getattr(args, "_reading", None) is None:
        from ..readers.read import read_files

        args._reading = read_files(args.from_files, cli_settings(args))
    return args._reading


def announce(args: argparse.Namespace) -> None:
    """The --from files' warnings (and with --verbose the keys not read) on stderr, once, when the scenario
    they describe has been built: a run refused says its one error line alone."""
    r = reading(args)
    if r is None or getattr(args, "_announced", False):
        return
    args._announced = True
    for line in r.warnings:
        print(f"symvram: warning: {one_line(line)}", file=sys.stderr)
    if args.verbose and r.unread:
        keys = (k if len(k) <= 2 * EXCERPT else excerpt(k, 2 * EXCERPT) for k in r.unread)
        print(f"symvram: not read (not known to change memory): {', '.join(keys)}", file=sys.stderr)


def time_flags(args: argparse.Namespace) -> tuple[float | None, str | None]:
    """--mfu and --interconnect, checked (also where the output shows no times: a bad value is refused)."""
    from ..api import check_interconnect, check_mfu

    return (check_mfu(args.mfu) if getattr(args, "mfu", None) is not None else None,
            check_interconnect(getattr(args, "interconnect", None)))


def model_of(args: argparse.Namespace) -> str:
    """The model on the command line, else the base model the --from files name."""
    if args.model is not None:
        return args.model
    r = reading(args)
    if r is not None and r.model is not None:
        return r.model.value
    if r is not None:
        raise UserError(f"{', '.join(args.from_files)} names no base model; give MODEL on the command line")
    raise UserError("the following arguments are required: model (a preset, a config.json, a Hub id) or --from FILE")


def scenario_kwargs(args: argparse.Namespace) -> dict:
    """Settings of the --from files, then the command line's over them."""
    r = reading(args)
    files, cli = (r.kwargs() if r is not None else {}), cli_settings(args)
    if "overrides" in files and "overrides" in cli:   # the files' symbols (DeepSpeed's buckets) under --set
        cli["overrides"] = {**dict(files["overrides"]), **cli["overrides"]}
    return {**files, **cli}


def check_context(sc: Scenario, args: argparse.Namespace) -> Scenario:
    """A sequence the user gave (flag or file) beyond the model's context is estimated as given, with a
    warning line (symvram's default 2048 on a short-context config is not the user's choice: no warning)."""
    limit = sc.model.max_position
    if limit is not None and sc.seq > limit and "seq" in scenario_kwargs(args):
        print(f"symvram: warning: seq {sc.seq} is longer than {sc.model.name}'s context "
              f"(max_position_embeddings {limit}); estimated as given", file=sys.stderr)
    return sc


def traced(e: UserError, args: argparse.Namespace) -> UserError:
    """``e`` with the files and keys its settings were read from (``--batch … (batch from run.yml:micro_batch_size)``;
    ``--set ds_sub_group …`` from the key that set that symbol), or ``e`` itself without --from."""
    import re

    from ..readers.tools import SYMBOL

    r = reading(args)
    if r is None:
        return e
    named = [n.replace("-", "_") for n in re.findall(r"--([a-z][a-z0-9-]*)", str(e))]
    named += [SYMBOL + n for n in re.findall(r"--set ([A-Za-z_][A-Za-z0-9_]*)", str(e))]
    cli = cli_settings(args)
    given = set(cli) | {SYMBOL + n for n in cli.get("overrides", {})}   # the command line's win over the files
    found = [f"{n.lstrip(SYMBOL)} from {r.settings[n].source}" for n in dict.fromkeys(named)
             if n in r.settings and n not in given]
    if not found and set(named) & given:   # the command line's own value: nothing to trace
        return e
    return UserError(f"{e} ({'; '.join(found) if found else 'the run read from ' + ', '.join(args.from_files)})")


def scenario_from_args(args: argparse.Namespace, **changes) -> Scenario:
    kw = scenario_kwargs(args)
    kw.update(changes)
    model = model_of(args)
    try:
        sc = Scenario.create(model, **kw)
    except UserError as e:
        raise traced(e, args) from None
    announce(args)
    if not getattr(args, "shows_provenance", False) and getattr(args, "format", None) != "json" \
            and reading(args) is not None:  # the table on stderr: stdout stays the command's output (JSON has it)
        print(provenance_text(args, sc), end="", file=sys.stderr)
    return check_context(sc, args)


def provenance(args: argparse.Namespace, sc: Scenario):
    """(rows, notes, files, warnings, keys not read) of the scenario read with --from, or None without it."""
    from ..present.provenance import provenance_rows

    r = reading(args)
    if r is None:
        return None
    model_source = "command line" if args.model is not None else r.model.source
    rows = provenance_rows(sc, r, set(cli_settings(args)), model_source)
    notes = [(k, str(v.value).lower() if isinstance(v.value, bool) else str(v.value), v.source) for k, v in r.notes]
    return rows, notes, r.files, r.warnings, r.unread


def provenance_text(args: argparse.Namespace, sc: Scenario) -> str:
    """The scenario read, as a table for the top of a command's output ("" without --from)."""
    from ..present.provenance import provenance_table

    p = provenance(args, sc)
    return "" if p is None else provenance_table(*p[:3], p[4]) + "\n\n"


def provenance_dict(args: argparse.Namespace, sc: Scenario) -> dict:
    """{"scenario_read": …} for a command's JSON ({} without --from)."""
    from ..present.provenance import provenance_json

    p = provenance(args, sc)
    return {} if p is None else {"scenario_read": provenance_json(*p)}


def write_output(text: str | bytes, path: str | None, force: bool) -> None:
    """Print to stdout, or write ``path`` — never over an existing file without --force."""
    if path is None or path == "-":
        if isinstance(text, bytes):  # a PDF or an image: the bytes as they are, into a pipe or a file
            binary = getattr(sys.stdout, "buffer", None)
            if binary is None or sys.stdout.isatty():
                raise UserError("the output is binary (PDF or image) and stdout is a terminal; give -o FILE")
            sys.stdout.flush()
            binary.write(text)
            binary.flush()
        else:
            print(text)
        return
    data = text if isinstance(text, bytes) else (text + ("" if text.endswith("\n") else "\n")).encode("utf-8")
    target = Path(path)
    try:
        if target.is_dir():
            raise UserError(f"{path} is a directory; give a file name")
        if force and (target.is_fifo() or target.is_socket()):  # opening it would wait for a reader, forever
            raise UserError(f"{path} is a {'named pipe' if target.is_fifo() else 'socket'}, not a file; "
                            "give a file name (or -o - for stdout)")
        # "x" creates the file only if nothing (not even a dangling link) is there: no check-then-write race
        with target.open("wb" if force else "xb") as fh:
            fh.write(data)
    except FileExistsError:
        raise UserError(f"{path} exists; pass --force to overwrite it") from None
    except UserError:
        raise
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
    except ValueError:  # the name holds a NUL character
        raise UserError(f"cannot write {excerpt(path)}: a file name cannot hold a NUL character") from None
