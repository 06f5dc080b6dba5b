"""``symvram validate``: measure the real peak of the same training step and set it beside the estimate."""
from __future__ import annotations

import argparse
import json
import sys
import warnings

from ..errors import UserError
from ..evaluate import evaluate
from ..present.tables import render_rows
from ..units import fmt_bytes
from .common import add_model_argument, add_output_arguments, add_scenario_arguments, positive_int, provenance_dict, scenario_from_args, scenario_kwargs, write_output

HELP = """\
Builds the real Hugging Face model (transformers + PEFT) from the same preset or config.json, with no
weights: every tensor is a FakeTensor, so shapes, dtypes and the exact sequence of aten ops are real
while no storage is allocated. Runs two training steps (forward with causal-LM loss, backward,
optimizer.step(), zero_grad) and records the peak of live tensor bytes — the figure
torch.cuda.max_memory_allocated() reports — with PyTorch's MemTracker, then prints it beside the
estimate, category by category. With --device cuda on a machine with a GPU it runs real tensors and
reads torch.cuda.max_memory_allocated() (that adds allocator rounding and library workspaces).
In the same fake run, torch.utils.flop_counter.FlopCounterMode counts the step's matmul FLOPs (forward,
backward with any checkpointed recompute) beside the FLOPs ledger's; with --world-size, the bytes each
FSDP2 collective sends beside the communication ledger's.

Its defaults are the stack's (--stack; hf for real models), the same as symvram estimate's; it measures
the CPU code paths (a GPU run with --device cuda).

Needs the optional extra:  pip install 'symvram[validate]'   (torch, transformers, peft: these versions or
newer, so it installs into an existing training environment). It measures the versions you have installed,
prints them beside the versions the ledger follows (torch 2.13.0, transformers 5.24.0, peft 0.21.2) and
warns when they differ.

examples:
  symvram validate tinyllama-1.1b --method lora --rank 16 --seq 512 --adapter-dtype fp32 --state-dtype fp32
  symvram validate ./config.json --method full --state-dtype bf16 --format json
"""


def register(sub) -> None:
    p = sub.add_parser("validate", help="measure the real peak (FakeTensorMode) and compare with the estimate",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p)
    add_scenario_arguments(p)
    p.add_argument("--world-size", type=positive_int, metavar="N",
                   help="check the ZeRO-3 / FSDP terms instead: torch FSDP2 fully_shard over N fake ranks")
    p.add_argument("--format", choices=("table", "json"), default="table")
    add_output_arguments(p)
    p.set_defaults(func=run)


