"""The interactive calculator page: one self-contained HTML file generated from the ledger.

Every formula in the page is the ledger's own SymPy expression, printed twice: as JavaScript
(``sympy.jscode``) for the arithmetic and as MathML (``latex2mathml`` of ``symbols.latex``) for the
reader. The page holds the ledgers of every structure its controls can reach; it works out which one
applies from two tables computed here by building real Scenarios:

- the *recipe* table (method × dtype × master × state dtype × adapter dtype): which
  structure fields and which numbers (``bytes_weight``, ``bytes_grad`` …) each choice gives, or the
  error ``Scenario.create`` raises;
- the *shape* table (method × targets × optimizer implementation × attention × checkpointing ×
  ZeRO stage): the rest of the structure, the largest valid rank, or the error.

Batch, sequence length, rank and the number of GPUs are plain numbers the page substitutes; which symbols they set is
found by changing each one on a Scenario and seeing which values move. No formula, dtype size or
validity rule is typed into the page by hand.

>>> recipe, shape = controls(Scenario.create("7b", method="lora", zero=2))
>>> [c.name for c in shape], shape[-1].option_labels()[shape[-1].initial]
(['method', 'targets', 'optimizer_impl', 'attention', 'grad_checkpointing', 'zero'], '2: ZeRO-2')
"""
from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources

import jinja2
from latex2mathml.converter import convert as latex_to_mathml
import sympy as sp
from sympy.printing.jscode import JavascriptCodePrinter

from ..analysis.fit import DEFAULT_HEADROOM, headroom_bytes
from ..card_memory import card_memory, device_block
from ..errors import UserError
from ..evaluate import free_symbols
from ..timing import STEP_TIME, TIME_FIELDS, TIME_PARTS, time_parts
from ..ledger import build_ledger
from ..ledger.sharding import divide_terms, divides_only
from ..presets import gpu_presets, load_gpu
from ..ledger.terms import BLOCKS, STAGE_NAMES
from ..scenario import (ATTENTIONS, DTYPES, MAX_BATCH, MAX_GPUS, MAX_RANK, MAX_SEQ, METHODS, OPTIMIZER_IMPLS,
                        STATE_DTYPES, Scenario)
from ..symbols import SYMBOLS, LatexPrinter
from .style import BLOCK_COLORS, FIT_COLORS, NEUTRAL, short_card_name
from .tables import BLOCK_TITLES
from ..units import UNITS

CONTINUOUS = ("batch", "seq", "rank", "gpus")
LIMITS = {"batch": MAX_BATCH, "seq": MAX_SEQ, "rank": MAX_RANK, "gpus": MAX_GPUS}
LABELS = {
    "method": "method", "targets": "LoRA targets", "optimizer_impl": "AdamW implementation",
    "attention": "attention", "grad_checkpointing": "activation checkpointing", "zero": "ZeRO stage (FSDP)",
    "dtype": "weight dtype", "master": "fp32 master copy", "state_dtype": "optimizer-state dtype",
    "adapter_dtype": "adapter dtype", "batch": "micro-batch", "seq": "sequence length",
    "rank": "LoRA rank r", "gpus": "data-parallel GPUs N",
}
LORA_ONLY = ("targets", "adapter_dtype", "rank")   # read only with adapters: greyed out for full fine-tuning
# the page's colours are the figures' (present/style.py): CSS variables named by the keys
COLORS = {**BLOCK_COLORS, "fits": FIT_COLORS["fits"], "nofit": FIT_COLORS["does not fit"], "neutral": NEUTRAL}
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Control:
    """One discrete control: its Scenario field, the values it offers and which is selected."""

    name: str
    values: tuple
    initial: int
    named: tuple[tuple[str, tuple], ...] = ()  # names of tuple values (the family's LoRA target groups)

    def option_labels(self) -> list[str]:
        def label(v) -> str:
            if isinstance(v, tuple):
                named = [k for k, members in self.named if members == v]
                return named[0] if named else ",".join(v)
            if isinstance(v, bool):
                return "on" if v else "off"
            if self.name == "zero":
                return f"{v}: {STAGE_NAMES[v]}"
            return str(v)
        return [label(v) for v in self.values]


