"""--stack torchtune and --from a torchtune recipe: torchtune 0.6.1's single-device recipes on its own model code.

The independent source is torchtune itself: benchmarks/torchtune_trace.py builds torchtune's Llama 3.2 model, its
chunked loss and fused AdamW and traces two steps under FakeTensorMode (symvram's PeakTracker); the rows it stored
(benchmarks/results/torchtune_trace.json, with the versions) are checked here against today's estimate. Needs no
torchtune."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.ledger.terms import Phase, Place
from symvram.presets import spec_from_config
from symvram.readers.read import read_files
from symvram.scenario import Scenario

STORED = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "torchtune_trace.json").read_text())


def _breakdown(row: dict):
    return evaluate(Scenario.create(spec_from_config(row["config"], row["case"], "config", "test"), **row["scenario"]))


def _estimate(row: dict) -> int:
    return _breakdown(row).peak


@pytest.mark.parametrize("row", [r for r in STORED if "open" not in r], ids=lambda r: r["case"])
def test_stored_torchtune_traces(row):
    """To the loss's scalars (56 B) where the peak is the forward's (every case but the real-size full fine-tune
    with checkpointing, whose peak is in the backward: 16 MiB = one bf16 2·T·h tail above the trace, 0.15 %, with
    or without offloading)."""
    assert row["versions"]["torchtune"].startswith("0.6.1")
    error = _estimate(row) - row["peak_bytes"]
    assert abs(error) <= 0.002 * row["peak_bytes"]
    if row["peak_phase"].endswith("forward"):
        assert -64 <= error <= 0


@pytest.mark.parametrize("row", [r for r in STORED if r["run"].get("offload")], ids=lambda r: r["case"])
def test_stored_offloading_host_bytes(row):
    """torchtune's own OffloadActivations run on the CPU (its pinned copies counted, benchmarks/torchtune_trace.py
    ``offloading``): the most host bytes at once are every layer input and the final norm's tensors, each saved
    twice and copied twice (full fine-tuning: its normalized tensor and the embedding's token ids too) — the
    ledger's host terms exactly."""
    b = _breakdown(row)
    host = sum(b.terms[t.key] for t in b.ledger.terms if t.place is Place.HOST)
    assert host == row["host_peak_bytes"]


def test_offloading_saves_every_layer_input_but_the_last():
    """The stored traces themselves: offloading takes L − 1 bf16 layer inputs (2·T·h each) off the LoRA forward's
    peak (the last stays in the forward stash through the loss), the full fine-tune's backward peak gains the token
    ids brought back for the embedding's backward (8·T)."""
    rows = {r["case"]: r for r in STORED}
    T, h, L = 4 * 1024, 2048, 16
    assert rows["llama3.2-1b-lora-ckpt"]["peak_bytes"] - rows["llama3.2-1b-lora-offload"]["peak_bytes"] == \
        (L - 1) * 2 * T * h
    assert rows["llama3.2-1b-full-offload"]["peak_bytes"] - rows["llama3.2-1b-full"]["peak_bytes"] == 8 * 2 * 1024


def test_offloading_terms_by_hand():
    """What torchtune's offloading keeps on the card, against TRL's (the same mechanism, ledger.activations
    offloaded_terms): no leaf embedding output and no position ids beside the offloaded inputs; one layer input
    in the forward stash (TRL: 3 at T ≥ 256), through the loss's and the head's backward; full fine-tuning none."""
    kw = dict(method="lora", rank=64, batch=4, seq=1024, grad_checkpointing=True, offload_activations=True,
              loss_impl="chunked", dtype="bf16", adapter_dtype="bf16")
    tt = evaluate(Scenario.create("llama-3.2-1b", stack="torchtune", **kw))
    trl = evaluate(Scenario.create("llama-3.2-1b", stack="torch", **kw))
    T, h, L = 4 * 1024, 2048, 16
    assert tt.terms["act_checkpoints"] == 0 and trl.terms["act_checkpoints"] == 2 * T * h + 8 * 1024
    assert (tt.terms["offload_forward_stash"], trl.terms["offload_forward_stash"]) == (2 * T * h, 3 * 2 * T * h)
    stash = next(t for t in tt.ledger.terms if t.key == "offload_forward_stash")
    assert Phase.LOSS_BACKWARD in stash.lifetime and Phase.FINAL_NORM_BACKWARD not in stash.lifetime
    assert tt.terms["act_offloaded"] == L * 2 * T * h
    assert tt.terms["act_offloaded_head"] == 2 * (4 * T * h + 4 * T)   # fp32 x and 1/rms, each copied twice
    full = evaluate(Scenario.create("llama-3.2-1b", stack="torchtune", method="full", batch=2, seq=1024,
                                    grad_checkpointing=True, offload_activations=True))
    assert "offload_forward_stash" not in full.terms


def test_offloading_needs_checkpointing():
    """The recipes raise without activation checkpointing (lora_finetune_single_device.py:172-175)."""
    with pytest.raises(UserError, match="without gradient checkpointing"):
        Scenario.create("llama-3.2-1b", stack="torchtune", method="lora", offload_activations=True)


def test_stored_rows_cover_tiny_and_real_size():
    cases = {r["case"] for r in STORED if "open" not in r}
    assert {"tiny-lora", "tiny-full", "tiny-full-inbwd", "llama3.2-1b-lora", "llama3.2-1b-full", "tiny-lora-offload",
            "tiny-full-offload", "llama3.2-1b-lora-offload", "llama3.2-1b-full-offload"} <= cases
    # a row the ledger does not match yet says why, and stays listed (never dropped)
    assert all(isinstance(r["open"], str) and r["open"] for r in STORED if "open" in r)


def test_defaults_follow_the_recipes():
    """recipes/configs/llama3_2/1B_lora_single_device.yaml: dtype bf16 (the adapters too), torch.optim.AdamW
    fused, CEWithChunkedOutputLoss, no autocast."""
    sc = Scenario.create("llama-3.2-1b", stack="torchtune", method="lora")
    assert (sc.dtype, sc.adapter_dtype, sc.state_dtype, sc.autocast, sc.rank) == ("bf16", "bf16", "bf16", "none", 8)
    assert (sc.optimizer, sc.optimizer_impl, sc.loss_impl, sc.checkpoint_impl) == ("adamw", "fused", "chunked",
                                                                                   "non-reentrant")
    from symvram.stacks import summary

    assert "torchtune 0.6.1's own Llama modules" in summary(sc)


def test_its_own_terms_by_hand():
    """Llama-3.2-1B: the RoPE cache is fp32 [131072, 32, 2] plus theta (32); SDPA keeps k and v expanded to 32
    heads (modules/attention.py:288-291), 2·2·T·64·(32 − 8) bytes more per layer than GQA's 8."""
    kw = dict(method="lora", rank=64, batch=4, seq=1024, loss_impl="chunked", dtype="bf16", adapter_dtype="bf16")
    tt = evaluate(Scenario.create("llama-3.2-1b", stack="torchtune", **kw))
    torch_ = evaluate(Scenario.create("llama-3.2-1b", stack="torch", **kw))
    T, L = 4 * 1024, 16
    assert tt.terms["rope_cache"] == 4 * (131072 * 32 * 2 + 32)
    assert "rope_cache" not in torch_.terms and "act_rope" not in tt.terms
    assert tt.terms["act_attention"] - torch_.terms["act_attention"] == L * 2 * 2 * T * 64 * (32 - 8)
    assert tt.terms["act_tokens"] == 8 * (4 * T + 4)   # tokens, labels, hstack's shift, the loss's chunk copies, [b, 1]


def test_full_fine_tuning_keeps_the_fp32_normalized_tensor():
    """torchtune's RMSNorm runs F.rms_norm on x.float() with the bf16 scale: the composite multiplies the fp32
    normalized tensor by the scale, which keeps it for the scale's gradient (2 norms a layer and the final one)."""
    kw = dict(method="full", batch=2, seq=512, loss_impl="chunked", dtype="bf16")
    tt = evaluate(Scenario.create("llama-3.2-1b", stack="torchtune", **kw))
    torch_ = evaluate(Scenario.create("llama-3.2-1b", stack="torch", **kw))
    assert tt.terms["act_norm_weight_input"] == 2 * torch_.terms["act_norm_weight_input"]


@pytest.mark.parametrize("kw, why", [
    (dict(method="qlora"), "QLoRA"), (dict(method="lora", dora=True), "DoRA"),
    (dict(method="lora", packing=4096), "packed"), (dict(model="qwen2.5-0.5b", method="lora"), "family"),
    (dict(method="lora", dtype="fp32", grad_checkpointing=True, offload_activations=True), "offloading with --dtype fp32"),
    (dict(method="lora", gpus=2), "several GPUs")])
def test_refused_outside_what_was_traced(kw, why):
    model = kw.pop("model", "llama-3.2-1b")
    with pytest.raises(UserError, match=why):
        Scenario.create(model, stack="torchtune", **kw)


RECIPE = """\
output_dir: /tmp/out
model:
  _component_: torchtune.models.llama3_2.lora_llama3_2_1b
  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']
  apply_lora_to_mlp: True
  lora_rank: 64
  lora_alpha: 128
  lora_dropout: 0.0
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  path: /tmp/tokenizer.model
  max_seq_len: 1024
checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: /tmp/ckpt
batch_size: 4
optimizer:
  _component_: torch.optim.AdamW
  fused: True
  lr: 3e-4
loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss
gradient_accumulation_steps: 8
compile: False
dtype: bf16
enable_activation_checkpointing: False
enable_activation_offloading: False
my_own_key: 1
"""


def test_recipe_reader(tmp_path):
    path = tmp_path / "1B_lora_single_device.yaml"
    path.write_text(RECIPE)
    r = read_files([str(path)])
    kw = r.kwargs()
    assert r.files == [(str(path), "torchtune")] and r.model.value == "llama-3.2-1b"
    assert (kw["stack"], kw["method"], kw["rank"], kw["batch"], kw["seq"]) == ("torchtune", "lora", 64, 4, 1024)
    assert kw["targets"] == ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert (kw["dtype"], kw["optimizer_impl"], kw["loss_impl"], kw["grad_checkpointing"]) == ("bf16", "fused",
                                                                                            "chunked", False)
    assert r.unread == [f"{path}:my_own_key"]   # listed, never dropped
    row = next(x for x in STORED if x["case"] == "llama3.2-1b-lora")
    assert evaluate(Scenario.create(r.model.value, **kw)).peak == _estimate(row)   # the traced run itself


def test_recipe_reader_offloading(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.replace("enable_activation_checkpointing: False", "enable_activation_checkpointing: True")
                    .replace("enable_activation_offloading: False", "enable_activation_offloading: True"))
    r = read_files([str(path)])
    kw = r.kwargs()
    assert kw["offload_activations"] is True and kw["grad_checkpointing"] is True
    assert not any("offloading" in w for w in r.warnings)
    row = next(x for x in STORED if x["case"] == "llama3.2-1b-lora-offload")
    assert evaluate(Scenario.create(r.model.value, **kw)).peak == _estimate(row)   # the traced run itself


def test_recipe_reader_warns_and_refuses(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.replace("compile: False", "compile: True").replace("  max_seq_len: 1024\n", "")
                    .replace("optimizer:\n  _component_: torch.optim.AdamW\n  fused: True",
                             "optimizer_in_bwd: True\noptimizer:\n  _component_: torch.optim.AdamW"))
    r = read_files([str(path)])
    assert any("compile = true" in w and "not modelled" in w for w in r.warnings)
    assert any("max_seq_len is not set" in w for w in r.warnings)
    assert r.kwargs()["optimizer_in_backward"] is True and r.kwargs()["optimizer_impl"] == "foreach"
    path.write_text(RECIPE.replace("llama3_2.lora_llama3_2_1b", "qwen2_5.lora_qwen2_5_0_5b"))
    with pytest.raises(UserError, match="qwen2_5_0_5b builder is not modelled"):
        read_files([str(path)])


def test_remedies_are_edits_of_the_recipe(tmp_path):
    from symvram.readers.edits import edits

    path = tmp_path / "r.yaml"
    path.write_text(RECIPE)
    r = read_files([str(path)])
    lines = [e.split(": ", 1)[1] for e in edits(r, {"grad_checkpointing": True, "batch": 1}, batch_before=4)]
    assert lines == ["enable_activation_checkpointing: true", "batch_size: 1", "gradient_accumulation_steps: 32"]
    lines = [e.split(": ", 1)[1] for e in edits(r, {"grad_checkpointing": True, "offload_activations": True})]
    assert lines == ["enable_activation_checkpointing: true", "enable_activation_offloading: true"]


def test_validate_refuses_it_and_names_the_trace():
    from symvram.cli.validate import _check_supported

    with pytest.raises(UserError, match="benchmarks/torchtune_trace.py"):
        _check_supported(Scenario.create("llama-3.2-1b", stack="torchtune", method="lora"))
