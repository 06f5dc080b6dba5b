"""The time price of memory: FLOPs, communication and step time of a scenario, from the FLOPs and
communication ledgers and a stated roofline.

    step time = F / (Φ · μ)                    matmul FLOPs at the card's dense peak Φ times MFU μ
              + M_HBM / B_HBM                  memory-bound work (optimizer update, QLoRA dequantization)
              + (1 − ω) · C_link / B_link      GPU-to-GPU bytes sent, of which a fraction ω is hidden
              + C_host / B_host                offload traffic over PCIe (never hidden)
              + M_cpu / B_cpu                  the offloaded optimizer's update in host memory (memory-bound)

Assumptions, printed wherever a time is: μ = 0.4 unless ``--mfu`` (the matmul-bound part of a
well-tuned fine-tuning step; elementwise kernels, launches and the loss are inside that derating);
ω = 0 (no overlap: communication adds to compute — an upper bound; ``--set overlap=0.7`` to change
it); nominal link and HBM bandwidths (data/gpus.toml, data/interconnects.toml); under offload, the CPU
optimizer's update at the nominal memory bandwidth of the card's typical host shared by its GPUs
(data/hosts.toml), after the backward and before the next forward. Step time cannot be measured without a GPU: the
benchmark ``benchmarks/step_time_gpu.py`` compares it with a real step where there is one.

>>> from symvram.scenario import Scenario
>>> sc = Scenario.create("7b", method="full")
>>> f = flops(sc)
>>> round(f.recompute_share_if_checkpointed, 3)    # one more forward, less the early-stopped down projection
0.257
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from functools import cache, cached_property, lru_cache
from importlib import resources

import sympy as sp

from .errors import UserError, excerpt
from .evaluate import exact_function
from .ledger import build_ledger
from .ledger.comm import COMM_FIELDS, build_comm
from .ledger.flops import FLOPS_FIELDS, PHASES, build_flops
from .ledger.structure import Structure
from .presets import GPUSpec, gpu_presets
from .scenario import Scenario
from .symbols import sym

DEFAULT_MFU = 0.4
Phi, mu, B_hbm, B_link, B_host, B_cpu, omega = (sym(n) for n in ("peak_flops", "mfu", "hbm_bandwidth", "link_bandwidth",
                                                                  "host_bandwidth", "cpu_bandwidth", "overlap"))


@cache
def interconnects() -> dict[str, dict]:
    return tomllib.loads(resources.files("symvram.data").joinpath("interconnects.toml").read_text(encoding="utf-8"))


def check_mfu(value) -> float:
    """``--mfu``: a fraction in (0, 1]."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UserError(f"--mfu must be a number in (0, 1] (model FLOPs utilization, default {DEFAULT_MFU}); "
                        f"got {excerpt(value)}") from None
    if not 0 < v <= 1:
        raise UserError(f"--mfu must be in (0, 1] (model FLOPs utilization, default {DEFAULT_MFU}); got {excerpt(value)}")
    return v


def check_interconnect(name: str | None) -> str | None:
    if name is None or name in interconnects():
        return name
    raise UserError(f"--interconnect: unknown link {name!r}; known: {', '.join(interconnects())}")


TIME_FIELDS = tuple(dict.fromkeys(FLOPS_FIELDS + COMM_FIELDS))   # every field the step time reads
# the step's parts, derived per structure by ``time_parts``: FLOPs, then HBM, link, host and CPU-memory bytes
TIME_PARTS = F, M_hbm, C_link, C_host, M_cpu = tuple(sym(n) for n in ("step_flops", "hbm_bytes", "link_bytes",
                                                                        "host_bytes", "cpu_bytes"))
# the roofline above over the step's parts (``time_parts``) and the card's figures
STEP_TIME = F / (Phi * mu) + M_hbm / B_hbm + (1 - omega) * C_link / B_link + C_host / B_host + M_cpu / B_cpu


