"""--loss-impl: torchtune's chunked cross-entropy measured on tiny models; Liger's fused linear cross-entropy and
Cut Cross-Entropy modelled from their source (GPU kernels only) and checked against hand arithmetic."""
from __future__ import annotations

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.presets import spec_from_config
from symvram.scenario import Scenario

ARCH = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000,
        "tie_word_embeddings": False}
TINY = spec_from_config(ARCH, "tiny", "config", "test")


def test_chunked_loss_keeps_one_chunk_of_fp32_logits_and_gradients():
    T, V, c = 2 * 64, 1000, 8
    torch_ = evaluate(Scenario.create(TINY, stack="torch", method="lora", rank=8, batch=2, seq=64))
    chunked = evaluate(Scenario.create(TINY, stack="torch", method="lora", rank=8, batch=2, seq=64,
                                       loss_impl="chunked"))
    assert chunked.terms["logits_fp32"] == 4 * T * V // c and chunked.terms["loss_backward_temp"] == 8 * T * V // c
    assert chunked.terms["act_logsoftmax"] == torch_.terms["act_logsoftmax"] == 4 * T * V
    assert chunked.peak_moment == "forward_loss"  # the research's measurement: the peak moves to the forward


def test_liger_and_cce_have_no_vocabulary_sized_logits():
    sc = Scenario.create("llama-3.1-8b", method="lora", rank=16, seq=8192, grad_checkpointing=True)
    T, V, h = 8192, 128256, 4096
    liger = evaluate(sc.with_changes(loss_impl="liger"))
    assert liger.terms["logits"] == 2 * 256 * V  # chunk = next_pow2(⌈T / ⌈V/h⌉⌉) = 256 rows of bf16 logits
    assert liger.terms["act_logsoftmax"] == 2 * T * h + 4 * T and liger.terms["loss_backward_temp"] == 0
    cce = evaluate(sc.with_changes(loss_impl="cce"))
    assert cce.terms["act_logsoftmax"] == 4 * T + 4 * V
    assert cce.terms["loss_backward_temp"] == 2 * T * h + 12 * V
    assert evaluate(sc).peak > liger.peak and evaluate(sc).peak > cce.peak


def test_cce_refuses_fp32_hidden_states():
    with pytest.raises(UserError, match="Cut Cross-Entropy asserts 16-bit hidden states"):
        Scenario.create("llama-3-8b", method="qlora", loss_impl="cce")


@pytest.mark.parametrize("settings", [dict(method="lora", rank=8), dict(method="full"),
                                      dict(method="lora", rank=8, grad_checkpointing=True)])
def test_chunked_estimate_against_the_measured_peak(settings):
    pytest.importorskip("peft")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    sc = Scenario.create(TINY, stack="torch", batch=2, seq=64, device="cpu", loss_impl="chunked", **settings)
    measured = measure({**from_scenario(sc), "steps": 2})
    assert measured["peak_phase"] == "step2:forward"
    # within 1,072 bytes (0.04 %): the loss loop's scalars, not in the ledger
    assert 0 <= measured["peak_bytes"] - evaluate(sc).peak <= 1072


def test_trl_fused_lm_head_against_its_source():
    """TRL 1.16's SFTTrainer (the trl stack): chunked_logprob.py by hand. LoRA on bf16 weights under autocast: the
    hidden copy (bf16) + int64 labels + fp32 log_z and entropy are saved; the forward holds one [min(T, 4096), 32768]
    bf16 tile buffer and 7 fp32 per-token statistics; the backward the buffer again, the fp32 hidden gradient and its
    bf16 cast, each for the N = b·(s − 1) positions it scores (hidden[:, :-1] against labels[:, 1:], trainer/utils.py:1618-1619).
    No vocabulary-sized logits, so the 8k-token peak falls far below transformers' loss."""
    kw = dict(method="lora", rank=16, seq=8192, grad_checkpointing=True, dtype="bf16")
    T, h = 8192 - 1, 4096   # the scored positions of one row
    trl = evaluate(Scenario.create("llama-3.1-8b", stack="trl", **kw))
    assert trl.scenario.loss_impl == "trl"
    assert trl.terms["act_logsoftmax"] == 2 * T * h + 8 * T + 2 * 4 * T
    buffer = 2 * 4096 * 32768
    assert trl.terms["logits"] == buffer + 7 * 4 * T
    assert trl.terms["loss_backward_temp"] == buffer + 4 * T * h + 2 * T * h
    hf = evaluate(Scenario.create("llama-3.1-8b", stack="hf", **kw))
    assert hf.peak_moment == "loss_backward" != trl.peak_moment and hf.peak - trl.peak > 9 * 2**30


def test_trl_full_fine_tuning_accumulates_lm_head_in_fp32():
    """Full fine-tuning on bf16 weights: lm_head's gradient accumulates in an fp32 [V, h] buffer before its bf16 cast
    (the cast is the gradient the ledger counts already); on fp32 weights (bf16 autocast) the buffers are the
    gradients themselves, while each vocabulary chunk of the weight and each token chunk of the hidden states is cast
    to bf16 for its tile (the 1023 positions scored of one row of 1024)."""
    T, V, h = 1023, 151936, 896
    bf16 = evaluate(Scenario.create("qwen2.5-0.5b", stack="trl", method="full", seq=1024, dtype="bf16", autocast="none"))
    fp32 = evaluate(Scenario.create("qwen2.5-0.5b", stack="trl", method="full", seq=1024, dtype="fp32"))
    # the fp32 accumulator and its bf16 cast are both alive as the backward returns (measured by the DPO traces)
    assert bf16.terms["loss_backward_temp"] == 2 * T * 32768 + 4 * T * h + 2 * T * h + (4 + 2) * V * h
    assert fp32.terms["loss_backward_temp"] == (2 * T * 32768 + 4 * T * h  # bf16 tiles; the fp32 hidden gradient
                                                + 2 * 32768 * h + 2 * T * h)     # a weight chunk's and the rows' casts


def test_trl_fused_lm_head_caps_gemma2_logits_inside_its_tiles():
    """Gemma 2's final-logit soft-capping under TRL's fused LM head: the kernel applies cap·tanh(z/cap) to each tile
    (trl 1.16 kernels/chunked_logprob.py:66-74; the backward recomputes tanh from the tile, :180) and saves what it
    saves without a cap (:386): the same hidden copy, labels, log_z and entropy, and no vocabulary-sized
    tanh(logits/cap) — which transformers' own loss keeps (b·s·V in bf16). Other fused losses stay refused."""
    kw = dict(method="lora", rank=16, seq=2048, batch=1, dtype="bf16")
    T, h, V = 2048, 3584, 256000   # T tokens, T − 1 of them scored by TRL's head
    trl = evaluate(Scenario.create("gemma-2-9b", stack="trl", **kw))
    assert "act_logit_softcap" not in trl.terms
    assert trl.terms["act_logsoftmax"] == 2 * (T - 1) * h + 8 * (T - 1) + 2 * 4 * (T - 1)
    hf = evaluate(Scenario.create("gemma-2-9b", stack="hf", **kw))
    assert hf.terms["act_logit_softcap"] == 2 * T * V
    with pytest.raises(UserError, match="soft-capping is not modelled"):
        Scenario.create("gemma-2-9b", loss_impl="chunked", **kw)
