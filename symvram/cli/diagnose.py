"""``symvram diagnose``: OOM triage — which side is over, the probe, the remedies in order."""
from __future__ import annotations

import argparse
import json

from ..analysis.diagnose import PART_NAMES, PARTS, PROBE_SEQ, Diagnosis, diagnose, tensor_parallel_ok
from ..analysis.fit import load_card
from ..errors import UserError
from ..stacks import summary as stack_summary
from ..present.units import fmt_bytes, parse_size
from .common import (add_model_argument, add_output_arguments, add_scenario_arguments, positive_int, provenance_dict,
                     provenance_text, reading, scenario_from_args, write_output)
from .fit import add_card_arguments

HELP = f"""\
A job that "should fit" ran out of memory. diagnose names the moment of the peak and splits its bytes
into what lives there: the parameter side (weights, gradients, optimizer states, master, adapters),
the optimizer step's temporaries, the loss's vocabulary-sized tensors, the saved activations and the
backward temporaries. It prescribes the probe that splits parameters from the rest on the real job
(batch 1, seq {PROBE_SEQ}), then the remedies for that moment, cheapest first, each with its predicted
saving and price, stopping at the first that fits: free ones (fused AdamW, a chunked cross-entropy,
SDPA, max_seq_len from the data's P95), gradient checkpointing, batch 1 + gradient accumulation,
optimizer precision, LoRA/QLoRA, and only then more cards (tensor parallelism only over NVLink).
With --measured-peak it fits the unknown overhead.

examples:
  symvram diagnose llama-3-8b --method lora --gpu 24GiB --batch 4 --seq 4096
  symvram diagnose llama-3-8b --method lora --gpu 24GiB --batch 4 --seq 4096 --p95-seq 1800
  symvram diagnose llama-3-8b --method lora --gpu 24GiB --batch 4 --seq 4096 \\
      --measured-peak 23.5GiB --measured-at batch=1,seq=512
  symvram diagnose --from axolotl.yml --gpu rtx-4090      # the remedies as edits to axolotl.yml
"""
MEASURED_KEYS = ("batch", "seq", "rank")


def parse_measured_at(text: str) -> dict:
    """``batch=1,seq=512`` → {"batch": 1, "seq": 512}.

    >>> parse_measured_at("batch=1, seq=512")
    {'batch': 1, 'seq': 512}
    """
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in MEASURED_KEYS:
            raise UserError(f"--measured-at takes {'/'.join(MEASURED_KEYS)}=N pairs, e.g. batch=1,seq=512; got {part!r}")
        try:
            out[key] = positive_int(value.strip())
        except argparse.ArgumentTypeError as e:
            raise UserError(f"--measured-at {key}: {e}") from None
    return out


