"""Model families as data: each decoder family's layers, norms and LoRA target groups, read from
``symvram/data/families/*.toml``, and the parameter counts they imply as expressions.

A family is one data entry (``extends`` another and restates only what differs); the ledger takes it
as an input like every other choice, so nothing here describes one architecture in code.

>>> fam = family("llama")
>>> fam.linear("k_proj").d_out
head_dim*kv_heads
>>> dims = {h: 4096, f: 11008, nh: 32, nkv: 32, dh: 128}
>>> fam.params_per_layer(()).xreplace(dims)    # Llama-2-7B: 4·4096² + 3·4096·11008 + 2·4096
202383360
>>> family("qwen3").params_per_layer(()).xreplace({**dims, f: 12288, nkv: 8})  # + q/k norms of d_head each
192946432
"""
from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from pathlib import Path

import sympy as sp

from ..errors import UserError
from ..symbols import SYMBOLS, sym
from .functions import at_least

h, f, L, nh, nkv, dh, V = (sym(n) for n in ("hidden", "intermediate", "layers", "heads", "kv_heads", "head_dim", "vocab"))
E, k_e, f_e = sym("experts"), sym("experts_per_token"), sym("moe_intermediate")

# the tensors a layer's linears read; q_latent and kv_latent: latent attention's normed low-rank q and kv (DeepSeek-V3)
# ple_in and ple_act: Gemma 4's per-layer-input gate reads the residual after the MLP, its projection the gated product;
# router_in: Gemma 4's router reads its own scaled, normed copy of the residual
# ssm_in and ssm_out: a parallel Mamba-2 mixer's own input (Falcon-H1 scales the norm's output for it apart from
# attention's) and its gated output (out_proj's input, beside o_proj's)
GROUPS = ("attn_in", "attn_out", "mlp_in", "mlp_act", "q_latent", "kv_latent", "ple_in", "ple_act", "router_in", "ssm_in",
          "ssm_out")
NORM_SITES = ("layer_in", "resid", "attn_out", "mlp_out", "q", "k", "v", "q_latent", "kv_latent", "ple_out")
MLP_KINDS = ("gated", "moe", "plain", "none")   # plain: up, activation, down (Nemotron-H); none: a block without an MLP
ACTIVATIONS = ("silu", "gelu_tanh", "relu2")
MIXERS = ("attention", "mamba2", "parallel", "none")   # a layer's token mixer (extras.mixer): none in an MLP-only
# block; parallel: attention and a Mamba-2 mixer side by side on the same normed input (Falcon-H1)
NORM_KINDS = ("rms", "gemma_rms", "rms_fp32_weight", "gemma4_rms")


_PRODUCT = re.compile(r"\w+(?:[*/]\w+)*")   # names and integers joined by * and /: most shape expressions
_INTEGER = re.compile(r"0|[1-9][0-9]*")


@cache
def expr(text: str | int) -> sp.Expr:
    """A shape expression over registry symbols: ``"kv_heads*head_dim"`` → kv_heads·head_dim.

    A product or quotient of registry names and integers is evaluated left to right as Python with SymPy
    numbers (what ``sympify`` makes of it, without its parser); anything else goes through ``sympify``.

    >>> local = {n: d.symbol for n, d in SYMBOLS.items()}
    >>> all(expr(t) == sp.sympify(t, locals=local, rational=True) for t in ("hidden/heads", "2*intermediate", "3/2"))
    True
    """
    if isinstance(text, int):
        return sp.Integer(text)
    if _PRODUCT.fullmatch(text):
        parts = re.split(r"[*/]", text)
        if all(n in SYMBOLS or _INTEGER.fullmatch(n) for n in parts):
            values = [SYMBOLS[n].symbol if n in SYMBOLS else sp.Integer(int(n)) for n in parts]
            out = values[0]
            for op, v in zip(re.findall(r"[*/]", text), values[1:]):
                out = out * v if op == "*" else out / v
            return out
    return sp.sympify(text, locals={**{n: d.symbol for n, d in SYMBOLS.items()}, "at_least": at_least}, rational=True)


def built(part: "Linear | Norm", options: tuple[str, ...]) -> bool:
    """Whether the model has ``part`` with the config switches ``options`` on: a module or norm under a switch
    (``option``) exists only when it is on (Gemma 4's per-layer-input gate needs hidden_size_per_layer_input).

    >>> built(Norm("q_norm", "attention", h, option="use_qk_norm"), ())
    False
    """
    return part.option is None or part.option in options


