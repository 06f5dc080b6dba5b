"""Models and GPU cards as data: presets shipped in ``symvram/data`` and Hugging Face config.json files.

>>> m = load_model("llama-3-8b")
>>> m.hidden, m.kv_heads, m.vocab, m.tied
(4096, 8, 128256, False)
>>> load_gpu("a100-80g").usable_bytes
84396107366
"""
from __future__ import annotations

import difflib
import json
import re
import tomllib
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import UserError, did_you_mean, excerpt
from .hub import config_path, is_hub_id
from .symbols import SYMBOLS, sym
from .units import fmt_bytes, parse_size

from .userfiles import read_user_file, unreadable

if TYPE_CHECKING:
    from .ledger.towers import Tower

MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few kB; refuse anything that is not one
MAX_DIM = 10**7  # no model dimension (hidden, layers, vocab …) comes near this
GIB = 1 << 30


@dataclass(frozen=True)
class ModelSpec:
    """The shape of a decoder, its family, and where it came from.

    ``params`` is set only for nominal interview presets (P taken as written); for exact presets and
    config.json files P is derived from the shape (see ``ledger.architecture``). ``options`` are the
    family's boolean switches that are on (``attention_bias``); ``extra`` the family's own dimensions
    (an MoE model's experts and top-k); ``tower`` the vision tower a multimodal config loads beside the
    decoder (``ledger.towers``), whose weights the base block holds.
    """

    name: str
    kind: str  # "nominal" | "exact" | "config"
    model_type: str
    family: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    options: tuple[str, ...] = ()
    extra: tuple[tuple[str, int], ...] = ()
    max_position: int | None = None
    params: int | None = None
    published_params: int | None = None
    description: str = ""
    tower: "Tower | None" = None
    layer_pattern: str = ""   # each layer's kind as its letter, in order, where the family spells them (Nemotron-H)
    loader: str = "causal-lm"   # the Auto class a multimodal config is read as loaded by (ledger.towers.LOADERS)
    # the same config as AutoModelForImageTextToText builds it, where AutoModelForCausalLM builds a text-only class
    image_text_to_text: "ModelSpec | None" = field(default=None, compare=False, repr=False)

    def loaded_as(self, loader: str) -> "ModelSpec":
        """This model as ``loader`` builds it (``--loader``): AutoModelForImageTextToText's class carries the vision
        tower where AutoModelForCausalLM's is text-only (Qwen3.5, Llama 4: modeling_auto.py:941, :894); where both
        build the same class (Gemma 3) or only one can (Qwen3-VL, Mistral 3), the model itself, so labelled.

        >>> m = spec_from_config({"model_type": "qwen3_5", "vision_config": {}, "text_config": {
        ...     "model_type": "qwen3_5_text", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 4,
        ...     "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24, "vocab_size": 1000}}, "q", "config", "t")
        >>> m.tower, m.loaded_as("image-text-to-text").tower.loader
        (None, 'Qwen3_5ForConditionalGeneration')
        """
        from .ledger.towers import LOADERS

        if loader not in LOADERS:
            raise UserError(f"--loader must be one of {', '.join(LOADERS)}; got {excerpt(loader)}")
        if loader == self.loader:
            return self
        if loader == "image-text-to-text" and self.image_text_to_text is not None:
            return self.image_text_to_text
        if loader == "image-text-to-text" and self.tower is None:
            raise UserError(f"--loader image-text-to-text: {self.name} is not a multimodal config "
                            "(AutoModelForImageTextToText builds a vision tower beside a text_config's decoder)")
        if loader == "causal-lm":   # a reading as image-text-to-text (the variant above) cannot go back
            raise UserError(f"--loader causal-lm: {self.name} was read as {self.loader} loads it")
        return replace(self, loader=loader)   # the class both build, or the only one that builds it

    @property
    def dims(self) -> dict[str, int]:
        """Values of the model symbols (the registry names)."""
        d = dict(hidden=self.hidden, intermediate=self.intermediate, layers=self.layers,
                 heads=self.heads, kv_heads=self.kv_heads, head_dim=self.head_dim, vocab=self.vocab, **dict(self.extra))
        if self.tower is not None:
            d.update(tower_params=self.tower.params, tower_float_buffers=self.tower.float_buffers,
                     tower_index_buffers=self.tower.index_buffers)
            d.update(self.tower.images or ())
        if self.params is not None:
            d["P"] = self.params
        return d

    def config(self) -> dict:
        """The config.json fields of this shape, as its family reads them (what ``validate`` builds).

        >>> load_model("qwen2.5-0.5b").config()["attention_bias"], load_model("mixtral-8x7b").config()["num_local_experts"]
        (True, 8)
        """
        from .ledger.architecture import expr, family

        fam, dims = family(self.family), self.dims
        cfg = {"model_type": self.model_type}
        for symbol, keys, default in fam.dims:
            if keys == "layer_types" or flag_pattern(default) is not None or default.startswith("pattern"):
                continue
            value = dims[symbol]
            if default.startswith("fraction of"):
                value = value / self.head_dim
            elif listed := LIST_COUNT.fullmatch(default):   # the kind's layers first (the kind is layer 0's)
                value = [listed["kind"]] * value + [listed["other"]] * (self.layers - value)
            elif doubled := DOUBLED.fullmatch(default):
                value = value != dims[doubled["base"]]
            cfg[keys.split("|")[0]] = value
        if flags := fam.extra("layer_flags"):   # each layer's flags, from its kind, in the model's order
            cfg.update(self._flag_lists(fam, flags))
        elif "sliding_layers" in dims:  # counts of layer kinds, laid out as a list (the order costs nothing)
            cfg["layer_types"] = (["sliding_attention"] * dims["sliding_layers"]
                                  + ["full_attention"] * (self.layers - dims["sliding_layers"]))
        if counted := fam.extra("counted_layers") if fam.kinds else None:  # a hybrid: its layers in the model's order
            cfg["layer_types"] = [counted["kind"] if k else "full_attention" for k in fam.model_kinds(dims)]
        if self.layer_pattern:   # the pattern string, or (a family without one: Granite 4) the per-layer list
            spelled = fam.extra("layer_pattern")
            names = {letter: name for name, letter in reversed(spelled["names"].items())}   # each letter's first name
            cfg.update({spelled["key"]: self.layer_pattern} if "key" in spelled else
                       {spelled["list_key"]: [names[c] for c in self.layer_pattern]})
            if "count_key" in spelled:   # the config's own layer count beside its list (num_hidden_layers)
                cfg[spelled["count_key"]] = len(self.layer_pattern)
        cfg.update({o: o in self.options for o, default in fam.options
                    if o != "tie_word_embeddings" and default != GIVEN and not NONZERO.fullmatch(str(default))})
        cfg.update({o: float(m["default"]) if o in self.options else 0.0 for o, default in fam.options
                    if (m := NONZERO.fullmatch(str(default)))})
        dim_keys = {k for _, keys, _ in fam.dims for k in keys.split("|")}
        cfg.update({o: fam.extra("given_values", {}).get(o, True) if o in self.options else None   # a field whose
                    for o, default in fam.options if default == GIVEN and o not in dim_keys})      # value is a setting
        cfg["tie_word_embeddings"] = self.tied
        cfg.update({k: v for k, v in fam.extra("must_equal", {}).items() if k not in cfg})   # the settings assumed
        cfg.update({k: int(expr(e).xreplace({sym(n): v for n, v in dims.items()}))   # fields that follow from dims
                    for k, e in fam.extra("derived_fields", {}).items()})
        if self.tower is not None:  # the multimodal config: the decoder's fields as its text_config
            return {**json.loads(self.tower.config), "text_config": cfg, "tie_word_embeddings": self.tied}
        return cfg


    def _flag_lists(self, fam, flags: dict) -> dict:
        """The per-layer lists of a flagged family (Llama 4's no_rope_layers and moe_layers) for this shape: each layer
        takes its kind's flags (the default kind's are ``extras.default_flags``), in ``model_kinds`` order."""
        defaults = {symbol: default for symbol, _, default in fam.dims}
        wanted = {name: flag_pattern(defaults[count]) for name, count, _ in fam.kinds}
        wanted[""] = flag_pattern("layers flagged " + fam.extra("default_flags"))
        per_layer = [wanted[k] for k in fam.model_kinds(self.dims)]
        out = {}
        for name, how in flags.items():
            on = [layer.get(name, False) for layer in per_layer]
            if "types" in how:
                out[how["types"]] = [how["kind"] if x else "full_attention" for x in on]
                continue
            if "last" in how:   # the flagged layers are the last ones in model_kinds' order (the kinds' order)
                out[how["last"]] = sum(on)
                continue
            if "boolean" in how:
                out[how["boolean"]] = any(on)
                continue
            out[how.get("flags") or how["indices"]] = ([int(x) for x in on] if "flags" in how
                                                       else [i for i, x in enumerate(on) if x])
        return out


