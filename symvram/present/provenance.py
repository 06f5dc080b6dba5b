"""The scenario read from the user's files: each setting, its value and where it came from.

>>> from symvram.scenario import Scenario
>>> sc = Scenario.create("7b", method="lora", batch=4)
>>> rows = provenance_rows(sc, None, {"batch"}, model_source="command line")
>>> rows[:4]
[('model', '7b', 'command line'), ('stack', 'interview', 'symvram default'), ('method', 'lora', 'symvram default'), ('batch', '4', 'command line')]
>>> next(r for r in rows if r[0] == "targets")
('targets', 'all-linear', 'symvram default')
>>> max(len(line) for line in provenance_table(rows, [], []).splitlines()) <= WIDTH
True
"""
from __future__ import annotations

WIDTH = 100
SHOWN = ("objective", "prompt", "precompute_ref", "stack", "method", "batch", "seq", "grad_checkpointing", "rank",
         "targets", "lora_dropout", "modules_to_save",
         "double_quant", "kbit_prep", "dtype",
         "loss_impl", "autocast", "adapter_dtype", "master", "optimizer", "optimizer_impl", "state_dtype", "attention", "gpus",
         "zero", "offload", "mp_policy", "tp", "loader", "image_tokens", "train_vision")
MULTIMODAL = {"loader", "image_tokens", "train_vision"}   # shown for a multimodal checkpoint, or when given
LORA_ONLY = {"rank", "targets", "lora_dropout", "modules_to_save", "adapter_dtype"}


def _value(v, target_sets: dict[str, tuple[str, ...]]) -> str:
    """A setting as text; a target tuple by its family group name when it is one (all-linear …)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, tuple):
        return next((name for name, mods in target_sets.items() if set(mods) == set(v)), ",".join(v))
    return str(v)


def provenance_rows(sc, reading, cli: set[str], model_source: str) -> list[tuple[str, str, str]]:
    """(setting, value, source) for the model and every setting that matters for this scenario."""
    given = reading.model.value if reading is not None and reading.model is not None else None
    if given in (None, sc.model.name) or model_source == "command line":
        rows = [("model", sc.model.name, model_source)]
    else:  # the file's id, and the preset or config it resolved to
        rows = [("model", given, f"{model_source} → {'config' if sc.model.kind == 'config' else 'preset'} {sc.model.name}")]
    settings = reading.settings if reading is not None else {}
    for key in SHOWN:
        if (key in LORA_ONLY and not sc.lora) or (key in ("double_quant", "kbit_prep") and sc.method != "qlora") \
                or (key == "tp" and sc.tp == 1 and key not in cli and key not in settings) \
                or (key == "modules_to_save" and not sc.modules_to_save) \
                or (key == "mp_policy" and sc.mp_policy == "none" and key not in cli and key not in settings) \
                or (key in ("objective", "prompt", "precompute_ref") and sc.objective == "sft"
                    and key not in cli and key not in settings) \
                or (key in MULTIMODAL and sc.model.tower is None and key not in cli and key not in settings):
            continue
        value = getattr(sc, key)
        if key in cli:
            source = "command line"
        elif key in settings and settings[key].value == value or (key == "targets" and key in settings):
            source = settings[key].source
        elif key == "adapter_dtype" and "adapter_dtype" not in settings:
            source = "symvram default (the compute dtype)"
        elif key == "loss_impl" and sc.objective != "sft":
            source = f"objective {sc.objective}: TRL's fused LM head"
        else:
            source = "symvram default"
        shown = _value(value, sc.structure.arch.target_sets)
        if key == "targets" and sc.head_targets:   # the layers' group, then LoRA on the head modules
            shown = ",".join((shown, *sc.head_targets))
        rows.append((key, shown, source))
    for name, value in sc.overrides:   # ledger symbols a file set (DeepSpeed's buckets) or --set
        read = settings.get("=" + name)
        rows.append((name, f"{value:g}", read.source if read is not None and read.value == value else "command line"))
    return rows


def _fit(text: str, width: int) -> str:
    """Cut a long cell from the left (the end names the key): …/configs/run.yml:micro_batch_size."""
    return text if len(text) <= width else "…" + text[-(width - 1):]


def _short(rows, files):
    """Sources name a file by its base name when no two files share one (the heading has the paths)."""
    import os

    names = {f: os.path.basename(f.split(":")[0]) + f[len(f.split(":")[0]):] for f, _ in files}
    if len(set(names.values())) < len(names):
        return rows
    ordered = sorted(names, key=len, reverse=True)   # a referenced mapping "a.yml:deepspeed" before "a.yml"

    def cut(source):
        for f in ordered:
            if source.startswith(f + ":") or source.startswith(f + " "):
                return names[f] + source[len(f):]
        return source

    return [(k, v, cut(s)) for k, v, s in rows]


def not_read_line(unread) -> str:
    """How many keys of the files were not read: always said, listed with --verbose.

    >>> not_read_line(["a.yml:my_key", "a.yml:other"]), not_read_line([])
    ('2 keys of the files not read (not known to change memory; --verbose lists them)', 'every key of the files read')
    """
    n = len(unread)
    return (f"{n} key{'s' * (n != 1)} of the files not read (not known to change memory; --verbose lists them)"
            if n else "every key of the files read")


def provenance_table(rows, notes, files, unread=()) -> str:
    """The table, at most WIDTH columns; ``notes``: (key, value, source) shown with no effect; ``unread``:
    the keys of the files not read (counted under the table when files were read)."""
    import textwrap

    rows, notes = _short(rows, files), _short(notes, files)

    head = "scenario read from " + ", ".join(f"{f} ({t})" for f, t in files) if files else "scenario"
    lines = textwrap.wrap(head, WIDTH, subsequent_indent="  ", break_on_hyphens=False)
    allrows = list(rows) + [(k + " *", v, s) for k, v, s in notes]
    w1 = max(len(r[0]) for r in allrows + [("setting", "", "")])
    w2 = min(28, max(len(r[1]) for r in allrows + [("", "value", "")]))
    w3 = WIDTH - w1 - w2 - 4
    lines.append(f"{'setting':<{w1}}  {'value':<{w2}}  source")
    lines.append(f"{'-' * w1}  {'-' * w2}  {'-' * min(w3, 30)}")
    for key, value, source in allrows:
        lines.append(f"{key:<{w1}}  {_fit(value, w2):<{w2}}  {_fit(source, w3)}".rstrip())
    if notes:
        lines.append("* read and shown; no effect on the peak (the ledger counts b·s tokens per micro-batch)")
    if files:
        lines.append(not_read_line(unread))
    return "\n".join(lines)


def provenance_json(rows, notes, files, warnings, unread) -> dict:
    return {"files": [{"path": f, "format": t} for f, t in files],
            "settings": {k: {"value": v, "source": s} for k, v, s in rows},
            "notes": {k: {"value": v, "source": s} for k, v, s in notes},
            "warnings": list(warnings), "not_read": list(unread)}