@dataclass(frozen=True)
class Linear:
    """One projection: y = x Wᵀ with W of shape (d_out, d_in). ``input_group`` names the tensor it
    reads (projections of one group read the same tensor: q, k and v all read the attention norm's
    output); ``bias`` names the config option that gives it a bias; ``count`` is how many copies a
    layer holds (E for a fused 3-D expert weight, 1 for an nn.Linear)."""

    name: str
    d_in: sp.Expr
    d_out: sp.Expr
    input_group: str
    bias: str | None = None
    count: sp.Expr = sp.Integer(1)
    rank_factor: int = 1   # PEFT gives a merged weight (gate_up_proj from gate + up) this many times the rank
    transposed: bool = False  # stored (count, d_in, d_out) rather than (count, d_out, d_in) (gpt-oss's experts)
    option: str | None = None  # the config switch that gives the layer this module (Gemma 4's per-layer-input gate)

    @property
    def params(self) -> sp.Expr:
        return self.count * self.d_in * self.d_out


@dataclass(frozen=True)
class Norm:
    """One normalization of a layer: where it sits, its weight width and its rows per token
    (a per-head q/k norm normalizes n_h rows of d_head per token)."""

    name: str
    at: str
    width: sp.Expr
    rows: sp.Expr = sp.Integer(1)
    after: str | None = None  # the projection whose output it normalizes (a q/k norm): it saves if that one trains
    option: str | None = None  # the config switch that gives the layer this norm (GLM-4.5's use_qk_norm)
    weight: bool = True  # False: a norm without a weight (Llama 4's L2 q/k norm), no parameter


