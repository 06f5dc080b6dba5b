"""The vision tower of a multimodal config.json: the parameters transformers builds beside the decoder, read
from ``symvram/data/towers.toml`` (keyed by the outer ``model_type``).

A text-only fine-tune of a multimodal checkpoint still loads the tower when the class it is loaded as has one
(``AutoModelForCausalLM`` builds ``Gemma3ForConditionalGeneration`` for a ``gemma3`` config): its weights sit on
the card, frozen, and LoRA adapts its linears that the target names match (PEFT matches module names by their
last part; ``all-linear`` takes every nn.Linear but the lm_head). On a text-only batch the tower never runs: its
adapters get no gradient and the optimizer keeps no state for them (torch's AdamW skips a parameter whose
``grad`` is None), and it saves no activations.

>>> t = read_tower({"model_type": "gemma3", "vision_config": {"hidden_size": 1152, "intermediate_size": 4304,
...     "num_hidden_layers": 27, "image_size": 896, "patch_size": 14, "vision_use_head": False},
...     "text_config": {"hidden_size": 2560}}, "gemma-3-4b")
>>> t.params, t.loader     # google/gemma-3-4b: 4,300,079,472 in all, 3,880,263,168 of them the decoder's
(419816304, 'Gemma3ForConditionalGeneration')
>>> t.lora_width(("q_proj", "v_proj"), all_linear=False)   # Σ copies·(d_in + d_out) of the matched linears
124416
"""
from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

import sympy as sp

from ..errors import UserError, excerpt

LOADERS = ("causal-lm", "image-text-to-text")   # AutoModelForCausalLM, AutoModelForImageTextToText


@dataclass(frozen=True)
class Tower:
    """A tower's parameter layout as integers (what one config.json gives): every parameter element, its
    nn.Linear modules by PEFT's name as (name, d_in, d_out, copies, bias elements per copy), its buffers, the class
    transformers loads it as and the outer config without ``text_config`` (``validate`` rebuilds the model)."""

    model_type: str
    description: str
    source: str
    loader: str
    params: int
    linears: tuple[tuple[str, int, int, int, int], ...]
    float_buffers: int = 0
    index_buffers: int = 0
    ids_copy: bool = False   # the forward embeds a copy of input_ids (a trainable embedding saves it)
    rope_per_sample: bool = False   # the decoder's RoPE tables are per sample (its position ids expanded to the batch)
    unsupported_targets: tuple[str, ...] = ()   # target names PEFT matches to tower modules it cannot wrap
    unsupported_why: str = ""
    config: str = "{}"
    modules: tuple[str, ...] = ()   # the tower's top modules by name (what a user freezes: requires_grad_(False))
    # images modelled (towers.toml [images]): the ledger's symbols per image token (pixel_values elements, what a
    # trainable tower saves by dtype, its parameter tensors) and their values; None where its image forward is not
    images: tuple[tuple[str, int], ...] | None = None
    images_refused: str = ""   # why this config's image forward is not modelled, where its tower's could be
    forward_refused: str = ""   # why the class that carries this tower cannot run a training step

    def lora_width(self, targets: tuple[str, ...], all_linear: bool) -> int:
        """Σ copies·(d_in + d_out) over the linears LoRA adapts: all of them under ``all-linear``, else those whose
        name is a target (one adapter pair of rank r each: r times this many elements)."""
        return sum(n * (i + o) for name, i, o, n, _ in self.linears if all_linear or name in targets)

    @property
    def linear_weights(self) -> tuple[tuple[int, int], ...]:
        """(elements of one weight, copies) per nn.Linear: what bitsandbytes packs to NF4."""
        return tuple((i * o, n) for _, i, o, n, _ in self.linears)

    @property
    def linear_bias_params(self) -> int:
        return sum(n * bias for *_, n, bias in self.linears)


