"""Arguments shared by the commands that describe one scenario, and their conversion to a Scenario."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError
from ..scenario import (ATTENTIONS, DEVICES, DTYPES, METHODS, OFFLOADS, OPTIMIZER_IMPLS, OPTIMIZERS,
                        STATE_DTYPES, Scenario)
from ..present.units import UNITS


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def parse_set(text: str) -> tuple[str, float]:
    """``SYMBOL=VALUE`` for --set."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--set takes SYMBOL=VALUE, got {text!r}")
    name, _, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--set {name}: {value!r} is not a number") from None
    return name.strip(), int(number) if number.is_integer() else number


def add_model_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a preset (7b, 13b, 70b, llama-2-7b, llama-3-8b, mistral-7b, qwen2.5-7b …) "
                                 "or a Hugging Face config.json / model folder (nothing is downloaded)")


def add_scenario_arguments(p: argparse.ArgumentParser, method_default: str | None = None) -> None:
    """The inputs of one scenario; defaults are the reference answer's modern recipe."""
    g = p.add_argument_group("method")
    g.add_argument("--method", choices=METHODS, default=method_default,
                   help="full fine-tuning, LoRA (frozen 16-bit base) or QLoRA (frozen NF4 base)")
    g.add_argument("--rank", type=positive_int, help="LoRA rank r (default 64)")
    g.add_argument("--targets", help="LoRA targets: all-linear (default), attention, qv, mlp, or a comma list "
                                     "of modules (q_proj,v_proj or q,v)")
    g.add_argument("--lora-dropout", type=float, help="LoRA dropout p (default 0); p > 0 keeps a dropped copy "
                                                      "of each target's input and a mask")
    g.add_argument("--no-double-quant", dest="double_quant", action="store_false", default=None,
                   help="QLoRA: absmax constants in fp32 (0.5 bit/param) instead of double-quantized (0.127)")
    g = p.add_argument_group("precision and optimizer")
    g.add_argument("--dtype", choices=DTYPES, help="dtype the weights are stored in (default bf16)")
    g.add_argument("--master", choices=("none", "fp32"), help="keep an fp32 master copy of the trainable weights "
                                                            "(default none: 12 B/param; fp32: 16 B/param)")
    g.add_argument("--state-dtype", choices=STATE_DTYPES, help="optimizer-state dtype (default fp32; torch's "
                                                               "AdamW keeps states in the parameter's dtype)")
    g.add_argument("--optimizer", choices=OPTIMIZERS, help="default adamw (two states per parameter)")
    g.add_argument("--optimizer-impl", choices=OPTIMIZER_IMPLS,
                   help="torch AdamW implementation: foreach (default; one state-sized temporary), fused (none), "
                        "forloop (two temporaries of the largest parameter)")
    g.add_argument("--adapter-dtype", choices=DTYPES, help="LoRA adapter dtype (default: the compute dtype, as "
                                                           "in the reference answer; PEFT itself keeps adapters "
                                                           "in fp32 — pass fp32 to match a default PEFT run)")
    g.add_argument("--autocast", choices=("none", "bf16", "fp16"),
                   help="torch.autocast compute dtype with --dtype fp32 (HF Trainer bf16=True on an fp32 model)")
    g = p.add_argument_group("activations")
    g.add_argument("--batch", type=positive_int, help="micro-batch size per GPU (default 1)")
    g.add_argument("--seq", type=positive_int, help="sequence length in tokens (default 2048)")
    g.add_argument("--grad-checkpointing", action="store_true", default=None,
                   help="activation checkpointing of each decoder layer (≈ 20–30 %% slower, far less memory)")
    g.add_argument("--attention", choices=ATTENTIONS, help="sdpa (default; flash/memory-efficient kernel) or "
                                                           "eager (materialises b·heads·seq² scores)")
    g.add_argument("--device", choices=DEVICES, help="cuda (default) or cpu: which tensors dropout keeps")
    g = p.add_argument_group("several GPUs (per-GPU bytes; offloaded bytes reported as host memory)")
    g.add_argument("--gpus", type=positive_int, help="data-parallel GPUs N, the ZeRO/FSDP shard degree (default 1)")
    g.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="ZeRO stage: 0 = DDP (default), 1 = optimizer "
                   "states / N, 2 = + gradients (FSDP SHARD_GRAD_OP), 3 = + parameters (FSDP FULL_SHARD)")
    g.add_argument("--offload", choices=OFFLOADS, help="CPU offload: none (default), optimizer (gradients, states, "
                                                       "master; ZeRO >= 1), optimizer+params (ZeRO-3)")
    g.add_argument("--tp", type=positive_int, help="tensor-parallel degree t (Megatron; must divide the heads)")
    g.add_argument("--sequence-parallel", action="store_true", default=None,
                   help="with --tp: also split the norm/residual activations along the sequence")
    g = p.add_argument_group("overrides")
    g.add_argument("--set", action="append", type=parse_set, default=[], metavar="SYMBOL=VALUE",
                   help="override any symbol (hidden=5120, bytes_state=1, layers=40 …); repeatable")
    g = p.add_argument_group("output")
    g.add_argument("--units", choices=tuple(UNITS), default="GiB", help="GiB (2^30, default; card sizes) or GB (10^9)")


def add_output_arguments(p: argparse.ArgumentParser, required: bool = False,
                         help: str = "write to this file instead of stdout") -> None:
    """-o/--output and --force: a file is never overwritten without --force."""
    p.add_argument("-o", "--output", required=required, help=help)
    p.add_argument("--force", action="store_true", help="overwrite --output if it exists")


def scenario_kwargs(args: argparse.Namespace) -> dict:
    keys = ("method", "rank", "targets", "lora_dropout", "double_quant", "dtype", "master", "state_dtype",
            "optimizer", "optimizer_impl", "adapter_dtype", "autocast", "batch", "seq", "grad_checkpointing",
            "attention", "device", "gpus", "zero", "offload", "tp", "sequence_parallel")
    kw = {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}
    if args.set:
        kw["overrides"] = dict(args.set)
    return kw


def scenario_from_args(args: argparse.Namespace, **changes) -> Scenario:
    kw = scenario_kwargs(args)
    kw.update(changes)
    return Scenario.create(args.model, **kw)


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
        # "x" creates the file only if nothing (not even a dangling link) is there: no check-then-write race
        with target.open("wb" if force else "xb") as fh:
            fh.write(data)
    except FileExistsError:
        raise UserError(f"{path} exists; pass --force to overwrite it") from None
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
