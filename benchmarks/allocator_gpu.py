"""The caching allocator on a real GPU beside symvram's replay (issue 24): reserved memory and the OOM line.

    python benchmarks/allocator_gpu.py reserved --out OUT/allocator_reserved.jsonl          # both allocators
    python benchmarks/allocator_gpu.py oom-line --out OUT/allocator_oom_line.jsonl [--stop-after 300]

Never in CI (needs CUDA and an 80+ GB card). Six settings of Llama-3-8B (``SETTINGS``): LoRA and QLoRA, with
and without gradient checkpointing, and both with checkpointing at batch 4.

* ``reserved``: each setting at seq ``--seq`` in a fresh process per allocator (PYTORCH_CUDA_ALLOC_CONF is read
  when CUDA starts): two training steps, then ``max_memory_allocated()``, ``max_memory_reserved()`` and
  ``mem_get_info()`` (the nvidia-smi level: total − free), beside symvram's allocated, reserved and device
  peaks (``symvram.card_memory``) on the same card.
* ``oom-line``: per setting, one process; ``set_per_process_memory_fraction`` emulates cards of 24, 40, 48 and
  80 GB (decimal, as sold: ``CARDS_GB``) and a bisection of the sequence length, bracketed around symvram's
  ``fit`` answer for that card size, finds the longest that trains two steps; beside it ``fit``'s answer.

Each row is appended as soon as it is measured (a rerun resumes: rows already there are skipped).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODEL = "llama-3-8b"
SETTINGS = {
    "lora": dict(method="lora", batch=1),
    "lora-ckpt": dict(method="lora", batch=1, grad_checkpointing=True),
    "qlora-nockpt": dict(method="qlora", batch=1, grad_checkpointing=False),
    "qlora": dict(method="qlora", batch=1, grad_checkpointing=True),
    "lora-ckpt-b4": dict(method="lora", batch=4, grad_checkpointing=True),
    "qlora-b4": dict(method="qlora", batch=4, grad_checkpointing=True),
}
CARDS_GB = (24, 40, 48, 80)
ALLOC_CONF = {"default": "", "expandable": "expandable_segments:True"}


def _scenario(name: str, seq: int):
    from symvram.scenario import Scenario

    return Scenario.create(MODEL, seq=seq, **SETTINGS[name])


def _two_steps(sc) -> None:
    """Build the setting's model on the GPU and run two steps (symvram.validate's harness)."""
    from symvram.validate.measure import _train_steps, prepare
    from symvram.validate.spec import from_scenario

    spec = from_scenario(sc)
    spec["device"] = "cuda"
    model, optimizer, input_ids, labels, *_ = prepare(spec, None, "cuda")
    _train_steps(spec, model, optimizer, input_ids, labels, None, None)


def measure_reserved(name: str, seq: int, allocator: str) -> dict:
    """One setting, one allocator (this process's PYTORCH_CUDA_ALLOC_CONF): the three levels, measured and predicted."""
    import torch

    from symvram.card_memory import card_memory
    from symvram.presets import GPUSpec

    sc = _scenario(name, seq)
    torch.zeros(1, device="cuda")   # the CUDA context, before anything else: what is not the allocator's
    free0, total = torch.cuda.mem_get_info()
    context = total - free0 - torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    _two_steps(sc)
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    measured = {"allocated": torch.cuda.max_memory_allocated(), "reserved": torch.cuda.max_memory_reserved(),
                "device_now": total - free, "reserved_now": torch.cuda.memory_reserved(), "context": context}
    card = GPUSpec("measured", torch.cuda.get_device_name(), total, total - context)
    cm = card_memory(sc, card, allocator)
    return {"setting": name, "seq": seq, "allocator": allocator, "measured": measured,
            "predicted": {"allocated": cm.allocated, "schedule_allocated": cm.schedule_allocated,
                          "reserved": cm.reserved[allocator], "device_peak": cm.device_peak},
            "card_total": total, "torch": torch.__version__}


def _trains(sc, fraction: float) -> bool:
    import gc

    import torch

    torch.cuda.set_per_process_memory_fraction(fraction)
    try:
        _two_steps(sc)
        return True
    except torch.OutOfMemoryError:
        return False
    finally:
        gc.collect()
        torch.cuda.empty_cache()


def oom_line(name: str, stop_at: float) -> list[dict]:
    """Per emulated card: the longest sequence that trains two steps, bisected, beside fit's answer."""
    import torch

    from symvram.analysis.fit import fit
    from symvram.presets import load_card

    total = torch.cuda.mem_get_info()[1]
    rows = []
    for gb in CARDS_GB:
        if time.time() > stop_at:
            break
        card_bytes = gb * 10**9
        predicted = fit(_scenario(name, 1024), load_card(f"{gb}GB"), solve="seq")
        guess = predicted.value or 256
        lo, hi = max(guess * 3 // 4, 1), guess * 5 // 4 + 1
        while lo > 1 and not _trains(_scenario(name, lo), card_bytes / total):
            lo //= 2
        while _trains(_scenario(name, hi), card_bytes / total) and hi < 131072:
            lo, hi = hi, hi * 2
        while hi - lo > max(lo // 100, 8) and time.time() < stop_at:   # to 1 % (or 8 tokens)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if _trains(_scenario(name, mid), card_bytes / total) else (lo, mid)
        rows.append({"setting": name, "card_gb": gb, "measured_seq": lo, "bracket": [lo, hi],
                     "fit_seq": predicted.value, "fit_status": predicted.status, "card_total": total,
                     "torch": torch.__version__})
    return rows


def _done(out: Path) -> set:
    """(setting, allocator) of the rows already there (allocator None: an OOM-line row)."""
    if not out.exists():
        return set()
    return {(r["setting"], r.get("allocator")) for r in map(json.loads, out.read_text().splitlines())}


def _append(out: Path, rows) -> None:
    with out.open("a") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("reserved", "oom-line", "_one"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--stop-after", type=float, default=480, help="start nothing after this many seconds")
    ap.add_argument("--setting", help=argparse.SUPPRESS)
    ap.add_argument("--allocator", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out = Path(args.out)
    stop_at = time.time() + args.stop_after
    if args.mode == "_one":   # a child: one setting under this process's allocator settings
        rows = ([measure_reserved(args.setting, args.seq, args.allocator)] if args.allocator
                else oom_line(args.setting, stop_at))
        _append(out, rows)
        return 0
    done = _done(out)
    for name in SETTINGS:
        for allocator in (ALLOC_CONF if args.mode == "reserved" else (None,)):
            if time.time() > stop_at or (name, allocator) in done:
                continue
            env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": ALLOC_CONF.get(allocator or "default", "")}
            cmd = [sys.executable, __file__, "_one", "--out", str(out), "--seq", str(args.seq), "--setting", name,
                   "--stop-after", str(max(stop_at - time.time(), 1))] + (["--allocator", allocator] if allocator else [])
            subprocess.run(cmd, env=env, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
