"""``symvram family-draft CONFIG``: the parameter layout of any model transformers builds, as a family entry."""
from __future__ import annotations

import argparse

from ..errors import UserError
from .common import add_output_arguments, positive_int, write_output

HELP = """\
Builds the model of a config.json with transformers on the meta device (no weights, no download) and
writes its parameter layout as a family entry (TOML) for symvram/data/families/: every nn.Linear of a
decoder layer with d_in/d_out matched to the config's fields, the norms, the parameters that are not
nn.Linear (fused experts, a bare router, per-head vectors), tied embeddings, the LoRA target groups by
the module names PEFT matches. The comments above it give the parameter side the ledger computes from
the entry, beside transformers' and PEFT's own counts: weights, LoRA adapters, gradients, optimizer
states and FSDP2 ZeRO-3 shards per GPU.

The entry lists the layer's module classes no shipped family models (`unmodelled`): with it, estimate
refuses the activation block by those names. Put the file in a folder named by $SYMVRAM_FAMILIES (or
under symvram/data/families/), then measure the step with symvram validate, model the activations
(docs/adding-a-family.md) and remove the line.

Needs the optional extra:  pip install 'symvram[validate]'   (torch, transformers, peft)

examples:
  symvram family-draft ./config.json > granite.toml
  symvram family-draft ibm-granite/granite-3.3-8b-instruct -o granite.toml
  mkdir fams && symvram family-draft ./config.json -o fams/granite.toml && SYMVRAM_FAMILIES=fams symvram validate ./config.json --method lora
"""


def register(sub) -> None:
    p = sub.add_parser("family-draft", help="a family entry drafted from transformers' model (the validate extra)",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="a Hugging Face config.json, a model folder holding one, or a Hub id org/name "
                                  "(its config.json: the local cache, else downloaded with the hub extra)")
    p.add_argument("--rank", type=positive_int, default=16, help="LoRA rank of the parameter side shown (default 16)")
    p.add_argument("--gpus", type=positive_int, default=8, help="GPUs of the FSDP2 shards shown (default 8)")
    add_output_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..validate import is_available, missing_reason

    if not is_available():
        raise UserError(f"family-draft builds the model with transformers: {missing_reason()}")
    from ..validate.layout import draft_entry, parameter_side, read_config, read_layout

    from pathlib import Path

    from ..hub import is_hub_id
    from ..presets import hub_config_path

    source = args.config
    if not Path(source).exists() and is_hub_id(source):
        source = hub_config_path(source)  # a Hub id: its config.json from the cache, else downloaded
    cfg = read_config(source)
    from ..api import shipped_model_types

    if (shipped := shipped_model_types().get(cfg["model_type"])) is not None:
        raise UserError(f"model_type {cfg['model_type']!r} has a family entry already (symvram/data/families/"
                        f"{shipped}.toml); family-draft drafts one for a model_type without")
    layout = read_layout(cfg)
    comments, _ = parameter_side(cfg, draft_entry(cfg, layout), rank=args.rank, gpus=args.gpus)
    write_output(draft_entry(cfg, layout, notes=tuple(comments)), args.output, args.force)
    return 0
