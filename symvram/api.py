"""The Python API: the CLI's commands as functions, for scripts and notebooks.

Every function takes the model as the CLI does (a preset such as ``"7b"``, a config.json path, a
ModelSpec) or an existing Scenario, plus Scenario settings as keywords (``method``, ``rank``,
``batch``, ``seq``, ``dtype``, ``master`` …). Results display themselves in Jupyter.

>>> e = estimate("llama-2-7b", method="lora", rank=64)
>>> e.derived["P"], e.derived["P_train"]
(6738415616, 159907840)
"""
from __future__ import annotations

from dataclasses import dataclass

from .analysis.diagnose import PROBE_SEQ
from .analysis.fit import DEFAULT_HEADROOM, KNOBS
from .analysis.sensitivity import SensitivityResult, compare as compare_knobs
from .errors import UserError
from .evaluate import Breakdown, evaluate
from .ledger.architecture import shipped_model_types
from .ledger.objectives import objectives
from .presets import GPUSpec, ModelSpec, load_model
from .scenario import Scenario
from .timing import DEFAULT_MFU, check_interconnect, check_mfu, interconnects

# Besides the commands as functions, the names the command line reads from the layers below pass through here, so
# that a command crosses each layer once, downward: fit's knobs and default margin, diagnose's probe length, the
# sensitivity comparison of two knobs, the step-time roofline's defaults and checks, the objectives, the model types
# with a family entry.
__all__ = ["scenario", "estimate", "estimate_report", "compare", "compare_report", "fit", "whatif", "sensitivity",
           "step_time", "plan", "diagnose", "plot", "explain", "Breakdown", "Scenario", "GPUSpec", "ModelSpec",
           "DEFAULT_HEADROOM", "KNOBS", "PROBE_SEQ", "SensitivityResult", "compare_knobs", "DEFAULT_MFU",
           "check_interconnect", "check_mfu", "interconnects", "objectives", "shipped_model_types", "PLOT_KINDS",
           "DEFAULT_PLOT_CARDS", "DEFAULT_PLOT_RANKS", "check_allocator"]

Model = str | ModelSpec | Scenario


def scenario(model: Model | None = None, from_file: str | list[str] | None = None, **settings) -> Scenario:
    """A checked Scenario: ``model`` with ``settings``, or an existing Scenario with some changed. ``from_file``
    (one path or a list, as ``--from``): the training configs' settings, under ``settings``; ``model`` may then
    be left out when a file names the base model.

    >>> scenario("7b", method="qlora").with_changes(rank=8).rank
    8
    """
    if isinstance(model, Scenario):
        return model.with_changes(**settings)
    if from_file is not None:
        from .readers.read import read_files

        paths = [from_file] if isinstance(from_file, str) else list(from_file)
        reading = read_files(paths, settings)
        if model is None and reading.model is None:
            raise UserError(f"{', '.join(paths)} names no base model; pass model=")
        files = reading.kwargs()
        if "overrides" in files and "overrides" in settings:   # as on the command line: --set over the files
            settings = {**settings, "overrides": {**files["overrides"], **dict(settings["overrides"])}}
        model, settings = (model if model is not None else load_model(reading.model.value)), {**files, **settings}
    if model is None:
        raise UserError("scenario(): give a model (a preset, a config.json, a Hub id) or from_file=")
    return Scenario.create(model, **settings)


def estimate(model: Model | None = None, gpu: str | int | GPUSpec | None = None, headroom: int | str = "1GiB",
             **settings):
    """``symvram estimate MODEL --method …``: every term, block and moment of one scenario, in bytes (a
    Breakdown). With ``gpu`` (``--gpu``) the verdict on that card instead: the Diagnosis, whose ``estimate``
    is that Breakdown. ``from_file=`` reads training configs as ``--from`` does.

    >>> e = estimate("7b", method="full", master="fp32")
    >>> e.terms["weights"], e.terms["grads"], e.terms["master"], e.terms["optimizer_states"]
    (14000000000, 14000000000, 28000000000, 56000000000)
    >>> estimate("7b", method="qlora", gpu="rtx-4090").cause
    'fits'
    """
    sc = scenario(model, **settings)
    if gpu is None:
        return evaluate(sc)
    from .analysis.diagnose import diagnose as triage

    return triage(sc, _card(gpu), headroom=headroom)


