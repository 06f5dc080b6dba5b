"""``symvram cards``: the cards symvram knows (data/gpus.toml), with the figures the estimates use."""
from __future__ import annotations

from ..presets import gpu_presets
from .listing import add_listing_parser, write_listing

HELP = """\
Every named card of data/gpus.toml: its memory as the driver reports it and what is left for tensors
(usable: the default capacity of fit, plan and diagnose), the dense bf16 peak and memory bandwidth the
step time uses, and the GPU-to-GPU link (tensor parallelism is offered only over NVLink or Infinity
Fabric). JSON adds the CPU link and the host (data/hosts.toml) an offloaded optimizer's update is priced
on. Any other card: pass its size (--gpu 40GiB) and, for a step time, --tflops and --hbm-gbps.

examples:
  symvram cards
  symvram cards --format json
"""


def card_rows() -> list[dict]:
    """One dict per card, the figures as gpus.toml holds them (None where a card has none: T4, V100 have no bf16).

    >>> next(r for r in card_rows() if r["key"] == "rtx-4090")["bf16_tflops"]
    165.2
    """
    return [{"key": key, "name": e["name"], "memory_gib": e["memory_gib"], "usable_gib": e["usable_gib"],
             "bf16_tflops": e.get("bf16_tflops"), "fp16_tflops": e.get("fp16_tflops"), "hbm_gbps": e.get("hbm_gbps"),
             "interconnect": e.get("interconnect"), "host_link": e.get("host_link"), "host": e.get("host"),
             "aliases": list(e.get("aliases", ()))}
            for key, e in gpu_presets().items()]


def _cell(value) -> str:
    return "—" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def register(sub) -> None:
    add_listing_parser(sub, "cards", "the named cards and their figures (memory, bf16 TFLOP/s, bandwidth, link)",
                       HELP, run)


def run(args) -> int:
    rows = card_rows()
    table = [["card (--gpu)", "memory (GiB)", "usable (GiB)", "bf16 TFLOP/s", "HBM GB/s", "link", "name"]]
    table += [[r["key"], f"{r['memory_gib']:.2f}", f"{r['usable_gib']:.2f}", _cell(r["bf16_tflops"]),
               _cell(r["hbm_gbps"]), _cell(r["interconnect"]),
               r["name"] + (f" (also {', '.join(r['aliases'])})" if r["aliases"] else "")] for r in rows]
    return write_listing(args, rows, table, "lrrrrll",
                         "\n\nbf16 TFLOP/s: the dense tensor-core peak of the vendor's datasheet (gpus.toml cites each);\n"
                         "usable: the memory less the CUDA context")
