"""ZeRO-3 per GPU: symvram's ledger (the fsdp stack) and DeepSpeed's published estimator against torch FSDP2.

    python benchmarks/fsdp.py              # needs the validate extra (torch, transformers, peft)
    python benchmarks/fsdp.py --remeasure  # measure every case again (else a stored measurement of the same
                                           # spec and torch version is reused; the estimates are always recomputed)

The fsdp stack as people run it: ``fully_shard`` per decoder layer then the root, parameters stored in fp32
with ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``, or stored in bf16 without a policy;
torch AdamW (foreach, states in the parameter's dtype). TinyLlama-1.1B and Qwen2.5-0.5B (tied embeddings),
full fine-tuning and LoRA, N = 2 … 16 fake ranks, with and without checkpointing: rank 0's bytes measured by
torch's FSDPMemTracker (``symvram.validate.fsdp``) beside the ledger's per-GPU terms and peak and, for model
states, DeepSpeed's ``estimate_zero3_model_states_mem_needs`` (no offload: 4·LL + 18Ψ/N, LL = the largest
single module's parameters). Writes benchmarks/results/fsdp.md and fsdp.json.
"""
from __future__ import annotations

import json
import statistics
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from symvram.scenario import Scenario  # noqa: E402
from symvram.validate.fsdp import CATEGORIES, compare_fsdp  # noqa: E402
from symvram.validate.spec import from_scenario  # noqa: E402

OUT = ROOT / "benchmarks" / "results"
GOAL = {"median": 0.005, "max": 0.02}   # |peak error| over the cases
LORA_RANK = 16


def _cases() -> list[dict]:
    cases = []
    for model, sizes in (("tinyllama-1.1b", (2, 4, 8, 16)), ("qwen2.5-0.5b", (2, 8))):
        for method in ("full", "lora"):
            for dtype in ("fp32", "bf16"):   # fp32 storage with the bf16 policy; bf16 storage, no policy
                cases += [dict(model=model, method=method, dtype=dtype, gpus=n, seq=512) for n in sizes]
    for method, dtype, n in (("full", "fp32", 4), ("full", "bf16", 8), ("lora", "fp32", 4), ("lora", "bf16", 8)):
        cases.append(dict(model="tinyllama-1.1b", method=method, dtype=dtype, gpus=n, seq=512, grad_checkpointing=True))
    cases += [dict(model="tinyllama-1.1b", method="full", dtype="bf16", gpus=8, seq=2048),
              dict(model="tinyllama-1.1b", method="lora", dtype="fp32", gpus=4, seq=2048)]
    return cases


CASES = _cases()


def scenario_kw(case: dict) -> dict:
    """Scenario.create's settings for one case (stored with it: tests/test_fsdp_benchmark.py re-estimates them);
    the fsdp stack's defaults for everything else."""
    kw = {k: v for k, v in case.items() if k != "model"}
    return {**kw, "stack": "fsdp", "device": "cpu", **({"rank": LORA_RANK} if case["method"] == "lora" else {})}


def deepspeed_zero3(sc: Scenario, n: int) -> int:
    """DeepSpeed's per-GPU model states without offload: 4·LL + 18Ψ/N (Ψ all parameters)."""
    m = sc.model
    largest_module = max(m.vocab * m.hidden, m.hidden * m.intermediate, m.hidden * m.heads * m.head_dim)
    from symvram.evaluate import evaluate

    psi = evaluate(sc).derived["P"]
    return 4 * largest_module + int(18 * psi / n)


def _key(spec: dict, world_size: int) -> str:
    return json.dumps([spec, world_size], sort_keys=True)


def _stored() -> dict[str, dict]:
    """Earlier measurements by spec and world size (the spec does not hold N)."""
    path = OUT / "fsdp.json"
    if not path.exists():
        return {}
    stored = json.loads(path.read_text())
    return {_key(r["spec"], r["measured"]["world_size"]): r["measured"] for r in
            (stored.get("cases", []) if isinstance(stored, dict) else []) if "spec" in r}


def run_case(case: dict, stored: dict) -> dict:
    sc = Scenario.create(case["model"], **scenario_kw(case))
    spec = from_scenario(sc.with_changes(device="cpu"))
    spec["device"] = "fake"
    import torch

    earlier = stored.get(_key(spec, case["gpus"]))
    if earlier and earlier["versions"]["torch"] != torch.__version__:
        earlier = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = compare_fsdp(sc, case["gpus"], measured=earlier)
    states = {side: sum(result["rows"][c][side] for c in CATEGORIES) for side in ("estimate", "measured")}
    out = {"case": case, "scenario": scenario_kw(case), **result, "model_states": states}
    if sc.method == "full":
        out["model_states"]["deepspeed"] = deepspeed_zero3(sc, case["gpus"])
    return out


