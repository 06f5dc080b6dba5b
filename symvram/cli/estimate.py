"""``symvram estimate``: the comparison table, or one detailed ledger; with --gpu, the verdict."""
from __future__ import annotations

import argparse
import json

from ..api import compare
from ..errors import UserError
from ..evaluate import evaluate
from ..present.reports import compare_time_line, time_json, time_lines
from ..present.tables import card_memory_json, card_memory_lines, detail, terminal, to_json, tower_note
from ..stacks import summary as stack_summary
from .common import (add_model_argument, add_output_arguments, add_scenario_arguments, announce, check_context,
                     model_of, provenance_dict, provenance_text, reading, scenario_from_args, scenario_kwargs,
                     time_flags, traced, write_output)
from .fit import add_card_arguments, card_of

HELP = """\
Without --method: the reference answer's table — full fine-tuning without and with an fp32 master copy
(12 and 16 bytes/param with the default recipe), LoRA and QLoRA — each split into base / trainable /
activations, with the predicted peak. Rows the engine refuses for your settings say why.
With --method (or a --from file that sets the method): every term of the ledger with its formula and
value, the moments of the step, the peak. With --from, the scenario read comes first: each setting,
its value and where it came from. With --gpu, the verdict; when it does not fit, the remedies
(written as edits to the --from files).
Every answer ends with its time: the step's matmul FLOPs (forward, backward, recompute) from the FLOPs
ledger; with --gpu also seconds per step and tokens/s from a stated roofline (--mfu, default 0.4;
--interconnect, default the card's link), the assumptions printed beside it. JSON: the "time" block.

examples:
  symvram estimate 7b
  symvram estimate llama-3-8b --method lora --rank 64 --targets all-linear --batch 4 --seq 2048 --format json
  symvram estimate ./config.json --method full --master fp32
  symvram estimate meta-llama/Llama-3.1-8B --method lora       # a Hub id: preset, HF cache or config.json
  symvram estimate --from axolotl.yml --gpu a100-80g --gpus 8
  symvram estimate --from trainer_args.json --from ds_zero3.json llama-3-8b
"""


def register(sub) -> None:
    p = sub.add_parser("estimate", help="memory of one fine-tuning setup, term by term",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(p)
    add_scenario_arguments(p)
    add_card_arguments(p, required=False)
    p.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    add_output_arguments(p)
    p.set_defaults(func=run, shows_provenance=True)


def _verdict(sc, args) -> tuple[str, dict]:
    """The verdict on --gpu (text and JSON), with the remedies when the run does not fit."""
    from ..analysis.diagnose import diagnose
    from ..present.reports import estimate_verdict
    mfu, link = time_flags(args)
    d = diagnose(sc, card_of(args), headroom=args.headroom, allocator=args.allocator, mfu=mfu, interconnect=link)
    return estimate_verdict(d, args.units, reading(args))


def _compare_verdict(table, args) -> str:
    from ..analysis.fit import headroom_bytes
    from ..present.reports import compare_verdict

    card = card_of(args)
    return compare_verdict(table, card, card.usable_bytes - headroom_bytes(args.headroom, card.usable_bytes), args.units)


def card_memory_of(sc, args):
    """The replay of the scenario on --gpu (or on no card: the context of a card given as a size)."""
    from ..card_memory import card_memory

    return card_memory(sc, card_of(args) if args.gpu else None, args.allocator)


def time_of(sc, args):
    """The step time on --gpu (None without a card), --mfu and --interconnect checked first."""
    from ..timing import step_time

    mfu, link = time_flags(args)
    if not getattr(args, "gpu", None):
        return None
    try:
        return step_time(sc, card_of(args), mfu, link)
    except UserError as e:
        if mfu is not None or link is not None:   # a time was asked for: a card without figures is an error
            raise
        return str(e)   # the memory answer stands; the time line says why there is none


def run(args) -> int:
    kw = scenario_kwargs(args)
    if "method" not in kw:
        time_flags(args)
        try:
            table = compare(model_of(args), **kw)
        except UserError as e:
            raise traced(e, args) from None
        announce(args)
        sc = check_context(table.rows[0][1].scenario, args)
        if args.format == "json":
            text = json.dumps({**{name: {**to_json(bd), "time": time_json(bd.scenario, None)} for name, bd in table.rows},
                               **{name: {"error": reason} for name, reason in table.skipped},
                               **provenance_dict(args, sc)}, indent=2)
        else:
            first = table.rows[0][1]
            head = f"{sc.model.name}: P = {first.derived['P']:,} parameters{tower_note(sc)}; "
            lora = dict(table.rows).get("LoRA")
            if lora:
                head += (f"LoRA r={lora.scenario.rank} on {','.join((*lora.scenario.targets, *lora.scenario.head_targets))} = "
                         f"{lora.derived['P_train']:,} trainable; ")
            head += f"batch {sc.batch}, seq {sc.seq}" + (", checkpointing" if sc.grad_checkpointing else "")
            head += "\n" + stack_summary((lora or first).scenario)
            text = provenance_text(args, sc) + head + "\n\n" + table.table(args.units, args.format)
            text += "\n\n" + compare_time_line(table)
            if args.gpu:
                text += "\n\n" + _compare_verdict(table, args)
    else:
        sc = scenario_from_args(args)
        bd = evaluate(sc)
        st = time_of(sc, args)
        cm = card_memory_of(sc, args)
        verdict, data = _verdict(sc, args) if args.gpu else ("", None)
        if args.format == "json":
            out = to_json(bd)
            out["bytes"].update(card_memory_json(cm))
            text = json.dumps({**out, "time": time_json(sc, st), **provenance_dict(args, sc),
                               **({"verdict": data} if data else {})}, indent=2)
        else:
            text = (provenance_text(args, sc) + detail(bd, args.units, args.format) + "\n\n"
                    + "\n".join(card_memory_lines(cm, args.units)) + "\n" + "\n".join(time_lines(sc, st))
                    + ("\n\n" + verdict if verdict else ""))
    write_output(terminal(text) if args.format == "table" else text, args.output, args.force)
    return 0