@dataclass(frozen=True)
class GPUSpec:
    """A card: its memory, what is left for tensors, and — for a card given as a size — the step time's peak
    figures the user stated (``--tflops``: dense TFLOP/s in the matmul dtype, ``--hbm-gbps``); a named card's
    figures are in data/gpus.toml."""

    key: str
    name: str
    memory_bytes: int
    usable_bytes: int
    tflops: float | None = None
    hbm_gbps: float | None = None


def _toml(name: str) -> dict:
    return tomllib.loads(resources.files("symvram.data").joinpath(name).read_text(encoding="utf-8"))


@cache
def model_presets() -> dict[str, dict]:
    return _toml("models.toml")


@cache
def gpu_presets() -> dict[str, dict]:
    return _toml("gpus.toml")


def _lookup(name: str, table: dict[str, dict], what: str) -> tuple[str, dict]:
    key = name.strip().lower()
    for k, entry in table.items():
        if key == k or key in entry.get("aliases", ()):
            return k, entry
    names = list(table) + [a for e in table.values() for a in e.get("aliases", ())]
    raise UserError(f"unknown {what} {name!r}{did_you_mean(key, names, cutoff=0.5)}; known: {', '.join(table)}")


LAYER_KINDS = ("full_attention", "sliding_attention", "linear_attention")  # the kinds a layer_types list may name
# a family's dims default "entries KIND of KIND/OTHER, default N": the layers a per-layer list gives KIND (N without it)
LIST_COUNT = re.compile(r"entries (?P<kind>\w+) of \w+/(?P<other>\w+), default (?P<default>\d+)")
# a family's dims default "layers flagged F !G …": the layers whose flags (the family's extras.layer_flags) are F and
# not G (Llama 4: "layers flagged rope !moe", its dense RoPE layers)
FLAGGED = re.compile(r"layers flagged (?P<flags>!?\w+(?: !?\w+)*)")
# "EXPR, read when OPTION": the field counts only when the boolean config field OPTION is true, else EXPR (Gemma 4's
# num_global_key_value_heads applies with attention_k_eq_v only, configuration_gemma4.py:214)
READ_WHEN = re.compile(r"(?P<default>\w+), read when (?P<option>\w+)")
# "EXPR doubled when true": the field is a boolean; twice EXPR when it is true (Gemma 4's use_double_wide_mlp)
DOUBLED = re.compile(r"(?P<base>\w+) doubled when true")
# "N, or 0": an integer that may be 0 (a width that switches a block off: Gemma 4's hidden_size_per_layer_input)
OR_ZERO = re.compile(r"(?P<default>\d+), or 0")
# an [options] entry "given": on when config.json gives the field a value other than null, 0 or false
GIVEN = "given"
# an [options] entry "non-zero, default X": on when the field's number (X, the config class's default, where
# config.json has none) is not 0 (router_aux_loss_coef: TRL enables the load-balancing loss on it)
NONZERO = re.compile(r"non-zero, default (?P<default>[0-9.e+-]+)")


