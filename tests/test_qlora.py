"""QLoRA as it is run: bitsandbytes NF4 (double quantization) on the nn.Linear layers, PEFT's
prepare_model_for_kbit_training (fp32 embeddings, lm_head and norms, hence fp32 activations), its checkpointing
implementation — each measured on tiny models under FakeTensorMode against the estimate."""
from __future__ import annotations

import math

import pytest

from symvram.evaluate import evaluate
from symvram.presets import spec_from_config
from symvram.scenario import Scenario

ARCH = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000,
        "tie_word_embeddings": False}


def tiny(**changes):
    return spec_from_config({**ARCH, **changes}, "tiny", "config", "test")


def w4(n: int) -> tuple[int, int]:
    """bitsandbytes quantize_4bit(blocksize=64, compress_statistics=True), by hand: the packed weight, and the
    quantization state (uint8 absmax per 64, fp32 absmax per 256 of those, the 256-entry fp32 code, the offset,
    the 16-entry NF4 code)."""
    blocks = math.ceil(n / 64)
    return math.ceil(n / 2), blocks + 4 * math.ceil(blocks / 256) + 1024 + 4 + 64


def test_nf4_bytes_by_hand():
    h, f, q, kv, L = 64, 176, 64, 32, 2
    linears = [q * h, kv * h, kv * h, h * q, f * h, f * h, h * f]
    bd = evaluate(Scenario.create(tiny(), method="qlora", rank=8, stack="torch"))
    assert bd.terms["weights_nf4"] == L * sum(w4(n)[0] for n in linears) == 46_080
    assert bd.terms["quant_constants"] == L * sum(w4(n)[1] for n in linears) == 16_784  # the research's count
    kept = 2 * 1000 * h + (2 * L + 1) * h
    assert bd.terms["weights_16bit"] == 4 * kept  # prepare_model_for_kbit_training: fp32
    assert evaluate(Scenario.create(tiny(), method="qlora", rank=8, stack="torch", kbit_prep="none")
                    ).terms["weights_16bit"] == 2 * kept


def test_prepared_qlora_defaults():
    sc = Scenario.create("llama-3-8b", method="qlora", stack="torch")
    assert (sc.kbit_prep, sc.grad_checkpointing, sc.checkpoint_impl, sc.compute_dtype) == \
        ("peft", True, "reentrant", "fp32")
    hf = Scenario.create("llama-3-8b", method="qlora")
    assert (hf.stack, hf.grad_checkpointing, hf.checkpoint_impl) == ("hf", True, "non-reentrant")
    interview = Scenario.create("7b", method="qlora")  # the reference answer: no preparation, bf16 activations
    assert (interview.kbit_prep, interview.grad_checkpointing, interview.compute_dtype) == ("none", False, "bf16")


def test_prepared_qlora_under_autocast_by_hand():
    """A prepared model's stream is fp32, but autocast casts every matmul input to bf16: SDPA keeps bf16 q, k, v and
    its output, each LoRA target a bf16 cast of its input, bf16 lora_A outputs and the cast adapters (the research
    report's tiny model: the estimate used to count these fp32, 117,248 B = 3.3 % too high)."""
    T, h, kv, f, r, L = 128, 64, 32, 176, 8, 2
    bd = evaluate(Scenario.create(tiny(), method="qlora", rank=8, batch=2, seq=64, stack="hf", grad_checkpointing=False))
    assert bd.terms["act_attention"] == L * 2 * T * (h + 2 * kv + h)
    assert bd.terms["act_lora_inputs"] == L * 2 * T * (6 * h + f)
    assert bd.terms["act_lora_hidden"] == L * 7 * 2 * T * r
    d_out, d_in, first_qkv = 64 + 32 + 32 + 64 + 176 + 176 + 64, 6 * h + f, 3 * h
    assert bd.terms["act_adapter_casts"] == 2 * r * L * (d_out + d_in)
    # the first layer: no fp32 norm input nor 1/rms, no cast of lora_A for q, k, v (their input needs no gradient)
    assert bd.terms["act_first_layer"] == -(4 * T * h + 4 * T) - 2 * r * first_qkv
    assert bd.terms["act_adapter_casts"] - 2 * r * first_qkv == 34_304  # measured: the live bf16 casts


MEASURED = [
    dict(stack="torch", grad_checkpointing=False),
    dict(stack="torch", grad_checkpointing=False, kbit_prep="none"),
    dict(stack="torch"),                                   # PEFT's reentrant checkpointing
    dict(stack="torch", checkpoint_impl="non-reentrant"),
    dict(stack="hf"),                                      # Trainer bf16=True: autocast on the prepared model
    dict(stack="hf", grad_checkpointing=False),            # autocast's 16-bit matmul inputs in an fp32 stream
    dict(stack="torch", grad_checkpointing=False, arch=dict(model_type="qwen2", tie_word_embeddings=True)),
]


@pytest.mark.parametrize("settings", MEASURED, ids=[str(i) for i in range(len(MEASURED))])
def test_estimate_equals_the_measured_peak(settings):
    pytest.importorskip("peft")
    pytest.importorskip("bitsandbytes")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    settings = dict(settings)
    sc = Scenario.create(tiny(**settings.pop("arch", {})), method="qlora", rank=8, batch=2, seq=64, device="cpu",
                         **settings)
    measured = measure({**from_scenario(sc), "steps": 2})
    assert measured["breakdown_at_peak"]["quant_state"] == evaluate(sc).terms["quant_constants"]
    assert 0 <= measured["peak_bytes"] - evaluate(sc).peak <= 8  # the 0-d loss and its gradient seed