def estimate_report(model: Model | None = None, gpu: str | int | GPUSpec | None = None,
                    headroom: int | str = "1GiB", allocator: str | None = None, mfu: float | None = None,
                    interconnect: str | None = None, **settings):
    """Everything ``symvram estimate MODEL --method …`` prints, as one result (``analysis.estimate.EstimateReport``):
    the Breakdown, the step's FLOPs and time, the caching allocator's replay and, with ``gpu``, the verdict.

    >>> r = estimate_report("7b", method="qlora", gpu="rtx-4090")
    >>> r.diagnosis.cause, r.timing.step.tokens_per_second > 0
    ('fits', True)
    """
    from .analysis.estimate import estimate_report as _report

    return _report(scenario(model, **settings), None if gpu is None else _card(gpu), headroom=headroom,
                   allocator=allocator, mfu=mfu, interconnect=interconnect)


@dataclass(frozen=True)
class Comparison:
    """The reference answer's table: named estimates of one model, side by side.

    ``skipped`` names the rows the engine refuses for these settings, with the reason (fp32 weights
    are their own master copy; fp16 needs one)."""

    rows: tuple[tuple[str, Breakdown], ...]
    skipped: tuple[tuple[str, str], ...] = ()

    def __getitem__(self, name: str) -> Breakdown:
        return dict(self.rows)[name]

    def table(self, units: str = "GiB", fmt: str = "table") -> str:
        """The table as text (``fmt="table"``) or Markdown, with a line for each refused row."""
        from .present.tables import comparison

        notes = "".join(f"\n{name}: not shown — {reason}" for name, reason in self.skipped)
        return comparison(list(self.rows), units, fmt) + ("\n" + notes if notes else "")

    def __repr__(self) -> str:
        return self.table()

    def _repr_markdown_(self) -> str:
        return self.table(fmt="markdown")


COMPARED = (("full", {"method": "full", "master": "none"}), ("full + fp32 master", {"method": "full", "master": "fp32"}),
            ("LoRA", {"method": "lora"}), ("QLoRA", {"method": "qlora"}))


def compare(model: Model, **settings) -> Comparison:
    """``symvram estimate MODEL`` (no ``--method``): full without and with an fp32 master, LoRA, QLoRA.

    >>> c = compare("7b", rank=16)
    >>> [name for name, _ in c.rows]
    ['full', 'full + fp32 master', 'LoRA', 'QLoRA']
    >>> c["LoRA"].derived["P_train"]
    39976960
    >>> [name for name, _ in compare("7b", dtype="fp32").skipped]   # fp32 weights are their own master
    ['full + fp32 master', 'QLoRA']
    """
    settings = {k: v for k, v in settings.items() if k not in ("method", "master")}
    model = model if isinstance(model, ModelSpec) else load_model(model)  # a bad model is one error, not four
    rows, skipped = [], []
    for name, choice in COMPARED:
        try:
            rows.append((name, estimate(model, **settings, **choice)))
        except UserError as e:
            skipped.append((name, str(e)))
    if not rows:
        reasons = dict.fromkeys(reason for _, reason in skipped)
        raise UserError(next(iter(reasons)) if len(reasons) == 1 else
                        "; ".join(f"{name}: {reason}" for name, reason in skipped))
    return Comparison(tuple(rows), tuple(skipped))


def check_allocator(choice: str | None) -> str:
    """``--allocator`` checked (default | expandable; None: what PYTORCH_CUDA_ALLOC_CONF says), also where the
    answer does not replay the allocator (the reference table), so that a typo is never silently ignored.

    >>> check_allocator("expandable")
    'expandable'
    """
    from .card_memory import allocator_from_env

    return allocator_from_env(choice)


def compare_report(table: Comparison, gpu: str | int | GPUSpec | None = None, headroom: int | str = "0"):
    """``symvram estimate MODEL`` as one result (``analysis.estimate.CompareReport``): ``compare``'s rows with their
    FLOPs and, with ``gpu``, each row's tokens/s on it, within its usable memory less ``headroom``.

    >>> r = compare_report(compare("7b"), gpu="h100-80g")
    >>> [name for name, bd in r.rows if bd.peak <= r.budget]
    ['LoRA', 'QLoRA']
    """
    from .analysis.estimate import compare_report as _report
    from .analysis.fit import headroom_bytes

    card = None if gpu is None else _card(gpu)
    budget = None if card is None else card.usable_bytes - headroom_bytes(headroom, card.usable_bytes)
    return _report(table.rows, table.skipped, card, budget)


