"""bitsandbytes' 8-bit AdamW (and the paged ones, 8- and 32-bit) as the ledger models it, against measured tiny runs.

Measured under FakeTensorMode (bitsandbytes registers fake kernels for its optimizer ops); skipped without
the validate extra or bitsandbytes."""
from __future__ import annotations

import math

import pytest

from symvram.evaluate import evaluate
from symvram.errors import UserError
from symvram.presets import spec_from_config
from symvram.scenario import Scenario

ARCH = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000,
        "tie_word_embeddings": False}


def tiny(**changes):
    return spec_from_config({**ARCH, **changes}, "tiny", "config", "test")


def s8(n: int) -> int:
    """bitsandbytes Optimizer2State.init_state, by hand: uint8 m, v and an fp32 absmax per 256 from 4096
    elements on, fp32 m, v below."""
    return 2 * n + 8 * math.ceil(n / 256) if n >= 4096 else 8 * n


def test_states_by_hand_full_fine_tuning():
    h, f, V, L, q, kv = 64, 176, 1000, 2, 64, 32
    tensors = [V * h, V * h] + L * [q * h, kv * h, kv * h, h * q, f * h, f * h, h * f, h, h] + [h]
    bd = evaluate(Scenario.create(tiny(), method="full", optimizer="adamw8bit", stack="torch"))
    assert bd.terms["optimizer_states"] == sum(s8(n) for n in tensors) + 2 * 256 * 4  # + the two qmaps
    assert "optimizer_steps" not in bd.terms and "optimizer_temp" not in bd.terms  # step is a Python int
    hf = evaluate(Scenario.create(tiny(), method="full", optimizer="adamw8bit", stack="hf"))
    assert hf.terms["optimizer_states"] - bd.terms["optimizer_states"] == 8 * V * h - s8(V * h)  # Trainer override


def test_paged_states_are_their_own_line_outside_the_peak():
    sc = Scenario.create("llama-3-8b", method="full", optimizer="paged-adamw8bit", stack="torch")
    bd, plain = evaluate(sc), evaluate(sc.with_changes(optimizer="adamw8bit"))
    assert bd.ledger.by_key["paged_states"].block == "paged"
    assert bd.terms["paged_states"] + bd.terms["optimizer_states"] == plain.terms["optimizer_states"]
    assert bd.peak == plain.peak - bd.terms["paged_states"]
    on_cpu = evaluate(sc.with_changes(device="cpu"))  # bitsandbytes pages only CUDA tensors
    assert "paged_states" not in on_cpu.terms


def test_paged_32bit_states_by_hand():
    """PagedAdamW32bit (bitsandbytes optim/optimizer.py:509 init_state, :383 get_state_buffer): fp32 m and v per
    tensor, no quantization maps, a Python-int step; on CUDA the two buffers of a tensor with ≥ 1e5 elements are
    paged (here only the two 2000×64 embeddings), the rest stay allocator-resident."""
    h, f, V, L, q, kv = 64, 176, 2000, 2, 64, 32
    tensors = [V * h, V * h] + L * [q * h, kv * h, kv * h, h * q, f * h, f * h, h * f, h, h] + [h]
    sc = Scenario.create(tiny(vocab_size=V), method="full", optimizer="paged-adamw", stack="torch")
    bd = evaluate(sc)
    assert sc.state_dtype == "fp32"
    assert bd.terms["paged_states"] == sum(8 * n for n in tensors if n >= 100_000) == 2 * 8 * V * h
    assert bd.terms["optimizer_states"] == sum(8 * n for n in tensors if n < 100_000)
    assert "optimizer_steps" not in bd.terms and "optimizer_temp" not in bd.terms
    torch_adamw = evaluate(sc.with_changes(optimizer="adamw", optimizer_impl="fused", state_dtype="fp32"))
    assert torch_adamw.terms["optimizer_states"] == bd.terms["optimizer_states"] + bd.terms["paged_states"]
    with pytest.raises(UserError, match="keeps its states in 32 bits"):
        Scenario.create("llama-3-8b", optimizer="paged-adamw", state_dtype="int8")


def test_trainer_paged_8bit_pages_the_32bit_embedding_states():
    """The Trainer's paged_adamw_8bit on a tied Qwen3-0.6B: transformers registers every nn.Embedding weight for
    32-bit states (trainer.py:1328-1338 register_module_override); bitsandbytes applies the override at the first
    step (optim/optimizer.py:286-303 check_overrides, :341-363 get_config) and allocates those fp32 m and v through
    get_state_buffer (:383-389), which pages any tensor of ≥ 1e5 elements, 32-bit or not: the embedding's states
    are in CUDA unified memory, off the device's allocator and out of the peak. By hand: the tied 151,936 × 1,024
    embedding's two fp32 states are all paged; none is resident."""
    V, h = 151_936, 1_024
    bd = evaluate(Scenario.create("qwen3-0.6b", method="full", optimizer="paged-adamw8bit", stack="hf"))
    plain = evaluate(Scenario.create("qwen3-0.6b", method="full", optimizer="paged-adamw8bit", stack="torch"))
    assert bd.terms["paged_states"] - plain.terms["paged_states"] == 8 * V * h - 2 * V * h   # fp32, not uint8
    assert bd.terms["optimizer_states"] - plain.terms["optimizer_states"] == -8 * -(-V * h // 256)  # no absmax
    assert bd.peak - plain.peak == -8 * -(-V * h // 256)


def test_8bit_states_contradict_another_state_dtype():
    with pytest.raises(UserError, match="keeps its states in 8 bits"):
        Scenario.create("llama-3-8b", optimizer="adamw8bit", state_dtype="fp32")
    assert Scenario.create("7b", optimizer="adamw8bit").state_dtype == "int8"


MEASURED = [
    ("torch", dict(method="full"), {}),
    ("hf", dict(method="full"), {}),
    ("hf", dict(method="full"), {"tie_word_embeddings": True}),
    ("torch", dict(method="lora", rank=8), {}),
    ("hf", dict(method="lora", rank=64), {"hidden_size": 128, "head_dim": 32}),  # adapters ≥ 4096: 8-bit
    ("hf", dict(method="full", optimizer="paged-adamw8bit"), {}),
    ("torch", dict(method="full", optimizer="paged-adamw"), {}),   # on the CPU bitsandbytes pages nothing
    ("hf", dict(method="lora", rank=8, optimizer="paged-adamw"), {}),
]


@pytest.mark.parametrize("stack, settings, arch", MEASURED, ids=[f"{s}-{i}" for i, (s, *_) in enumerate(MEASURED)])
def test_estimate_equals_the_measured_peak(stack, settings, arch):
    pytest.importorskip("peft")
    pytest.importorskip("bitsandbytes")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    sc = Scenario.create(tiny(**arch), stack=stack, batch=2, seq=64, device="cpu",
                         **{"optimizer": "adamw8bit", **settings})
    measured = measure({**from_scenario(sc), "steps": 2})
    assert measured["breakdown_at_peak"]["optimizer_state"] == evaluate(sc).terms["optimizer_states"]
    assert 0 <= measured["peak_bytes"] - evaluate(sc).peak <= 8  # the 0-d loss and its gradient seed
