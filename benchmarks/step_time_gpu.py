"""Predicted vs measured step time on a CUDA GPU (skips cleanly without one).

    python benchmarks/step_time_gpu.py                 # the card is read from torch.cuda.get_device_name()
    python benchmarks/step_time_gpu.py --gpu h100 --steps 5 --large   # adds the 8B cases (an 80 GB card)
    python benchmarks/step_time_gpu.py --device cpu --seq 64 --steps 1  # a dry run of this script, no GPU

A few cases (a ~1B Llama-shaped model, full and LoRA, with and without checkpointing, a sequence short enough
for a 24 GB card; with --large also Llama-3-8B-shaped LoRA and full fine-tuning) are built with random weights
(symvram.validate.measure.prepare: transformers + PEFT, the same code path as ``validate --device cuda``),
run for ``--warmup`` steps, then timed over ``--steps`` steps with CUDA events. Beside each: symvram's
predicted seconds per step (symvram.timing: the FLOPs ledger over the card's dense peak × MFU, plus the
memory-bound work over HBM bandwidth; one GPU, so no communication) and the MFU the measurement implies
(predicted FLOPs / measured seconds / peak). Takes under five minutes on an A100/H100-class card.
Needs the validate extra (torch, transformers, peft). Each finished case is printed and saved at once (--out).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARCH_1B = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 16,
           "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000}
ARCH_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256}
CASES = [
    {"model": "1b", "method": "full", "grad_checkpointing": False},
    {"model": "1b", "method": "full", "grad_checkpointing": True},
    {"model": "1b", "method": "lora", "rank": 16, "grad_checkpointing": False},
    {"model": "1b", "method": "lora", "rank": 16, "grad_checkpointing": True},
]
LARGE = [  # Llama-3-8B's shape at the batch x sequence of a real run (about 60-75 GiB each)
    {"model": "8b", "method": "lora", "rank": 16, "grad_checkpointing": False, "batch": 2, "seq": 2048},
    {"model": "8b", "method": "lora", "rank": 16, "grad_checkpointing": True, "batch": 8, "seq": 2048},
    {"model": "8b", "method": "full", "grad_checkpointing": True, "batch": 2, "seq": 2048},
]
ARCHS = {"1b": ARCH_1B, "8b": ARCH_8B}


def card_key(name: str, total_bytes: int) -> str | None:
    """The gpus.toml entry whose model the CUDA device name contains, the closest in memory
    (NVIDIA A100-SXM4-80GB → a100-80g)."""
    from symvram.presets import gpu_presets

    lowered = name.lower()
    found = [(abs(entry["memory_gib"] * 2**30 - total_bytes), key) for key, entry in gpu_presets().items()
             if entry["name"].lower().replace("nvidia ", "").replace("geforce ", "").split()[0] in lowered]
    return min(found)[1] if found else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", help="the card's gpus.toml name (default: from the CUDA device name)")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--mfu", type=float, default=None)
    ap.add_argument("--large", action="store_true", help="also the Llama-3-8B-shaped cases (needs ~80 GB)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: a dry run of this script (the times say nothing about a GPU)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "step_time_gpu.json"))
    ap.add_argument("--report-only", action="store_true",
                    help="write the Markdown report (beside --out, .md) from the saved JSON; measure nothing")
    a = ap.parse_args(argv)
    if a.report_only:
        write_report(Path(a.out))
        return 0
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed (pip install 'symvram[validate]')")
        return 0
    if a.device == "cuda" and not torch.cuda.is_available():
        print("skipped: no CUDA GPU here; step time is predicted, not measured (run this on a machine with one)")
        return 0
    from symvram.presets import load_card
    from symvram.timing import step_time
    from symvram.validate.measure import _train_steps, _versions, prepare
    from symvram.validate.spec import normalize_spec, to_scenario

    if a.device == "cuda":
        device_name = torch.cuda.get_device_name()
        key = a.gpu or card_key(device_name, torch.cuda.get_device_properties(0).total_memory)
    else:
        device_name, key = "cpu (dry run)", a.gpu or "h100"
    if key is None:
        print(f"skipped: {device_name} is not in data/gpus.toml; pass --gpu")
        return 0
    card = load_card(key)
    out = Path(a.out)
    rows = []
    for case in CASES + (LARGE if a.large else []):
        setup = {k: v for k, v in case.items() if k != "model"}
        spec = normalize_spec({"arch": ARCHS[case["model"]], "batch": a.batch, "seq": a.seq, "adapter_dtype": "base",
                               "device": "cuda", **setup})
        sc = to_scenario(spec).with_changes(state_dtype="bf16")
        predicted = step_time(sc, card, a.mfu)
        model, optimizer, ids, labels, *_ = prepare(spec, None, a.device)
        _train_steps({**spec, "steps": a.warmup}, model, optimizer, ids, labels)
        measured = _seconds_per_step(a.device, a.steps, lambda: _train_steps({**spec, "steps": a.steps}, model,
                                                                              optimizer, ids, labels))
        implied = predicted.flops.per_step / measured / predicted.peak_flops
        rows.append({"case": case, "batch": spec["batch"], "seq": spec["seq"],
                     "predicted_s": predicted.seconds_per_step, "measured_s": measured,
                     "error": predicted.seconds_per_step / measured - 1, "implied_mfu": implied,
                     "predicted_parts_s": {k: v for k, v in predicted.seconds.items() if v}})
        print(f"{json.dumps(case)}: predicted {predicted.seconds_per_step:.4f} s/step, measured {measured:.4f} s/step "
              f"({100 * rows[-1]['error']:+.1f} %), implied MFU {implied:.2f}", flush=True)
        out.write_text(json.dumps({"card": card.name, "device": device_name, "time": time.ctime(),
                                   "versions": _versions(), "assumptions": predicted.assumptions(), "rows": rows},
                                  indent=1))
        del model, optimizer, ids, labels
        if a.device == "cuda":
            torch.cuda.empty_cache()
    print("assumptions: " + "; ".join(predicted.assumptions()))
    write_report(out)
    return 0


def write_report(out: Path) -> None:
    """benchmarks/results/step_time_gpu.md from the JSON: one row per case, the implied MFU beside the default."""
    data = json.loads(out.read_text())
    lines = [f"# Step time on a GPU: predicted vs measured ({data['device']})", "",
             f"`python benchmarks/step_time_gpu.py --large` on {data['device']} ({data['time']}; "
             + ", ".join(f"{k} {v}" for k, v in data["versions"].items()) + "). Random weights, bf16 weights and "
             "AdamW states (the time ledger's setup), two warm-up steps, then the mean of the timed steps (CUDA "
             "events). Predicted: symvram.timing with " + "; ".join(data["assumptions"]) + ". Error = predicted / "
             "measured - 1 (negative: the prediction is too fast). Implied MFU = the ledger's FLOPs per step / "
             "measured seconds / the card's dense peak.", "",
             "| model | method | checkpointing | batch x seq | predicted (s/step) | measured (s/step) | error "
             "| implied MFU |", "|---|---|---|---|---:|---:|---:|---:|"]
    for r in data["rows"]:
        c = r["case"]
        method = c["method"] + (f" r{c['rank']}" if "rank" in c else "")
        lines.append(f"| {c['model']} | {method} | {'yes' if c['grad_checkpointing'] else 'no'} | "
                     f"{r['batch']} x {r['seq']} | {r['predicted_s']:.4f} | {r['measured_s']:.4f} | "
                     f"{100 * r['error']:+.1f} % | {r['implied_mfu']:.2f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _seconds_per_step(device: str, steps: int, run) -> float:
    """Wall seconds per step of ``run()`` (``steps`` steps): CUDA events on a GPU, the CPU clock otherwise."""
    import torch

    if device != "cuda":
        t0 = time.perf_counter()
        run()
        return (time.perf_counter() - t0) / steps
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / 1000 / steps


if __name__ == "__main__":
    sys.exit(main())