def fit(model: Model, gpu: str | int | GPUSpec, solve: str = "seq", headroom: int | str = "0",
        limit: int | None = None, allocator: str | None = None, **settings):
    """``symvram fit MODEL --gpu GPU --solve seq|batch|rank``: the largest value whose two steps the simulated
    caching allocator runs on the card (``allocator``: default | expandable, else PYTORCH_CUDA_ALLOC_CONF's).

    ``gpu`` is a card name (``"rtx-4090"``), a size (``"24GiB"``), a number of bytes or a GPUSpec.

    >>> r = fit("llama-3-8b", "rtx-4090", solve="seq", method="qlora", batch=4)
    >>> r.status, r.memory.reserved_peak <= r.budget, r.memory_above.fits
    ('fits', True, False)
    """
    from .analysis.fit import fit as _fit

    return _fit(scenario(model, **settings), _card(gpu), solve=solve, headroom=headroom, limit=limit,
                allocator=allocator)


def whatif(model: Model, changes: dict[str, int | float], **settings):
    """``symvram whatif MODEL --set SYMBOL=VALUE …``: both ledgers and the change, term by term.

    ``changes`` maps registry symbols to new values: run settings (``rank``, ``batch``, ``seq``) or any
    other symbol (``hidden``, ``layers``, ``bytes_state`` …).

    >>> w = whatif("7b", {"bytes_state": 1}, method="full")      # 8-bit optimizer states
    >>> w.term_delta("optimizer_states") == 7_000_000_000 * 2 * (1 - 4)
    True
    """
    from .analysis.whatif import whatif as _whatif

    return _whatif(scenario(model, **settings), changes)


def sensitivity(model: Model, knobs: list[str] | None = None, **settings):
    """``symvram sensitivity MODEL``: ∂peak/∂x and the elasticity of each knob, ranked.

    The elasticity is the percent change of the peak per percent change of the knob.

    >>> res = sensitivity("7b", ["bytes_weight", "rank"], method="lora")
    >>> res.row("bytes_weight").derivative, res.row("bytes_weight").value    # ∂peak/∂β_w = P
    (P, 7000000000.0)
    """
    from .analysis.sensitivity import sensitivity as _sensitivity

    return _sensitivity(scenario(model, **settings), knobs)


def _card(gpu: str | int | GPUSpec) -> GPUSpec:
    from .presets import load_card

    if isinstance(gpu, GPUSpec):
        return gpu
    return load_card(gpu if isinstance(gpu, str) else f"{gpu}B")


def step_time(model: Model, gpu: str | GPUSpec, mfu: float | None = None, interconnect: str | None = None,
              **settings):
    """The time ledger of one setup on a card: FLOPs by phase, bytes sent, seconds per step, tokens/s.

    >>> t = step_time("7b", "h100", method="lora")
    >>> t.flops.by_phase["recompute"], round(t.seconds_per_step, 3)
    (0, 0.162)
    """
    from .timing import step_time as _step_time

    return _step_time(scenario(model, **settings), _card(gpu), mfu, interconnect)


def plan(model: Model, gpu: str | int | GPUSpec, max_gpus: int = 64, headroom: int | str = "0",
         methods: tuple[str, ...] | None = None, strategies: tuple[str, ...] | None = None, mfu: float | None = None,
         interconnect: str | None = None, allocator: str | None = None, **settings):
    """``symvram plan MODEL --gpu GPU``: the fewest GPUs for each method × strategy (DDP, ZeRO, TP, offload).

    >>> r = plan("70b", "a100-80g", methods=("qlora",), grad_checkpointing=True)
    >>> r.best("qlora").gpus, r.best("qlora").strategy.name     # a 35 GB NF4 base: one 80 GB card
    (1, 'DDP')
    """
    from .analysis.plan import plan as _plan

    return _plan(scenario(model, **settings), _card(gpu), max_gpus=max_gpus, headroom=headroom,
                 methods=methods, strategies=strategies, mfu=mfu, interconnect=interconnect, allocator=allocator)


def diagnose(model: Model, gpu: str | int | GPUSpec, headroom: int | str = "0", p95_seq: int | None = None,
             measured_peak: int | str | None = None, measured_at: dict | None = None, max_gpus: int = 64,
             allocator: str | None = None, mfu: float | None = None, interconnect: str | None = None, **settings):
    """``symvram diagnose MODEL --gpu GPU``: OOM triage, which side is over and the remedies in order.

    ``measured_peak`` (bytes or a size such as ``"23.1GiB"``) fits the overhead the ledger does not hold.

    >>> d = diagnose("llama-3-8b", "24GiB", method="lora", batch=4, seq=4096)
    >>> d.side, d.fixed
    ('activation', True)
    """
    from .analysis.diagnose import diagnose as _diagnose
    from .units import parse_size

    if isinstance(measured_peak, str):
        measured_peak = parse_size(measured_peak)
    return _diagnose(scenario(model, **settings), _card(gpu), headroom=headroom, p95_seq=p95_seq,
                     measured_peak=measured_peak, measured_at=measured_at, max_gpus=max_gpus, allocator=allocator,
                      mfu=mfu, interconnect=interconnect)