def _control(sc: Scenario, name: str, values: tuple, named: tuple = ()) -> Control:
    current = getattr(sc, name)
    if current not in values:
        values = (*values, current)
    return Control(name, values, values.index(current), named)


def controls(sc: Scenario) -> tuple[tuple[Control, ...], tuple[Control, ...]]:
    """The recipe controls and the shape controls (method belongs to both), initialised from ``sc``."""
    method = _control(sc, "method", METHODS)
    recipe = (method, _control(sc, "dtype", DTYPES), _control(sc, "master", ("none", "fp32")),
              _control(sc, "state_dtype", STATE_DTYPES), _control(sc, "adapter_dtype", DTYPES))
    groups = sc.structure.arch.targets
    shape = (method, _control(sc, "targets", tuple(dict.fromkeys(m for _, m in groups)), groups),
             _control(sc, "optimizer_impl", OPTIMIZER_IMPLS), _control(sc, "attention", ATTENTIONS),
             _control(sc, "grad_checkpointing", (False, True)), _control(sc, "zero", tuple(STAGE_NAMES)))
    return recipe, shape


def fixed_settings(sc: Scenario) -> dict[str, str]:
    """The settings the page has no control for, as text: they stay as the command line gave them.

    >>> fixed_settings(Scenario.create("7b", method="lora", lora_dropout=0.05))["lora_dropout"]
    '0.05'
    """
    recipe, shape = controls(sc)
    controlled = {c.name for c in (*recipe, *shape)} | set(CONTINUOUS) | {"model", "model_kind", "targets"}
    return {k: ", ".join(f"{n}={v}" for n, v in value.items()) if isinstance(value, dict) else str(value)
            for k, value in sc.inputs().items() if k not in controlled and value != {}}


def _table(base_for, group: tuple[Control, ...]) -> list[Scenario | str]:
    """Every combination of ``group`` (mixed radix, last control fastest): a Scenario or the error."""
    out: list[Scenario | str] = []
    for combo in itertools.product(*(c.values for c in group)):
        kw = {c.name: v for c, v in zip(group, combo)}
        try:
            base = base_for(kw["method"])
            out.append(base if isinstance(base, str) else base.with_changes(**kw))
        except UserError as e:
            out.append(str(e))
    return out


def _varying(items: list[dict]) -> set[str]:
    return {k for k in items[0] if len({repr(d[k]) for d in items}) > 1} if items else set()


def continuous_symbols(sc: Scenario) -> dict[str, list[str]]:
    """Which value names each continuous setting fills (found by changing it, not by retyping).

    >>> continuous_symbols(Scenario.create("7b", method="lora"))
    {'batch': ['batch'], 'seq': ['seq'], 'rank': ['rank'], 'gpus': ['gpus']}
    """
    base = sc.with_changes(**{name: 2 for name in CONTINUOUS})   # 2 tokens: a GRPO prompt and its completion
    before = base.values()
    out = {}
    for name in CONTINUOUS:
        after = base.with_changes(**{name: 3}).values()
        moved = sorted(k for k in after if after[k] != before[k])
        if any(after[k] != 3 for k in moved):
            raise AssertionError(f"{name} does not map to its symbols one to one")
        out[name] = moved
    return out