def peak_error(r: dict) -> float:
    return (r["peak"]["estimate"] - r["peak"]["measured"]) / r["peak"]["measured"]


def pct(est: int, meas: int) -> str:
    return f"{100 * (est - meas) / meas:+.3f} %"


def precision(case: dict) -> str:
    return "fp32 + bf16 policy" if case["dtype"] == "fp32" else "bf16"


def markdown(results: list[dict]) -> str:
    gib = 2**30
    errors = [abs(peak_error(r)) for r in results]
    lines = [
        "# ZeRO-3 per GPU: symvram (`--stack fsdp`) and DeepSpeed's estimator against torch FSDP2",
        "",
        "Regenerate: `python benchmarks/fsdp.py` (stored measurements of the same spec and torch version are reused; "
        "`--remeasure` runs them again). seq as listed, batch 1, torch AdamW (foreach, states in the parameter's "
        "dtype), `fully_shard` per decoder layer then the root over a fake process group of N ranks, FakeTensorMode, "
        "rank 0 counted by torch's FSDPMemTracker. Precision: *fp32 + bf16 policy* = parameters stored and sharded "
        "in fp32, `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`; *bf16* = stored in bf16, no policy. "
        "LoRA: r = 16 on every linear, adapters stored as the base. Why the columns differ: docs/sharding.md.",
        "",
        f"**Per-GPU peak: median |error| {100 * statistics.median(errors):.3f} %, max {100 * max(errors):.3f} % over "
        f"{len(results)} cases** (goal: median ≤ {100 * GOAL['median']:.1f} %, max ≤ {100 * GOAL['max']:.0f} %).",
        "",
        "| model | method | precision | N | ckpt | seq | sharded params | sharded grads | states | unsharded params "
        "| model states: symvram | DeepSpeed | peak: measured (GiB) | symvram | symvram's peak moment | measured at |",
        "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        c, rows, ms, peak = r["case"], r["rows"], r["model_states"], r["peak"]
        cells = [pct(rows[k]["estimate"], rows[k]["measured"]) for k in CATEGORIES]
        ds = pct(ms["deepspeed"], ms["measured"]) if "deepspeed" in ms else "—"
        lines.append(f"| {c['model']} | {c['method']} | {precision(c)} | {c['gpus']} | "
                     f"{'yes' if c.get('grad_checkpointing') else 'no'} | {c['seq']} | " + " | ".join(cells)
                     + f" | {pct(ms['estimate'], ms['measured'])} | {ds} | {peak['measured'] / gib:.3f} | "
                     f"{pct(peak['estimate'], peak['measured'])} | {peak['estimate_moment']} | {peak['measured_at']} |")
    lines += ["", "Each symvram cell is (estimate − measured) / measured. Unsharded parameters: the root unit and one "
              "layer (the all-gather outputs, among them the prefetched layer's, are counted in the peak).",
              "", "## Bytes each GPU sends per step: the communication ledger against the collectives FSDP2 dispatched",
              "", "Counted on rank 0 by a dispatch mode that reads every c10d all-gather and reduce-scatter of the last "
              "step ((N − 1) × the shard each); the ledger: every layer's weights gathered (in the policy's dtype) in "
              "forward and again in backward, the root once, every trainable gradient reduce-scattered in the reduce "
              "dtype (symvram/ledger/comm.py).", "",
              "| model | method | precision | N | all-gather: measured (bytes) | symvram | reduce-scatter: measured (bytes) "
              "| symvram |", "|---|---|---|---:|---:|---:|---:|---:|"]
    seen = set()
    for r in results:
        c, cm = r["case"], r["comm"]
        key = (c["model"], c["method"], c["dtype"], c["gpus"])
        if key in seen:
            continue
        seen.add(key)
        lines.append(f"| {c['model']} | {c['method']} | {precision(c)} | {c['gpus']} | {cm['allgather']['measured']:,} | "
                     f"{pct(cm['allgather']['estimate'], cm['allgather']['measured'])} | "
                     f"{cm['reduce_scatter']['measured']:,} | "
                     f"{pct(cm['reduce_scatter']['estimate'], cm['reduce_scatter']['measured'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    stored = {} if "--remeasure" in argv else _stored()
    results = []
    for case in CASES:
        print(f"measuring {case} …", file=sys.stderr, flush=True)
        results.append(run_case(case, stored))
    errors = [abs(peak_error(r)) for r in results]
    summary = {"cases": len(results), "peak_median_abs_error": statistics.median(errors), "peak_max_abs_error": max(errors),
               "goal": GOAL}
    (OUT / "fsdp.json").write_text(json.dumps({"summary": summary, "cases": results}, indent=1) + "\n", encoding="utf-8")
    (OUT / "fsdp.md").write_text(markdown(results), encoding="utf-8")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