def register(sub) -> None:
    p = sub.add_parser("diagnose", help="OOM triage: which side is over and the remedies in order",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p)
    add_scenario_arguments(p)
    add_card_arguments(p)
    p.add_argument("--p95-seq", type=positive_int, help="95th percentile of the data's tokenized lengths")
    p.add_argument("--measured-peak", help="the peak the job reached (torch.cuda.max_memory_allocated), e.g. 23.5GiB")
    p.add_argument("--measured-at", help="settings of that measurement, e.g. batch=1,seq=512 (default: the job's)")
    p.add_argument("--max-gpus", type=positive_int, default=64, help="most GPUs to consider for more cards (default 64)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    add_output_arguments(p)
    p.set_defaults(func=run, shows_provenance=True)


def _moment(bd, key=None) -> str:
    key = key or bd.peak_moment
    return next(m.label for m in bd.ledger.moments if m.key == key)


def probe_advice(d: Diagnosis) -> str:
    """What the probe (batch 1, short sequence) can and cannot tell for this job."""
    sc = d.estimate.scenario
    suspects = (["the LoRA target modules (all-linear adapts more matrices than q,v)"] if sc.lora else []) + [
        "an fp32 master copy the framework keeps", "the optimizer's state precision and implementation"]
    return ("Still OOM → the parameter side is bigger than this ledger: check " + ", ".join(suspects)
            + ". Runs → the batch- and sequence-dependent part is the problem: go on.")


def verdict(d: Diagnosis, fb) -> str:
    parts = d.parts
    sizes = {p: sum(v.values()) for p, v in parts.items()}
    cause = d.cause
    if cause == "fits":
        return (f"verdict: the ledger says it fits with {fb(d.budget - d.estimate.peak)} to spare; an OOM means "
                "something the ledger does not hold (another process, a leak, a different recipe): measure "
                "with --measured-peak")
    if cause == "parameter":
        return (f"verdict: the parameter side alone ({fb(d.parameter_bytes)}) is over the budget by "
                f"{fb(d.parameter_bytes - d.budget)}: no batch, sequence, checkpointing or loss setting can fix it; "
                "only the optimizer's precision, the method or more cards can")
    room = d.budget - sizes["parameter"]
    where = {"optimizer": f"at the {d.moment_label} the activations are already freed: the optimizer's own "
                          f"temporaries ({fb(sizes['optimizer'])}) do not fit in the {fb(room)} the parameter side leaves",
             "loss": f"the loss's vocabulary-sized tensors ({fb(sizes['loss'])}) are the largest part of the peak; "
                     f"the parameter side leaves {fb(room)}",
             "activation": f"the saved activations ({fb(sizes['activation'])}) are the largest part of the peak; "
                           f"the parameter side leaves {fb(room)}",
             "backward": f"the backward temporaries ({fb(sizes['backward'])}) are the largest part of the peak; "
                         f"the parameter side leaves {fb(room)}"}[cause]
    return f"verdict: {where}"


def remedy_edits(d: Diagnosis, reading) -> list[list[str]]:
    """Each remedy's own changes (not the ones above it) as edits to the --from files."""
    from ..readers.edits import edits

    out, before = [], {}
    for r in d.remedies:
        step = {k: v for k, v in r.changes.items() if before.get(k) != v}
        out.append(edits(reading, step, batch_before=r.before.scenario.batch))
        before = r.changes
    return out


def remedy_lines(d: Diagnosis, units: str, reading=None) -> list[str]:
    """The remedies for the peak's moment, cheapest first: modelled ones with their saving and the peak after,
    the ones the engine cannot model yet with the most they can save; with a Reading (--from), each modelled
    remedy followed by its edits to the user's files."""
    fb = (lambda n: fmt_bytes(n, units))
    lines = []
    if d.proposals or d.skipped:
        lines += ["", f"remedies for the {d.moment_label}, cheapest first (each keeps the ones above it; "
                      "stops at the first that fits)" + (":" if reading is None else ", as edits to your files:")]
    for title, why in d.skipped:
        lines.append(f"  - {title}: skipped — {why}")
    edits = iter(remedy_edits(d, reading) if reading is not None else [[] for _ in d.remedies])
    for n, r in enumerate(d.proposals, 1):
        if not r.modelled:
            lines.append(f"  {n}. {r.title}: up to {fb(r.bound)} at the {_moment(r.before)} (not modelled yet: the "
                         f"steps below are estimated without it); cost: {r.cost}")
            continue
        where = "fits" if r.after.peak <= d.budget else f"still {fb(r.after.peak - d.budget)} over"
        price = "" if r.price is None else (f"; time price {r.price:+.1f} % per token ({r.price_basis})"
                                            if abs(r.price) >= 0.05 or "unpriced" in r.price_basis
                                            else f"; free in time ({r.price_basis})")
        lines.append(f"  {n}. {r.title}: saves {fb(r.saving)} → peak {fb(r.after.peak)} at the {_moment(r.after)}, "
                     f"{where}{price}; cost: {r.cost}")
        lines += [f"       {e}" for e in next(edits)]
    return lines


def render(d: Diagnosis, units: str, reading=None) -> str:
    sc, est = d.estimate.scenario, d.estimate
    fb = (lambda n: fmt_bytes(n, units))
    budget = (f"{fb(d.card.usable_bytes)} usable − {fb(d.headroom)} headroom"
              + (f" − {fb(d.overhead)} measured overhead" if d.overhead > 0 else "") + f" = {fb(d.budget)}")
    lines = [f"{sc.model.name} · {sc.method}" + (f" r={sc.rank}" if sc.lora else "") + f" · batch {sc.batch} · "
             f"seq {sc.seq} on {d.card.name}: budget {budget}", stack_summary(sc), ""]
    if d.measured:
        measured, at = d.measured
        lines.append(f"measured: {fb(measured)} at batch {at.scenario.batch}, seq {at.scenario.seq}; the ledger "
                     f"predicts {fb(at.peak)} there: the measurement is {fb(abs(d.overhead))} "
                     f"({100 * d.overhead / at.peak:+.1f} %) {'above' if d.overhead >= 0 else 'below'} the estimate"
                     + (" — taken as unknown overhead (context, allocator, fragmentation) and kept free below"
                        if d.overhead > 0 else " — no overhead to add"))
    lines.append(f"estimate: peak {fb(est.peak)} at the {d.moment_label}; what lives there:")
    for part in PARTS:
        terms = {k: v for k, v in d.parts[part].items() if v}
        if sum(terms.values()) * 1000 >= est.peak:   # parts below 0.1 % of the peak (rotary cache, ids) are noise
            shown = [(k, v) for k, v in sorted(terms.items(), key=lambda kv: -kv[1]) if v * 1000 >= est.peak][:4]
            detail = ", ".join(f"{k} {fb(v)}" for k, v in shown)
            lines.append(f"  {PART_NAMES[part]}: {fb(sum(terms.values()))} ({detail})")
    lines.append(verdict(d, fb))
    if d.cause == "optimizer":
        lines.append(f"probe: batch 1, seq {d.probe.scenario.seq} predicts {fb(d.probe.peak)} — it cannot split the "
                     "sides here: the optimizer step's temporaries do not depend on the batch or the sequence; the "
                     "first remedy below is the test")
    elif d.cause not in ("fits", "parameter"):
        verdict_probe = "fits" if d.probe.peak <= d.budget else "is over too"
        lines.append(f"probe: run the real job at batch 1, seq {d.probe.scenario.seq} (predicted {fb(d.probe.peak)}: "
                     f"{verdict_probe}). " + probe_advice(d))
    lines += remedy_lines(d, units, reading)
    if d.cards is not None:
        c = d.cards
        lead = f"  or keep {sc.method}:" if d.fixed else "  then more cards:"
        lines.append(f"{lead} {c.strategy.name} on {c.gpus} × {d.card.name} ({fb(c.at.peak)} per GPU"
                     + (f", {fb(c.host_total)} host" if c.host_total else "") + f") with the other fixes above"
                     + ("" if tensor_parallel_ok(d.card) else "; no tensor parallelism: these cards have no NVLink"))
    elif d.cause != "fits" and not d.fixed:
        lines.append("  more cards: nothing fits within --max-gpus; a larger card is needed")
    return "\n".join(lines)


def to_json(d: Diagnosis, reading=None) -> dict:
    edits = remedy_edits(d, reading) if reading is not None else [None] * len(d.remedies)
    return {
        "card": {"name": d.card.name, "usable_bytes": d.card.usable_bytes}, "headroom_bytes": d.headroom,
        "overhead_bytes": d.overhead, "budget_bytes": d.budget, "cause": d.cause, "side": d.cause,
        "peak_bytes": d.estimate.peak, "peak_moment": d.estimate.peak_moment,
        "parts_bytes": {p: sum(v.values()) for p, v in d.parts.items()},
        "parameter_side_bytes": d.parameter_bytes, "activation_side_bytes": d.activation_bytes,
        "probe": {"batch": d.probe.scenario.batch, "seq": d.probe.scenario.seq, "peak_bytes": d.probe.peak},
        # the modelled remedies, each on top of the previous (as before); "proposals" adds, in order, the
        # remedies the engine cannot model yet (a chunked cross-entropy) with the most they can save
        "remedies": [{"key": r.key, "title": r.title, "tier": r.tier, "changes": r.changes, "saving_bytes": r.saving,
                      "peak_after_bytes": r.after.peak, "fits": r.after.peak <= d.budget, "cost": r.cost,
                      "time_price_percent": r.price, "time_price_basis": r.price_basis,
                      **({"edits": e} if e is not None else {})}
                     for r, e in zip(d.remedies, edits)],
        "proposals": [{"key": r.key, "title": r.title, "tier": r.tier, "modelled": r.modelled,
                       "saving_bytes": r.saving, "peak_after_bytes": r.after.peak if r.modelled else None,
                       "cost": r.cost} for r in d.proposals],
        "skipped": [{"title": t, "why": w} for t, w in d.skipped],
        "more_cards": None if d.cards is None else {"strategy": d.cards.strategy.key, "gpus": d.cards.gpus,
                                                    "per_gpu_peak_bytes": d.cards.at.peak},
        "measured": None if d.measured is None else {"peak_bytes": d.measured[0], "estimate_bytes": d.measured[1].peak},
        "inputs": d.estimate.scenario.inputs(),
    }


def run(args) -> int:
    sc = scenario_from_args(args)
    measured = parse_size(args.measured_peak) if args.measured_peak else None
    if args.measured_at and measured is None:
        raise UserError("--measured-at describes a measurement: give --measured-peak too")
    at = parse_measured_at(args.measured_at) if args.measured_at else None
    from ..timing import check_interconnect, check_mfu

    d = diagnose(sc, load_card(args.gpu), headroom=args.headroom, p95_seq=args.p95_seq, measured_peak=measured,
                 measured_at=at, max_gpus=args.max_gpus,
                 mfu=check_mfu(args.mfu) if args.mfu is not None else None,
                 interconnect=check_interconnect(args.interconnect))
    r = reading(args)
    text = (json.dumps({**to_json(d, r), **provenance_dict(args, sc)}, indent=2) if args.format == "json"
            else provenance_text(args, sc) + render(d, args.units, r))
    write_output(text, args.output, args.force)
    return 0
