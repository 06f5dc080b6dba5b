"""``symvram plan``: the fewest GPUs for every strategy × method, per-GPU and host memory."""
from __future__ import annotations

import argparse
import json

from ..analysis.fit import load_card
from ..analysis.plan import STRATEGIES, PlanResult, plan, interconnect, tensor_parallel_ok
from ..errors import UserError
from ..present.tables import host_bytes, render_rows
from ..stacks import summary as stack_summary
from ..present.units import fmt_bytes
from ..scenario import METHODS
from .common import add_model_argument, add_output_arguments, add_scenario_arguments, positive_int, provenance_dict, scenario_from_args, scenario_kwargs, write_output
from .fit import add_card_arguments

HELP = """\
For each strategy (DDP, ZeRO-1, ZeRO-2, ZeRO-3/FSDP, TP, ZeRO-3 with optimizer or parameter offload)
and each method (full, LoRA, QLoRA unless --method): the fewest GPUs whose per-GPU peak fits the
card's usable memory less --headroom, solved from the ledger's expressions in N; the per-GPU peak
there, the host memory offload needs, and why the strategies rank as they do in communication cost.
"params only" is the count the interview arithmetic gives (weights + trainable triple, no activations).
The setups that fit are ranked by predicted tokens/s per GPU (symvram.timing: the FLOPs ledger at the card's
dense bf16 peak × --mfu, memory-bound work over HBM, the communication ledger over --interconnect or the
card's link, no overlap), with tokens/s in all beside it and why the fastest wins; GPUs stays a column.

examples:
  symvram plan 70b --gpu a100-80g
  symvram plan 70b --gpu a100-80g --grad-checkpointing
  symvram plan llama-3-70b --method lora --gpu h100-80g --max-gpus 64 --seq 4096 --batch 4
"""


def register(sub) -> None:
    p = sub.add_parser("plan", help="fewest GPUs per strategy (ZeRO, FSDP, TP, offload) and method",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p)
    add_scenario_arguments(p)
    add_card_arguments(p)
    p.add_argument("--max-gpus", type=positive_int, default=64, help="most GPUs to consider (default 64)")
    p.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    add_output_arguments(p)
    p.set_defaults(func=run)


def to_json(r: PlanResult) -> dict:
    return {
        "card": {"key": r.card.key, "name": r.card.name, "usable_bytes": r.card.usable_bytes},
        "headroom_bytes": r.headroom, "budget_bytes": r.budget, "max_gpus": r.max_gpus,
        "rows": [{"method": row.method, "strategy": row.strategy.key, "strategy_name": row.strategy.name,
                  "fits": row.fits, "gpus": row.gpus, "tp": row.tp, "params_only_gpus": row.params_gpus,
                  "per_gpu_peak_bytes": row.at.peak, "peak_moment": row.at.peak_moment,
                  "host_bytes_per_gpu": host_bytes(row.at), "host_bytes_total": row.host_total,
                  "communication_rank": STRATEGIES.index(row.strategy) + 1, "communication": row.strategy.reason,
                  "tokens_per_second": row.tokens_per_second, "tokens_per_second_per_gpu": row.tokens_per_second_per_gpu,
                  "seconds_per_step": row.time.seconds_per_step if row.time else None,
                  "seconds": row.time.seconds if row.time else None,
                  "speed_rank": r.ranked.index(row) + 1 if row.time else None}
                 for row in r.rows],
        "fastest": {m: (f.strategy.key if (f := r.fastest(m)) else None) for m in METHODS
                    if any(x.method == m for x in r.rows)},
        "fastest_why": why_fastest(r),
        "time_assumptions": next((x.time.assumptions() for x in r.ranked if x.time), None),
        "best": {m: (b.strategy.key if (b := r.best(m)) else None) for m in METHODS if any(x.method == m for x in r.rows)},
    }


def why_fastest(r: PlanResult) -> str | None:
    """Why the fastest setup wins: GPU-seconds per 1,000 tokens by kind (compute, memory, network, host),
    against the fewest-GPU setup's."""
    top = r.fastest()
    if top is None:
        return None

    def cost(row):   # GPU-seconds per 1,000 tokens, by kind
        scale = 1000 * row.time.gpus_total / row.time.tokens_per_step
        return {k: row.time.seconds[k] * scale for k in ("compute", "memory", "network", "host")}

    mine = cost(top)
    parts = ", ".join(f"{k} {v:.3g}" for k, v in mine.items() if v)
    text = (f"{top.method} with {top.strategy.name} on {top.gpus}: {top.tokens_per_second_per_gpu:,.0f} tokens/s per "
            f"GPU ({top.tokens_per_second:,.0f} in all); GPU-seconds per 1,000 tokens: {parts}")
    fewest = min((x for x in r.ranked if x.time is not None), key=lambda x: (x.gpus, -x.tokens_per_second_per_gpu))
    if fewest is not top:
        theirs = cost(fewest)
        extra = max(theirs, key=lambda k: theirs[k] - mine[k])
        text += (f"; the fewest-GPU setup ({fewest.method}, {fewest.strategy.name} on {fewest.gpus}) reaches "
                 f"{fewest.tokens_per_second_per_gpu:,.0f} per GPU, losing most on {extra} "
                 f"({theirs[extra]:.3g} against {mine[extra]:.3g})")
    return text


