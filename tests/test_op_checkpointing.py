"""--selective-checkpointing op: torchtitan's op-level selective activation checkpointing (``SelectiveAC``,
torchtitan/distributed/activation_checkpoint.py at b5bcd76, :245-277) on every decoder layer. Each layer keeps its
input, the outputs of its odd-numbered ``aten.mm`` calls (LoRA's base, lora_A and lora_B matmuls counted in their
call order; a biased linear's ``aten.addmm`` is saved and not counted) and SDPA's output and fp32 log-sum-exp; the
recompute reruns only the even-numbered mms. By hand, and traced with the real policy (validate.sac) through the
validate tracer, bytes and FLOPs (tiny Llama and Qwen2 models)."""
from __future__ import annotations

import pytest

from symvram.cli.common import every_k
from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.scenario import Scenario
from symvram.timing import flops
from test_every_n_layers import traced_step
from test_modules_to_save import tiny as tiny_llama  # the tiny Llama of the LoRA tests (h 64, d_ff 176, 4 × 16 q, 2 kv)


def tiny(**changes):
    return tiny_llama(**{"num_hidden_layers": 2, **changes})


def test_by_hand():
    """Full fine-tuning, bf16, T = 128: mms q (64), k (32), v (32), o (64), gate (176), up (176), down (64) — the
    1st, 3rd, 5th and 7th saved: (64 + 32 + 176 + 64)·T·2 B, with SDPA's bf16 output (T·64·2) and fp32 lse
    (b·4·s·4); the recompute is k, o and up: 2·T·64·(32 + 64 + 176) per layer. LoRA on all seven (r 8, fp32
    adapters, no autocast): base, A, B per target, 21 mms; the saved ones' widths 64 q, 64 qB, 8 kA, 32 v, 32 vB,
    8 oA, 176 gate, 176 gateB, 8 upA, 64 down, 64 downB, the adapters' in fp32."""
    kw = dict(stack="torch", batch=2, seq=64)
    T, L = 128, 2
    full = evaluate(Scenario.create(tiny(), method="full", checkpoint_ops=True, **kw))
    attention = T * 64 * 2 + 2 * 4 * 64 * 4
    assert full.terms["act_sac_matmuls"] == (L - 1) * (64 + 32 + 176 + 64) * T * 2   # the last layer's apart
    assert full.terms["act_sac_attention"] == (L - 1) * attention
    assert full.terms["act_sac_last_layer"] == (64 + 32 + 176 + 64) * T * 2 + attention
    assert flops(full.scenario).by_phase["recompute"] == L * 2 * T * 64 * (32 + 64 + 176)
    targets = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
    lora = evaluate(Scenario.create(tiny(), method="lora", rank=8, targets=targets, checkpoint_ops=True, **kw))
    base, adapters = 64 + 32 + 176 + 64, 64 + 8 + 32 + 8 + 176 + 8 + 64
    assert lora.terms["act_sac_matmuls"] == (L - 1) * T * (2 * base + 4 * adapters)
    recomputed = 64 * 8 + 64 * 32 + 8 * 32 + 64 * 8 + 64 * 64 + 8 * 64 + 64 * 8 + 64 * 176 + 8 * 176 + 176 * 8
    assert flops(lora.scenario).by_phase["recompute"] == L * 2 * T * recomputed
    plain = evaluate(Scenario.create(tiny(), method="full", grad_checkpointing=True, **kw))
    assert full.terms["act_checkpoints"] == plain.terms["act_checkpoints"]   # the layer inputs, as before


