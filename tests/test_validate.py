"""symvram.validate: fake-tensor measurement of real training steps, checked by hand derivations.

Skipped when the optional extra ``validate`` (torch, transformers, peft) is not installed.
"""

import pytest

torch = pytest.importorskip("torch", reason="symvram[validate] extra not installed (torch)")
pytest.importorskip("transformers", reason="symvram[validate] extra not installed (transformers)")
pytest.importorskip("peft", reason="symvram[validate] extra not installed (peft)")

import importlib  # noqa: E402

M = importlib.import_module("symvram.validate.measure")
EP = importlib.import_module("symvram.validate.explain_peak")

# a tiny llama with all dimensions distinct
b, s, h, f, V, L, nh, nkv, hd, r = 3, 40, 64, 176, 1000, 2, 4, 2, 16, 8
ARCH = {
    "model_type": "llama", "hidden_size": h, "intermediate_size": f, "num_hidden_layers": L,
    "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": hd, "vocab_size": V,
    "tie_word_embeddings": False,
}
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA = {"arch": ARCH, "method": "lora", "rank": r, "targets": ALL, "lora_dropout": 0.0,
        "adapter_dtype": "fp32", "batch": b, "seq": s, "dtype": "bf16", "autocast": None,
        "optimizer": "adamw", "optimizer_impl": "foreach", "grad_checkpointing": False,
        "attention": "sdpa", "steps": 2}

# hand counts
PER_LAYER = h * nh * hd + 2 * h * nkv * hd + nh * hd * h + 3 * h * f + 2 * h
BASE = V * h + L * PER_LAYER + h + V * h  # embed, layers, final norm, untied lm_head
LORA_PER_LAYER = r * ((h + nh * hd) + 2 * (h + nkv * hd) + (nh * hd + h) + 3 * (h + f))
TRAINABLE = L * LORA_PER_LAYER
N_LORA_TENSORS = L * len(ALL) * 2


@pytest.fixture(scope="module")
def lora():
    return M.measure(LORA)


def test_param_counts(lora):
    assert lora["trainable_params"] == TRAINABLE
    assert lora["total_params"] == BASE + TRAINABLE


