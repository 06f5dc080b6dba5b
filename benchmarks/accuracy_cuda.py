"""The estimate against real CUDA peaks (``torch.cuda.max_memory_allocated``), from a GPU session's rows.

    python benchmarks/accuracy_cuda.py    # reads benchmarks/results/measurements_cuda.jsonl (no torch needed)

The rows come from ``benchmarks/gpu_session.sh`` (``measure_cases.py --device cuda``: several cases in one
process, smallest first). The raw peak holds what a fresh training process holds too beyond live tensors, and
what one case left for the next; each is taken off before comparing with the ledger (live tensor bytes):

* **library workspaces**: the cuBLAS workspace of each thread that runs a matmul (the forward's and autograd's:
  2 x 32 MiB on compute capability 9.x and later, 2 x 8.125 MiB before; torch's CublasHandlePool.cpp) and
  cuBLASLt's (1 MiB per thread, once a matmul with a bias ran). They stay allocated for the process, so the
  workspace of a case is what stays allocated after it (``persistent_bytes``) — or, after a case that left
  tensors behind, the workspace known before it.
* **what an earlier case left** (``baseline_bytes`` beyond the workspaces): the first session's harness let
  bitsandbytes' process-wide GlobalOptimManager keep the embeddings of an hf-stack 8-bit case; the next 8-bit case
  resets the manager (so its own peak holds none of it). The harness now resets it after each case.
* **tied weights**: the first session's harness materialised the model with ``Module.to_empty``, which gives each
  module its own copy of a shared parameter: a tied model ran with an untied lm_head. Those rows
  (``tied_weights_kept: false``) are compared with the estimate of the model that ran (``tie_word_embeddings``
  false); the harness now keeps tied weights tied.

Writes benchmarks/results/accuracy_cuda.md and accuracy_cuda.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from symvram.evaluate import evaluate  # noqa: E402
from symvram.validate.spec import to_scenario  # noqa: E402

MiB = 2**20
BNB = ("adamw8bit", "paged-adamw8bit")


def corrected(rows: list[dict]) -> list[dict]:
    """Per row (in the order measured, per run): the workspaces, the earlier cases' leftovers, the tensor peak."""
    out = []
    for run in sorted({str(r.get("run", 1)) for r in rows}):
        workspace = 0
        for r in sorted((r for r in rows if str(r.get("run", 1)) == run), key=lambda r: r.get("order", 0)):
            eight_bit = r["spec"]["optimizer"] in BNB
            # the first harness: an 8-bit case resets bitsandbytes' manager (frees what the last one kept) and,
            # under the hf stack, keeps its own embeddings
            if r.get("tied_weights_kept"):  # the current harness: nothing but the workspaces outlives a case
                leftover, workspace = 0, r["persistent_bytes"]   # (allocated by measure_cases' warm-up, or here)
            else:
                leftover = 0 if eight_bit else max(0, r["baseline_bytes"] - workspace)
                if not (eight_bit and r["spec"].get("stack") == "hf"):
                    workspace = r["persistent_bytes"] - leftover  # what stays once the case is freed
            out.append({**r, "workspace_bytes": workspace, "leftover_bytes": leftover,
                        "tensor_peak_bytes": r["peak_bytes"] - workspace - leftover})
    return out


def assess(row: dict) -> dict:
    spec = row["spec"]
    untied = bool(spec["arch"].get("tie_word_embeddings")) and not row.get("tied_weights_kept")
    if untied:
        spec = {**spec, "arch": {**spec["arch"], "tie_word_embeddings": False}}
    bd = evaluate(to_scenario(spec))
    measured = row["tensor_peak_bytes"]
    return {"name": row["name"], "family": bd.scenario.model.family, "method": spec["method"],
            "measured_raw": row["peak_bytes"], "workspace": row["workspace_bytes"], "leftover": row["leftover_bytes"],
            "measured": measured, "estimate": bd.peak, "error": (bd.peak - measured) / measured,
            "diff_mib": (bd.peak - measured) / MiB, "untied": untied, "moment": bd.peak_moment,
            "measured_phase": row["peak_phase"], "checkpointing": bool(bd.scenario.grad_checkpointing)}