@cache
def _entries() -> dict:
    """The entries, each ``extends`` resolved: the base entry's tables with this entry's keys over them."""
    raw = tomllib.loads(resources.files("symvram.data").joinpath("towers.toml").read_text(encoding="utf-8"))

    def resolved(name: str) -> dict:
        entry = raw[name]
        if "extends" not in entry:
            return entry
        base = resolved(entry["extends"])
        return {**base, **{k: {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
                           for k, v in entry.items() if k != "extends"}}

    return {name: resolved(name) for name in raw}


def tower_model_types() -> tuple[str, ...]:
    """The outer model_types whose tower is described."""
    return tuple(_entries())


def tied_by_default(model_type, loader: str = "causal-lm") -> bool | None:
    """The outer config class's tie_word_embeddings default for a described tower's model_type, where ``loader``
    builds the outer class (else None: Qwen3.5's and Llama 4's causal LM is built from the text_config,
    auto_factory.py:236-242, and ties as the text_config says).

    >>> tied_by_default("gemma3"), tied_by_default("qwen3_5"), tied_by_default("qwen3_vl")
    (True, None, False)
    >>> tied_by_default("qwen3_5", "image-text-to-text")
    False
    """
    entry = _entries().get(model_type, {})
    return None if loader in entry.get("text_only", ()) else entry.get("tie_word_embeddings")


def text_only_loaders(model_type) -> tuple[str, ...]:
    """The loaders whose class for a described tower's model_type has no tower (Qwen3.5's and Llama 4's
    ForCausalLM); () for any other model_type.

    >>> text_only_loaders("qwen3_5"), text_only_loaders("gemma3")
    (('causal-lm',), ())
    """
    return tuple(_entries().get(model_type, {}).get("text_only", ())) if isinstance(model_type, str) else ()


def text_decoder(model_type) -> tuple[str, str, dict] | None:
    """(the text_config's model_type, the family its layers are, the family's fields it always behaves as having)
    where a described tower's entry names one: the decoder whose model_type has no family of its own (Qwen3-VL's
    qwen3_vl_text is Qwen3's), else None.

    >>> text_decoder("qwen3_vl"), text_decoder("qwen3_vl_moe")[2], text_decoder("gemma3")
    (('qwen3_vl_text', 'qwen3', {}), {'norm_topk_prob': True}, None)
    """
    decoder = _entries().get(model_type, {}).get("decoder") if isinstance(model_type, str) else None
    return None if decoder is None else (decoder["model_type"], decoder["family"], decoder.get("fields", {}))


def _field(cfg: dict, key: str, default, source: str) -> int:
    """A field as an integer: a boolean as 0/1, a list as its length (Mistral 3's vision_feature_layer)."""
    where, _, names = key.rpartition(".")
    table = cfg.get({"vision": "vision_config", "text": "text_config", "audio": "audio_config"}[where]) if where else cfg
    table = table if isinstance(table, dict) else {}
    names, _, index = names.partition("[")   # "name[i]": item i of a list field (Gemma 4's subsampling channels)
    name = next((n for n in names.split("|") if table.get(n) is not None), names)   # "a|b": either spelling
    value = table.get(name)
    if index and isinstance(value, list):
        value = value[int(index.rstrip("]"))] if len(value) > int(index.rstrip("]")) else None
    if value is None:
        return int(default)
    if isinstance(value, dict):   # a sub-config that is there (Gemma 4's audio_config): 1
        return 1
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, list):
        return len(value)
    if isinstance(value, int):
        return 1 if name == "vision_feature_layer" else value   # one layer's index (-1): one layer's features
    raise UserError(f"{source}: field {key!r} must be an integer, got {excerpt(value)}")


def read_tower(cfg: dict, source: str, loader: str = "causal-lm") -> Tower | None:
    """The tower ``cfg`` (an outer multimodal config.json) loads with ``loader``, or None when it has none
    described or the loader's class has none; a loader that cannot build the model_type falls back to
    ``image-text-to-text``, as a user must."""
    entry = _entries().get(cfg.get("model_type"))
    if entry is None or loader in entry.get("text_only", ()):
        return None
    cls = entry["loaded_by"].get(loader) or entry["loaded_by"]["image-text-to-text"]
    values = {name: _field(cfg, key, default, source) for name, (key, default) in entry["fields"].items()}
    local = {name: sp.Symbol(name) for name in values}

    def count(text: str) -> int:
        n = sp.sympify(sp.sympify(text, locals=local, rational=True).xreplace({local[k]: v for k, v in values.items()}))
        if not n.is_integer or n < 0:
            raise UserError(f"{source}: the tower's {text} = {n} is not a whole number of elements "
                            f"(vision_config: {', '.join(f'{k} {v}' for k, v in values.items())})")
        return int(n)

    linears = tuple((m.get("module", name), count(m["d_in"]), count(m["d_out"]), count(m.get("count", "1")),
                     count(m.get("bias", "0")) * count(m["d_out"])) for name, m in entry["linears"].items())
    params = (sum(n * (i * o + bias) for _, i, o, n, bias in linears)
              + sum(count(e) for e in entry.get("tensors", {}).values()))
    buffers = entry.get("buffers", {})
    images, when = entry.get("images", {}), entry.get("images", {}).get("when")   # when: a condition on the fields
    images_modelled = bool(images) and (when is None or count(f"Piecewise((1, {when['condition']}), (0, True))") == 1)
    outer = {k: v for k, v in cfg.items() if k != "text_config"}
    return Tower(model_type=cfg["model_type"], description=entry["description"], source=entry["source"], loader=cls,
                 params=params, linears=linears, float_buffers=count(buffers.get("float", "0")),
                 index_buffers=count(buffers.get("index", "0")), config=json.dumps(outer, sort_keys=True),
                 unsupported_targets=tuple(entry.get("unsupported_targets", {}).get("names", ())),
                 unsupported_why=entry.get("unsupported_targets", {}).get("why", ""),
                 modules=tuple(entry.get("modules", ())), forward_refused=entry.get("forward_refused", ""),
                 images=tuple((k, count(v)) for k, v in images.items() if k != "when") if images_modelled else None, images_refused=when["why"] if images and not images_modelled else "",
                 **{name: bool(sp.sympify(entry.get("conditions", {}).get(name, "0"), locals=local)
                                   .xreplace({local[k]: v for k, v in values.items()}))
                    for name in ("ids_copy", "rope_per_sample")})