def test_lora_breakdown_is_numel_times_element_size(lora):
    bd = lora["breakdown_at_peak"]
    assert lora["peak_phase"] == "step2:backward"
    assert bd["params"] == BASE * 2 + TRAINABLE * 4  # bf16 base, fp32 adapters (PEFT default)
    # AdamW: exp_avg + exp_avg_sq in the adapters' dtype, plus a 4-byte step per tensor
    assert bd["optimizer_state"] == 2 * TRAINABLE * 4 + 4 * N_LORA_TENSORS
    assert bd["grads"] == 0 and bd["optimizer_step_temp"] == 0
    assert bd["inputs_other"] == 2 * b * s * 8  # input_ids and labels, int64
    assert bd["buffers"] == 2 * (hd // 2) * 2  # rotary inv_freq + original_inv_freq, bf16
    assert sum(bd[k] for k in M.BREAKDOWN_KEYS) == lora["peak_bytes"]
    assert lora["optimizer_state_dtypes"] == ["exp_avg:float32", "exp_avg_sq:float32"]


def test_lora_activation_formula(lora):
    """The peak is at the loss backward of step 2: every saved activation plus three fp32 b·s·V."""
    bsh, bsf = b * s * h, b * s * f
    per_layer = (
        8 * bsh * 4  # fp32: 2 RMSNorm up-casts, 6 LoRA input casts (q,k,v,o,gate,up)
        + 2 * bsf * 2  # gate / up outputs (bf16)
        + bsf * 4  # fp32 cast of down_proj's input for its LoRA
        + bsf * 2  # silu(gate)
        + 7 * b * s * r * 4  # lora_A outputs (fp32)
        + b * nh * s * hd * 2 + 2 * b * nkv * s * hd * 2  # q (after RoPE), k, v
        + b * nh * s * hd * 2 + b * nh * s * 4  # SDPA output and log-sum-exp
        + 2 * b * s * 4  # two rsqrt
    )
    acts = L * per_layer + b * s * V * 4 + 2 * s * hd * 2 + 8  # log_softmax out, cos/sin, 2 scalars
    bd = lora["breakdown_at_peak"]
    assert bd["activations"] == acts
    assert bd["backward_temp"] == 2 * b * s * V * 4  # grad of log-probs and of logits, fp32


def test_reproducible(lora):
    again = M.measure(LORA)
    assert again["peak_bytes"] == lora["peak_bytes"]
    assert again["peak_bytes_by_phase"] == lora["peak_bytes_by_phase"]


def test_full_foreach_optimizer_moment():
    res = M.measure(dict(LORA, method="full"))
    assert res["trainable_params"] == res["total_params"] == BASE
    n_tensors = 2 + L * 9 + 1  # embed, lm_head, 9 per layer, final norm
    params = grads = temp = BASE * 2
    states = 2 * BASE * 2 + 4 * n_tensors  # bf16 exp_avg/exp_avg_sq + fp32 step
    other = 2 * b * s * 8 + 2 * (hd // 2) * 2
    # foreach AdamW makes one temporary per parameter (sqrt of exp_avg_sq) at the same time
    assert res["peak_bytes_by_phase"]["step1:optimizer"] == params + grads + states + temp + other
    fused = M.measure(dict(LORA, method="full", optimizer_impl="fused"))
    assert fused["peak_bytes_by_phase"]["step1:optimizer"] == params + grads + states + other


def test_normalize_accepts_calibration_spellings():
    s = M.normalize_spec({"arch": ARCH, "method": "lora", "rank": 8, "dtype_setup": "fp32-autocast-bf16",
                          "optimizer": "adamw-fused", "adapter_dtype": "peft-default", "name": "x"})
    assert (s["dtype"], s["autocast"], s["optimizer"], s["optimizer_impl"], s["adapter_dtype"]) == (
        "fp32", "bf16", "adamw", "fused", "fp32")
    assert "name" not in s and s["lora_alpha"] == 16


def test_explain_peak_lists_everything_alive():
    res = EP.explain_peak(dict(LORA, steps=1))
    g = res["moments"]["global"]
    assert g["total_bytes"] == g["sum_of_live_bytes"] == res["peak_bytes"]
    logits_grads = [e for e in g["groups"] if e["category"] == "backward_temp" and e["shape"] == [b * s, V]]
    assert sum(e["count"] for e in logits_grads) == 2


PINNED = {"torch": "2.13.0+cpu", "transformers": "5.24.0", "peft": "0.21.2"}


@pytest.mark.skipif(
    M._versions() != PINNED, reason="calibration numbers hold for the pinned torch/transformers/peft"
)
def test_reproduces_calibration_tinyllama():
    """calibration.jsonl 'tinyllama': TinyLlama-1.1B, LoRA r64 all-linear, b1 s2048, bf16."""
    arch = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
            "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
            "head_dim": 64, "tie_word_embeddings": False}
    res = M.measure({"arch": arch, "method": "lora", "rank": 64, "targets": ALL, "batch": 1,
                     "seq": 2048, "dtype_setup": "bf16", "optimizer": "adamw-foreach"})
    assert res["peak_bytes"] == 9585087832
    assert res["peak_phase"] == "step2:backward"
    assert res["trainable_params"] == 50462720 and res["total_params"] == 1150511104


def test_real_tensors_keep_tied_weights_tied():
    """The GPU path (real tensors, here on the CPU) builds the model that the fake path measures: a tied
    lm_head stays the embedding (``Module.to_empty`` would untie it: a real run measured with it held an extra
    V x h weight), and the parameter count is the hand count of the tied model."""
    tied = {**ARCH, "tie_word_embeddings": True}
    spec = M.normalize_spec({**LORA, "arch": tied, "method": "full", "steps": 1})
    model, *_, trainable, total = M.prepare(spec, None, "cpu")
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert total == trainable == BASE - V * h
    assert not any(p.is_meta for p in model.parameters())


def test_real_tensors_quantize_4bit_weights():
    """QLoRA on real tensors: every targeted Linear holds bitsandbytes' packed NF4 weight (two 4-bit values a
    byte: h*f/2 bytes for an h x f weight), quantized where the run is, not a 16-bit copy."""
    bnb = pytest.importorskip("bitsandbytes")
    spec = M.normalize_spec({**LORA, "method": "qlora", "steps": 1})
    model, *_ = M.prepare(spec, None, "cpu")
    q4 = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(q4) == L * len(ALL)
    up = next(m for m in q4 if m.out_features == f and m.in_features == h)
    assert isinstance(up.weight, bnb.nn.Params4bit) and up.weight.bnb_quantized
    assert up.weight.numel() * up.weight.element_size() == h * f // 2


def test_the_traced_schedule_holds_every_tensor(lora):
    """Every storage MemTracker counts is an alloc of the recorded schedule and every one it drops a free: the
    replay's allocated peak is MemTracker's peak, each tensor rounded up to the allocator's 512 B (the tiny
    model has fewer than 3000 storages live at once: at most 512 B each more)."""
    replayed = lora["allocator"]["default"]["allocated_peak"]
    assert lora["peak_bytes"] <= replayed <= lora["peak_bytes"] + 512 * 3000
    assert lora["allocator"]["default"]["reserved_peak"] >= replayed


def test_counting_flops_does_not_change_the_measured_bytes():
    """FlopCounterMode decomposes the ops it has no formula for (torch/utils/flop_counter.py:1050-1054): run in
    the measuring pass it turned SiLU's fused backward into sigmoid and muls and inflated a backward-bound peak
    (this tiny Qwen2 with bf16 adapters, one step: 8,393,032 B with it, 7,211,336 B without). The bytes must be those of
    explain_peak's run, which has no counter, and the FLOPs those of a run of their own."""
    arch = {"model_type": "qwen2", "hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 64,
            "tie_word_embeddings": True}
    spec = dict(LORA, arch=arch, adapter_dtype="base", batch=2, seq=256, grad_checkpointing=True,
                targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"], steps=1)
    with_flops = M.measure(spec, flops=True)
    assert with_flops["peak_bytes"] == EP.explain_peak(spec)["peak_bytes"]
    assert with_flops["flops"]["backward"] > with_flops["flops"]["forward"] > 0