def time_parts(sc) -> dict[sp.Symbol, sp.Expr]:
    """The parts of ``STEP_TIME`` of a Scenario or a Structure, over the registry symbols (derived quantities
    unexpanded): FLOPs from the FLOPs ledger, bytes from the communication ledger. Structures share them widely
    (the FLOPs read neither the ZeRO stage nor the precision recipe): the page substitutes them into
    ``STEP_TIME`` itself. The dict is cached: not to be changed. DDP all-reduces every gradient as a ring:

    >>> from symvram.ledger.structure import Structure
    >>> time_parts(Structure(method="full", params_given=True))[C_link]
    2*P_train*bytes_grad*(gpus - 1)/gpus
    """
    s = getattr(sc, "structure", sc)
    return _time_parts(s.keep(FLOPS_FIELDS), s.keep(COMM_FIELDS))


@lru_cache(maxsize=1024)
def _time_parts(flops_structure: Structure, comm_structure: Structure) -> dict[sp.Symbol, sp.Expr]:
    cm = build_comm(comm_structure)
    return dict(zip(TIME_PARTS, (build_flops(flops_structure).total, cm.block_expr("hbm"), cm.block_expr("network"),
                                 cm.block_expr("host"), cm.block_expr("cpu"))))


def time_expr(sc) -> sp.Expr:
    """Seconds per step as one expression over the registry symbols (derived quantities unexpanded),
    of a Scenario or a Structure."""
    return STEP_TIME.xreplace(time_parts(sc))


@dataclass(frozen=True)
class Flops:
    """Matmul-class FLOPs of one micro-batch's step on one GPU, by phase and by term."""

    by_phase: dict[str, int]
    by_term: dict[str, int]
    per_step: int
    scenario: Scenario = field(repr=False, compare=False)

    @cached_property
    def recompute_share_if_checkpointed(self) -> float:
        """What checkpointing adds, over the step without it (the other FLOPs ledger built only when asked).
        Checkpointing is toggled without with_changes: no other setting depends on it."""
        sc = self.scenario
        other = replace(sc, grad_checkpointing=not sc.grad_checkpointing)
        other_total = sum(int(v) for v in _flops_program(other.structure, sc.structure)(sc.values()))
        without, with_ = (other_total, self.per_step) if sc.grad_checkpointing else (self.per_step, other_total)
        return (with_ - without) / without

    def json(self) -> dict:
        return {"by_phase": self.by_phase, "by_term": self.by_term}


COMM_BLOCKS = ("network", "host", "hbm", "cpu")


@lru_cache(maxsize=256)
def _flops_program(structure, ledger_structure):
    """The FLOPs terms of ``structure`` with the derived quantities of ``ledger_structure``'s ledger, compiled
    once."""
    return exact_function(build_ledger(ledger_structure).definitions, tuple(x.expr for x in build_flops(structure).terms))


@lru_cache(maxsize=256)
def _comm_program(structure):
    cm = build_comm(structure)
    return exact_function(build_ledger(structure).definitions, tuple(cm.block_expr(b) for b in COMM_BLOCKS))


def flops(sc: Scenario) -> Flops:
    fl = build_flops(sc.structure)
    by_term = {x.key: int(v) for x, v in zip(fl.terms, _flops_program(sc.structure, sc.structure)(sc.values()))}
    by_phase = {p: sum(by_term[x.key] for x in fl.phase_terms(p)) for p in PHASES}
    return Flops(by_phase, by_term, sum(by_phase.values()), sc)


def comm_bytes(sc: Scenario) -> dict[str, int]:
    """Bytes one GPU sends per step (network, host), the memory-bound HBM bytes and the host-memory bytes of an
    offloaded optimizer's update (cpu): card-independent."""
    return dict(zip(COMM_BLOCKS, map(math.ceil, _comm_program(sc.structure)(sc.values()))))


@dataclass(frozen=True)
class Link:
    key: str
    name: str
    bytes_per_s: float


@dataclass(frozen=True)
class Host:
    """The machine a card sits in: its CPU memory's share per GPU (data/hosts.toml)."""

    key: str
    name: str
    bytes_per_s: float     # the host's nominal memory bandwidth over the GPUs that share it


