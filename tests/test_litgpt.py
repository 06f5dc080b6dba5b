"""--stack litgpt: LitGPT 0.5.13's finetune full and finetune lora on its own model code.

The independent source is LitGPT itself: benchmarks/litgpt_trace.py builds its GPT (its LoRA, fused qkv), its
chunked_cross_entropy and torch's AdamW and traces two steps under FakeTensorMode (symvram's PeakTracker); the rows
(benchmarks/results/litgpt_trace.json, with the versions) are checked here against today's estimate. Needs no
litgpt."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.presets import spec_from_config
from symvram.scenario import Scenario

STORED = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "litgpt_trace.json").read_text())


def _params_by_hand(a: dict, lora: dict | None) -> int:
    """LitGPT's Llama (untied, no biases): wte and lm_head V·h, per layer the fused qkv h·(n_h + 2·n_kv)·d_h, proj h²,
    LLaMAMLP's three h·I, two RMSNorm weights, ln_f; LoRAQKVLinear (lora.py:175-260) keeps one lora_A of
    (r·enabled, h) for its adapted parts together and one lora_B of (their widths, r); LoRALinear (lora.py:89-131) an
    A of (r, d_in) and a B of (d_out, r) on proj (lora_projection), on fc_1, fc_2, proj (lora_mlp) and on lm_head
    (lora_head)."""
    h, dh, V, f = a["n_embd"], a["n_embd"] // a["n_head"], a["padded_vocab_size"], a["intermediate_size"]
    layer = h * (a["n_head"] + 2 * a["n_query_groups"]) * dh + h * h + 3 * h * f + 2 * h
    adapters = 0
    if lora is not None:
        r, on = lora["rank"], set(lora["lora"])
        parts = {"query": a["n_head"] * dh, "key": a["n_query_groups"] * dh, "value": a["n_query_groups"] * dh}
        adapted = [w for k, w in parts.items() if k in on]
        adapters = (r * len(adapted) * h + sum(adapted) * r if adapted else 0) + r * 2 * h * ("projection" in on) \
            + r * (2 * (h + f) + (f + h)) * ("mlp" in on)
    head = lora["rank"] * (h + V) if lora is not None and "head" in lora["lora"] else 0   # lm_head's LoRALinear
    return 2 * V * h + a["n_layer"] * (layer + adapters) + h + head


@pytest.mark.parametrize("row", STORED, ids=lambda r: r["case"])
def test_stored_rows_are_litgpt_by_hand(row):
    """Each row names its versions; its parameters count by hand; the RoPE cache is cos and sin of
    [max_seq_length, d_head] rebuilt in fp32 when finetune sets max_seq_length after the bf16 conversion
    (model.py:43-62, finetune/lora.py:304), left as converted (bf16) at the full context, where nothing is rebuilt."""
    assert row["versions"]["litgpt"] == "0.5.13"
    a, run = row["arch"], row["run"]
    lora = run if run["method"] == "lora" else None
    assert row["total_params"] == _params_by_hand(a, lora)
    assert row["trainable_params"] == (row["total_params"] - _params_by_hand(a, None) if lora else row["total_params"])
    rope = [[run["seq"], a["n_embd"] // a["n_head"]], "torch.bfloat16" if run["seq"] == a["block_size"] else "torch.float32"]
    assert row["buffers"]["cos"] == row["buffers"]["sin"] == rope


@pytest.mark.parametrize("row", [r for r in STORED if r["run"]["method"] == "full"], ids=lambda r: r["case"])
def test_full_fine_tuning_matches_the_trace(row):
    """Tiny GQA and MHA Llamas and the Llama-3.2-1B slice: at most the loss's scalars over the trace (12–30 B)."""
    est = evaluate(Scenario.create(spec_from_config(row["config"], row["case"], "config", "test"), **row["scenario"]))
    assert 0 <= est.peak - row["peak_bytes"] <= 64


@pytest.mark.parametrize("row", [r for r in STORED if r["run"]["method"] == "lora"], ids=lambda r: r["case"])
def test_lora_matches_the_trace(row):
    """finetune lora's defaults (q and v, r 8, dropout 0.05), every switch but lora_head under GQA and MHA, k and the
    projection, no dropout, one sample and two lm_head chunks, LoRA on the chunked lm_head (whose forward instant is
    the peak at one sample), every switch with r 32, the full context, at Llama-3.2-1B's width with the config hub's
    r 32 and the chunks' waiting int64 targets: within the loss's scalars of the trace (−4…+62 B)."""
    est = evaluate(Scenario.create(spec_from_config(row["config"], row["case"], "config", "test"), **row["scenario"]))
    assert -8 <= est.peak - row["peak_bytes"] <= 64


def test_lora_defaults_are_finetune_loras():
    """finetune/lora.py:56-64: r 8, dropout 0.05, q and v; bf16-true's adapters and states in bf16."""
    sc = Scenario.create("llama-3.2-1b", stack="litgpt", method="lora")
    assert (sc.rank, sc.lora_dropout, sc.targets, sc.adapter_dtype, sc.state_dtype) == \
        (8, 0.05, ("q_proj", "v_proj"), "bf16", "bf16")


