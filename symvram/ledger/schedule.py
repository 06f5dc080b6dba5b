"""The allocation schedule a ledger implies: every tensor its terms are made of, allocated and freed in the
program order its moments describe, for the caching-allocator replay (symvram.allocator).

A term's expression is a sum of monomials; each monomial is one tensor shape and its integer coefficient the
number of such tensors (of a forward of rows·batch rows, ``Term.rows``, coefficient / rows tensors of rows·batch
rows: DPO's [2b, s, h] tensors, not twice as many [b, s, h] — DPO Qwen2.5-0.5B LoRA b2·s2048 with checkpointing
against its traced schedule: +5.9 % → +3.2 % reserved) (SDPA's ``2·T·d_h·n_h + 2·T·d_h·n_kv`` is q and the output, k and v). A monomial
with the factor L is one tensor per layer. A negative monomial (the first layer's correction) removes a
tensor of that shape from layer 0. For a family whose layers differ (``Family.layer_kinds``), a monomial with
a kind's layer count is one tensor in each layer of that kind: (L − L_d)·X + L_d·Y is X in a default layer and
Y in one of kind d.

The order, over two training steps (the first allocates the optimizer states in its step, as torch's
optimizers do lazily; the second starts with them):

* the parameter side (base weights, adapters, master copies) once, before the first step;
* forward: the activations alive for the whole step, then layer by layer the layer's saved tensors and each
  sub-block's working set made and freed in turn on top of them (an op keeps its input or output as it runs,
  before the ops after it make their temporaries); a checkpointed forward saves nothing, and the tensors the
  layer would save stand in sub-block by sub-block beside its working sets before its output, the next
  checkpoint, is made; then the model head's;
* the moments in order: a transient is allocated when a moment first lists it (before the activations that
  moment adds: an op's inputs exist before its output) and freed when the next one no longer does; a saved
  activation is freed when a moment stops listing it; the head's working set (LoRA on lm_head's products) is
  made and freed before the first loss temporary, the logits it sums to (the sum takes lora_B's freed block);
* between the moment before ``first_layer_backward`` and it, the layer loop from the last layer down: (under
  checkpointing, the layer's forward again: its working sets and recomputed tensors, then the recompute's own
  temporary,) the layer's backward temporaries, freed — one net of what that backward has freed (a negative
  monomial: LoRA's r-wide down-projection input) frees that tensor of the layer first and then makes its own, each
  a tensor (reward Llama-3.2-1B LoRA with checkpointing against its traced schedule: +6.8 % → +0.4 % reserved),
  else one block of its bytes —, its saved tensors freed, its gradients allocated;
* after the optimizer step ``zero_grad(set_to_none=True)`` frees the gradients, and the step's activations go.

What a term does in the schedule is read from its role (ledger.terms.ROLES): a backward temporary alive in
both layer phases is made and freed in each layer's backward; the gradients so far, a recomputed layer and
FSDP2's layer ends name memory other terms hold; a recompute temporary is made in each layer's recompute;
optimizer states and step counts are made lazily; a term
not on the device (offloaded, paged) is not the device allocator's; a first-layer term that is a per-layer term's
value there (``Term.stands_for``) makes no tensors, the layer loop makes that term's in every layer.

>>> from symvram.ledger import build_ledger
>>> from symvram.ledger.structure import Structure
>>> sch = ledger_schedule(build_ledger(Structure(method="lora", params_given=True)), layers=2)
>>> sum(1 for e in sch.events if e[0] == "alloc") == sum(1 for e in sch.events if e[0] == "free") + sch.persistent
True
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sympy as sp

from ..symbols import sym
from .functions import at_least, ceil_div, largest_indicators
from .activations import MLP_INPUT_SET, MLP_OPENING_SET
from .architecture import f, f_e
from .terms import LAYER_BACKWARDS, ROLES, STATES, Ledger, Phase, Place, Role

L, BATCH = sym("layers"), sym("batch")
MLP_WIDTHS = {f, f_e}   # a tensor of the MLP sub-block is d_ff wide (a dense MLP's or an expert's)
# roles that name memory other terms already hold: the gradients made so far, one recomputed layer's tensors
# (the layer loop makes them under checkpointing), what FSDP2's layer ends add up
ALIASES = (Role.GRADIENTS_SO_FAR, Role.RECOMPUTED_ACTIVATION, Role.LAYER_END)


def _per_layer_loop(t, stood_for: set[str]) -> bool:
    """A backward temporary made anew in every layer's backward (alive in both layer phases, not between; or the
    last layer's where the first layer's has a term of its own: a key in ``stood_for``, ``Term.stands_for``)."""
    return t.role is Role.BACKWARD_TEMPORARY and (t.phases == LAYER_BACKWARDS or t.key in stood_for)


def _program_order(t) -> tuple:
    """The order in which a moment's new terms are made: phase by phase; within a phase the model's own tensors
    before the loss's (the final norm's saved input before the logits), and the temporaries before what is
    saved (an op's inputs before its output: the logits before the log-softmax they feed). A term with no
    phases of its own (ZeRO's buffers, placed in moments by sharding) comes after them."""
    return (min(t.lifetime or ROLES[t.role].lifetime, default=len(Phase)), t.info.triage == "loss",
            t.block != "transient")


@dataclass(frozen=True)
class Schedule:
    """``sizes``: one SymPy expression (bytes) per distinct tensor size; ``events``: ("alloc", tensor id,
    size index) or ("free", tensor id, -1), in program order; ``persistent``: tensors never freed;
    ``parameters``: the first events, the parameter side allocated before the first step."""

    sizes: tuple[sp.Expr, ...]
    events: tuple[tuple[str, int, int], ...]
    persistent: int
    parameters: int


def _conditional_widths(expr: sp.Expr, counts: tuple[sp.Symbol, ...]) -> dict[sp.Expr, sp.Dummy]:
    """The sums inside a product that hold a condition (``at_least``) and no layer count (``counts``): one
    tensor's width that depends on the setting, not several tensors — SDPA's k and v are n_kv heads wide, or n_h
    where it repeats them: ``X·(n_kv + (n_h − n_kv)·[d_head ≥ 257])`` is one tensor, which expanding would split
    into a difference, and so is a difference beside a condition, ``X·(n_h − n_kv)·[n_kv ≥ 2]`` (the heads a
    packed batch's attention repeats). A sum of tensors, some of them conditional (RMSNorm's input, 1/rms and its weight's
    cast), has no difference and is expanded as before, and so is a sum with a layer count (how many layers)."""
    def difference(a):
        return any(m.as_coeff_Mul()[0] < 0 for m in sp.Add.make_args(sp.expand(a)))
    found = {a for m in expr.atoms(sp.Mul) for a in m.args
             if a.is_Add and m.has(at_least) and not a.has(*counts, ceil_div) and difference(a)}
    innermost = [a for a in found if not any(c != a and a.has(c) for c in found)]   # the width, not a sum holding it
    return {a: sp.Dummy() for a in innermost}


@lru_cache(maxsize=4096)
def pieces(expr: sp.Expr, kinds: tuple[sp.Symbol, ...] = (), rows: int = 1) -> list[tuple[sp.Expr, int, sp.Symbol | None]]:
    """The tensors of one expression: (one tensor's bytes, how many, the layer count it is per: L, one of the
    layer ``kinds``' counts, or None). With ``rows`` (``Term.rows``: a forward of rows·batch rows), a monomial
    with the factor batch is its coefficient / rows tensors of rows·batch rows.

    >>> from symvram.symbols import sym
    >>> b, T, f, L = sym("bytes_act"), sym("seq"), sym("intermediate"), sym("layers")
    >>> pieces(3 * b * T * f * L + b * T)
    [(bytes_act*seq, 1, None), (bytes_act*intermediate*seq, 3, layers)]
    >>> pieces(4 * b * sym("batch") * T, rows=2)   # DPO's two concatenated [2b, s] tensors, not four [b, s]
    [(2*batch*bytes_act*seq, 2, None)]
    """
    out = []
    widths = _conditional_widths(expr, (L, *kinds))
    for mono in sp.Add.make_args(sp.expand_mul(expr.xreplace(widths))):
        mono = mono.xreplace({d: w for w, d in widths.items()})
        if mono == 0:
            continue
        coeff, rest = mono.as_coeff_Mul()
        factors = sp.Mul.make_args(rest)
        per_layer = next((n for n in (L, *kinds) if n in factors), None)   # to the first power, as a factor
        if per_layer is None:   # ⌈L/k⌉ tensors: one in each of layers 0, k, 2k … (every_n_layers checkpointing)
            per_layer = next((n for n in factors if isinstance(n, ceil_div) and n.args[0] == L), None)
        if per_layer is not None:
            rest = sp.Mul(*(f for f in factors if f != per_layer))
        if rows != 1 and BATCH in factors:
            coeff, rest = coeff / rows, rows * rest
        if coeff.is_Integer:
            out.append((rest, int(coeff), per_layer))
        else:   # a fraction of a shape (a chunk, a shard) is one tensor of that size
            out.append((sp.Abs(coeff) * rest, 1 if coeff > 0 else -1, per_layer))
    return sorted(out, key=lambda p: (p[2] is not None, str(p[2]), sp.default_sort_key(p[0])))


class _Builder:
    def __init__(self):
        self.sizes: dict[sp.Expr, int] = {}
        self.events: list[tuple[str, int, int]] = []
        self.next_id = 0
        self.size_of: dict[int, sp.Expr] = {}

    def alloc(self, size: sp.Expr) -> int:
        index = self.sizes.setdefault(size, len(self.sizes))
        self.next_id += 1
        self.events.append(("alloc", self.next_id, index))
        self.size_of[self.next_id] = size
        return self.next_id

    def alloc_all(self, shapes) -> list[int]:
        return [self.alloc(size) for size, n in shapes for _ in range(n)]

    def free_all(self, ids) -> None:
        self.events.extend(("free", i, -1) for i in ids)


def _term_pieces(ledger: Ledger, term, kinds: tuple[sp.Symbol, ...]) -> list[tuple[sp.Expr, int, sp.Symbol | None]]:
    """A term's tensors. An activation's negative monomials are layer 0's corrections (``_corrections``), a
    negative one per layer of a kind what that kind lacks of a default layer; any other term with a negative
    monomial (a difference: bitsandbytes' 8-bit states less their fp32 small tensors) is one tensor of its whole
    expression. A term that declares its tensors (``Term.tensors``) is those: each one tensor, per layer where its
    size has the factor L."""
    if term.tensors:
        return [_declared(ledger.expand(size), n) for n, size in term.tensors]
    expr = ledger.expand(term.expr)
    larger = [a for a in sp.Add.make_args(expr) if isinstance(a, sp.Max)]
    if larger and term.block != "activations":
        return [p for a in larger for p in _branches(a, kinds, term.rows)] + \
            _term_pieces_of(expr - sp.Add(*larger), term, kinds)
    return _term_pieces_of(expr, term, kinds)


def _branches(larger: sp.Max, kinds: tuple[sp.Symbol, ...], rows: int = 1) -> list[tuple[sp.Expr, int, sp.Symbol | None]]:
    """The larger of several sets of tensors (a hybrid's recomputed layer: the largest kind's): each set's tensors,
    each one's size times the indicator that its set is the larger (the first of equal ones), so that the replay
    makes only that set's (an empty tensor allocates nothing) and not one block of the Max.

    >>> a, c = sym("hidden"), sym("intermediate")
    >>> sorted((str(size), n) for size, n, _ in _branches(sp.Max(2 * a, c), ()))
    [('hidden*(1 - at_least(intermediate, 2*hidden))', 2), ('intermediate*at_least(intermediate, 2*hidden)', 1)]
    """
    out = []
    for a, wins in zip(larger.args, largest_indicators(larger.args)):
        out += [(size * wins, n, per_layer) for size, n, per_layer in pieces(a, kinds, rows) if n > 0]
    return out


def _term_pieces_of(expr: sp.Expr, term, kinds: tuple[sp.Symbol, ...]) -> list[tuple[sp.Expr, int, sp.Symbol | None]]:
    out = pieces(expr, kinds, term.rows)
    if term.block != "activations" and any(n < 0 and p not in kinds for _, n, p in out):
        return [(expr, 1, None)]
    return [p for p in out if p[1] > 0 or p[2] in kinds or isinstance(p[2], ceil_div)]


def _made_and_freed(ledger: Ledger, term, kinds: tuple[sp.Symbol, ...]):
    """A per-layer backward temporary net of what that backward has freed (``layer_backward_temp``: the MLP's
    gradients less LoRA's r-wide down-projection input, ledger.activations._output_projection_done), as tensors:
    (made, freed), each [(one tensor's bytes, how many)]; None for a term with no freed tensor or a Max."""
    expr = ledger.expand(term.expr)
    if term.tensors or expr.has(sp.Max):
        return None
    out = pieces(expr, kinds, term.rows)
    if any(layer is not None for _, _, layer in out) or all(n > 0 for _, n, _ in out):
        return None
    return [(size, n) for size, n, _ in out if n > 0], [(size, -n) for size, n, _ in out if n < 0]


def _declared(size: sp.Expr, n: int) -> tuple[sp.Expr, int, sp.Symbol | None]:
    """A declared tensor as a piece: ``n`` of ``size``, per layer where L is a factor of it.

    >>> from symvram.symbols import sym
    >>> _declared(32768 * sym("bytes_act") * sym("seq"), 1), _declared(sym("bytes_act") * sym("rank") * L, 2)
    ((32768*bytes_act*seq, 1, None), (bytes_act*rank, 2, layers))
    """
    factors = sp.Mul.make_args(size)
    if L in factors:
        return sp.Mul(*(x for x in factors if x != L)), n, L
    return size, n, None


def _corrections(ledger: Ledger, kinds: tuple[sp.Symbol, ...]) -> dict[sp.Expr, int]:
    """Layer 0's missing tensors: the negative monomials of the activation terms, by shape."""
    out: dict[sp.Expr, int] = {}
    for t in ledger.block_terms("activations"):
        for size, n, per_layer in pieces(ledger.expand(t.expr), kinds, t.rows):
            if n < 0 and per_layer is None:
                out[size] = out.get(size, 0) - n
    return out


@lru_cache(maxsize=256)
def ledger_schedule(ledger: Ledger, layers: int, layer_order: tuple[str, ...] = (),
                    kinds: tuple[str, ...] = ()) -> Schedule:
    """The schedule of two training steps of ``ledger`` with its L decoder layers unrolled (``layers``); for a
    family whose layers differ, ``layer_order`` names each layer's count symbol from layer 0 up ("layers" for the
    default kind) and ``kinds`` every kind's count symbol, those this model has no layer of too (Gemma 4 E2B has
    no full-attention K = V layer: its count still appears in the parameter side's expressions, where
    (L − L_kv − …)·X is the default layer's tensor X, not a difference to make one tensor of)."""
    b = _Builder()
    order = tuple(sym(n) for n in layer_order) or (L,) * layers
    kinds = tuple(sorted((set(order) | {sym(k) for k in kinds}) - {L}, key=str))
    terms, moments = ledger.by_key, ledger.moments
    loop_at = next(i for i, m in enumerate(moments) if m.phase is Phase.FIRST_LAYER_BACKWARD)
    shapes = {k: _term_pieces(ledger, t, kinds) for k, t in terms.items()}

    def per_layer(k, i=layers - 1):
        """Layer i's tensors of term k (L's, net of what its kind's count adds or takes away)."""
        counts: dict[sp.Expr, int] = {}
        for size, n, layer in shapes[k]:
            if layer is L or (layer is not None and layer == order[i]) or (
                    isinstance(layer, ceil_div) and i % int(layer.args[1]) == 0):
                counts[size] = counts.get(size, 0) + n
        return [(size, n) for size, n in counts.items() if n > 0]

    def whole(k):
        return [(size, n) for size, n, layer in shapes[k] if layer is None]

    def every(k):
        return [sh for i in range(layers) for sh in per_layer(k, i)] + whole(k)

    act_keys = [t.key for t in ledger.block_terms("activations")]
    layer_act = [k for k in act_keys if any(layer is not None for _, _, layer in shapes[k])]
    whole_step = [k for k in act_keys if k not in layer_act and all(k in m.terms for m in moments)]
    missing = _corrections(ledger, kinds)
    recompute = any(t.role is Role.RECOMPUTED_ACTIVATION and t.alive(Phase.LAST_LAYER_BACKWARD)   # checkpointing:
                    for t in terms.values())                                            # layers recomputed
    every_k = next((int(layer.args[1]) for t in terms.values() for _, _, layer in pieces(ledger.expand(t.expr), kinds)
                    if isinstance(layer, ceil_div)), 1)   # … or layers 0, k, 2k … only
    on_device = {k: t.place is Place.DEVICE for k, t in terms.items()}
    grad_keys = [k for k, t in terms.items() if t.role is Role.GRADIENT and on_device[k]]
    lazy = [k for k, t in terms.items() if t.role in STATES and on_device[k]]
    step_temps = [k for k, t in terms.items() if t.role is Role.OPTIMIZER_STEP_TEMPORARY and on_device[k]]
    # the optimizer steps inside backward (a step temporary alive before the layers' backward): its states are
    # made lazily as each parameter's gradient arrives, the head's before the layers, each layer's after its backward
    in_backward = any(k in m.terms for m in moments[:loop_at] for k in step_temps)
    stood_for = {t.stands_for for t in terms.values() if t.stands_for}   # what the first layer's terms are values of
    loop_temps = [k for k, t in terms.items() if _per_layer_loop(t, stood_for)]
    netted = {k: _made_and_freed(ledger, terms[k], kinds) for k in loop_temps}

    def _take(freed, held):
        """The ids of the tensors ``freed`` names, taken out of the layer's ``held`` lists (its recomputed and
        saved tensors, matched by their bytes); None, taking nothing, where the layer holds no such tensor."""
        want, found = dict(freed), []
        for group in held:
            for i in group:
                if want.get(b.size_of[i], 0) > 0:
                    want[b.size_of[i]] -= 1
                    found.append((group, i))
        if any(want.values()):
            return None
        for group, i in found:
            group.remove(i)
        return [i for _, i in found]
    redo_keys = [k for k, t in terms.items() if t.role is Role.RECOMPUTED_ACTIVATION and not t.stands_for]
    ws_keys = [k for k, t in terms.items() if t.role is Role.LAYER_WORKING_SET and on_device[k]]
    working_sets = [whole(k) for k in ws_keys]
    head_sets = [sh for k, t in terms.items() if t.role is Role.HEAD_WORKING_SET and on_device[k] for sh in whole(k)]
    mlp_from = ws_keys.index(MLP_OPENING_SET) if MLP_OPENING_SET in ws_keys else len(ws_keys)
    # a recompute runs with grad: the MLP's d_ff-wide saved tensors start with its input projections' outputs, which
    # their working set makes (its base result), so they are kept from after it (from the MLP's norm without one)
    mlp_made = ws_keys.index(MLP_INPUT_SET) + 1 if MLP_INPUT_SET in ws_keys else mlp_from
    # what one op of the recompute holds beside the rebuilt layer (LoRA's down projection; the experts where the
    # recompute reruns them, the ledger's experts_recompute): made in each recompute
    redo_temp_keys = [k for k, t in terms.items() if on_device[k] and (t.role is Role.RECOMPUTE_TEMPORARY or (
        t.role is Role.EXPERTS_TEMPORARY and Phase.LAST_LAYER_RECOMPUTE in t.phases))] if recompute else []
    redo_temps = [sh for k in redo_temp_keys for sh in whole(k)]
    # the tensors a checkpointed layer recomputes, by sub-block: the attention side's, then the MLP's (d_ff wide)
    redo_layer = [sh for k in redo_keys for sh in whole(k)]
    redo_mlp = [sh for sh in redo_layer if MLP_WIDTHS & sh[0].free_symbols]
    redo_attention = [sh for sh in redo_layer if sh not in redo_mlp]

    def layer_forward(kept_shapes, checkpointed=False, unsaved=()):
        """One layer's forward: ``kept_shapes`` (the tensors it saves) made first, then each sub-block's working set
        made and freed in turn on top of them, so that no temporary's block is later filled by a saved tensor
        (tinyllama LoRA q/v against its traced schedule: −1.0 % → −0.3 % reserved). A checkpointed forward runs
        without grad and saves nothing: each sub-block's outputs live only until the next sub-block has read them,
        so the tensors the layer would save stand in sub-block by sub-block — the attention side's beside its
        working sets, freed when the MLP's norm starts, then the MLP's (its d_ff-wide tensors) beside the MLP's —
        and ``kept_shapes`` (the layer's output, the next checkpoint) comes last (llama-3.2-1b full b8·s4096
        with checkpointing: +3.0 % → +0.5 % reserved). A layer that saves less than a layer of its kind (``unsaved``:
        the first layer's inputs no gradient reaches, a frozen layer before the first trainable one) still makes
        those tensors: each term's made and freed in turn, as a working set of its own (Nemotron-H LoRA on q/v: its
        frozen Mamba layer 0's scan tensors)."""
        if checkpointed:
            dropped = b.alloc_all(redo_attention)
            for j, shapes in enumerate(working_sets + [[]]):
                if j == mlp_from:   # (a layer without an MLP norm: after its last working set)
                    b.free_all(dropped)
                    dropped = b.alloc_all(redo_mlp)
                b.free_all(b.alloc_all(shapes))
            b.free_all(dropped)
            return b.alloc_all(kept_shapes)
        kept = b.alloc_all(kept_shapes)
        for shapes in [*unsaved, *working_sets]:
            b.free_all(b.alloc_all(shapes))
        return kept

    def recomputed_layer():
        """A checkpointed layer's recompute before its backward: its saved tensors made sub-block by sub-block — the
        attention side's, its working sets, then the MLP's working sets with the MLP side's made after its input
        projections' (whose base results they are: not both at once) — and all kept for the backward; then, with every
        saved tensor rebuilt, what the recompute's last op holds (``Role.RECOMPUTE_TEMPORARY``: LoRA's down projection,
        with the backward above's incoming gradient), made and freed — the ledger's ``recompute_lora_output`` moment,
        in every layer's recompute rather than once before the layer loop (DPO Qwen2.5-0.5B LoRA b2·s2048 with
        checkpointing against its traced schedule: allocated +5.7 % → +0.7 %, reserved +5.9 % → +5.9 %; reward
        Llama-3.2-1B LoRA: +4.3 % → +0.7 %, +9.6 % → +5.4 %); the ids."""
        ids = b.alloc_all(redo_attention)
        for j, shapes in enumerate(working_sets + [[]]):
            if j == mlp_made:
                ids += b.alloc_all(redo_mlp)
            b.free_all(b.alloc_all(shapes))
        b.free_all(b.alloc_all(redo_temps))
        return ids

    def saved_by_layer():
        """Each layer's saved tensors, the corrections' missing ones taken from layer 0 up: the first layer's
        own, and every layer before the first with a trainable weight (a lead kind's) saves nothing: (saved,
        made but not saved, term by term) per layer."""
        out, left = [], dict(missing)
        for i in range(layers):
            layer, unsaved = [], []
            for k in layer_act:
                unsaved.append([])
                for size, n in per_layer(k, i):
                    take = min(n, left.get(size, 0))
                    left[size] = left.get(size, 0) - take
                    layer.append((size, n - take))
                    unsaved[-1].append((size, take))
            out.append((layer, unsaved))
        return out

    saved_shapes, unsaved_shapes = zip(*saved_by_layer()) if layers else ((), ())
    kept = 0
    for k, t in terms.items():     # the parameter side, before the first step
        if t.block in ("base", "trainable") and t.role is not Role.GRADIENT and t.role not in STATES \
                and on_device[k] and k in moments[-1].terms:
            kept += len(b.alloc_all(every(k)))
    parameters = len(b.events)
    for step in (1, 2):
        held = {k: b.alloc_all(every(k)) for k in whole_step}
        saved = [layer_forward(shapes, recompute and i % every_k == 0, unsaved_shapes[i])
                 for i, shapes in enumerate(saved_shapes)]
        grads: list[int] = []
        grads_outside_layers = states_made = head_made = False
        previous: tuple[str, ...] = ()
        for j, m in enumerate(moments):
            for k in previous:
                if k not in m.terms and k in held:
                    b.free_all(held.pop(k))
            if j == loop_at:   # what the moments before it hold and it does not is gone before the layers' backward
                for i in reversed(range(layers)):
                    redo = recomputed_layer() if recompute and i % every_k == 0 else []
                    for k in loop_temps:
                        net = netted[k] and _take(netted[k][1], (redo, saved[i]))
                        if net is None:   # what it frees is not a tensor the layer holds: its bytes as one block
                            b.free_all(b.alloc_all(whole(k)))
                            continue
                        b.free_all(net)   # the layer's tensors its backward has freed by then, before it makes these
                        b.free_all(b.alloc_all(netted[k][0]))
                    b.free_all(redo)
                    b.free_all(saved[i])
                    grads += b.alloc_all([sh for k in grad_keys for sh in per_layer(k, i)])
                    if in_backward and step == 1:
                        kept += len(b.alloc_all([sh for k in lazy for sh in per_layer(k, i)]))
            if step == 1 and in_backward and j < loop_at and not states_made and any(k in m.terms for k in step_temps):
                kept += len(b.alloc_all([sh for k in lazy for sh in whole(k)]))
                states_made = True
            if m.phase is Phase.OPTIMIZER_STEP and step == 1 and not in_backward:
                kept += len(b.alloc_all([sh for k in lazy for sh in every(k)]))
            for k in sorted(m.terms, key=lambda k: _program_order(terms[k])):
                t = terms[k]
                if (k in held or t.role in ALIASES or k in loop_temps or k in redo_temp_keys or t.stands_for
                        or not on_device[k]):
                    continue
                if t.role is Role.GRADIENT:
                    if not grads_outside_layers:   # the gradients outside the layers, once (embeddings, head)
                        grads += b.alloc_all(whole(k))
                        grads_outside_layers = True
                elif t.block in ("transient", "activations") and k not in layer_act:
                    if t.role is Role.LOSS_TEMPORARY and not head_made:   # the head's working set before its
                        b.free_all(b.alloc_all(head_sets))                 # output, the first loss temporary
                        head_made = True
                    held[k] = b.alloc_all(every(k))
            previous = m.terms
        for ids in held.values():
            b.free_all(ids)
        b.free_all(grads)
    return Schedule(tuple(b.sizes), tuple(b.events), kept, parameters)