def _max_rank(sc: Scenario) -> int:
    """The largest rank Scenario accepts for this method and these targets."""
    def ok(r: int) -> bool:
        try:
            sc.with_changes(rank=r)
            return True
        except UserError:
            return False
    lo, hi = 1, MAX_RANK
    if ok(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


# SymPy's LaTeX spaces its operators: outside braces and \left…\right they cut a formula into pieces whose
# MathML, in one row, is latex2mathml's MathML of the whole
_PIECES = re.compile(r"\\[{}]|\\left|\\right|[{}]| (?:[=+-]|\\cdot) ")
_ROW = '<math display="inline"><mrow>', "</mrow></math>"
_NAMESPACE = ' xmlns="http://www.w3.org/1998/Math/MathML"'   # inline HTML5 MathML needs none (the page names no URL)


def _mathml(tex: str) -> str:
    r"""latex2mathml's MathML of ``tex``, each piece converted once (the page's formulas share most): a formula is
    cut at its top-level operators, and inside a parenthesis that is a whole piece, at the parenthesis' own.

    >>> tex = r"M/N = \frac{P \cdot \beta_{g}}{N} - \left\{L - 1\right\} \cdot \left(x^{2} + \left(y - 1\right)\right)"
    >>> _mathml(tex) == latex_to_mathml(tex).replace(_NAMESPACE, "")
    True
    """
    return _ROW[0] + _row(tex) + _ROW[1]


def _row(tex: str) -> str:
    depth, start, row = 0, 0, []
    for m in _PIECES.finditer(tex):
        token = m.group()
        if token in ("{", r"\left"):
            depth += 1
        elif token in ("}", r"\right"):
            depth -= 1
        elif depth == 0 and token[0] == " ":
            row += [_group(tex[start:m.start()]), _piece(token.strip())]
            start = m.end()
    return "".join(row) + _group(tex[start:])


def _group(tex: str) -> str:
    """A piece: a parenthesis around a row (latex2mathml fences the row's own MathML), else converted whole."""
    inner = tex[len(_OPEN):-len(_CLOSE)]
    if tex.startswith(_OPEN) and tex.endswith(_CLOSE) and _balanced(inner):
        opening, closing = _fence()
        return opening + _row(inner) + closing
    return _piece(tex)


_OPEN, _CLOSE = r"\left(", r"\right)"


def _balanced(tex: str) -> bool:
    """Whether every brace and \\left in ``tex`` closes inside it (``\\left(a\\right) + \\left(b\\right)`` is no
    parenthesis around a row)."""
    depth = 0
    for m in _PIECES.finditer(tex):
        depth += {"{": 1, r"\left": 1, "}": -1, r"\right": -1}.get(m.group(), 0)
        if depth < 0:
            return False
    return depth == 0


@cache
def _fence() -> tuple[str, str]:
    """latex2mathml's MathML before and after the row inside ``\\left( … \\right)``."""
    opening, closing = _piece(_OPEN + "x" + _CLOSE).split("<mi>x</mi>")
    return opening, closing


@cache
def _piece(tex: str) -> str:
    whole = latex_to_mathml(tex).replace(_NAMESPACE, "")
    if not (whole.startswith(_ROW[0]) and whole.endswith(_ROW[1])):
        raise AssertionError(f"latex2mathml wrapped {tex!r} otherwise: {whole[:80]}")
    return whole[len(_ROW[0]):-len(_ROW[1])]


class _Interner:
    """Assigns each distinct item a small integer, in first-seen order."""

    def __init__(self):
        self.items: dict = {}
        self.order: list = []   # item by id

    def __call__(self, item) -> int:
        i = self.items.setdefault(item, len(self.order))
        if i == len(self.order):
            self.order.append(item)
        return i

    def list(self) -> list:
        return list(self.order)


class _Once:
    """A SymPy printer that prints each subexpression once: the page's formulas share most of theirs (the 216
    step-time formulas their FLOPs and traffic sums, a sharded term its single-GPU formula); the same text."""

    def __init__(self, settings: dict | None = None):
        super().__init__(settings or {})
        self._printed: dict[sp.Basic, str] = {}

    def _print(self, expr, **kwargs) -> str:
        if kwargs or not isinstance(expr, sp.Basic):
            return super()._print(expr, **kwargs)
        if expr not in self._printed:
            self._printed[expr] = super()._print(expr)
        return self._printed[expr]


class _JavaScript(_Once, JavascriptCodePrinter):
    """``sympy.jscode``'s printer, a sum's terms in SymPy's own order (``order="none"``: sorting them for a reader
    is most of the printing time, and nobody reads the script).

    >>> from sympy.printing.jscode import jscode
    >>> from symvram.symbols import sym
    >>> e = sym("seq") * sym("batch") / 3 + sym("hidden")
    >>> _JavaScript().doprint(e) == jscode(e, order="none")
    True
    """

    def __init__(self):
        super().__init__({"order": "none"})

    def _handle_UnevaluatedExpr(self, expr):
        return expr   # CodePrinter rewrites re(…) of an UnevaluatedExpr, walking the whole tree: the ledger has none


class _Latex(_Once, LatexPrinter):
    """``symbols.latex``'s printer, each subexpression printed once.

    >>> from symvram.symbols import latex, sym
    >>> e = (sym("seq") * sym("batch") + sym("hidden")) / sym("gpus")
    >>> _Latex().doprint(e) == latex(e)
    True
    """


def _js_function(expr, printer: _JavaScript) -> str:
    names = sorted(s.name for s in free_symbols(expr))
    bad = [n for n in names if not _IDENTIFIER.match(n)]
    if bad:
        raise AssertionError(f"symbol names {bad} are not JavaScript identifiers")
    code = printer.doprint(expr)
    if "<" in code or ">" in code:  # arithmetic never compares; keep the script block unbreakable
        raise AssertionError(f"unexpected JavaScript for {expr}: {code}")
    return f"function(v){{{'const {' + ', '.join(names) + '} = v; ' if names else ''}return {code};}}"


def _card_time(key: str) -> dict:
    """A card's roofline figures for the page's step time: the dense bf16 peak (none where gpus.toml has no bf16
    figure: T4 and V100 have no bf16; the command line prices their fp16 runs)."""
    from ..timing import host_of, interconnects

    e = gpu_presets()[key]
    peak = e.get("bf16_tflops")
    if not peak:
        return {}
    return {"peak_flops": peak * 1e12, "hbm_bandwidth": e["hbm_gbps"] * 1e9,
            "link_bandwidth": interconnects()[e["interconnect"]]["gbps"] * 1e9,
            "host_bandwidth": interconnects()[e["host_link"]]["gbps"] * 1e9,
            "cpu_bandwidth": host_of(e["host"]).bytes_per_s}


def page_data(sc: Scenario, gpu: str | None = None, units: str = "GiB") -> tuple[dict, list[str]]:
    """Everything the page needs: JSON-ready data and the JavaScript function of each distinct expression."""
    card = load_gpu(gpu).key if gpu else None
    recipe, shape = controls(sc)
    probe = sc.with_changes(rank=1)
    recipe_rows = _table(lambda m: probe, recipe)
    first_ok = {}
    for row in recipe_rows:
        if not isinstance(row, str):
            first_ok.setdefault(row.method, row)
    shape_rows = _table(lambda m: first_ok.get(m, f"no precision recipe is valid for --method {m}"), shape)

    # Split the Structure: fields the recipe decides (per method) and the rest, which the shape decides.
    recipe_fields: dict[str, set[str]] = {}
    for m in METHODS:
        recipe_structs = [vars(r.structure) for r in recipe_rows if not isinstance(r, str) and r.method == m]
        shape_structs = [vars(r.structure) for r in shape_rows if not isinstance(r, str) and r.method == m]
        recipe_fields[m] = _varying(recipe_structs)
        clash = recipe_fields[m] & _varying(shape_structs)
        if clash:
            raise AssertionError(f"structure fields {clash} depend on both control groups")
        shape_values = [r.values() for r in shape_rows if not isinstance(r, str) and r.method == m]
        if _varying(shape_values) - set(CONTINUOUS):
            raise AssertionError("a shape control changes a numeric value")
    ok_recipes = [r for r in recipe_rows if not isinstance(r, str)]
    continuous = continuous_symbols(probe)
    fixed_names = {n for names in continuous.values() for n in names}
    value_dicts = [{k: v for k, v in r.values().items() if k not in fixed_names} for r in ok_recipes]
    recipe_value_names = _varying(value_dicts)
    common = {k: v for k, v in value_dicts[0].items() if k not in recipe_value_names} if value_dicts else {}

    vals, recipe_parts, shape_parts = _Interner(), _Interner(), _Interner()
    recipe_table = []
    for r in recipe_rows:
        if isinstance(r, str):
            recipe_table.append(r)
            continue
        part = (r.method, tuple((f, getattr(r.structure, f)) for f in sorted(recipe_fields[r.method])))
        values = r.values()
        recipe_table.append([recipe_parts(part), vals(tuple((k, values[k]) for k in sorted(recipe_value_names)))])
    shape_table = []
    max_rank: dict[tuple, int] = {}
    for r in shape_rows:
        if isinstance(r, str):
            shape_table.append(r)
            continue
        key = (r.method, r.targets)
        if key not in max_rank:
            max_rank[key] = _max_rank(r)
        shape_table.append([shape_parts(r.structure), max_rank[key]])

    fns, maths, term_ids, moment_ids, def_ids = _Interner(), _Interner(), _Interner(), _Interner(), _Interner()
    lists = _Interner()  # structures share most of their term lists: each block's list is stored once

    tex = _Latex()
    # the layouts share most of their Term objects (and moment and definition tuples): looked up by identity
    # first (hashing a Term hashes all its fields), by equality on a miss; the dicts keep each object alive
    known: dict[int, tuple[object, int]] = {}

    def once(item, intern) -> int:
        hit = known.get(id(item))
        if hit is None:
            hit = known[id(item)] = (item, intern(item))
        return hit[1]

    equal_terms: dict = {}   # a Term -> its id: ledgers built apart hold equal Terms

    def term_id(t) -> int:   # ``label = formula``, as estimate's tables print it
        i = equal_terms.get(t)
        if i is None:
            i = equal_terms[t] = term_ids((t.key, t.block, fns(t.expr), maths(f"{t.label} = {tex.doprint(t.expr)}"),
                                           t.why))
        return i

    @cache
    def divided_list(list_id: int, stage: int) -> int:   # a block's term list as build_ledger divides it
        return lists(tuple(once(t, term_id) for t in divide_terms([term_of[i] for i in lists.order[list_id]], stage)))

    def moment_list(moments) -> int:
        return lists(tuple(moment_ids((m.key, m.label, m.terms)) for m in moments))

    def definition_list(definitions) -> int:
        return lists(tuple(def_ids((symbol.name, fns(expr))) for symbol, expr in definitions))

    def time_list(parts) -> int:   # the fn of each of STEP_TIME's parts
        return lists(tuple(fns(parts[symbol]) for symbol in TIME_PARTS))

    # a layout is a shape row with a recipe part; its step time reads only TIME_FIELDS of the recipe's fields
    structures, pairs, composed, timings = [], {}, [], {}
    for s_id, s_struct in enumerate(shape_parts.order):
        # ZeRO-1/2 under FSDP2: the DDP twin's ledger with its sharded terms divided, composed below on the ids
        # (the recipe controls set precision fields only, never the parallel ones divides_only reads)
        composes = divides_only(s_struct)
        for r_id, (method, assigned) in enumerate(recipe_parts.order):
            if method != s_struct.method:
                continue
            timing = (s_id, tuple(field for field in assigned if field[0] in TIME_FIELDS))
            s = replace(s_struct, **dict(assigned)) if timing not in timings or not composes else None
            if timing not in timings:   # seconds per step: symvram.timing's roofline, from its parts
                timings[timing] = once(time_parts(s), time_list)
            if composes:
                composed.append((s_id, r_id, timings[timing]))
                continue
            led = build_ledger(s)
            by_block: dict[str, list[int]] = {}   # each block's term ids, blocks in the ledger's order
            for t in led.terms:
                by_block.setdefault(t.block, []).append(once(t, term_id))
            structures.append([
                [lists(tuple(ids)) for ids in by_block.values()],
                once(led.moments, moment_list),
                once(led.definitions, definition_list),
                timings[timing],
            ])
            pairs[f"{s_id},{r_id}"] = len(structures) - 1
    twins, term_of = {}, {i: t for t, i in equal_terms.items()}   # a term id -> a Term it stands for
    for s_id, r_id, timing in composed:   # as build_ledger composes them
        if s_id not in twins:
            twins[s_id] = shape_parts.items[replace(shape_parts.order[s_id], zero=0)]
        blocks, moments, definitions, _ = structures[pairs[f"{twins[s_id]},{r_id}"]]
        stage = shape_parts.order[s_id].zero
        structures.append([[divided_list(i, stage) for i in blocks], moments, definitions, timing])
        pairs[f"{s_id},{r_id}"] = len(structures) - 1

    gpus = {key: load_gpu(key) for key in gpu_presets()}
    data = {
        "model": sc.model.name,
        "model_kind": sc.model.kind,
        "units": dict(UNITS),
        "unit": units,
        "recipe": [c.name for c in recipe],
        "shape": [c.name for c in shape],
        "controls": {c.name: {"label": LABELS[c.name], "options": c.option_labels(),
                              "values": [list(v) if isinstance(v, tuple) else v for v in c.values],
                              "initial": c.initial} for c in (*recipe, *shape)},
        "continuous": {name: {"label": LABELS[name], "symbols": continuous[name], "initial": getattr(sc, name)}
                       for name in CONTINUOUS},
        "limits": LIMITS,
        "recipeTable": recipe_table,
        "shapeTable": shape_table,
        "pairs": pairs,
        "common": common,
        "vals": [dict(v) for v in vals.list()],
        "structures": structures,
        "lists": [list(x) for x in lists.list()],
        "terms": [{"key": k, "block": b, "fn": f, "math": m, "why": w} for k, b, f, m, w in term_ids.list()],
        "moments": [{"key": k, "label": label, "terms": list(t)} for k, label, t in moment_ids.list()],
        "defs": [{"symbol": s, "fn": f} for s, f in def_ids.list()],
        "mathml": [_mathml(tex) for tex in maths.list()],
        "blocks": BLOCK_TITLES,
        "ledgerBlocks": list(BLOCKS),
        "fixed": fixed_settings(sc),
        "gpus": {k: {"name": g.name, "short": short_card_name(g.name), "usable": g.usable_bytes, **_card_time(k),
                     **_card_block(g, sc.gpus)} for k, g in gpus.items()},
        "cardMemory": _card_memory(sc, gpus[card] if card else None),
        "loraOnly": list(LORA_ONLY),
        "loraMethods": [m for m, r in first_ok.items() if r.lora],
        # the verdict keeps the headroom that fit, plan and diagnose keep (--headroom's default)
        "headroom": headroom_bytes(DEFAULT_HEADROOM, 1 << 50),
        "gpu": card,
        "stepTime": {"parts": [symbol.name for symbol in TIME_PARTS], "fn": fns(STEP_TIME)},
        # what the formulas' derived symbols (P_train, A_saved …) mean, shown with their values under the terms
        "derived": {name: {"math": _mathml(SYMBOLS[name].latex), "meaning": SYMBOLS[name].meaning,
                           "unit": SYMBOLS[name].unit} for name in dict.fromkeys(n for n, _ in def_ids.list())},
    }
    printer = _JavaScript()
    return data, [_js_function(e, printer) for e in fns.list()]


def _card_block(card, gpus: int) -> dict[str, int]:
    """A card's device block for the page (symvram.card_memory; modelled, not measured): the CUDA context and
    NCCL's buffers beyond the caching allocator (NCCL for a job of two GPUs or more, what the page adds when N > 1),
    the cuBLAS workspaces inside it."""
    block = device_block(card, max(gpus, 2))
    return {"context": block["cuda_context"], "cublas": device_block(card, 1)["cublas_workspaces"],
            "nccl": block["nccl_buffers"]}


def _card_memory(sc: Scenario, card) -> dict:
    """The caching allocator's replay at the page's own settings (modelled, not measured): the reserved peak with
    each allocator on an unbounded card (the workspaces of ``card``, or the default ones), and on ``card`` whether
    two steps run. The page shows it while its controls are where the command line put them."""
    cm = card_memory(sc, card)
    return {"allocator": cm.allocator, "allocated": cm.allocated, "schedule": cm.schedule_allocated,
            "reserved": dict(cm.reserved), "card": card.key if card else None,
            "fits": cm.fits if card else None, "reservedOnCard": cm.reserved_peak if card else None}


def _json_for_script(data: dict) -> str:
    """JSON that cannot close its <script> element: <, > and & as \\u escapes.

    >>> _json_for_script({"model": "</script><b>"})
    '{"model":"\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e"}'
    """
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@cache
def _environment() -> jinja2.Environment:
    loader = jinja2.FunctionLoader(
        lambda name: resources.files("symvram.templates").joinpath("page", name).read_text(encoding="utf-8"))
    return jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined)


def render_page(sc: Scenario, gpu: str | None = None, units: str = "GiB") -> str:
    """The calculator page for ``sc`` (controls start at its settings); ``gpu`` is the card to check against."""
    data, functions = page_data(sc, gpu, units)
    card = load_gpu(gpu) if gpu else None
    return _environment().get_template("page.html.j2").render(
        model=sc.model.name, card=card.name if card else None, colors=COLORS, data_json=_json_for_script(data),
        functions="[\n" + ",\n".join(functions) + "\n]")
