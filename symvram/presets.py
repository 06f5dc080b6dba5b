"""Models and GPU cards as data: presets shipped in ``symvram/data`` and Hugging Face config.json files.

>>> m = load_model("llama-3-8b")
>>> m.hidden, m.kv_heads, m.vocab, m.tied
(4096, 8, 128256, False)
>>> load_gpu("a100-80g").usable_bytes
84396107366
"""
from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from .errors import UserError, did_you_mean
from .symbols import sym
from .units import fmt_bytes, parse_size

MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few kB; refuse anything that is not one
MAX_DIM = 10**7  # no model dimension (hidden, layers, vocab …) comes near this
GIB = 1 << 30


@dataclass(frozen=True)
class ModelSpec:
    """The shape of a decoder, its family, and where it came from.

    ``params`` is set only for nominal interview presets (P taken as written); for exact presets and
    config.json files P is derived from the shape (see ``ledger.architecture``). ``options`` are the
    family's boolean switches that are on (``attention_bias``); ``extra`` the family's own dimensions
    (an MoE model's experts and top-k).
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

    @property
    def dims(self) -> dict[str, int]:
        """Values of the model symbols (the registry names)."""
        d = dict(hidden=self.hidden, intermediate=self.intermediate, layers=self.layers,
                 heads=self.heads, kv_heads=self.kv_heads, head_dim=self.head_dim, vocab=self.vocab, **dict(self.extra))
        if self.params is not None:
            d["P"] = self.params
        return d

    def config(self) -> dict:
        """The config.json fields of this shape, as its family reads them (what ``validate`` builds).

        >>> load_model("qwen2.5-0.5b").config()["attention_bias"], load_model("mixtral-8x7b").config()["num_local_experts"]
        (True, 8)
        """
        from .ledger.architecture import family

        fam, dims = family(self.family), self.dims
        cfg = {"model_type": self.model_type}
        cfg.update({keys.split("|")[0]: dims[symbol] for symbol, keys, _ in fam.dims if keys != "layer_types"})
        if "sliding_layers" in dims:  # counts of layer kinds, laid out as a list (the order costs nothing)
            cfg["layer_types"] = (["sliding_attention"] * dims["sliding_layers"]
                                  + ["full_attention"] * (self.layers - dims["sliding_layers"]))
        cfg.update({o: o in self.options for o, _ in fam.options if o != "tie_word_embeddings"})
        cfg["tie_word_embeddings"] = self.tied
        return cfg


@dataclass(frozen=True)
class GPUSpec:
    key: str
    name: str
    memory_bytes: int
    usable_bytes: int


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


def _int_field(cfg: dict, key: str, source: str, default=None) -> int:
    value = default if cfg.get(key) is None else cfg[key]  # null means absent, as transformers reads it
    if value is None:
        raise UserError(f"{source}: missing required field {key!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserError(f"{source}: field {key!r} must be a positive integer, got {value!r}")
    if value > MAX_DIM:
        raise UserError(f"{source}: field {key!r} = {value} is not a plausible model dimension")
    return value


def _optional_int(cfg: dict, key: str, source: str, limit: int) -> int | None:
    value = cfg.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= limit):
        raise UserError(f"{source}: field {key!r} must be a positive integer up to {limit}, got {value!r}")
    return value


def _bool_field(cfg: dict, key: str, source: str, default: bool) -> bool:
    value = default if cfg.get(key) is None else cfg[key]
    if not isinstance(value, bool):  # "false" is a non-empty string: bool("false") would be True
        raise UserError(f"{source}: field {key!r} must be true or false, got {value!r}")
    return value


def _known_types() -> dict[str, str]:
    from .ledger.architecture import families_by_model_type

    return families_by_model_type()


def _family_of(cfg: dict, source: str):
    from .ledger.architecture import families_by_model_type, family

    model_type = cfg.get("model_type")
    known = families_by_model_type()
    if model_type not in known:
        raise UserError(f"{source}: model_type {model_type!r} is not supported; supported: {', '.join(sorted(known))} "
                        "(a family is added as one file under symvram/data/families/, see the README)")
    return family(known[model_type])


def _count_layer_types(cfg: dict, fam, layers: int, what: str, source: str) -> int:
    """How many distinct layer types (``what`` = "layer types present") or sliding-window layers
    ("sliding layers") a config has: its ``layer_types``, else the family's pattern (every n-th layer full)."""
    types = cfg.get("layer_types")
    if types is None:
        n = cfg.get("sliding_window_pattern") or fam.extra("sliding_pattern")
        types = ["full_attention" if (i + 1) % n == 0 else "sliding_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers:
        raise UserError(f"{source}: layer_types must list one attention kind per layer ({layers})")
    return len(set(types)) if what == "layer types present" else types.count("sliding_attention")


def spec_from_config(cfg: dict, name: str, kind: str, source: str) -> ModelSpec:
    """Build a ModelSpec from config.json-style fields (also used for presets): the family's data
    entry names the fields it reads and their defaults."""
    from sympy import sympify

    from .ledger.architecture import expr

    if not isinstance(cfg, dict):
        raise UserError(f"{source}: expected a JSON object")
    text = cfg.get("text_config")
    if isinstance(text, dict) and cfg.get("model_type") not in _known_types() and text.get("model_type") in _known_types():
        cfg = {**text, "tie_word_embeddings": cfg.get("tie_word_embeddings", text.get("tie_word_embeddings"))}
        source += " (its text_config: the language model; vision towers are not modelled)"  # Gemma 3 4B–27B
    fam = _family_of(cfg, source)
    dims: dict[str, int] = {}
    for symbol, keys, default in fam.dims:
        if keys == "layer_types":  # counted from the per-layer attention kinds
            dims[symbol] = _count_layer_types(cfg, fam, dims["layers"], default, source)
            continue
        key = next((k for k in keys.split("|") if cfg.get(k) is not None), keys.split("|")[0])  # "a|b": either
        if cfg.get(key) is None and default != "required":
            value = sympify(expr(default).xreplace({sym(n): v for n, v in dims.items()}))
            if not value.is_integer:  # head_dim = hidden/heads: hidden_size is not divisible by num_attention_heads
                raise UserError(f"{source}: {key} is absent and its default {default} is not a whole number: "
                                + ", ".join(f"{k} {cfg.get(k)}" for n, k, _ in fam.dims if n in default
                                            and cfg.get(k) is not None) + " (hidden_size is not divisible by "
                                "num_attention_heads)" * (default == "hidden/heads"))
            dims[symbol] = int(value)
        dims[symbol] = _int_field({key: dims.get(symbol, cfg.get(key))}, key, source)
    if dims["heads"] % dims["kv_heads"]:
        raise UserError(f"{source}: num_attention_heads {dims['heads']} is not a multiple of num_key_value_heads "
                        f"{dims['kv_heads']}")
    if fam.moe and dims["experts_per_token"] > dims["experts"]:
        raise UserError(f"{source}: each token is routed to {dims['experts_per_token']} experts but the model has "
                        f"only {dims['experts']}")
    for key, allowed in fam.extra("must_equal", {}).items():  # settings the family's ledger assumes
        if cfg.get(key) is not None and cfg[key] != allowed:
            raise UserError(f"{source}: {key} = {cfg[key]!r} is not modelled for {fam.key} (only {allowed!r})")
    options = tuple(o for o, default in fam.options
                    if o != "tie_word_embeddings" and _bool_field(cfg, o, source, default))
    base = {"hidden", "intermediate", "layers", "heads", "kv_heads", "head_dim", "vocab"}
    return ModelSpec(
        name=name, kind=kind, model_type=cfg["model_type"], family=fam.key,
        **{k: v for k, v in dims.items() if k in base},
        tied=_bool_field(cfg, "tie_word_embeddings", source, dict(fam.options).get("tie_word_embeddings", False)),
        options=options, extra=tuple(sorted((k, v) for k, v in dims.items() if k not in base)),
        max_position=_optional_int(cfg, "max_position_embeddings", source, 1 << 40), params=cfg.get("params"),
        published_params=_optional_int(cfg, "published_params", source, 10**15),
        description=str(cfg.get("description", "")),
    )


def load_config_json(path: Path) -> ModelSpec:
    """A Hugging Face config.json (a file, or a folder holding one). Nothing is downloaded."""
    try:
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise UserError(f"no config.json at {str(path)!r}")
        with path.open("rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise UserError(f"cannot read {str(path)!r}: {e.strerror or e}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise UserError(f"{path}: over {MAX_CONFIG_BYTES} bytes is too large for a config.json")
    try:
        cfg = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, an integer of 5000 digits
        raise UserError(f"{path}: not valid JSON ({e})") from None
    if isinstance(cfg, dict) and "params" in cfg:
        cfg = {k: v for k, v in cfg.items() if k != "params"}  # P of a real config is derived
    name = (cfg.get("_name_or_path") if isinstance(cfg, dict) else None) or path.parent.name or "config.json"
    return spec_from_config(cfg, name=str(name), kind="config", source=str(path))


def load_model(name_or_path: str) -> ModelSpec:
    """A preset name (``7b``, ``llama-3-8b`` …), a path to a config.json / model folder, or a Hub id
    (``meta-llama/Llama-3.1-8B``: a preset of that name, the local cache, a download; ``readers.hub``)."""
    text = str(name_or_path)
    try:
        is_path = text.endswith(".json") or "/" in text or Path(text).is_dir()
        exists = is_path and Path(text).exists()
    except OSError:  # a name too long for the file system is no folder
        is_path = exists = False
    if is_path:
        if not exists:
            from .readers.hub import is_hub_id, resolve

            if is_hub_id(text):
                return resolve(text)
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
    0.49
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