def flag_pattern(default: str) -> dict[str, bool] | None:
    """The flags a "layers flagged …" default asks for, else None.

    >>> flag_pattern("layers flagged rope !moe"), flag_pattern("required")
    ({'rope': True, 'moe': False}, None)
    """
    m = FLAGGED.fullmatch(default)
    return None if m is None else {w.lstrip("!"): not w.startswith("!") for w in m["flags"].split()}


class ConfigFields:
    """The fields of a config.json (or a preset entry), each read by its type and range: the one place a
    model's fields are checked, the field named in every message. ``null`` means absent, as transformers
    reads it.

    >>> f = ConfigFields({"hidden_size": "4096", "layer_types": ["full_attention", ["x"]]}, "c.json")
    >>> f.integer("hidden_size")
    Traceback (most recent call last):
    ...
    symvram.errors.UserError: c.json: field 'hidden_size' must be a positive integer, got '4096'
    >>> f.layer_counts(2, None)
    Traceback (most recent call last):
    ...
    symvram.errors.UserError: c.json: field 'layer_types' item 1 must be full_attention, sliding_attention or linear_attention, got ['x']
    """

    def __init__(self, cfg, source: str, decoders: dict[str, str] | None = None):
        if not isinstance(cfg, dict):
            raise UserError(f"{source}: expected a JSON object")
        # decoders: model_type → family for a text_config whose model_type has no family of its own (towers.toml)
        self.cfg, self.source, self.decoders = cfg, source, decoders or {}

    def given(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def _refuse(self, key: str, expected: str, value) -> UserError:
        return UserError(f"{self.source}: field {key!r} must be {expected}, got {excerpt(value)}")

    def integer(self, key: str, default=None) -> int:
        """A positive integer up to MAX_DIM (no model dimension comes near it), else ``default``."""
        value = self.cfg[key] if self.given(key) else default
        if value is None:
            raise UserError(f"{self.source}: missing required field {key!r}")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self._refuse(key, "a positive integer", value)
        if value > MAX_DIM:
            raise UserError(f"{self.source}: field {key!r} = {excerpt(value)} is not a plausible model dimension")
        return value

    def optional_integer(self, key: str, limit: int) -> int | None:
        value = self.cfg.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= limit):
            raise self._refuse(key, f"a positive integer up to {limit}", value)
        return value

    def layer_count(self, key: str, default: int, layers: int) -> int:
        """A count of decoder layers: an integer from 0 (else ``default``), at most ``layers`` (transformers reads
        first_k_dense_replace ≥ L as every layer dense).

        >>> f = ConfigFields({"first_k_dense_replace": 9}, "c.json")
        >>> f.layer_count("first_k_dense_replace", 1, 4), f.layer_count("mlp_only", 1, 4)
        (4, 1)
        >>> ConfigFields({"first_k_dense_replace": -1}, "c.json").layer_count("first_k_dense_replace", 1, 4)
        Traceback (most recent call last):
        ...
        symvram.errors.UserError: c.json: field 'first_k_dense_replace' must be a non-negative integer, got -1
        """
        value = self.cfg[key] if self.given(key) else default
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._refuse(key, "a non-negative integer", value)
        return min(value, layers)

    def fraction(self, key: str, default: float) -> float:
        """A number in (0, 1], at the top level or in ``rope_parameters`` (transformers 5 moves RoPE fields there)."""
        rope = self.cfg.get("rope_parameters")
        value = self.cfg.get(key, rope.get(key) if isinstance(rope, dict) else None)
        value = default if value is None else value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise self._refuse(key, "a number in (0, 1]", value)
        return value

    def listed_layers(self, key: str, kind: str, allowed: tuple[str, str], default: int, layers: int) -> int:
        """How many entries of the per-layer list ``key`` are ``kind`` (each one of ``allowed``; ``default`` without the
        list).

        >>> ConfigFields({"mlp_layer_types": ["dense", "sparse"]}, "c.json").listed_layers("mlp_layer_types", "dense",
        ...                                                                                 ("dense", "sparse"), 1, 2)
        1
        """
        entries = self.cfg.get(key)
        if entries is None:
            return min(default, layers)
        if not isinstance(entries, list) or len(entries) != layers or any(e not in allowed for e in entries):
            raise self._refuse(key, f"a list of {' or '.join(allowed)}, one per layer ({layers})", entries)
        return entries.count(kind)

    def layer_flags(self, flags: dict, layers: int) -> dict[str, tuple[bool, ...]]:
        """Each flag of ``flags`` (a family's extras.layer_flags) for every layer: from its per-layer list of 0/1
        (``flags``) or its list of layer indices (``indices``), else every ``every``-th layer (i + 1 divisible by
        it) is ``on_every`` and the others are not — as transformers' Llama4TextConfig fills no_rope_layers and
        moe_layers (configuration_llama4.py:168-186).

        >>> spec = {"rope": {"flags": "no_rope_layers", "every": "no_rope_layer_interval", "default_every": 4},
        ...         "moe": {"indices": "moe_layers", "every": "interleave_moe_layer_step", "default_every": 1,
        ...                 "on_every": True}}
        >>> f = ConfigFields({"interleave_moe_layer_step": 2}, "c.json").layer_flags(spec, 4)
        >>> f["rope"], f["moe"]
        ((True, True, True, False), (False, True, False, True))
        """
        out = {}
        for name, how in flags.items():
            if "types" in how or "last" in how or "boolean" in how:
                out[name] = self._layer_flag(how, layers)
                continue
            key = how.get("flags") or how["indices"]
            entries = self.cfg.get(key)
            if entries is not None and not (entries == [] and "flags" in how):   # an empty no_rope_layers: the default
                if "flags" in how:
                    if not isinstance(entries, list) or len(entries) != layers or any(
                            not isinstance(e, int) or e not in (0, 1) for e in entries):
                        raise self._refuse(key, f"a list of 0 or 1, one per layer ({layers})", entries)
                    out[name] = tuple(bool(e) for e in entries)
                else:
                    if not isinstance(entries, list) or any(isinstance(e, bool) or not isinstance(e, int)
                                                            or not 0 <= e < layers for e in entries):
                        raise self._refuse(key, f"a list of layer indices 0 … {layers - 1}", entries)
                    out[name] = tuple(i in entries for i in range(layers))
                continue
            n = self.integer(how["every"], how["default_every"])
            out[name] = tuple(((i + 1) % n == 0) == how.get("on_every", False) for i in range(layers))
        return out

    def _layer_flag(self, how: dict, layers: int) -> tuple[bool, ...]:
        """One layer flag of the kinds Gemma 4 reads (configuration_gemma4.py:188-199, :225-251): ``types``, the
        layers whose entry in that per-layer list is ``kind`` (without the list: every layer but each
        ``default_every``-th; ``last_off``: the last layer never, as transformers forces it full); ``last``, the last
        N layers for the integer field N (0 … L); ``boolean``, every layer or none by that switch.

        >>> f = ConfigFields({"num_kv_shared_layers": 2, "attention_k_eq_v": True}, "c.json")
        >>> f._layer_flag({"types": "layer_types", "kind": "sliding_attention", "default_every": 3, "last_off": True}, 5)
        (True, True, False, True, False)
        >>> f._layer_flag({"last": "num_kv_shared_layers"}, 5), f._layer_flag({"boolean": "attention_k_eq_v"}, 2)
        ((False, False, False, True, True), (True, True))
        """
        if "boolean" in how:
            return (self.boolean(how["boolean"], False),) * layers
        if "last" in how:
            n = self.layer_count(how["last"], 0, layers)
            return tuple(i >= layers - n for i in range(layers))
        kinds = self.cfg.get(how["types"])
        if kinds is None:
            on = [(i + 1) % how["default_every"] != 0 for i in range(layers)]
        else:
            self.layer_counts(layers, None)   # checks the list: one known kind per layer
            on = [k == how["kind"] for k in kinds]
        if how.get("last_off"):
            on[-1] = False
        return tuple(on)

    def layer_pattern(self, spelled: dict) -> str:
        """Each layer's kind as one letter (a family's extras.layer_pattern): the pattern string ``spelled["key"]``
        names, else the per-layer list ``spelled["list_key"]`` in transformers' names (NemotronHConfig keeps both,
        configuration_nemotron_h.py:168-176, :271-281). A letter no kind models is refused by what it is.

        >>> spec = {"key": "p", "list_key": "l", "kinds": {"M": "m", "-": ""}, "names": {"mlp": "-", "mamba": "M"},
        ...         "unmodelled": {"E": "an MoE block"}}
        >>> ConfigFields({"l": ["mamba", "mlp"]}, "c.json").layer_pattern(spec)
        'M-'
        >>> ConfigFields({"p": "M-E"}, "c.json").layer_pattern(spec)
        Traceback (most recent call last):
        ...
        symvram.errors.UserError: c.json: field 'p' has E layers (an MoE block): not modelled yet
        """
        key, letters = spelled.get("key", spelled["list_key"]), "".join(spelled["kinds"])
        value = self.cfg.get(key) if "key" in spelled else None
        if value is None and isinstance(listed := self.cfg.get(spelled["list_key"]), list):
            key = spelled["list_key"]
            if any(not isinstance(x, str) or x not in spelled["names"] for x in listed):
                raise self._refuse(key, f"a list of {', '.join(spelled['names'])}, one per layer", listed)
            value = "".join(spelled["names"][x] for x in listed)
        if not isinstance(value, str) or not value:
            raise self._refuse(key, f"a string of {', '.join(letters)}, one letter per layer", value)
        for letter, what in spelled.get("unmodelled", {}).items():
            if letter in value:
                raise UserError(f"{self.source}: field {key!r} has {letter} layers ({what}): not modelled yet")
        if bad := sorted(set(value) - set(letters)):
            raise self._refuse(key, f"a string of {', '.join(letters)}, one letter per layer (not {bad[0]!r})", value)
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.cfg[key] if self.given(key) else default
        if not isinstance(value, bool):  # "false" is a non-empty string: bool("false") would be True
            raise self._refuse(key, "true or false", value)
        return value

    def text(self, key: str, default: str | None = None) -> str | None:
        value = self.cfg[key] if self.given(key) else default
        if value is not None and not isinstance(value, str):
            raise self._refuse(key, "a string", value)
        return value

    def mapping(self, key: str) -> "ConfigFields | None":
        """A nested object (Gemma 3's ``text_config``), read the same way."""
        value = self.cfg.get(key)
        if value is not None and not isinstance(value, dict):
            raise self._refuse(key, "an object", value)
        return None if value is None else ConfigFields(value, f"{self.source} {key}")

    def layer_counts(self, layers: int, pattern: int | None, kind: str = "sliding_attention",
                     pattern_key: str = "sliding_window_pattern", min_full: int = 0) -> tuple[int, int]:
        """(kinds present, layers of ``kind``) from ``layer_types``, one of LAYER_KINDS per layer; without it,
        every ``pattern_key``-th layer (else the family's ``pattern``-th) is full attention and the others are of
        ``kind`` (transformers' Gemma3TextConfig: sliding unless (i + 1) % pattern == 0; Qwen3.5's
        full_attention_interval the same way, configuration_qwen3_5.py:111-116); ``min_full`` full layers at least
        (OLMo Hybrid makes its last layer full when no fourth one is, configuration_olmo_hybrid.py:127-129).

        >>> ConfigFields({"sliding_window_pattern": 3}, "c.json").layer_counts(12, 6)
        (2, 8)
        >>> ConfigFields({}, "c.json").layer_counts(24, 4, "linear_attention", "full_attention_interval")
        (2, 18)
        >>> ConfigFields({"layer_types": ["linear_attention"] * 3 + ["full_attention"]}, "c.json").layer_counts(
        ...     4, 4, "linear_attention")
        (2, 3)
        >>> ConfigFields({}, "c.json").layer_counts(2, 4, "linear_attention", "full_attention_interval", min_full=1)
        (2, 1)
        """
        kinds = self.cfg.get("layer_types")
        if kinds is None:
            n = self.integer(pattern_key, pattern)
            full = max(layers // n, min_full)
            return (full > 0) + (full < layers), layers - full
        if not isinstance(kinds, list) or len(kinds) != layers:
            raise self._refuse("layer_types", f"a list of one attention kind per layer ({layers})", kinds)
        for i, item in enumerate(kinds):
            if not isinstance(item, str) or item not in LAYER_KINDS:
                kinds_text = f"{', '.join(LAYER_KINDS[:-1])} or {LAYER_KINDS[-1]}"
                raise UserError(f"{self.source}: field 'layer_types' item {i} must be {kinds_text}, "
                                f"got {excerpt(item)}")
        return len(set(kinds)), kinds.count(kind)

    def family(self):
        """The family ``model_type`` names."""
        from .ledger.architecture import families_by_model_type, family

        model_type, known = self.cfg.get("model_type"), families_by_model_type() | self.decoders
        if model_type is not None and not isinstance(model_type, str):
            raise self._refuse("model_type", "a string naming the architecture (llama, qwen2 …)", model_type)
        if model_type not in known:
            raise UserError(f"{self.source}: model_type {excerpt(model_type)} is not supported; supported: "
                            f"{', '.join(sorted(known))} (an entry for another: symvram family-draft CONFIG, "
                            "docs/adding-a-family.md)")
        fam = family(known[model_type])
        # a setting that makes the model another family's entry (Granite 4.0 with RoPE: granitemoehybrid_rope)
        chosen = next((v["family"] for v in fam.extra("variants", ()) if self.cfg.get(v["key"]) == v["value"]
                       or ("above" in v and isinstance(x := self.cfg.get(v["key"]), int) and x > v["above"])), None)
        return family(chosen) if chosen else fam


def _text_model(fields: ConfigFields, loader: str = "causal-lm") -> ConfigFields:
    """A multimodal config's language model: its ``text_config`` when only that names a family (Gemma 3 4B–27B),
    tied as the class ``loader`` builds ties it."""
    from .ledger.architecture import families_by_model_type
    from .ledger.towers import text_decoder, tied_by_default

    known = families_by_model_type()
    text = fields.mapping("text_config")
    outer = fields.cfg.get("model_type")
    inner = text.cfg.get("model_type") if text is not None else None
    # a decoder whose model_type has no family of its own, read as the family its layers are (Qwen3-VL's: Qwen3's)
    decoder = text_decoder(outer)
    decoders, fixed = ({inner: decoder[1]}, decoder[2]) if decoder and decoder[0] == inner else ({}, {})
    if not isinstance(inner, str) or inner not in known | decoders or (isinstance(outer, str) and outer in known):
        return fields
    # transformers ties by the outer config (modeling_utils.py:2492): its field, else its class's default
    outer_default = tied_by_default(outer, loader)
    tied = fields.cfg.get("tie_word_embeddings",
                          text.cfg.get("tie_word_embeddings") if outer_default is None else outer_default)
    return ConfigFields({**text.cfg, **fixed, "tie_word_embeddings": tied}, fields.source + " (its text_config: the language model)",
                        decoders)


def decoder_family(cfg: dict) -> str | None:
    """The family name a config.json's decoder is read as (a multimodal config's text_config by its model_type, or
    as its tower entry's decoder), else None; a missing model_type is llama's, as transformers' default.

    >>> decoder_family({"model_type": "qwen3_vl", "text_config": {"model_type": "qwen3_vl_text"}})
    'qwen3'
    """
    from .ledger.architecture import families_by_model_type

    f = _text_model(ConfigFields(cfg, "config"))
    return (families_by_model_type() | f.decoders).get(f.cfg.get("model_type", "llama"))


def _option_on(f: "ConfigFields", key: str, default) -> bool:
    """Whether the family's [options] switch ``key`` is on in the config: a boolean field (``default`` where
    absent), a "given" one, or a "non-zero, default X" number."""
    if default == GIVEN:
        return f.cfg.get(key) not in (None, 0, False)
    if nonzero := NONZERO.fullmatch(str(default)):
        value = f.cfg[key] if f.given(key) else float(nonzero["default"])
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise f._refuse(key, "a number", value)
        return value != 0
    return f.boolean(key, default)


def spec_from_config(cfg: dict, name: str, kind: str, source: str, loader: str = "causal-lm") -> ModelSpec:
    """Build a ModelSpec from config.json-style fields (also used for presets): the family's data
    entry names the fields it reads and their defaults; ``ConfigFields`` checks each. A multimodal config is read
    as ``loader`` builds it (``ModelSpec.loaded_as``: the other loader's reading beside it where they differ)."""
    from sympy import sympify

    from .ledger.architecture import expr

    from .ledger.towers import LOADERS, read_tower, text_only_loaders

    f = _text_model(ConfigFields(cfg, source), loader)
    fam = f.family()
    tower = read_tower(cfg, source, loader) if f.cfg is not cfg else None
    # AutoModelForImageTextToText's reading where AutoModelForCausalLM builds a text-only class (Qwen3.5, Llama 4)
    other = (spec_from_config(cfg, name, kind, source, "image-text-to-text")
             if f.cfg is not cfg and loader == LOADERS[0] and loader in text_only_loaders(cfg.get("model_type")) else None)
    dims: dict[str, int] = {}
    pattern = f.layer_pattern(fam.extra("layer_pattern")) if fam.extra("layer_pattern") else ""
    for symbol, keys, default in fam.dims:
        if default.startswith("pattern"):   # counted from the per-layer letters: all of them, or one letter's
            dims[symbol] = len(pattern) if default == "pattern length" else pattern.count(default.split()[-1])
            continue
        if keys == "layer_types":  # counted from the per-layer attention kinds
            counted = fam.extra("counted_layers", {"kind": "sliding_attention", "pattern_key": "sliding_window_pattern"})
            present, of_kind = f.layer_counts(dims["layers"], fam.extra("sliding_pattern"), **counted)
            dims[symbol] = present if default == "layer types present" else of_kind
            continue
        if (wanted := flag_pattern(default)) is not None:   # a layer kind counted by per-layer flags (Llama 4)
            flags = f.layer_flags(fam.extra("layer_flags"), dims["layers"])
            dims[symbol] = sum(all(flags[k][i] == v for k, v in wanted.items()) for i in range(dims["layers"]))
            continue
        key = next((k for k in keys.split("|") if f.given(k)), keys.split("|")[0])  # "a|b": either
        if default.startswith("fraction of head_dim"):   # partial RoPE: int(d_head · factor), top level or in rope_parameters
            dims[symbol] = int(dims["head_dim"] * f.fraction(key, float(default.split()[-1])))
            continue
        if when := READ_WHEN.fullmatch(default):
            dims[symbol] = (f.integer(key, dims[when["default"]]) if f.boolean(when["option"], False)
                            else dims[when["default"]])
            continue
        if doubled := DOUBLED.fullmatch(default):
            dims[symbol] = dims[doubled["base"]] * (2 if f.boolean(key, False) else 1)
            continue
        if zero := OR_ZERO.fullmatch(default):
            dims[symbol] = f.layer_count(key, int(zero["default"]), MAX_DIM)
            continue
        if listed := LIST_COUNT.fullmatch(default):   # a layer kind counted in a per-layer list (mlp_layer_types)
            dims[symbol] = f.listed_layers(key, listed["kind"], (listed["kind"], listed["other"]),
                                           int(listed["default"]), dims["layers"])
            continue
        if SYMBOLS[symbol].unit == "layers" and symbol != "layers":   # a layer kind's count: 0 … L
            dims[symbol] = f.layer_count(key, int(default), dims["layers"])
            continue
        if not f.given(key) and default != "required":
            value = sympify(expr(default).xreplace({sym(n): v for n, v in dims.items()}))
            if not value.is_integer:  # head_dim = hidden/heads: hidden_size is not divisible by num_attention_heads
                raise UserError(f"{f.source}: {key} is absent and its default {default} is not a whole number: "
                                + ", ".join(f"{k} {dims[n]}" for n, k, _ in fam.dims if n in default and n in dims)
                                + " (hidden_size is not divisible by num_attention_heads)" * (default == "hidden/heads"))
            dims[symbol] = f.integer(key, int(value))
        else:
            dims[symbol] = f.integer(key)
    if fam.extra("layer_flags"):
        _refuse_unkinded_layers(fam, f.layer_flags(fam.extra("layer_flags"), dims["layers"]), f.source)
    if dims["heads"] % dims["kv_heads"]:
        raise UserError(f"{f.source}: num_attention_heads {dims['heads']} is not a multiple of num_key_value_heads "
                        f"{dims['kv_heads']}")
    if fam.latent_attention and dims["kv_heads"] != dims["heads"]:   # expand_kv makes n_h key heads, which SDPA's
        raise UserError(f"{f.source}: num_key_value_heads {dims['kv_heads']} must equal num_attention_heads "   # GQA
                        f"{dims['heads']} for latent attention (every head has its own k and v)")    # would repeat
    if fam.has_moe and dims["experts_per_token"] > dims["experts"]:
        raise UserError(f"{f.source}: each token is routed to {dims['experts_per_token']} experts but the model has "
                        f"only {dims['experts']}")
    for key, text in fam.extra("derived_fields", {}).items():   # a field the dims imply (Falcon-H1's mamba_d_ssm)
        if f.given(key) and f.cfg[key] != (implied := int(expr(text).xreplace({sym(n): v for n, v in dims.items()}))):
            raise UserError(f"{f.source}: {key} = {excerpt(f.cfg[key])} must equal {text} = {implied}")
    for key, allowed in fam.extra("must_equal", {}).items():  # settings the family's ledger assumes
        if f.given(key) and f.cfg[key] != allowed:
            raise UserError(f"{f.source}: {key} = {excerpt(f.cfg[key])} is not modelled for {fam.key} (only {allowed!r})")
    for key, why in fam.extra("null_refused", {}).items():   # a field set to null, top level or in rope_parameters
        if any(isinstance(c, dict) and key in c and c[key] is None for c in (f.cfg, f.cfg.get("rope_parameters"))):
            raise UserError(f"{f.source}: {key} null: {why}")   # (OLMo Hybrid's NoPE)
    options = tuple(o for o, default in fam.options if o != "tie_word_embeddings" and _option_on(f, o, default))
    base = {"hidden", "intermediate", "layers", "heads", "kv_heads", "head_dim", "vocab"}
    return ModelSpec(
        name=name, kind=kind, model_type=f.cfg["model_type"], family=fam.key,
        **{k: v for k, v in dims.items() if k in base},
        tied=f.boolean("tie_word_embeddings", dict(fam.options).get("tie_word_embeddings", False)),
        options=options, extra=tuple(sorted((k, v) for k, v in dims.items() if k not in base)),
        max_position=f.optional_integer("max_position_embeddings", 1 << 40),
        params=f.optional_integer("params", 10**15),
        published_params=f.optional_integer("published_params", 10**15),
        description=f.text("description", ""), tower=tower, layer_pattern=pattern, loader=loader,
        image_text_to_text=other,
    )


def _refuse_unkinded_layers(fam, flags: dict[str, tuple[bool, ...]], source: str) -> None:
    """A layer whose flags no layer kind has (the default kind's are ``extras.default_flags``) is refused by them:
    Gemma 4's MoE block in a layer reading shared K/V, of which no config is published."""
    defaults = {symbol: default for symbol, _, default in fam.dims}
    kinds = [flag_pattern(defaults[count]) for _, count, _ in fam.kinds]
    kinds.append(flag_pattern("layers flagged " + fam.extra("default_flags")))
    for i in range(len(next(iter(flags.values()), ()))):
        if not any(all(flags[k][i] == v for k, v in kind.items()) for kind in kinds):
            on = ", ".join(("" if flags[k][i] else "not ") + k for k in flags)
            raise UserError(f"{source}: layer {i} ({on}) is of no layer kind {fam.key} models")


def load_config_json(path: Path) -> ModelSpec:
    """A Hugging Face config.json (a file, or a folder holding one). Nothing is downloaded."""
    try:
        if path.is_dir():
            path = path / "config.json"
    except (OSError, ValueError):  # a name too long, a NUL character, a loop of links: read_user_file says which
        pass
    data = read_user_file(path, str(path), MAX_CONFIG_BYTES, "a config.json", missing=f"no config.json at {str(path)!r}")
    try:
        cfg = json.loads(data.decode("utf-8-sig"))  # a byte-order mark, as Windows editors write, is not content
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, an integer of 5000 digits
        raise UserError(f"{path}: not valid JSON ({unreadable(e)})") from None
    if isinstance(cfg, dict) and "params" in cfg:
        cfg = {k: v for k, v in cfg.items() if k != "params"}  # P of a real config is derived
    name = ConfigFields(cfg, str(path)).text("_name_or_path") or path.parent.name or "config.json"
    return spec_from_config(cfg, name=name, kind="config", source=str(path))


# checkpoints of one base that share its config.json: the chat / instruction-tuned releases and the "-Base" name
VARIANT_SUFFIXES = ("-instruct", "-base", "-it", "-chat", "-hf")


def base_name(name: str) -> str:
    """``name`` without the release suffixes of VARIANT_SUFFIXES (a version after them is kept: v0.3 differs).

    >>> base_name("llama-2-7b-chat-hf"), base_name("qwen3-8b-base"), base_name("mistral-7b-instruct-v0.3")
    ('llama-2-7b', 'qwen3-8b', 'mistral-7b-instruct-v0.3')
    """
    while (cut := next((s for s in VARIANT_SUFFIXES if name.endswith(s) and len(name) > len(s)), None)):
        name = name[:-len(cut)]
    return name


def preset_for_repo(repo_id: str) -> ModelSpec | None:
    """The preset named like the repo (``meta-llama/Llama-3.1-8B`` → llama-3.1-8b) or whose description
    names that repo (``allenai/OLMo-2-1124-7B`` → olmo-2-7b); else the preset of its base when the id is a
    release of it (``Qwen/Qwen3-8B-Instruct``, ``google/gemma-2-9b-it`` → qwen3-8b, gemma-2-9b)."""
    name = repo_id.split("/", 1)[1].lower()
    for candidate in dict.fromkeys((name, base_name(name))):
        for key, entry in model_presets().items():
            described = (entry.get("description") or "").split(" ")[0].lower()
            if candidate == key or candidate in entry.get("aliases", ()) or described == f"{repo_id.split('/')[0]}/{candidate}".lower():
                how = f"preset {key}" if candidate == name else f"preset {key} (the base of {repo_id}: the same config)"
                return spec_from_config(entry, name=key, kind=entry["kind"], source=how)
    return None


def close_presets(repo_id: str) -> str:
    """The presets whose names are close to a Hub id's, as the end of a refusal."""
    name = repo_id.split("/", 1)[1].lower()
    table = model_presets()
    names = list(table) + [a for e in table.values() for a in e.get("aliases", ())]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    close += [n for n in names if n not in close and (name.startswith(n) or n.startswith(name))][:3 - len(close)]
    return f"; presets that match: {', '.join(close)}" if close else f"; presets: {', '.join(table)}"


def hub_config_path(repo_id: str) -> Path:
    """The config.json of a Hub id (``hub.config_path``); a refusal names the presets whose names are close."""
    return config_path(repo_id, close_presets(repo_id))


def hub_model(repo_id: str) -> ModelSpec:
    """A ModelSpec for a Hub id, named by the id (or by the preset it matches).

    >>> hub_model("meta-llama/Llama-3.1-8B").name
    'llama-3.1-8b'
    """
    spec = preset_for_repo(repo_id)
    if spec is not None:
        return spec
    return replace(load_config_json(hub_config_path(repo_id)), name=repo_id)


def load_model(name_or_path: str) -> ModelSpec:
    """A preset name (``7b``, ``llama-3-8b`` …), a path to a config.json / model folder, or a Hub id
    (``meta-llama/Llama-3.1-8B``: a preset of that name, the local cache, a download; ``hub_model``)."""
    text = str(name_or_path)
    try:
        is_path = text.endswith(".json") or "/" in text or Path(text).is_dir()
        exists = is_path and Path(text).exists()
    except (OSError, ValueError):  # a name too long for the file system, or holding a NUL, is no folder
        is_path = exists = False
    if is_path:
        if not exists:
            if is_hub_id(text):
                return hub_model(text)
        return load_config_json(Path(text))
    return _preset(_lookup(text, model_presets(), "model preset")[0])


@cache
def _preset(key: str) -> ModelSpec:
    """A preset's ModelSpec, built once (a ModelSpec is frozen)."""
    entry = model_presets()[key]
    return spec_from_config(entry, name=key, kind=entry["kind"], source=f"preset {key}")


def load_gpu(name: str) -> GPUSpec:
    """A named card from ``data/gpus.toml``; a name that several cards share (``a100``: 40 or 80 GB) is
    refused with the choices rather than read as one of them.

    >>> load_gpu("a100")
    Traceback (most recent call last):
    ...
    symvram.errors.UserError: 'a100' names more than one card: a100-40g, a100-80g (say which)
    """
    shared = [k for k in gpu_presets() if k.startswith(name.strip().lower() + "-")]
    if len(shared) > 1:
        raise UserError(f"{name!r} names more than one card: {', '.join(shared)} (say which)")
    key, entry = _lookup(name, gpu_presets(), "GPU")
    return GPUSpec(key=key, name=entry["name"], memory_bytes=round(entry["memory_gib"] * GIB),
                   usable_bytes=round(entry["usable_gib"] * GIB))


MIN_CARD_BYTES = 1 << 30  # nothing smaller is a training accelerator; "--gpu 24" (bytes) is a typo


@cache
def size_card_context() -> int:
    """The CUDA context taken off a card given as a size: the median of the named cards' (memory − usable).

    >>> round(size_card_context() / 2**30, 2)
    0.51
    """
    contexts = sorted(round(e["memory_gib"] * GIB) - round(e["usable_gib"] * GIB) for e in gpu_presets().values())
    return contexts[len(contexts) // 2]


def load_card(text: str) -> GPUSpec:
    """A named card (``rtx-4090``, ``a100-80g`` …) or a size (``24GiB``). A size is the card's physical
    memory, as a named card's is: the same CUDA context (``size_card_context``) is taken off for the usable.

    >>> card = load_card("24GiB")
    >>> card.memory_bytes == 24 * 2**30, card.usable_bytes == 24 * 2**30 - size_card_context()
    (True, True)
    >>> load_card("4090").name
    'NVIDIA GeForce RTX 4090 24GB'
    >>> load_card("24GB").name, load_card("24G").name, load_card("24 GiB").name
    ('24GB = 22.35 GiB card', '24G = 24.00 GiB card', '24.00 GiB card')
    """
    text = str(text).strip()
    try:
        return load_gpu(text)
    except UserError as named_error:
        if not text[:1].isdigit() and text[:1] not in ".-+":
            raise UserError(f"--gpu: {named_error}") from None
    try:
        size = parse_size(text)
    except UserError as e:
        raise UserError(f"--gpu {text}: {e}") from None
    if size < MIN_CARD_BYTES:
        raise UserError(f"--gpu {text}: {size:,} bytes is not a GPU's memory (at least 1 GiB; write the unit, e.g. 24GiB)")
    # echo how a size was read unless it was written in GiB: "24GB = 22.35 GiB card", "24G = 24.00 GiB card"
    echo = "" if text.lower().replace(" ", "").endswith("gib") else f"{text} = "
    return GPUSpec(key=text, name=f"{echo}{fmt_bytes(size)} card", memory_bytes=size,
                   usable_bytes=size - size_card_context())