def test_biased_linears_by_hand():
    """Qwen2's q, k and v have a bias: each is an ``aten.addmm``, in the save set but not counted, so all three are
    saved and the count starts at o_proj: o (1st) and up (3rd) saved, gate and down recomputed. LoRA on q and v:
    the base addmms saved uncounted, then qA 1st (saved), qB 2nd, vA 3rd (saved), vB 4th, o 5th
    (saved), gate 6th, up 7th (saved), down 8th."""
    kw = dict(stack="torch", batch=2, seq=64)
    T, L = 128, 2
    qwen2 = tiny(model_type="qwen2", tie_word_embeddings=True)
    full = evaluate(Scenario.create(qwen2, method="full", checkpoint_ops=True, **kw))
    assert full.terms["act_sac_matmuls"] == (L - 1) * (64 + 32 + 32 + 64 + 176) * T * 2
    assert flops(full.scenario).by_phase["recompute"] == L * 2 * T * (64 * 176 + 176 * 64)
    lora = evaluate(Scenario.create(qwen2, method="lora", rank=8, targets="q_proj,v_proj", checkpoint_ops=True, **kw))
    assert lora.terms["act_sac_matmuls"] == (L - 1) * T * ((64 + 32 + 32 + 64 + 176) * 2 + (8 + 8) * 4)
    assert flops(lora.scenario).by_phase["recompute"] == L * 2 * T * (8 * 64 + 8 * 32 + 64 * 176 + 176 * 64)


def test_sliding_window_by_hand():
    """A sliding layer past its window gets transformers' boolean (s, s) mask, one block broadcast over the batch
    and a checkpoint input; SDPA's converted mask and repeat_kv's copies are recomputed (not in the save set), so
    the saved outputs are a full layer's: the mask is the only difference (s² B; traced, the 4,096 B between the
    window-16 and window-128 traces at s = 64)."""
    kw = dict(stack="torch", method="lora", rank=8, batch=2, seq=64, checkpoint_ops=True)
    masked, unmasked = (evaluate(Scenario.create(tiny(**sliding("gemma3_text", w)), **kw)) for w in (16, 128))
    assert (masked.terms["act_sliding_mask"], unmasked.terms["act_sliding_mask"]) == (64 * 64, 0)
    assert masked.peak - unmasked.peak == 64 * 64
    for key in ("act_sac_matmuls", "act_sac_attention", "act_sac_last_layer"):
        assert masked.terms[key] == unmasked.terms[key]


def test_last_layer_handed_to_its_recompute():
    """The last layer's saved outputs live until its recompute replays them into its recomputed tensors (one_layer),
    so the recompute moments count L − 1 layers' of them; the loss moments all L."""
    from symvram.ledger.activations import sac_terms
    from symvram.ledger.terms import Phase

    sc = Scenario.create(tiny(num_hidden_layers=3), method="full", stack="torch", batch=2, seq=64, checkpoint_ops=True)
    terms = {t.key: t for t in sac_terms(sc.structure)}
    assert Phase.LOSS_BACKWARD in terms["act_sac_last_layer"].phases
    assert Phase.LAST_LAYER_RECOMPUTE not in terms["act_sac_last_layer"].phases
    assert Phase.LAST_LAYER_RECOMPUTE in terms["act_sac_matmuls"].phases


def test_cli_and_refusals():
    assert every_k("op") == "op" and every_k("every:3") == 3
    from symvram.cli.common import cli_settings
    import argparse

    assert cli_settings(argparse.Namespace(checkpoint_every="op")) == {"checkpoint_ops": True}
    assert Scenario.create(tiny(), method="lora", rank=8, checkpoint_ops=True).grad_checkpointing   # implied
    with pytest.raises(UserError, match="MoE"):
        Scenario.create(tiny(model_type="mixtral", num_local_experts=4, num_experts_per_tok=2), method="full",
                        checkpoint_ops=True)
    for kw, why in [(dict(method="lora", dora=True), "--dora"), (dict(liger=True), "--liger"), (dict(checkpoint_impl="reentrant"), "reentrant"),
                    (dict(method="qlora"), "qlora"), (dict(checkpoint_every=2), "every:K"),
                    (dict(zero=3, gpus=2), "several GPUs"), (dict(attention="eager"), "eager"),
                    (dict(grad_checkpointing=False), "without gradient checkpointing")]:
        with pytest.raises(UserError, match=why):
            Scenario.create(tiny(), **{"method": "lora", "rank": 8, "checkpoint_ops": True, **kw})


QWEN2 = dict(model_type="qwen2", tie_word_embeddings=True)   # q/k/v biases


PACKED = dict(packing=256, batch=1, seq=256)   # one padding-free row whose position ids restart


def sliding(model_type, window, **extra):
    """One sliding-window layer, then one full-attention layer (Gemma 3, OLMo 3)."""
    return dict(model_type=model_type, layer_types=["sliding_attention", "full_attention"], sliding_window=window,
                **extra)