def _check_supported(sc, fsdp: bool = False) -> None:
    """Refuse, with the reason, what a fake-tensor run cannot measure (``fsdp``: the FSDP2 check over N ranks)."""
    if sc.structure.zero_impl == "deepspeed":
        raise UserError("--stack deepspeed cannot be measured here: DeepSpeed's ZeRO optimizers need CUDA (their "
                        "buffers, collectives and FusedAdam are CUDA/NCCL code with no fake-tensor or CPU path), so "
                        "its terms are modelled from its source, not measured; validate --stack fsdp --gpus N measures "
                        "ZeRO-3 through torch FSDP2")
    if sc.structure.model_code == "torchtune":
        raise UserError("--stack torchtune runs torchtune's own modules, which validate (it traces transformers' "
                        "models) does not build; torchtune itself is traced by benchmarks/torchtune_trace.py in a venv "
                        "with torchtune, and tests/test_torchtune.py checks the estimate against its stored rows")
    if sc.structure.model_code == "litgpt":
        raise UserError("--stack litgpt runs LitGPT's own GPT, which validate (it traces transformers' models) does not "
                        "build; LitGPT itself is traced by benchmarks/litgpt_trace.py in a venv with litgpt, and "
                        "tests/test_litgpt.py checks the estimate against its stored rows")
    if sc.method == "qlora":
        import importlib.util

        if importlib.util.find_spec("bitsandbytes") is None:
            raise UserError("QLoRA is measured through bitsandbytes' fake-tensor kernels: pip install bitsandbytes")
        if sc.structure.arch.moe:
            raise UserError("QLoRA of a mixture-of-experts model is not measured: its fused experts are not "
                            "nn.Linear, so bitsandbytes leaves them in 16-bit")
    if fsdp:
        if sc.tp > 1 or sc.offload != "none" or sc.zero not in (0, 3):
            raise UserError("validate --world-size (or --stack fsdp) measures ZeRO-3 through FSDP2 only: no --tp, "
                            "--offload or --zero 1/2")
    elif sc.gpus > 1 or sc.tp > 1 or sc.zero or sc.offload != "none":
        raise UserError("validate measures one device; multi-GPU strategies are checked by the sharding tests and "
                        "by validate --world-size N (or --stack fsdp --gpus N): torch FSDP2 over N fake ranks")
    if sc.objective != "sft":
        import importlib.util

        if importlib.util.find_spec("trl") is None:
            raise UserError(f"--objective {sc.objective} is measured by tracing TRL's own trainer: pip install "
                            "'symvram[trl]'")
        if sc.method == "qlora" or sc.device == "cuda":
            raise UserError(f"--objective {sc.objective} is measured under FakeTensorMode (--device cpu) for "
                            "--method full or lora")
    elif sc.loss_impl == "trl":
        raise UserError("--loss-impl trl: off a GPU, TRL's fused LM head takes its torch fallback (every position "
                        "scored, fp32 tile temporaries the Triton path lacks): the estimate models the GPU path from "
                        "its source, a fake-tensor run cannot measure it")
    if sc.loss_impl in ("liger", "cce", "unsloth"):
        raise UserError(f"--loss-impl {sc.loss_impl} runs GPU kernels only (Triton): the estimate models it from its "
                        "source, a fake-tensor run cannot measure it")
    bnb = sc.structure.bnb
    if sc.optimizer != "adamw" and not bnb:
        raise UserError(f"validate runs torch.optim.AdamW or bitsandbytes' AdamW (8-bit, paged 8- or 32-bit); --optimizer {sc.optimizer} "
                        "is not measured here")
    if bnb:
        import importlib.util

        if importlib.util.find_spec("bitsandbytes") is None:
            raise UserError(f"--optimizer {sc.optimizer} is measured with bitsandbytes: pip install bitsandbytes")
    if sc.master == "fp32":
        raise UserError("validate runs plain torch AdamW, which keeps no separate fp32 master copy; "
                        "use --dtype fp32 --autocast bf16 for the mixed-precision recipe")
    trainable = sc.adapter_dtype if sc.lora else sc.dtype
    if sc.state_dtype != trainable and not bnb:
        raise UserError(f"torch AdamW keeps its states in the parameter's dtype ({trainable}); "
                        f"pass --state-dtype {trainable} so that the estimate describes the same run")


def run_defaults(given: dict) -> dict:
    """What the measurement needs where the user (flags or --from files: ``given``) said nothing: the CPU
    code paths of a fake-tensor run. Every other default is the stack's (symvram.stacks), the same as
    ``symvram estimate``'s: the estimate and the measurement describe the same run."""
    return {"device": "cpu"} if given.get("device") is None else {}


def _warn_versions(measured: dict) -> str:
    """Print a warning line per library whose version is not the ledger's; return the versions line."""
    from ..validate import version_note

    line, warnings = version_note(measured)
    for w in warnings:
        print(f"symvram: warning: {w}", file=sys.stderr)
    return line


def flops_comparison(sc, measured: dict) -> dict:
    """Predicted vs counted FLOPs of one step: forward, backward (with the checkpointed recompute), total."""
    from ..timing import flops

    counted = measured.get("flops")
    if not counted:
        return {}
    f = flops(sc)
    pred = {"forward": f.by_phase["forward"], "backward": f.by_phase["backward"] + f.by_phase["recompute"],
            "total": f.per_step}
    return {k: {"estimate": v, "measured": counted[k],
                "error": None if not counted[k] else (v - counted[k]) / counted[k]} for k, v in pred.items()}


def allocator_comparison(sc, measured: dict) -> dict:
    """The reserved peak of the ledger's allocation schedule against that of the traced run's, each replayed
    through the caching-allocator model with the default allocator and with expandable segments."""
    from ..card_memory import schedule_peaks

    traced = measured.get("allocator")
    if not traced:
        return {}
    ledger = schedule_peaks(sc)
    out = {}
    for name in ("default", "expandable"):
        est, got = ledger[name]["reserved_peak"], traced[name]["reserved_peak"]
        out[f"reserved, {name}"] = {"estimate": est, "measured": got, "error": (est - got) / got if got else 0.0}
    return out