def summary(r: PlanResult, method: str, units: str) -> str:
    """One sentence per method: the fewest GPUs without offload (ties: cheaper communication), then
    what offload saves in cards and costs in host memory."""
    rows = [x for x in r.rows if x.method == method]
    plain = r.best(method, offload=False)
    offload = r.best(method, offload=True)
    never = [x.strategy.name for x in rows if not x.fits]
    parts = []
    if plain:
        parts.append(f"{plain.strategy.name} on {plain.gpus} × {r.card.name} ({fmt_bytes(plain.at.peak, units)} per GPU)")
    if offload and (plain is None or offload.gpus < plain.gpus):
        parts.append(f"with {offload.strategy.name} on {offload.gpus} ({fmt_bytes(offload.at.peak, units)} per GPU, "
                     f"{fmt_bytes(offload.host_total, units)} of host memory)")
    if not parts:
        return f"{method}: nothing fits on {r.max_gpus} × {r.card.name}"
    text = f"{method}: " + "; or ".join(parts)
    if never:
        text += f"; {', '.join(never)} do not fit on {r.max_gpus}"
    starved = [x for x in rows if x.params_gpus and (not x.fits or x.gpus > x.params_gpus)]
    if starved and not rows[0].at.scenario.grad_checkpointing:
        text += (f" — activations, which ZeRO does not divide, cost cards ({starved[0].strategy.name}: "
                 f"{starved[0].params_gpus} for the parameters alone): try --grad-checkpointing or a shorter --seq")
    return text


def render(r: PlanResult, sc, units: str, fmt: str) -> str:
    head = (f"{sc.model.name} · batch {sc.batch} · seq {sc.seq}" + (" · checkpointing" if sc.grad_checkpointing else "")
            + f" on {r.card.name}: {fmt_bytes(r.card.usable_bytes, units)} usable − {fmt_bytes(r.headroom, units)} "
              f"headroom = {fmt_bytes(r.budget, units)} per GPU") + "\n" + stack_summary(sc)
    table = [["method", "strategy", "GPUs", "params only", f"per-GPU peak ({units})", f"host ({units})",
              "tokens/s per GPU", "tokens/s", "communication"]]
    for row in r.ranked:
        gpus = (str(row.gpus) + (f" (t={row.tp})" if row.tp > 1 else "")) if row.fits else f"> {r.max_gpus}"
        params = str(row.params_gpus) if row.params_gpus else f"> {r.max_gpus}"
        peak = fmt_bytes(row.at.peak, units).split()[0] + ("" if row.fits else f" at {row.at.scenario.gpus * row.tp}")
        speed = ([f"{row.tokens_per_second_per_gpu:,.0f}", f"{row.tokens_per_second:,.0f}"] if row.time
                 else ["—", "—"])
        table.append([row.method, row.strategy.name, gpus, params, peak,
                      fmt_bytes(row.host_total, units).split()[0], *speed, row.strategy.reason])
    methods = [m for m in METHODS if any(x.method == m for x in r.rows)]
    lines = [head, "", render_rows(table, "llrrrrrrl", fmt), ""] + [summary(r, m, units) for m in methods]
    timed = next((x for x in r.ranked if x.time), None)
    if timed:
        lines += ["", "ranked by predicted tokens/s per GPU (fastest first; GPUs is the fewest that fit)",
                  "fastest: " + why_fastest(r), "time assumes: " + "; ".join(timed.time.assumptions())]
    else:
        lines += ["", f"no step times: {r.card.name} has no peak FLOP/s figure in data/gpus.toml (rows in strategy order)"]
    if not tensor_parallel_ok(r.card, r.interconnect):
        lines.append(f"tensor parallelism is left out: {r.card.name} cards talk over {interconnect(r.card, r.interconnect)} "
                     "(data/gpus.toml, --interconnect), and TP all-reduces activations inside every layer, which needs NVLink")
    return "\n".join(lines)


def run(args) -> int:
    chosen = [f"--{k.replace('_', '-')}" for k in ("gpus", "zero", "offload", "tp", "sequence_parallel")
              if getattr(args, k, None) is not None]
    if chosen:
        raise UserError(f"plan searches {', '.join(chosen)} itself; use estimate to price one setup")
    sc = scenario_from_args(args)
    methods = (sc.method,) if "method" in scenario_kwargs(args) else None
    from ..timing import check_interconnect, check_mfu

    mfu = check_mfu(args.mfu) if args.mfu is not None else None
    result = plan(sc, load_card(args.gpu), max_gpus=args.max_gpus, headroom=args.headroom, methods=methods,
                  mfu=mfu, interconnect=check_interconnect(args.interconnect))
    text = json.dumps({**to_json(result), **provenance_dict(args, sc)}, indent=2) if args.format == "json" else render(result, sc, args.units, args.format)
    write_output(text, args.output, args.force)
    return 0
