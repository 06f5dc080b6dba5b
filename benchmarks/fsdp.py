"""ZeRO-3 per-GPU memory: symvram's ledger and DeepSpeed's published estimator against torch FSDP2.

    python benchmarks/fsdp.py          # needs the validate extra (torch, transformers, peft); a few minutes

For TinyLlama-1.1B (every dimension divisible by 8, so FSDP2's dim-0 padding adds nothing), full
fine-tuning and LoRA, N = 2, 4, 8 fake ranks: rank 0's bytes measured by torch's FSDPMemTracker
(``symvram.validate.fsdp``) beside the ledger's per-GPU terms and, for model states,
DeepSpeed's ``estimate_zero3_model_states_mem_needs`` (no offload: 4·LL + 18Ψ/N, LL = the largest
single module's parameters). Writes benchmarks/results/fsdp.md and fsdp.json.
"""
from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from symvram.scenario import Scenario  # noqa: E402
from symvram.validate.fsdp import CATEGORIES, compare_fsdp  # noqa: E402

MODEL = "tinyllama-1.1b"
CASES = [dict(method="full", state_dtype="bf16", world_size=n) for n in (2, 4, 8)] + [
    dict(method="full", state_dtype="bf16", optimizer_impl="forloop", world_size=8)] + [
    dict(method="lora", rank=16, adapter_dtype="bf16", state_dtype="bf16", world_size=n) for n in (2, 4, 8)]
SEQ = 512


def deepspeed_zero3(sc: Scenario, n: int) -> int:
    """DeepSpeed's per-GPU model states without offload: 4·LL + 18Ψ/N (Ψ all parameters)."""
    m = sc.model
    largest_module = max(m.vocab * m.hidden, m.hidden * m.intermediate, m.hidden * m.heads * m.head_dim)
    from symvram.evaluate import evaluate

    psi = evaluate(sc).derived["P"]
    return 4 * largest_module + int(18 * psi / n)


def run_case(case: dict) -> dict:
    kw = dict(case)
    n = kw.pop("world_size")
    sc = Scenario.create(MODEL, stack="torch", seq=SEQ, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = compare_fsdp(sc, n)
    states = {side: sum(result["rows"][c][side] for c in CATEGORIES) for side in ("estimate", "measured")}
    out = {"case": case, **result, "model_states": states}
    if sc.method == "full":
        out["model_states"]["deepspeed"] = deepspeed_zero3(sc, n)
    return out


def pct(est: int, meas: int) -> str:
    return f"{100 * (est - meas) / meas:+.3f} %"


def markdown(results: list[dict]) -> str:
    gib = 2**30
    lines = [
        "# ZeRO-3 per GPU: symvram and DeepSpeed's estimator against torch FSDP2",
        "",
        f"Regenerate: `python benchmarks/fsdp.py`. {MODEL}, seq {SEQ}, batch 1, bf16, torch AdamW (states in bf16), "
        "`fully_shard` per decoder layer then the root over a fake process group of N ranks, FakeTensorMode, "
        "rank 0 counted by torch's FSDPMemTracker. Model states = sharded parameters + sharded gradients + "
        "optimizer states + the all-gathered parameters at their largest. Why the columns differ: docs/sharding.md.",
        "",
        "| method | N | AdamW | sharded params | sharded grads | states | gathered | model states: measured (GiB) "
        "| symvram | DeepSpeed | peak: measured (GiB) | symvram |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rows, ms, peak = r["rows"], r["model_states"], r["peak"]
        cells = [pct(rows[c]["estimate"], rows[c]["measured"]) for c in CATEGORIES]
        ds = pct(ms["deepspeed"], ms["measured"]) if "deepspeed" in ms else "—"
        lines.append(f"| {r['case']['method']} | {r['world_size']} | {r['case'].get('optimizer_impl', 'foreach')} | "
                     + " | ".join(cells) + f" | {ms['measured'] / gib:.3f} | {pct(ms['estimate'], ms['measured'])} | "
                     f"{ds} | {peak['measured'] / gib:.3f} | {pct(peak['estimate'], peak['measured'])} |")
    lines += ["", "Each symvram cell is (estimate − measured) / measured. The gathered set is compared without the "
              "prefetched layer, which a synchronous fake process group never holds at the same time."]
    lines += ["", "## Bytes each GPU sends per step: the communication ledger against the collectives FSDP2 dispatched",
              "", "Counted on rank 0 by a dispatch mode that reads every c10d all-gather and reduce-scatter of the last "
              "step ((N − 1) × the shard each); the ledger: every layer's weights gathered in forward and again in "
              "backward, the root once, every trainable gradient reduce-scattered (symvram/ledger/comm.py).", "",
              "| method | N | all-gather: measured (bytes) | symvram | reduce-scatter: measured (bytes) | symvram |",
              "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        c = r["comm"]
        lines.append(f"| {r['case']['method']} | {r['world_size']} | {c['allgather']['measured']:,} | "
                     f"{pct(c['allgather']['estimate'], c['allgather']['measured'])} | {c['reduce_scatter']['measured']:,} | "
                     f"{pct(c['reduce_scatter']['estimate'], c['reduce_scatter']['measured'])} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    results = []
    for case in CASES:
        print(f"measuring {case} …", file=sys.stderr, flush=True)
        results.append(run_case(case))
    out = ROOT / "benchmarks" / "results"
    (out / "fsdp.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (out / "fsdp.md").write_text(markdown(results), encoding="utf-8")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