def table(results: list[dict]) -> str:
    lines = ["| case | raw peak (GiB) | workspaces (MiB) | left by earlier case (MiB) | tensors (GiB) | symvram (GiB) "
             "| difference (MiB) | error |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(results, key=lambda r: -abs(r["error"])):
        name = r["name"] + (" (ran untied)" if r["untied"] else "")
        lines.append(f"| {name} | {r['measured_raw'] / 2**30:.3f} | {r['workspace'] / MiB:.1f} | "
                     f"{r['leftover'] / MiB:.1f} | {r['measured'] / 2**30:.3f} | {r['estimate'] / 2**30:.3f} | "
                     f"{r['diff_mib']:+.1f} | {100 * r['error']:+.3f} % |")
    return "\n".join(lines)


def groups(results: list[dict]) -> str:
    """The error by kind of run: the mechanisms a GPU changes (bitsandbytes kernels, DoRA, dropout masks)."""
    def kind(r):
        n = r["name"]
        for key, label in (("qlora", "QLoRA (bitsandbytes NF4 on CUDA)"), ("dora", "DoRA"),
                           ("adamw8bit", "8-bit AdamW (bitsandbytes)"), ("_do0.", "LoRA dropout (CUDA masks)")):
            if key in n:
                return label
        return f"{r['method']} (16-bit weights)" if r["method"] != "lora" else "LoRA (16-bit weights)"

    lines = ["| kind | cases | median abs error | max abs error | within 0.1 % |", "|---|---:|---:|---:|---:|"]
    for label in sorted({kind(r) for r in results}):
        errs = [abs(r["error"]) for r in results if kind(r) == label]
        lines.append(f"| {label} | {len(errs)} | {100 * statistics.median(errs):.3f} % | {100 * max(errs):.3f} % | "
                     f"{sum(e <= 0.001 for e in errs)} |")
    return "\n".join(lines)


def checkpointed_lora(results: list[dict]) -> list[dict]:
    """LoRA, QLoRA and DoRA runs with gradient checkpointing: the group in which the tracer's module hooks had
    kept a hidden-state block alive from one step into the next (issue 32; tests/test_tracer.py)."""
    return [r for r in results if r["method"] in ("lora", "qlora") and r["checkpointing"]]


def checkpointed_summary(results: list[dict]) -> str:
    group = checkpointed_lora(results)
    diffs = [r["diff_mib"] for r in group]
    return (f"**LoRA / QLoRA / DoRA with checkpointing: {len(group)} cases, median |difference| "
            f"{statistics.median(abs(d) for d in diffs):.2f} MiB, {sum(d > 0 for d in diffs)} above the GPU's "
            f"tensor peak (largest {max(diffs):+.1f} MiB).**")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measurements", default=str(ROOT / "benchmarks/results/measurements_cuda.jsonl"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/accuracy_cuda.md"))
    a = ap.parse_args(argv)
    rows = [json.loads(line) for line in Path(a.measurements).read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "peak_bytes" in r]
    if not rows:
        print(f"no CUDA measurements in {a.measurements}; run benchmarks/gpu_session.sh on a GPU", file=sys.stderr)
        return 1
    results = []
    for i, row in enumerate(corrected(rows), 1):
        print(f"[{i}/{len(rows)}] {row['name']}", file=sys.stderr)
        results.append(assess(row))
    errs = [abs(r["error"]) for r in results]
    first = rows[0]
    versions = ", ".join(f"{k} {v}" for k, v in first["versions"].items())
    text = [
        "# Accuracy on a GPU: estimated vs real CUDA peaks", "",
        f"Regenerate: `python benchmarks/accuracy_cuda.py` (no GPU needed; the rows come from "
        f"`benchmarks/gpu_session.sh` on a GPU). {len(results)} cases of benchmarks/cases.jsonl measured with real "
        f"tensors on one {first.get('gpu', 'GPU')} ({versions}): `torch.cuda.max_memory_allocated()` over two "
        "training steps, random weights. The ledger counts live tensor bytes, so the raw peak is first cleared of "
        "the cuBLAS/cuBLASLt workspaces and of what an earlier case in the same process left (the script's "
        "docstring says how each is known); rows marked *ran untied* are tied models that the first session's "
        "harness untied (`Module.to_empty`), compared with the estimate of the untied model that ran.", "",
        f"**{len(results)} cases: median abs error {100 * statistics.median(errs):.3f} %, max "
        f"{100 * max(errs):.3f} %; {sum(e <= 0.001 for e in errs)} within 0.1 %, {sum(e <= 0.01 for e in errs)} "
        "within 1 %.**", "", checkpointed_summary(results), "", "## By kind of run", "", groups(results), "", "## Every case (largest error first)", "",
        table(results), ""]
    Path(a.out).write_text("\n".join(text), encoding="utf-8")
    Path(a.out).with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"{len(results)} cases: median |error| {100 * statistics.median(errs):.3f} %, max {100 * max(errs):.3f} % "
          f"-> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
