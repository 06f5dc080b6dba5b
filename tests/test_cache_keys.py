"""The cache keys (``*_FIELDS``) cannot drift: a cached builder gets ``Structure.keep(FIELDS)``, whose other
fields are at their defaults — reading one would silently read the default. Every field read on a kept
structure is recorded here (dataclass hashing and equality aside) and must be one of its kept fields; and every
kept field must be read by some structure (no field nothing reads)."""
from __future__ import annotations

import sys
from dataclasses import fields

import pytest

from symvram.ledger.activations import ACTIVATION_FIELDS
from symvram.ledger.build import _activation_terms
from symvram.ledger.comm import COMM_FIELDS, _build_comm
from symvram.ledger.flops import FLOPS_FIELDS, _build_flops
from symvram.ledger.sharding import FSDP_FIELDS, fsdp_terms
from symvram.ledger.structure import Structure

FIELD_NAMES = frozenset(f.name for f in fields(Structure))
BUILDERS = {
    "ACTIVATION_FIELDS": (ACTIVATION_FIELDS, _activation_terms.__wrapped__),
    "FSDP_FIELDS": (FSDP_FIELDS, fsdp_terms),
    "FLOPS_FIELDS": (FLOPS_FIELDS, _build_flops.__wrapped__),
    "COMM_FIELDS": (COMM_FIELDS, _build_comm.__wrapped__),
}
BASES = [
    Structure(), Structure(method="full", tied=True, master=True, zero=3, offload="optimizer", fsdp_mixed_precision=True),
    Structure(method="lora", targets=("q_proj", "v_proj", "down_proj"), dora=True, dropout=True, zero=3),
    Structure(method="qlora", targets=("q_proj",), kbit_prepared=True, autocast=True, adapter_upcast=True, zero=3,
              grad_checkpointing=True, tensor_parallel=True, sequence_parallel=True),
    Structure(method="lora", family="mixtral", targets=("q_proj", "gate_up_proj", "down_proj"), modules_to_save=("lm_head",),
              loss_impl="trl", attention="eager", weight_casts=True, autocast=True, device="cpu", zero=2),
    Structure(method="full", objective="dpo", reference="copy", loss_impl="trl", grad_checkpointing=True),
    Structure(method="lora", family="gemma3_text", targets=("q_proj",), loss_impl="liger", compute_fp32=True,
              modules_to_save=("embed_tokens",), zero=3, offload="optimizer+params", double_quant=False),
    Structure(method="lora", family="glm4_moe", targets=("q_proj", "experts.down_proj"), zero=3),   # layer kinds
]


def _reads(builder, kept: Structure, key: tuple[str, ...]) -> set[str]:
    """The fields ``builder(kept)`` reads on kept structures beyond the ones each was kept with."""
    kept_fields: dict[int, frozenset] = {id(kept): frozenset(key)}
    out: set[str] = set()
    get, keep = Structure.__getattribute__, Structure.keep

    def recording_get(self, name):
        if name in FIELD_NAMES and id(self) in kept_fields and name not in kept_fields[id(self)]:
            if sys._getframe(1).f_code.co_name not in ("__eq__", "__hash__", "__repr__", "replace"):
                out.add(name)
        return get(self, name)

    def recording_keep(self, names):
        child = keep(self, names)
        kept_fields[id(child)] = frozenset(names)
        return child

    def recording_layer(self, kind):   # a layer kind's structure (dataclasses.replace) keeps what its parent kept
        child = layer(self, kind)
        if id(self) in kept_fields:
            kept_fields[id(child)] = kept_fields[id(self)]
        return child

    layer = Structure.layer
    Structure.__getattribute__, Structure.keep, Structure.layer = recording_get, recording_keep, recording_layer
    try:
        builder(kept)
    finally:
        Structure.__getattribute__, Structure.keep, Structure.layer = get, keep, layer
    return out


def _clear_caches() -> None:
    import symvram.ledger as ledger

    for module in vars(ledger).values():
        for value in vars(module).values() if hasattr(module, "__dict__") else ():
            if hasattr(value, "cache_clear"):
                value.cache_clear()


@pytest.mark.parametrize("name", BUILDERS)
def test_a_cached_builder_reads_only_its_key(name):
    key, builder = BUILDERS[name]
    for base in BASES:
        _clear_caches()
        assert not _reads(builder, base.keep(key), key), (name, base)


@pytest.mark.parametrize("name", BUILDERS)
def test_every_field_of_a_key_is_read(name):
    """Each field of the key changes what the builder returns for one of the structures, or is read by it."""
    key, builder = BUILDERS[name]
    unread = set(key)
    get = Structure.__getattribute__

    def recording_get(self, field):
        callers = {sys._getframe(1).f_code.co_name, sys._getframe(2).f_code.co_name}   # keep's comprehension too
        if field in unread and not callers & {"__eq__", "__hash__", "__repr__", "keep"}:
            unread.discard(field)
        return get(self, field)

    Structure.__getattribute__ = recording_get
    try:
        for base in BASES:
            _clear_caches()   # a cached inner builder would read nothing
            builder(base.keep(key))
    finally:
        Structure.__getattribute__ = get
    assert not unread, (name, sorted(unread))