@cache
def hosts() -> dict[str, dict]:
    return tomllib.loads(resources.files("symvram.data").joinpath("hosts.toml").read_text(encoding="utf-8"))


def host_of(key: str) -> Host:
    """A host of data/hosts.toml, each GPU's share of its memory bandwidth.

    >>> host_of("dgx-h100").bytes_per_s / 1e9    # 2 sockets × 8 channels × DDR5-4800 × 8 B, over 8 GPUs
    76.8
    """
    entry = hosts()[key]
    return Host(key, entry["name"], entry["gbps"] * 1e9 / entry["gpus"])


@dataclass(frozen=True)
class StepTime:
    """The roofline of one scenario on one card."""

    scenario: Scenario
    card: GPUSpec
    mfu: float
    link: Link
    host_link: Link
    host: Host
    flops: Flops
    comm: dict[str, int]           # network / host bytes sent per step, hbm / cpu bytes of the memory-bound work
    seconds: dict[str, float]      # compute / memory / network / host / cpu / total
    peak_flops: float

    @property
    def seconds_per_step(self) -> float:
        return self.seconds["total"]

    @property
    def tokens_per_step(self) -> int:
        return self.scenario.batch * self.scenario.seq * self.scenario.gpus   # every data-parallel rank's micro-batch

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.seconds_per_step

    @property
    def gpus_total(self) -> int:
        return self.scenario.gpus * self.scenario.tp

    @property
    def tokens_per_second_per_gpu(self) -> float:
        return self.tokens_per_second / self.gpus_total

    def assumptions(self) -> list[str]:
        sc = self.scenario
        out = [f"MFU {self.mfu:g} of {self.card.name}'s dense {sc.matmul_dtype} peak "
               f"{self.peak_flops / 1e12:g} TFLOP/s",
               f"HBM {self.card_hbm / 1e9:g} GB/s for the memory-bound work"]
        if self.comm["network"]:
            overlap = sc.values()["overlap"]
            out.append(f"{self.link.name} at {self.link.bytes_per_s / 1e9:g} GB/s per direction, "
                       + ("no overlap with compute (an upper bound)" if not overlap else f"{overlap:g} of it hidden"))
        if self.comm["host"]:
            out.append(f"{self.host_link.name} at {self.host_link.bytes_per_s / 1e9:g} GB/s to the CPU, not hidden"
                       + ("; activation copies not hidden behind compute (an upper bound: "
                          + ("TRL" if sc.offload_activations else "Unsloth") + " overlaps them on a second stream)"
                          if sc.offload_activations or sc.structure.offload_checkpoints else ""))
        if self.comm["cpu"]:
            out.append(f"the CPU optimizer's update memory-bound at {self.host.bytes_per_s / 1e9:.3g} GB/s of host memory "
                       f"per GPU{'' if self.host.key == 'set' else ', nominal'} ({self.host.name}); modelled, not "
                       "measured")
        return out

    @property
    def card_hbm(self) -> float:
        return dict(self.scenario.overrides).get("hbm_bandwidth", card_figures(self.card, self.scenario.matmul_dtype)[1])

    def summary(self) -> str:
        return (f"{self.seconds_per_step:.3g} s/step, {self.tokens_per_second:,.0f} tokens/s in all "
                f"({self.tokens_per_second_per_gpu:,.0f} per GPU)")

    def json(self) -> dict:
        return {"flops_per_step": self.flops.per_step, "flops": self.flops.by_phase,
                "flops_by_term": self.flops.by_term,
                "comm_bytes_per_step": self.comm["network"], "host_bytes_per_step": self.comm["host"],
                "hbm_bytes_per_step": self.comm["hbm"], "cpu_bytes_per_step": self.comm["cpu"],
                "seconds_per_step": self.seconds_per_step, "seconds": self.seconds,
                "tokens_per_second": self.tokens_per_second,
                "tokens_per_second_per_gpu": self.tokens_per_second_per_gpu,
                "card": self.card.name, "mfu": self.mfu, "interconnect": self.link.key,
                "assumptions": self.assumptions()}