def _measured_only(sc, measured: dict, units: str) -> str:
    """The measured peak by category, for a family whose activation block the ledger refuses."""
    rows = [["", f"measured ({units})"]] + [[k, fmt_bytes(v, units)] for k, v in measured["breakdown_at_peak"].items()]
    rows.append(["peak", fmt_bytes(measured["peak_bytes"], units)])
    return (render_rows(rows, "lr", "table") + f"\n\n{sc.structure.arch.key} is a drafted family (its module classes "
            f"{', '.join(sc.structure.arch.unmodelled)} are not modelled): no estimate of its activations to compare")


def run(args) -> int:
    from .. import validate

    sc = scenario_from_args(args, **run_defaults(scenario_kwargs(args)))
    world = args.world_size or (sc.gpus if sc.zero == 3 and sc.structure.zero_impl == "fsdp2" else None)
    _check_supported(sc, fsdp=world is not None)
    if not validate.is_available():
        raise UserError(validate.missing_reason())
    if world:  # ZeRO-3 against torch FSDP2 over N fake ranks
        import torch

        from ..validate.fsdp import cli_text
        _warn_versions({"torch": torch.__version__})
        write_output(cli_text(sc, world, args.format, args.units), args.output, args.force)
        return 0
    from ..validate.compare import comparison
    from ..validate.measure import measure
    from ..validate.spec import from_scenario

    spec = from_scenario(sc)
    spec["device"] = "cuda" if sc.device == "cuda" else "fake"
    with warnings.catch_warnings():  # transformers' deprecation notices are not the user's business here
        warnings.simplefilter("ignore", FutureWarning)
        if sc.objective != "sft":   # TRL's trainer's _compute_loss, traced (validate.objectives)
            from ..validate.objectives import measure_preference
            measured = measure_preference(spec)
        else:
            measured = measure(spec, flops=True)
    if sc.structure.arch.unmodelled:  # a drafted family: the measurement alone (the estimate refuses its activations)
        write_output(_measured_only(sc, measured, args.units), args.output, args.force)
        return 0
    bd = evaluate(sc)
    result = comparison(bd, measured)
    result["flops"] = flops_comparison(sc, measured)
    result["allocator"] = allocator_comparison(sc, measured)
    line = _warn_versions(result["versions"])
    if args.format == "json":
        text = json.dumps({"spec": spec, **result, "ledger_versions": validate.LEDGER_VERSIONS,
                           **provenance_dict(args, sc)}, indent=2)
    else:
        rows = [["", f"estimate ({args.units})", f"measured ({args.units})", "error"]]
        for name, row in result["rows"].items():
            err = "—" if row["error"] is None else f"{100 * row['error']:+.3f} %"
            rows.append([name, fmt_bytes(row["estimate"], args.units), fmt_bytes(row["measured"], args.units), err])
        text = (render_rows(rows, "lrrr", "table") +
                f"\n\npeak moment: estimate '{result['estimate_moment']}', measured '{result['measured_phase']}'"
                f"\n{line} ({'real CUDA tensors' if spec['device'] == 'cuda' else 'real CPU tensors' if sc.routing == 'worst' else 'FakeTensorMode, CPU code paths'}"
                + ", every token routed to experts 0 … k−1" * (sc.routing == "worst") + ")")
        if result["flops"]:
            frows = [["matmul FLOPs per step", "estimate", "counted", "error"]]
            for name, row in result["flops"].items():
                frows.append([name, f"{row['estimate']:,}", f"{row['measured']:,}",
                              "—" if row["error"] is None else f"{100 * row['error']:+.3f} %"])
            text += ("\n\n" + render_rows(frows, "lrrr", "table") + "\ncounted by torch.utils.flop_counter."
                     "FlopCounterMode in a fake run of its own (matmul-class ops; attention over the full s×s scores; "
                     "elementwise work and the optimizer's update are not counted)")
        if result["allocator"]:
            arows = [[f"caching allocator, replayed ({args.units})", "ledger's schedule", "traced schedule", "error"]]
            for name, row in result["allocator"].items():
                arows.append([name, fmt_bytes(row["estimate"], args.units), fmt_bytes(row["measured"], args.units),
                              f"{100 * row['error']:+.3f} %"])
            text += ("\n\n" + render_rows(arows, "lrrr", "table") + "\nreserved peaks (max_memory_reserved) of the "
                     "two schedules through symvram's replay of torch's CUDACachingAllocator: modelled, not measured; "
                     "allocated: " + fmt_bytes(measured["allocator"]["default"]["allocated_peak"], args.units)
                     + " traced")
    write_output(text, args.output, args.force)
    return 0
