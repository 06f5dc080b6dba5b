"""The compiled evaluation (``evaluate.exact_function``) against SymPy substitution, to the byte: every
preset × method, and settings that reach every kind of term (stacks, QLoRA, MoE, sharding, offload, tensor
parallel, checkpointing, 8-bit optimizers, loss implementations, DoRA, fractional overrides)."""
from __future__ import annotations

import math

import pytest
import sympy as sp

from symvram.errors import UserError
from symvram.evaluate import evaluate, exact_function, substitution
from symvram.ledger import build_ledger
from symvram.ledger.comm import build_comm
from symvram.ledger.flops import build_flops
from symvram.presets import model_presets
from symvram.scenario import Scenario

VARIANTS = (
    {},
    {"stack": "torch"},
    {"stack": "hf", "grad_checkpointing": True, "batch": 3, "seq": 1000},
    {"gpus": 8, "zero": 3, "offload": "optimizer+params"},
    {"gpus": 4, "zero": 1, "offload": "optimizer", "optimizer": "adamw8bit"},
    {"gpus": 2, "zero": 2, "tp": 2, "sequence_parallel": True},
    {"optimizer": "paged-adamw8bit", "loss_impl": "chunked", "attention": "eager"},
    {"loss_impl": "liger", "grad_checkpointing": True, "checkpoint_impl": "reentrant", "lora_dropout": 0.1},
    {"dora": True, "rank": 7, "seq": 777},
    {"stack": "hf", "modules_to_save": ("embed_tokens", "lm_head"), "grad_checkpointing": True},
    {"stack": "torch", "modules_to_save": ("lm_head",), "gpus": 4, "zero": 3},
    {"kbit_prep": "peft", "double_quant": False, "optimizer": "lion"},
    {"overrides": (("bytes_act", 2.5), ("bytes_state", 0.3), ("quant_block", 32))},
    {"overrides": (("quant_bits", 3.5),)},  # 2^3.5 is irrational: the SymPy numbers take over
    {"optimizer_impl": "fused", "gpus": 3, "zero": 1},             # composed from foreach and from DDP
    {"optimizer_impl": "forloop", "gpus": 2, "zero": 3, "grad_checkpointing": True},
    {"stack": "deepspeed", "gpus": 2, "zero": 2, "optimizer_impl": "fused"},
)


def _scenarios():
    for name in model_presets():
        for method in ("full", "lora", "qlora"):
            for kw in VARIANTS:
                try:
                    yield Scenario.create(name, method=method, **kw)
                except UserError:
                    continue


def _by_substitution(sc: Scenario) -> tuple[dict, dict]:
    led = build_ledger(sc.structure)
    subs = substitution(led, sc.values())
    terms = {t.key: int(sp.ceiling(t.expr.xreplace(subs))) for t in led.terms}
    derived = {str(s): int(subs[s]) for s, _ in led.definitions}
    return terms, derived


def test_compiled_equals_substitution_on_every_preset_method_and_setting():
    seen = set()
    for sc in _scenarios():
        if (sc.structure, sc.model.name) in seen:  # the numbers change with the model, the ledger with the structure
            continue
        seen.add((sc.structure, sc.model.name))
        bd = evaluate(sc)
        terms, derived = _by_substitution(sc)
        assert bd.terms == terms, (sc.model.name, sc.inputs())
        assert {k: bd.derived[k] for k in derived} == derived
    assert len({s for s, _ in seen}) > 150


@pytest.mark.parametrize("sc", [Scenario.create("mixtral-8x7b", method="lora", gpus=4, zero=3),
                                Scenario.create("qwen3-30b-a3b", method="qlora", seq=3000, kbit_prep="none"),
                                Scenario.create("gemma-2-9b", method="full", gpus=2, tp=2, sequence_parallel=True)],
                         ids=["mixtral", "qwen3-moe", "gemma-tp"])
def test_flops_and_communication_compile_exactly(sc):
    led, fl, cm = build_ledger(sc.structure), build_flops(sc.structure), build_comm(sc.structure)
    subs = substitution(led, sc.values())
    exprs = (*(t.expr for t in fl.terms), *(cm.block_expr(b) for b in ("network", "host", "hbm")))
    got = exact_function(led.definitions, exprs)(sc.values())
    assert [math.ceil(v) for v in got] == [int(sp.ceiling(e.xreplace(subs))) for e in exprs]


@pytest.mark.parametrize("kw", [{"method": "lora"}, {"method": "qlora", "grad_checkpointing": True},
                                {"method": "full", "gpus": 4, "zero": 3, "offload": "optimizer"}],
                         ids=["lora", "qlora", "zero3-offload"])
def test_sensitivity_equals_differentiating_and_substituting(kw):
    from symvram.analysis.sensitivity import sensitivity

    res = sensitivity(Scenario.create("llama-3.1-8b", **kw))
    led = res.breakdown.ledger
    subs = substitution(led, res.breakdown.values)
    moment = next(m for m in led.moments if m.key == res.moment)
    terms = [(k, led.expand(led.by_key[k].expr)) for k in moment.terms]
    flops = build_flops(res.breakdown.scenario.structure).total
    for row in res.rows:
        x = next(s for s in subs if str(s) == row.knob)
        assert row.derivative == sp.diff(sp.Add(*(e for _, e in terms)), x)
        assert row.value == float(row.derivative.xreplace(subs))
        shares = [(k, float(sp.diff(e, x).xreplace(subs)) * row.at) for k, e in terms]
        assert [(s.key, s.bytes) for s in row.shares] == sorted([s for s in shares if s[1]], key=lambda s: -abs(s[1]))
        assert row.time_elasticity == float(sp.diff(flops, x).xreplace(subs)) * row.at / float(flops.xreplace(subs))


def test_flops_and_communication_ledgers_read_only_their_fields():
    """build_flops / build_comm are cached on FLOPS_FIELDS / COMM_FIELDS alone: the same ledger as built from
    the whole structure."""
    from symvram.ledger.comm import _build_comm
    from symvram.ledger.flops import _build_flops

    structures = {sc.structure for sc in _scenarios() if sc.model.name in ("7b", "mixtral-8x7b", "gemma-2-9b")}
    for s in structures:
        assert build_flops(s) == _build_flops.__wrapped__(s), s
        assert build_comm(s) == _build_comm.__wrapped__(s), s


def test_parallel_layouts_share_the_single_gpu_terms():
    """build_ledger shards the single-GPU terms built once per structure without its parallel fields: the same
    ledger as building every term from the whole structure."""
    from symvram.ledger.build import _moments
    from symvram.ledger.sharding import shard_terms
    from symvram.ledger.weights import base_terms, optimizer_temp_terms, trainable_terms
    from symvram.ledger.activations import saved_terms, transient_terms

    structures = {sc.structure for sc in _scenarios() if sc.model.name in ("7b", "mixtral-8x7b", "gemma-2-9b")}
    for s in structures:
        terms = shard_terms(base_terms(s) + trainable_terms(s) + saved_terms(s) + transient_terms(s)
                            + optimizer_temp_terms(s), s)
        by_key = {t.key: t for t in terms}
        led = build_ledger(s)
        assert led.terms == tuple(terms) and led.moments == _moments(by_key, s), s
