"""Every number of the reference answer (shared/reference, the 7B interview question), derived.

The expected values are hand derivations written here, independent of the engine's code."""
import pytest

from symvram import estimate

ALL_LINEAR = "all-linear"


def test_full_12_bytes_per_param():
    e = estimate("7b", method="full")
    assert e.derived["P_train"] == 7_000_000_000
    assert e.blocks["base"] == 7e9 * 2 == 14e9                         # bf16 weights: 2 B/param = 14 GB
    # grads 2 B + AdamW m, v in fp32 4+4 B = 10 B/param
    assert e.blocks["trainable"] == 7e9 * (2 + 8) == 70e9
    assert e.blocks["base"] + e.blocks["trainable"] == 84e9


def test_full_16_bytes_with_fp32_master():
    e = estimate("7b", method="full", master="fp32")
    assert e.blocks["trainable"] == 7e9 * (2 + 4 + 8) == 98e9
    assert e.blocks["base"] + e.blocks["trainable"] == 112e9


def test_lora_trainable_count_r64_all_linear():
    e = estimate("7b", method="lora", rank=64, targets=ALL_LINEAR)
    per_layer_qkvo = 4 * 64 * (4096 + 4096)
    per_layer_gate_up = 2 * 64 * (4096 + 11008)
    per_layer_down = 64 * (11008 + 4096)
    assert (per_layer_qkvo, per_layer_gate_up, per_layer_down) == (2_097_152, 1_933_312, 966_656)
    assert e.derived["P_train"] == 32 * (per_layer_qkvo + per_layer_gate_up + per_layer_down) == 159_907_840
    assert e.derived["P_train"] / 7e9 == pytest.approx(0.0228, abs=1e-4)   # ≈ 2.3 % of the base
    assert e.blocks["trainable"] == 159_907_840 * 12                   # adapter 2 + grad 2 + m, v 8


def test_lora_linear_in_rank():
    r16 = estimate("7b", method="lora", rank=16).derived["P_train"]
    assert r16 == 39_976_960 == 159_907_840 // 4


def test_qlora_base_between_3_5_and_4_2_gb():
    e = estimate("7b", method="qlora", rank=64)
    assert 3.5e9 < e.blocks["base"] < 4.2e9
    # by hand: 16-bit part = embeddings + lm_head + norms of the 7B shape; the rest is NF4 + constants
    keep = 2 * 32000 * 4096 + 32 * 2 * 4096 + 4096
    quant = 7e9 - keep
    assert e.terms["weights_nf4"] == pytest.approx(quant * 0.5, abs=1)
    assert e.terms["quant_constants"] == pytest.approx(quant * (8 / 64 + 32 / (64 * 256)) / 8, abs=1)
    assert e.terms["weights_16bit"] == keep * 2


def test_70b():
    full = estimate("70b", method="full")
    assert full.blocks["base"] + full.blocks["trainable"] == 840e9
    assert estimate("70b", method="lora").blocks["base"] == 140e9
    q = estimate("70b", method="qlora")
    assert 35e9 < q.blocks["base"] < 35e9 * 1.1    # ≈ 35 GB + constants + 16-bit embeddings


def test_real_models_carry_their_buffers_and_step_counters():
    """An exact preset counts what PyTorch allocates beyond P·bytes: the rotary buffer (fp32, d_head/2)
    and AdamW's 0-d fp32 step counter per parameter tensor (2 + 9·L + 1 tensors for Llama-2-7B)."""
    e = estimate("llama-2-7b", method="full")
    assert e.terms["buffers"] == 4 * 128 // 2
    assert e.terms["optimizer_steps"] == 4 * (2 + 9 * 32 + 1)