@dataclass(frozen=True)
class Family:
    """One decoder family: the data entry, parsed and checked."""

    key: str
    description: str
    model_types: tuple[str, ...]
    source: str
    norm: str
    mlp_kind: str
    activation: str
    attention_kernels: tuple[str, ...]
    default_attention: str
    attention_why: str
    dims: tuple[tuple[str, str, str], ...]       # (symbol, config.json key, default: "required" | expression)
    options: tuple[tuple[str, bool], ...]        # boolean config switches and their defaults
    linears: tuple[Linear, ...]
    norms: tuple[Norm, ...]
    moe_weights: tuple[Linear, ...]              # the MoE block's weights that are not nn.Linear (router, fused experts)
    targets: tuple[tuple[str, tuple[str, ...]], ...]
    extras: tuple[tuple[str, object], ...] = ()  # family-specific settings (soft-capping, embedding scale …)
    unmodelled: tuple[str, ...] = ()  # a drafted entry: transformers module classes whose saved tensors no rule models
    kinds: tuple[tuple[str, str, bool], ...] = ()  # other layer kinds: (name, count symbol, layer 0's when present)

    # --- lookups -------------------------------------------------------------------------------
    def linear(self, name: str) -> Linear:
        return self.linear_map[name]

    @cached_property
    def linear_map(self) -> dict[str, Linear]:
        """Every weight LoRA can target: the nn.Linear layers and the MoE block's weights."""
        return {m.name: m for m in self.linears + self.moe_weights}

    @cached_property
    def target_map(self) -> dict[str, Linear]:
        """Every weight LoRA can target in any of the family's layer kinds (a hybrid's attention and linear-attention
        projections), the default kind's first, then the nn.Linear modules outside the layers (``model_linears``:
        PEFT's all-linear wraps Gemma 4's per_layer_model_projection too, peft 0.21.2 tuners_utils.py:2430-2490)."""
        out: dict[str, Linear] = {}
        for _, k in self.layer_kinds:
            for name, m in k.linear_map.items():
                out.setdefault(name, m)
        return out | {m.name: m for m in self.model_linears}

    @cached_property
    def mlp_output(self) -> Linear | None:
        """The MLP's output projection (down_proj): the one nn.Linear reading the activation's output; None where
        there is none or several (routed experts).

        >>> family("llama").mlp_output.name
        'down_proj'
        """
        out = [m for m in self.linears if m.input_group == "mlp_act"]
        return out[0] if len(out) == 1 else None

    @cached_property
    def target_sets(self) -> dict[str, tuple[str, ...]]:
        return dict(self.targets)

    def is_all_linear(self, targets, options: tuple[str, ...]) -> bool:
        """Whether ``targets`` are the family's all-linear group as the model has it (the modules under a switch
        that is off left out), in any order: what PEFT's ``all-linear`` adapts in the decoder.

        >>> family("llama").is_all_linear(("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), ())
        True
        """
        group = {t for t in self.target_sets["all-linear"] if built(self.target_map[t], options)}
        return set(targets) == group

    @cached_property
    def group_width(self) -> dict[str, sp.Expr]:
        """Width of each tensor a linear reads (every reader of a group has the same d_in)."""
        out: dict[str, sp.Expr] = {}
        for m in self.linears:
            out.setdefault(m.input_group, m.d_in)
        return out

    def dim(self, name: str, default: int = 1) -> sp.Expr:
        """The family's symbol ``name`` if its entry reads that dimension, else the constant every other
        family has (one rotary base, no sliding layers …)."""
        return sym(name) if any(d[0] == name for d in self.dims) else sp.Integer(default)

    def extra(self, name: str, default=None):
        return dict(self.extras).get(name, default)

    @property
    def latent_attention(self) -> bool:
        """Multi-head latent attention (DeepSeek-V3): q and kv through low-rank projections and their norms."""
        return any(m.input_group == "kv_latent" for m in self.linears)

    @property
    def attention_widths(self) -> tuple[sp.Expr, sp.Expr]:
        """(the width of a head's q and k, of its v): d_head both, or latent attention's d_nope + d_rope and d_v.

        >>> family("llama").attention_widths
        (head_dim, head_dim)
        """
        if self.latent_attention:
            return sym("qk_nope_dim") + dh, sym("v_head_dim")
        return dh, dh

    @property
    def moe(self) -> bool:
        return self.mlp_kind == "moe"

    @cached_property
    def has_moe(self) -> bool:
        """Whether any of the family's layer kinds is an MoE block (Gemma 4's only under enable_moe_block).

        >>> family("gemma4_text").moe, family("gemma4_text").has_moe
        (False, True)
        """
        return any(k.moe for _, k in self.layer_kinds)

    @cached_property
    def has_deltanet(self) -> bool:
        """Whether any of the family's layer kinds runs a Gated DeltaNet mixer (``extras.gated_deltanet``), whose
        code path ``--kernels`` chooses.

        >>> family("qwen3_5_text").has_deltanet, family("llama").has_deltanet
        (True, False)
        """
        return any(k.extra("gated_deltanet") for _, k in self.layer_kinds)

    @property
    def mixer(self) -> str:
        """The layer's token mixer: attention (every family's), a Mamba-2 mixer, both side by side (Falcon-H1's
        parallel), or none (Nemotron-H's MLP blocks).

        >>> family("llama").mixer, family("nemotron_h:mamba").mixer, family("nemotron_h").mixer
        ('attention', 'mamba2', 'none')
        """
        return self.extra("mixer", "attention")

    @property
    def mamba(self) -> bool:
        """Whether the layer runs a Mamba-2 mixer (alone or beside attention).

        >>> family("nemotron_h:mamba").mamba, family("falcon_h1").mamba, family("llama").mamba
        (True, True, False)
        """
        return self.mixer in ("mamba2", "parallel")

    @property
    def attends(self) -> bool:
        """Whether the layer runs attention (alone or beside a Mamba-2 mixer).

        >>> family("falcon_h1").attends, family("nemotron_h:mamba").attends
        (True, False)
        """
        return self.mixer in ("attention", "parallel")

    # --- layer kinds -----------------------------------------------------------------------------
    # A family's own tables describe its default layer (the last layer's kind). ``[layer_kinds.NAME]`` entries
    # describe layers that differ (DeepSeek-V3's dense first layers, Llama 4's dense layers between MoE ones,
    # a hybrid's linear-attention layers): each restates the top-level keys that differ, as ``extends`` does,
    # and names the symbol that counts its layers; the default kind has the rest, L − Σ counts.
    @cached_property
    def layer_kinds(self) -> tuple[tuple[sp.Expr, "Family"], ...]:
        """(how many layers, the layer's family) per kind, the default kind first.

        >>> [(n, k.key) for n, k in family("llama").layer_kinds]
        [(layers, 'llama')]
        """
        others = tuple((sym(count), self.kind(name)) for name, count, _ in self.kinds)
        return ((L - sp.Add(*(n for n, _ in others)), self.kind("")),) + others

    def over_layers(self, per_layer) -> sp.Expr:
        """Σ over the layer kinds of (layers of the kind) · ``per_layer(kind's family)``: L · per_layer(self)
        for a family whose layers are all alike."""
        if not self.kinds:
            return L * per_layer(self)
        return sp.Add(*(n * per_layer(k) for n, k in self.layer_kinds))

    def first_kind(self, dims: dict[str, int], pattern: str = "") -> str:
        """The kind of layer 0 for a model of ``dims``: the first kind marked ``first`` that has layers, else the
        default ("") — or the kind ``pattern``'s first letter names."""
        if pattern:
            return self.model_kinds(dims, pattern)[0]
        return next((name for name, count, first in self.kinds if first and dims.get(count, 0) > 0), "")

    def model_kinds(self, dims: dict[str, int], pattern: str = "") -> tuple[str, ...]:
        """Each layer's kind name ("" the default), layer 0 up, in the model's own order: a hybrid counted from
        ``layer_types`` (``extras.counted_layers``) interleaves its default layers every L / (L − L_kind)-th
        (transformers' full_attention_interval pattern), else ``layer_order``'s.

        >>> family("qwen3_5_text").model_kinds({"layers": 8, "linear_layers": 6})
        ('linear', 'linear', 'linear', '', 'linear', 'linear', 'linear', '')

        A family whose config spells every layer's kind as a letter (``extras.layer_pattern``: Nemotron-H's
        hybrid_override_pattern) takes that order from ``pattern``, the model's own string:

        >>> family("nemotron_h").model_kinds({"layers": 4}, "M-M*")
        ('mamba', '', 'mamba', 'attention')
        """
        if pattern and (spelled := self.extra("layer_pattern")):
            return tuple(spelled["kinds"][c] for c in pattern)
        n = dims["layers"]
        if self.kinds and self.extra("counted_layers"):
            name, count, _ = self.kinds[0]
            others = n - dims.get(count, 0)
            if others and n % others == 0:
                return tuple("" if (i + 1) % (n // others) == 0 else name for i in range(n))
        names = {count: name for name, count, _ in self.kinds}
        return tuple(names.get(c, "") for c in self.layer_order(dims)) or ("",) * n

    def leading_kinds(self, dims: dict[str, int], targets: tuple[str, ...], pattern: str = "") -> tuple[tuple[str, ...], str]:
        """Under LoRA with a frozen embedding: (the kinds of the layers before the first one holding a target, the
        kind of that one). Those layers' inputs need no gradient and nothing in them trains: they save nothing
        (Qwen3.5 with q_proj, v_proj only: the three DeltaNet layers before the first full-attention one).

        >>> family("qwen3_5_text").leading_kinds({"layers": 8, "linear_layers": 6}, ("q_proj", "v_proj"))
        (('linear', 'linear', 'linear'), '')
        """
        kinds = self.model_kinds(dims, pattern)
        for i, name in enumerate(kinds):
            if any(t in self.kind(name).linear_map for t in targets):
                return kinds[:i], name
        return (), kinds[0]

    def layer_order(self, dims: dict[str, int]) -> tuple[str, ...]:
        """Each layer's count symbol, layer 0 up, for a model of ``dims`` (empty when the layers are all alike):
        layer 0 of ``first_kind``, then the other kinds' layers in their order, then the default kind's. The
        allocator replay needs one order; where it differs from the model's (interleaved layers) only the
        blocks' reuse order differs.

        >>> family("llama").layer_order({"layers": 32})
        ()
        """
        if not self.kinds:
            return ()
        left = {count: dims.get(count, 0) for _, count, _ in self.kinds}
        first = dict((name, count) for name, count, _ in self.kinds).get(self.first_kind(dims), "layers")
        order = [first]
        if first != "layers":
            left[first] -= 1
        order += [c for c, n in left.items() for _ in range(n)]
        return tuple(order + ["layers"] * (dims["layers"] - len(order)))

    def kind(self, name: str) -> "Family":
        """The family of one layer of the kind ``name`` ("" the default kind: ``"family:"``, the family's own
        tables without its other kinds); the family itself when its layers are all alike."""
        return family(f"{self.key}:{name}") if self.kinds else self

    # --- parameter counts ------------------------------------------------------------------------
    def bias_params_per_layer(self, options: tuple[str, ...]) -> sp.Expr:
        """Bias vectors switched on by the model's options (Qwen2: q, k and v)."""
        return sp.Add(*(m.d_out for m in self.linears if m.bias in options))

    def linear_params_per_layer(self) -> sp.Expr:
        """Weights of every nn.Linear of one layer (the ones LoRA can target and bitsandbytes quantizes)."""
        return sp.Add(*(m.params for m in self.linears))

    def expert_params_per_layer(self) -> sp.Expr:
        return sp.Add(*(m.params for m in self.moe_weights))

    def active_linears(self, options: tuple[str, ...]) -> tuple[Linear, ...]:
        """The projections a layer has with ``options`` on (a module under a switch only when it is on: Gemma 4's
        per-layer-input gate without hidden_size_per_layer_input is not built)."""
        return tuple(m for m in self.linears if built(m, options))

    def active_norms(self, options: tuple[str, ...]) -> tuple[Norm, ...]:
        """The norms a layer has with ``options`` on (a norm under a switch only when it is on)."""
        return tuple(n for n in self.norms if built(n, options))

    def weighted_norms(self, options: tuple[str, ...]) -> tuple[Norm, ...]:
        """The active norms that carry a weight (parameters)."""
        return tuple(n for n in self.active_norms(options) if n.weight)

    def norm_params_per_layer(self, options: tuple[str, ...]) -> sp.Expr:
        return sp.Add(*(n.width for n in self.weighted_norms(options)))

    def params_per_layer(self, options: tuple[str, ...]) -> sp.Expr:
        """Linear and expert weights, biases and norm weights of one decoder layer."""
        return (self.linear_params_per_layer() + self.expert_params_per_layer() + self.bias_params_per_layer(options)
                + self.norm_params_per_layer(options))

    @cached_property
    def model_linears(self) -> tuple[Linear, ...]:
        """nn.Linear weights outside the decoder layers beside lm_head (``extras.model_weights`` entries with d_in and
        d_out: Gemma 4's per_layer_model_projection), which bitsandbytes packs like the layers'.

        >>> [m.name for m in family("gemma4_text").model_linears]
        ['per_layer_model_projection']
        """
        return tuple(Linear(n, expr(w["d_in"]), expr(w["d_out"]), "attn_in", option=w.get("option"))
                     for n, w in self.extra("model_weights", {}).items() if "d_in" in w)

    @cached_property
    def model_tensor_params(self) -> sp.Expr:
        """Elements of the other parameters outside the layers (``extras.model_weights`` entries with ``elements``:
        Gemma 4's per-layer embedding table and its norm's weight)."""
        return sp.Add(*(expr(w["elements"]) for w in self.extra("model_weights", {}).values() if "elements" in w))

    def model_weight_tensors(self, options: tuple[str, ...]) -> int:
        """How many of those parameter tensors the model has with ``options`` on (each entry's ``option``)."""
        return sum(1 for w in self.extra("model_weights", {}).values() if w.get("option") in (None, *options))

    def embedding_params(self, tied: bool, score_head: bool = False) -> sp.Expr:
        """Token embeddings, plus the lm_head unless it is tied to them — or, for a sequence-classification model
        (transformers' GenericForSequenceClassification, modeling_layers.py:138), its one-label score head."""
        return V * h + (h if score_head else 0 if tied else V * h)

    def total_params(self, tied: bool, options: tuple[str, ...], score_head: bool = False) -> sp.Expr:
        """P derived from the architecture: embeddings (+ lm_head or score head), L layers, the final norm (and the
        weights outside the layers a family names: Gemma 4's per-layer embeddings)."""
        return (self.embedding_params(tied, score_head) + self.over_layers(lambda k: k.params_per_layer(options)) + h
                + self.model_tensor_params + sp.Add(*(m.params for m in self.model_linears)))

    def kept_16bit_params(self, tied: bool, options: tuple[str, ...], score_head: bool = False) -> sp.Expr:
        """Parameters QLoRA leaves unquantized: everything but the nn.Linear weights of the layers
        (embeddings, lm_head, norms, biases, and the MoE router and fused 3-D experts, which are not nn.Linear)."""
        return self.embedding_params(tied, score_head) + self.over_layers(
            lambda k: k.expert_params_per_layer() + k.norm_params_per_layer(options) + k.bias_params_per_layer(options)
        ) + h + self.model_tensor_params

    def lora_params(self, targets: tuple[str, ...], rank: sp.Symbol) -> sp.Expr:
        """r (d_in + d_out) per target matrix, summed over targets and layers (an expert weight: per expert,
        at its rank factor; a layer kind without a target's module adds none)."""
        return self.over_layers(lambda k: k.lora_params_per_layer(targets, rank))

    def lora_params_per_layer(self, targets: tuple[str, ...], rank: sp.Symbol) -> sp.Expr:
        """r (d_in + d_out) per target matrix this layer has (an expert weight: per expert, at its rank factor)."""
        return rank * sp.Add(*(self.linear(t).count * self.linear(t).rank_factor
                               * (self.linear(t).d_in + self.linear(t).d_out) for t in targets if t in self.linear_map))

    def tensors_per_layer(self, options: tuple[str, ...]) -> int:
        """Parameter tensors (not elements) of one layer: weights, biases, norm weights."""
        return (len(self.active_linears(options)) + len(self.moe_weights)
                + sum(1 for m in self.linears if m.bias in options) + len(self.weighted_norms(options)))

    def factored_sizes_per_layer(self, options: tuple[str, ...]) -> sp.Expr:
        """Adafactor's row + column vectors of every matrix of a layer, and the norms' full vectors."""
        return (sp.Add(*(m.count * (m.d_in + m.d_out) for m in self.linears + self.moe_weights))
                + self.norm_params_per_layer(options))


# --- the data entries ----------------------------------------------------------------------------

_REGISTERED: dict[str, dict] = {}  # entries given at run time (``register_family``), by name


def register_family(name: str, text: str) -> Family:
    """Add an entry written as TOML text (a ``symvram family-draft``) to this process's families, under ``name``
    (a name or model_type already shipped is refused), and return it parsed.

    >>> register_family("mine", 'model_types = ["qwen3"]')
    Traceback (most recent call last):
    ...
    symvram.errors.UserError: family 'mine': a shipped family already has this name or one of its model_types
    """
    data = tomllib.loads(text)
    shipped = shipped_model_types()
    if name in shipped.values() or set(data.get("model_types", ())) & set(shipped):
        raise UserError(f"family {name!r}: a shipped family already has this name or one of its model_types")
    _REGISTERED[name] = data
    for cached in (_read, family, family_names, families_by_model_type):
        cached.cache_clear()
    return family(name)


def shipped_model_types() -> dict[str, str]:
    """model_type → the shipped family (symvram/data/families/) that describes it."""
    return {mt: p.name[:-5] for p in _shipped_files() for mt in _declared_model_types(p.name[:-5])}


def _shipped_files():
    return [p for p in resources.files("symvram.data").joinpath("families").iterdir() if p.name.endswith(".toml")]


FAMILIES_ENV = "SYMVRAM_FAMILIES"  # folders (os.pathsep-separated) of further entries, read like the shipped ones


def _user_files() -> dict[str, Path]:
    """The ``*.toml`` entries in the folders ``$SYMVRAM_FAMILIES`` names, by name (a shipped name wins)."""
    out: dict[str, Path] = {}
    for folder in filter(None, os.environ.get(FAMILIES_ENV, "").split(os.pathsep)):
        for path in sorted(Path(folder).glob("*.toml")):
            out.setdefault(path.stem, path)
    return out


@cache
def _read(name: str) -> dict:
    """The entry as written, parsed once (every family that extends llama reads it again); not to be changed."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    path = resources.files("symvram.data").joinpath("families", f"{name}.toml")
    if not path.is_file() and name in _user_files():
        path = _user_files()[name]
    if not path.is_file():
        raise UserError(f"no model family {name!r}; known: {', '.join(family_names())}")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not a family entry (TOML: {e})") from None


def _resolved(name: str, seen: tuple[str, ...] = ()) -> dict:
    """The entry with its ``extends`` chain applied (a child's top-level key replaces the parent's)."""
    if name in seen:
        raise ValueError(f"families: 'extends' cycle {' -> '.join(seen + (name,))}")
    entry = _read(name)
    parent = entry.get("extends")
    own = {k: v for k, v in entry.items() if k != "extends"}
    return {**_resolved(parent, seen + (name,)), **own} if parent else own


def _linears(table: dict, where: str, count: str | int = 1) -> tuple[Linear, ...]:
    out = []
    for name, m in table.items():
        if m["reads"] not in GROUPS:
            raise ValueError(f"{where}: {name}.reads must be one of {GROUPS}")
        out.append(Linear(name, expr(m["d_in"]), expr(m["d_out"]), m["reads"], m.get("bias"), expr(m.get("count", count)),
                          m.get("rank_factor", 1), m.get("transposed", False), m.get("option")))
    return tuple(out)


@cache
def family(name: str) -> Family:
    """The family called ``name`` (its data file's stem), parsed once; ``"family:kind"`` is one of its layer kinds,
    the family's entry with the kind's keys restated."""
    parent, one_layer, kind = name.partition(":")
    e = _resolved(parent)
    kinds = e.get("layer_kinds", {})
    if kind:
        if kind not in kinds:
            raise ValueError(f"families/{parent}.toml: no layer kind {kind!r}")
        e = {**e, **{k: v for k, v in kinds[kind].items() if k not in ("count", "first")}}
    if one_layer:
        kinds = {}
    where = f"families/{parent}.toml"
    mlp = e["mlp"]
    if (mlp["kind"] not in MLP_KINDS or mlp.get("activation", "silu") not in ACTIVATIONS or e["norm"] not in NORM_KINDS
            or e.get("extras", {}).get("mixer", "attention") not in MIXERS):
        raise ValueError(f"{where}: mlp kind/activation, norm kind or mixer unknown")
    norms = tuple(Norm(n, v["at"], expr(v["width"]), expr(v.get("rows", 1)), v.get("after"), v.get("option"),
                       v.get("weight", True))
                  for n, v in e["norms"].items())
    if any(n.at not in NORM_SITES for n in norms):
        raise ValueError(f"{where}: a norm's 'at' must be one of {NORM_SITES}")
    fam = Family(
        key=name, description=e["description"], model_types=tuple(e["model_types"]), source=e["source"],
        norm=e["norm"], mlp_kind=mlp["kind"], activation=mlp.get("activation", "silu"),
        attention_kernels=tuple(e["attention"]["kernels"]), default_attention=e["attention"]["default"],
        attention_why=e["attention"].get("why", ""),
        dims=tuple((s, key, str(default)) for s, (key, default) in e["dims"].items()),
        options=tuple(e.get("options", {}).items()),
        linears=_linears(e["linears"], where), norms=norms,
        moe_weights=_linears(e.get("moe_weights", {}), where, "experts"),
        targets=tuple((g, tuple(ms)) for g, ms in e["targets"].items()),
        extras=tuple(sorted(e.get("extras", {}).items())), unmodelled=tuple(e.get("unmodelled", ())),
        kinds=tuple((k, v["count"], v.get("first", False)) for k, v in kinds.items()),
    )
    for group, members in fam.targets if not one_layer else ():   # a layer kind may lack some (no experts in a dense layer)
        if unknown := set(members) - set(fam.target_map):
            raise ValueError(f"{where}: target group {group!r} names unknown modules {sorted(unknown)}")
    return fam


@cache
def family_names() -> tuple[str, ...]:
    shipped = [p.name[:-5] for p in _shipped_files()]
    return tuple(sorted(set(shipped) | set(_REGISTERED) | set(_user_files())))


@cache
def families_by_model_type() -> dict[str, str]:
    """config.json ``model_type`` → family name, from the entries' text alone (parsing every family's
    expressions would cost a cold start a second; parsing every file's TOML, a tenth of one).

    >>> families_by_model_type()["qwen3_moe"]
    'qwen3_moe'
    """
    return {mt: name for name in family_names() for mt in _declared_model_types(name)}


_MODEL_TYPES_LINE = re.compile(r"^model_types\s*=\s*(\[[^\]]*\])", re.M)


def _declared_model_types(name: str) -> list[str]:
    """An entry's ``model_types``: read from its top-level line where the file has one (the keys above its first
    table), else from the parsed entry with its ``extends`` chain."""
    path = resources.files("symvram.data").joinpath("families", f"{name}.toml")
    if name not in _REGISTERED and path.is_file():
        head = path.read_text(encoding="utf-8").split("\n[", 1)[0]
        if line := _MODEL_TYPES_LINE.search(head):
            return tomllib.loads(f"v = {line.group(1)}")["v"]
    return _resolved(name)["model_types"]
