"""--stack litgpt: LitGPT 0.5.13's finetune lora / finetune full on its own model code.

The independent source is LitGPT itself: benchmarks/litgpt_trace.py builds its GPT (its LoRA, fused qkv), its
chunked_cross_entropy and torch's AdamW and traces two steps under FakeTensorMode (symvram's PeakTracker); the rows
(benchmarks/results/litgpt_trace.json, with the versions) are read here. Needs no litgpt."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from symvram.errors import UserError
from symvram.scenario import Scenario

STORED = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "litgpt_trace.json").read_text())


def _params_by_hand(a: dict, lora: dict | None) -> int:
    """LitGPT's Llama (untied, no biases): wte and lm_head V·h, per layer the fused qkv h·(n_h + 2·n_kv)·d_h, proj h²,
    LLaMAMLP's three h·I, two RMSNorm weights, ln_f; LoRAQKVLinear (lora.py:175-260) keeps one lora_A of
    (r·enabled, h) for q and v together and one lora_B of (q_size + v_size, r)."""
    h, dh, V = a["n_embd"], a["n_embd"] // a["n_head"], a["padded_vocab_size"]
    layer = h * (a["n_head"] + 2 * a["n_query_groups"]) * dh + h * h + 3 * h * a["intermediate_size"] + 2 * h
    adapters = 0 if lora is None else (2 * lora["rank"] * h + (a["n_head"] + a["n_query_groups"]) * dh * lora["rank"])
    return 2 * V * h + a["n_layer"] * (layer + adapters) + h


@pytest.mark.parametrize("row", STORED, ids=lambda r: r["case"])
def test_stored_rows_are_litgpt_by_hand(row):
    """Each row names its versions; its parameters count by hand; the RoPE cache is cos and sin of
    [max_seq_length, d_head] rebuilt in fp32 when finetune sets max_seq_length after the bf16 conversion
    (model.py:43-62, finetune/lora.py:304)."""
    assert row["versions"]["litgpt"] == "0.5.13"
    a, run = row["arch"], row["run"]
    lora = run if run["method"] == "lora" else None
    assert row["total_params"] == _params_by_hand(a, lora)
    assert row["trainable_params"] == (row["total_params"] - _params_by_hand(a, None) if lora else row["total_params"])
    rope = [[run["seq"], a["n_embd"] // a["n_head"]], "torch.float32"]
    assert row["buffers"]["cos"] == row["buffers"]["sin"] == rope


def test_stack_is_refused_until_modelled():
    with pytest.raises(UserError, match="--stack litgpt is measured, not modelled"):
        Scenario.create("llama-3.2-1b", stack="litgpt", method="lora")


def test_cli_refuses_in_one_line():
    out = subprocess.run([sys.executable, "-m", "symvram", "estimate", "llama-3.2-1b", "--stack", "litgpt"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "litgpt_trace.json" in out.stderr
