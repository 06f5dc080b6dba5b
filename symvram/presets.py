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
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from .errors import UserError

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")
MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few kB; refuse anything that is not one
MAX_DIM = 10**7  # no model dimension (hidden, layers, vocab …) comes near this
GIB = 1 << 30


@dataclass(frozen=True)
class ModelSpec:
    """The shape of a Llama-family decoder, and where it came from.

    ``params`` is set only for nominal interview presets (P taken as written); for exact presets and
    config.json files P is derived from the shape (see ``ledger.architecture``).
    """

    name: str
    kind: str  # "nominal" | "exact" | "config"
    model_type: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    qkv_bias: bool
    max_position: int | None = None
    params: int | None = None
    published_params: int | None = None
    description: str = ""

    @property
    def dims(self) -> dict[str, int]:
        """Values of the model symbols (the registry names)."""
        d = dict(hidden=self.hidden, intermediate=self.intermediate, layers=self.layers,
                 heads=self.heads, kv_heads=self.kv_heads, head_dim=self.head_dim, vocab=self.vocab)
        if self.params is not None:
            d["P"] = self.params
        return d


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
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.5)
    hint = f"; closest: {', '.join(close)}" if close else ""
    raise UserError(f"unknown {what} {name!r}{hint} (known: {', '.join(table)})")


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


def spec_from_config(cfg: dict, name: str, kind: str, source: str) -> ModelSpec:
    """Build a ModelSpec from config.json-style fields (also used for presets)."""
    if not isinstance(cfg, dict):
        raise UserError(f"{source}: expected a JSON object")
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise UserError(f"{source}: model_type {model_type!r} is not supported; supported: "
                        f"{', '.join(SUPPORTED_MODEL_TYPES)} (Llama-family decoders)")
    hidden = _int_field(cfg, "hidden_size", source)
    heads = _int_field(cfg, "num_attention_heads", source)
    kv_heads = _int_field(cfg, "num_key_value_heads", source, default=heads)
    head_dim = cfg.get("head_dim") or None
    if head_dim is None:
        if hidden % heads:
            raise UserError(f"{source}: hidden_size {hidden} is not divisible by num_attention_heads {heads}")
        head_dim = hidden // heads
    head_dim = _int_field({"head_dim": head_dim}, "head_dim", source)
    if heads % kv_heads:
        raise UserError(f"{source}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
    qkv_bias = _bool_field(cfg, "attention_bias", source, model_type == "qwen2")
    params = cfg.get("params")
    return ModelSpec(
        name=name, kind=kind, model_type=model_type, hidden=hidden,
        intermediate=_int_field(cfg, "intermediate_size", source),
        layers=_int_field(cfg, "num_hidden_layers", source), heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, vocab=_int_field(cfg, "vocab_size", source),
        tied=_bool_field(cfg, "tie_word_embeddings", source, False), qkv_bias=qkv_bias,
        max_position=_optional_int(cfg, "max_position_embeddings", source, 1 << 40), params=params,
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
        exists = Path(text).exists()
    except OSError:  # a name too long for the file system is no folder
        is_path = exists = False
    if is_path:
        if not exists:
            from .readers.hub import is_hub_id, resolve

            if is_hub_id(text):
                return resolve(text)
        return load_config_json(Path(text))
    key, entry = _lookup(text, model_presets(), "model preset")
    return spec_from_config(entry, name=key, kind=entry["kind"], source=f"preset {key}")


def load_gpu(name: str) -> GPUSpec:
    """A named card from ``data/gpus.toml``."""
    key, entry = _lookup(name, gpu_presets(), "GPU")
    return GPUSpec(key=key, name=entry["name"], memory_bytes=round(entry["memory_gib"] * GIB),
                   usable_bytes=round(entry["usable_gib"] * GIB))