MEASURED = [
    dict(stack="torch", method="lora", rank=8),
    dict(stack="torch", method="lora", rank=8, targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
         arch=dict(num_hidden_layers=3)),
    dict(stack="hf", method="lora", rank=8),
    dict(stack="hf", method="lora", rank=16, lora_dropout=0.1, arch=dict(num_hidden_layers=3)),
    dict(stack="torch", method="full"),
    dict(stack="hf", method="full", arch=dict(num_hidden_layers=3)),
    dict(stack="torch", method="lora", rank=8, arch=QWEN2),   # the default targets, all seven
    dict(stack="torch", method="lora", rank=8, targets="q_proj,v_proj", arch=QWEN2),   # the addmms between adapters
    dict(stack="hf", method="lora", rank=8, targets="all-linear", lora_dropout=0.1,
         arch=dict(QWEN2, num_hidden_layers=3)),
    dict(stack="torch", method="full", arch=QWEN2),
    dict(stack="torch", method="lora", rank=8, arch=dict(attention_bias=True)),   # Llama's: o_proj's too
    dict(stack="hf", method="full", arch=dict(QWEN2, num_hidden_layers=3)),
    dict(stack="torch", method="lora", rank=8, arch=sliding("gemma3_text", 16)),   # masked: the mask a checkpoint input
    dict(stack="hf", method="full", arch=sliding("gemma3_text", 16)),
    dict(stack="torch", method="lora", rank=8, arch=sliding("gemma3_text", 128)),  # seq < window: no mask
    dict(stack="torch", method="full", arch=sliding("olmo3", 16, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    dict(stack="torch", method="lora", rank=8, **PACKED),   # the block-diagonal mask, a checkpoint input
    dict(stack="hf", method="lora", rank=8, arch=sliding("gemma3_text", 16), **PACKED),   # one per attention kind
]


@pytest.mark.parametrize("settings", MEASURED, ids=[str(i) for i in range(len(MEASURED))])
def test_estimate_equals_the_traced_step(settings):
    """The tracer runs torchtitan's policy (validate.sac) through transformers' checkpointing: the FLOPs of forward,
    backward and the recompute exactly, and the bytes where the loss backward is the peak (to the 8 B full
    checkpointing's estimate misses there too)."""
    pytest.importorskip("peft")
    measured, est = traced_step(tiny(**settings.get("arch", {})), checkpoint_ops=True,
                                **{k: v for k, v in settings.items() if k != "arch"})
    assert est.peak_moment == "loss_backward"
    assert abs(measured["peak_bytes"] - est.peak) <= 8


@pytest.mark.parametrize("settings", [dict(stack="torch", method="lora", rank=8, arch=dict(num_hidden_layers=4)),
                                      dict(stack="hf", method="lora", rank=8, arch=QWEN2)], ids=["llama", "qwen2"])
def test_under_activation_offloading(settings):
    """TRL's offloading hooks see only what autograd saves outside the checkpointed layers (their inputs); the
    policy's cache of saved outputs is the caching mode's own (torch utils/checkpoint.py:1355
    _CachingTorchDispatchMode), not a saved tensor, and stays on the device: the offloaded terms plus the
    policy's, the host bytes exactly and the device peak to the loss scalar."""
    pytest.importorskip("peft")
    from symvram.analysis.host import host_bytes

    measured, est = traced_step(tiny(**settings.get("arch", {})), checkpoint_ops=True, offload_activations=True,
                                **{k: v for k, v in settings.items() if k != "arch"})
    assert "act_offloaded" in est.terms and est.terms["act_sac_matmuls"] > 0
    assert measured["host_peak_bytes"] == host_bytes(est)
    assert est.peak_moment == "loss_backward"
    assert abs(measured["peak_bytes"] - est.peak) <= 8


def test_the_schedule_reaches_the_ledgers_peak():
    """The allocation schedule replays the new terms as tensors (L − 1 per layer, one for the last layer)."""
    from symvram.card_memory import schedule_peaks

    sc = Scenario.create("llama-3.1-8b", method="lora", seq=4096, checkpoint_ops=True)
    peak = evaluate(sc).peak
    assert peak * 0.99 <= schedule_peaks(sc)["default"]["allocated_peak"] <= peak * 1.02
