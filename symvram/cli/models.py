"""``symvram models``: the model presets symvram knows (data/models.toml), with their parameter counts."""
from __future__ import annotations

from ..presets import load_model, model_presets
from .listing import add_listing_parser, write_listing

HELP = """\
Every model preset: the family whose ledger it uses, P as the ledger derives it from the shape (a
nominal interview preset such as 7b takes P as written), layers, hidden size, vocabulary, context and
the names it also answers to. Any other model: pass a config.json, a model folder or a Hub id org/name
(an id with -Instruct, -Base, -it, -chat or -hf is its base's preset).

examples:
  symvram models
  symvram models --format json
"""


def model_rows() -> list[dict]:
    """One dict per preset; ``params`` is the ledger's P (the number every estimate uses), ``tower_params`` the
    frozen vision tower a multimodal preset loads beside it (0 for none).

    >>> next(r for r in model_rows() if r["key"] == "llama-2-7b")["params"]
    6738415616
    """
    from ..api import estimate

    out = []
    for key, e in model_presets().items():
        spec = load_model(key)
        out.append({"key": key, "family": spec.family, "params": estimate(spec).derived["P"],
                    "tower_params": spec.tower.params if spec.tower else 0,
                    "layers": spec.layers, "hidden": spec.hidden, "vocab": spec.vocab, "context": spec.max_position,
                    "aliases": list(e.get("aliases", ()))})
    return out


def register(sub) -> None:
    add_listing_parser(sub, "models", "the model presets, their family and parameter count", HELP, run)


def run(args) -> int:
    rows = model_rows()
    table = [["model", "family", "P", "tower", "layers", "hidden", "vocab", "context", "also"]]
    table += [[r["key"], r["family"], f"{r['params'] / 1e9:,.2f} B",
               f"{r['tower_params'] / 1e9:,.2f} B" if r["tower_params"] else "—", str(r["layers"]), str(r["hidden"]),
               f"{r['vocab']:,}", f"{r['context']:,}" if r["context"] else "—", ", ".join(r["aliases"])]
              for r in rows]
    note = "\n\ntower: the frozen vision tower a multimodal preset loads beside the decoder"
    if args.format == "table":   # the names a preset also answers to (Hub ids are long): a line under its row
        from ..present.tables import render_rows

        lines = render_rows([row[:-1] for row in table], "llrrrrrr", "table").split("\n")
        out, also = lines[:2], iter(row[-1] for row in table[1:])
        for i, line in enumerate(lines[2:], 2):   # a row whose long cell wraps goes on on lines opening blank
            out.append(line)
            if (i + 1 == len(lines) or not lines[i + 1].startswith(" ")) and (names := next(also)):
                out.append(f"    also: {names}")
        text = "\n".join(out)
        return write_listing(args, rows, [], "", note, text=text)
    return write_listing(args, rows, table, "llrrrrrrl", note)