def test_its_lora_terms_by_hand():
    """Llama-3.2-1B at 2 × 512, LoRA on q and v with dropout, against PEFT's (--stack torch, bf16 adapters): one
    dropout and one lora_A input for the fused qkv, not one per target (lora.py:405); zero_pad keeps the conv1d output
    over q and v, (n_h + n_kv)·d_h wide, and its int64 index (lora.py:326, IndexCopyBackward0), and the model the
    _lora_ind buffer; the loss backward holds one 128-position chunk's nll and log-softmax gradients at once, while
    the two chunks it has not reached keep their int64 targets."""
    kw = dict(method="lora", batch=2, seq=512, dtype="bf16", lora_dropout=0.05, targets="q_proj,v_proj")
    lg = evaluate(Scenario.create("llama-3.2-1b", stack="litgpt", **kw))
    peft = evaluate(Scenario.create("llama-3.2-1b", stack="torch", adapter_dtype="bf16", **kw))
    T, L, V, h, width = 2 * 512, 16, 128256, 2048, (32 + 8) * 64
    assert 2 * lg.terms["act_lora_inputs"] == peft.terms["act_lora_inputs"] == L * 2 * 2 * T * h
    assert lg.terms["act_lora_zero_pad"] == L * (2 * T + 8) * width and lg.terms["lora_index"] == L * 8 * width
    assert lg.terms["loss_backward_temp"] == 2 * 2 * 2 * 128 * V + (4 - 2) * 2 * 128 * 8   # 2 chunks' targets wait


def test_its_own_terms_by_hand():
    """Llama-3.2-1B (untied here, as LitGPT is) at 2 × 512: cos and sin fp32 [512, 64]; k and v repeated to 32 heads
    (model.py:535-539), 2·2·T·64·(32 − 8) bytes a layer more than GQA's; o_proj's input a copy of SDPA's
    (b, n_h, s, d) output (2·T·h a layer); the RMSNorm's fp32 normalized tensor; the loss's bf16 log-softmax of
    b·(s − 1) rows; the logits alive at the optimizer step."""
    kw = dict(method="full", batch=2, seq=512, dtype="bf16")
    lg = evaluate(Scenario.create("llama-3.2-1b", stack="litgpt", **kw))
    torch_ = evaluate(Scenario.create("llama-3.2-1b", stack="torch", **kw))
    T, L, V, h = 2 * 512, 16, 128256, 2048
    assert lg.terms["rope_cache"] == 2 * 4 * 512 * 64 and "act_rope" not in lg.terms
    assert lg.terms["act_attention"] - torch_.terms["act_attention"] == L * 2 * 2 * T * 64 * (32 - 8)
    assert lg.terms["act_linear_inputs"] - torch_.terms["act_linear_inputs"] == L * 2 * T * h
    assert lg.terms["act_norm_weight_input"] == 2 * torch_.terms["act_norm_weight_input"]
    assert lg.terms["act_logsoftmax"] == 2 * 2 * 511 * V
    assert lg.moments["optimizer_step"] - lg.terms["logits"] > 0 and lg.terms["logits"] == 2 * T * V


@pytest.mark.parametrize("kw, why", [
    (dict(method="qlora"), "--method qlora"), (dict(method="lora", targets="q_proj,embed_tokens"), "LoRA on embed_tokens"),
    (dict(method="lora", targets="q_proj,gate_proj"), "LoRA on part of gate_proj"),
    (dict(method="lora", dora=True), "DoRA"), (dict(method="full", grad_checkpointing=True), "gradient checkpointing"),
    (dict(method="full", gpus=2), "several GPUs"), (dict(method="full", dtype="fp32"), "--dtype fp32"),
])
def test_refused_where_not_modelled(kw, why):
    with pytest.raises(UserError, match=f"--stack litgpt with {why}"):
        Scenario.create("llama-3.2-1b", stack="litgpt", **kw)


def test_the_model_is_untied():
    """LitGPT copies a tied checkpoint's embedding into its own lm_head (scripts/convert_hf_checkpoint.py:273-274):
    its Llama-3.2-1B has 1,498,482,688 parameters, V·h = 128256 · 2048 more than transformers' tied model."""
    lg = evaluate(Scenario.create("llama-3.2-1b", stack="litgpt", method="full"))
    hf = evaluate(Scenario.create("llama-3.2-1b", stack="torch", method="full"))
    assert lg.derived["P"] - hf.derived["P"] == 128256 * 2048 and lg.derived["P"] == 1_498_482_688


def test_nominal_presets_are_refused():
    with pytest.raises(UserError, match="a nominal preset"):
        Scenario.create("7b", stack="litgpt", method="full")


def test_other_families_are_refused():
    with pytest.raises(UserError, match="the qwen2 family"):
        Scenario.create("qwen2.5-0.5b", stack="litgpt", method="full")


def test_cli_refuses_qlora_in_one_line():
    out = subprocess.run([sys.executable, "-m", "symvram", "estimate", "llama-3.2-1b", "--stack", "litgpt",
                          "--method", "qlora"], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "litgpt_trace.json" in out.stderr