PLOT_KINDS = ("breakdown", "seq-curve", "tornado", "fit-map")
DEFAULT_PLOT_CARDS = ("rtx-4090", "a100-80g")
DEFAULT_PLOT_RANKS = (8, 16, 64, 256)


def plot(model: Model, kind: str = "breakdown", gpu: str | list[str] | None = None, ranks=None,
         top: int | None = None, headroom: int | str = "0", units: str = "GiB", theme: str = "light",
         seq_max: int | None = None, **settings):
    """``symvram plot MODEL --kind KIND``: a matplotlib Figure (breakdown, seq-curve, tornado, fit-map).

    The method defaults to LoRA, as in the CLI (a breakdown emphasises its bars). ``gpu``: the cards drawn on
    a breakdown or a seq-curve (seq-curve default rtx-4090 and a100-80g), the card of a fit-map. ``seq_max``:
    the longest sequence a seq-curve or fit-map spans (default: four times ``seq``, at least 8192, within the
    model's context; a log2 axis).
    In Jupyter, ``%matplotlib inline`` shows the figure.

    >>> fig = plot("7b", "seq-curve", ranks=(16, 64))
    >>> fig.axes[0].get_xlabel()
    'sequence length s (tokens)'
    """
    from .analysis.curves import fit_cells, seq_curves
    from .present import plots

    if kind not in PLOT_KINDS:
        raise UserError(f"plot kind must be one of {', '.join(PLOT_KINDS)}; got {kind!r}")
    settings.setdefault("method", "lora")
    cards = [_card(g) for g in ([gpu] if isinstance(gpu, (str, int, GPUSpec)) else gpu or [])]
    sc = scenario(model, **settings)
    if kind == "breakdown":
        return plots.breakdown(compare(model, **settings).rows, units, theme, cards=cards, requested=sc)
    if kind == "seq-curve":
        if ranks and not sc.lora:
            raise UserError(f"--ranks does not apply to --method {sc.method}: there are no LoRA adapters")
        curves = seq_curves(sc, ranks=ranks or DEFAULT_PLOT_RANKS, cards=cards or [_card(c) for c in DEFAULT_PLOT_CARDS],
                            seq_max=seq_max, headroom=headroom)
        return plots.seq_curve(curves, units=units, theme=theme)
    if kind == "tornado":
        return plots.tornado(sensitivity(sc), top=top, units=units, theme=theme)
    if len(cards) != 1:
        raise UserError("--kind fit-map needs exactly one --gpu (a named card or a size such as 24GiB)")
    return plots.fit_map(fit_cells(sc, cards[0], headroom=headroom, seq_max=seq_max), units=units, theme=theme)


@dataclass(frozen=True)
class Document:
    """A rendered document: ``str(doc)`` is its text; Jupyter shows Markdown and HTML as such."""

    text: str
    fmt: str

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        import re

        title = re.search(r"(?m)^# (.*)$|<h1[^>]*>(.*?)</h1>|\\section\*?\{(.*?)\}", self.text)
        heading = next((g for g in title.groups() if g), "") if title else ""
        return f"<Document {self.fmt}, {len(self.text):,} characters: {heading}>"

    def _repr_markdown_(self) -> str | None:
        return self.text if self.fmt == "markdown" else None

    def _repr_html_(self) -> str | None:
        """A whole HTML page, shown in an iframe so that its styles stay out of the notebook."""
        if self.fmt != "html":
            return None
        from html import escape

        return f'<iframe srcdoc="{escape(self.text)}" style="width: 100%; height: 40em; border: 0"></iframe>'


def explain(model: Model, fmt: str = "markdown", lang: str = "en", gpu: str = "a100-80g", other: str | None = None,
            units: str = "GiB", **settings) -> Document:
    """``symvram explain MODEL``: the worked answer (derivation, numbers, follow-ups) as a document.

    ``fmt``: markdown, html or tex; ``lang``: en or zh; ``other``: the model to re-derive at.

    >>> doc = explain("7b", method="lora")
    >>> doc.text.splitlines()[0]
    '# Fine-tuning memory of 7b: the worked answer'
    """
    from .present.documents import render

    return Document(render(scenario(model, **settings), fmt=fmt, lang=lang, gpu=gpu, other=other, units=units), fmt)