def _link(key: str) -> Link:
    entry = interconnects()[key]
    return Link(key, entry["name"], entry["gbps"] * 1e9)


SIZE_CARD_LINK = "pcie4"   # a card given as a size: its GPU and host links, unless --interconnect says otherwise
SIZE_CARD_HOST = "desktop-ddr5"   # ... and the host it sits in


def card_figures(card: GPUSpec, dtype: str) -> tuple[float, float, str, str, str]:
    """(peak FLOP/s, HBM B/s, interconnect, host link, host) of a named card; one-line errors otherwise."""
    entry = gpu_presets().get(card.key)
    if entry is None and card.tflops and card.hbm_gbps:   # a size with the user's figures; the link as stated
        return card.tflops * 1e12, card.hbm_gbps * 1e9, SIZE_CARD_LINK, SIZE_CARD_LINK, SIZE_CARD_HOST
    if entry is None:
        raise UserError(f"--gpu {card.key}: a bare size has no peak FLOP/s or bandwidth for a step time; pass "
                        f"--tflops and --hbm-gbps, or name a card "
                        f"({', '.join(k for k, e in gpu_presets().items() if 'bf16_tflops' in e)})")
    field = f"{dtype}_tflops"
    if dtype not in ("bf16", "fp16") or field not in entry:
        with_figure = [k for k, e in gpu_presets().items() if field in e] if dtype in ("bf16", "fp16") else []
        raise UserError(f"--gpu {card.key}: no dense {dtype} peak figure for {card.name} in data/gpus.toml, so no step "
                        f"time; cards with one: {', '.join(with_figure) or 'none (compute in bf16 or fp16)'}")
    return entry[field] * 1e12, entry["hbm_gbps"] * 1e9, entry["interconnect"], entry["host_link"], entry["host"]


def step_time(sc: Scenario, card: GPUSpec, mfu: float | None = None, interconnect: str | None = None) -> StepTime:
    """Seconds per step and tokens/s of ``sc`` on ``card`` (the roofline above); ``--set`` replaces any of the
    card's figures (peak_flops, hbm_bandwidth, link_bandwidth, host_bandwidth, cpu_bandwidth) and the MFU."""
    given = dict(sc.overrides)
    mfu = check_mfu(given.get("mfu", DEFAULT_MFU) if mfu is None else mfu)
    peak, hbm, link_key, host_key, machine = card_figures(card, sc.matmul_dtype)
    peak, hbm = given.get("peak_flops", peak), given.get("hbm_bandwidth", hbm)
    link = _link(check_interconnect(interconnect) or link_key)
    host = _link(host_key)
    cpu = host_of(machine)
    if "link_bandwidth" in given:
        link = Link(link.key, f"{link.name} (--set link_bandwidth)", given["link_bandwidth"])
    if "host_bandwidth" in given:
        host = Link(host.key, f"{host.name} (--set host_bandwidth)", given["host_bandwidth"])
    if "cpu_bandwidth" in given:
        cpu = Host("set", "as given by --set cpu_bandwidth", given["cpu_bandwidth"])
    fl = flops(sc)
    comm = comm_bytes(sc)
    overlap = sc.values()["overlap"]
    seconds = {"compute": fl.per_step / (peak * mfu), "memory": comm["hbm"] / hbm,
               "network": (1 - overlap) * comm["network"] / link.bytes_per_s,
               "host": comm["host"] / host.bytes_per_s, "cpu": comm["cpu"] / cpu.bytes_per_s}
    seconds["total"] = sum(seconds.values())
    return StepTime(sc, card, mfu, link, host, cpu, fl, comm, seconds, peak)


def time_price(before: StepTime, after: StepTime) -> float:
    """The change in throughput a remedy costs, in % of tokens/s per GPU (positive: slower)."""
    return 100 * (1 - after.tokens_per_second_per_gpu / before.tokens_per_second_per_gpu)
