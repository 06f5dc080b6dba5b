"""Predicted vs measured step time on a CUDA GPU (skips cleanly without one).

    python benchmarks/step_time_gpu.py                 # the card is read from torch.cuda.get_device_name()
    python benchmarks/step_time_gpu.py --gpu h100 --steps 5

A few small cases (a ~1B Llama-shaped model, full and LoRA, with and without checkpointing; a short
sequence so that every case fits a 24 GB card) are built with random weights on the GPU
(symvram.validate.measure.prepare: transformers + PEFT, the same code path as ``validate --device cuda``),
run for ``--warmup`` steps, then timed over ``--steps`` steps with CUDA events. Beside each: symvram's
predicted seconds per step (symvram.timing: the FLOPs ledger over the card's dense peak × MFU, plus the
memory-bound work over HBM bandwidth; one GPU, so no communication) and the MFU the measurement implies
(predicted FLOPs / measured seconds / peak). Takes under five minutes on an A100/H100-class card.
Needs the validate extra (torch, transformers, peft).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARCH = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000}
CASES = [
    {"method": "full", "grad_checkpointing": False},
    {"method": "full", "grad_checkpointing": True},
    {"method": "lora", "rank": 16, "grad_checkpointing": False},
    {"method": "lora", "rank": 16, "grad_checkpointing": True},
]


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
    a = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed (pip install 'symvram[validate]')")
        return 0
    if not torch.cuda.is_available():
        print("skipped: no CUDA GPU here; step time is predicted, not measured (run this on a machine with one)")
        return 0
    from symvram.presets import load_card
    from symvram.timing import step_time
    from symvram.validate.measure import _train_steps, prepare
    from symvram.validate.spec import normalize_spec, to_scenario

    key = a.gpu or card_key(torch.cuda.get_device_name(), torch.cuda.get_device_properties(0).total_memory)
    if key is None:
        print(f"skipped: {torch.cuda.get_device_name()} is not in data/gpus.toml; pass --gpu")
        return 0
    card = load_card(key)
    rows = []
    for case in CASES:
        spec = normalize_spec({"arch": ARCH, "batch": a.batch, "seq": a.seq, "adapter_dtype": "base",
                               "device": "cuda", **case})
        sc = to_scenario(spec).with_changes(state_dtype="bf16")
        predicted = step_time(sc, card, a.mfu)
        model, optimizer, ids, labels, *_ = prepare(spec, None, "cuda")
        spec_w = {**spec, "steps": a.warmup}
        _train_steps(spec_w, model, optimizer, ids, labels)
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        _train_steps({**spec, "steps": a.steps}, model, optimizer, ids, labels)
        stop.record()
        torch.cuda.synchronize()
        measured = start.elapsed_time(stop) / 1000 / a.steps
        implied = predicted.flops.per_step / measured / predicted.peak_flops
        rows.append({"case": case, "predicted_s": predicted.seconds_per_step, "measured_s": measured,
                     "error": predicted.seconds_per_step / measured - 1, "implied_mfu": implied})
        print(f"{json.dumps(case)}: predicted {predicted.seconds_per_step:.4f} s/step, measured {measured:.4f} s/step "
              f"({100 * rows[-1]['error']:+.1f} %), implied MFU {implied:.2f}", flush=True)
        del model, optimizer
        torch.cuda.empty_cache()
    print("assumptions: " + "; ".join(predicted.assumptions()))
    out = ROOT / "benchmarks" / "results" / "step_time_gpu.json"
    out.write_text(json.dumps({"card": card.name, "device": torch.cuda.get_device_name(), "time": time.ctime(),
                               "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
