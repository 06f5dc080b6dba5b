"""--stack unsloth: Unsloth 2026.10.9's defaults, its offloaded gradient checkpointer (--checkpoint-impl unsloth)
and its fused linear cross-entropy (--loss-impl unsloth). Modelled from unsloth / unsloth_zoo 2026.10.9's source,
not measured (CUDA streams, Triton); every figure below is derived by hand from that source."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from symvram.analysis.host import host_bytes
from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.presets import load_model
from symvram.scenario import Scenario

L, h, V = 32, 4096, 128256   # Llama-3.1-8B
MiB = 1024 * 1024


def _value(sc, expr):
    from symvram.symbols import sym

    return int(expr.subs({sym(k): v for k, v in sc.values().items()}))


def _run(**kw):
    return evaluate(Scenario.create(load_model("llama-3.1-8b"), **{"stack": "unsloth", **kw}))


def test_defaults_follow_unsloth():
    """FastLanguageModel.from_pretrained(load_in_4bit=True) + get_peft_model(r=16, all seven projections,
    use_gradient_checkpointing="unsloth"); adapters upcast to fp32, norms and embeddings left 16-bit."""
    sc = Scenario.create(load_model("llama-3.1-8b"), stack="unsloth", seq=4096)
    assert (sc.method, sc.rank, sc.adapter_dtype, sc.kbit_prep) == ("qlora", 16, "fp32", "none")
    assert (sc.grad_checkpointing, sc.checkpoint_impl, sc.loss_impl) == (True, "unsloth", "unsloth")
    assert len(sc.targets) == 7
    from symvram.stacks import summary

    header = summary(sc)
    assert header.count("modelled, not measured") >= 3   # the stack, the checkpointer, the loss
    # below max_seq_length 512 Unsloth unpatches its checkpointer: plain reentrant checkpointing
    assert Scenario.create(load_model("llama-3.1-8b"), stack="unsloth", seq=256).checkpoint_impl == "reentrant"
    assert Scenario.create(load_model("llama-3.1-8b"), stack="unsloth", seq=256,
                           checkpoint_impl="unsloth").checkpoint_impl == "unsloth"


def test_offloaded_checkpointer_by_hand():
    """b 1, s 4096 (T·h = 16 Mi elements, 32 MiB in bf16 > 2 MiB: offloaded). From the second micro-batch the last
    layer's input stays on the card, and under LoRA the embedding output (a leaf) too; the other 31 go to pinned
    host slots (32 of them grown by the first micro-batch, which offloads all), the rest of the 200-slot pool keeps
    256 KiB each; two staging buffers of one input each."""
    T = 4096
    e = _run(method="lora", seq=T)
    x = T * h * 2
    assert e.terms["act_checkpoints"] == 2 * x + 8 * T
    assert e.terms["act_offloaded"] == L * x + (200 - L) * 128 * 1024 * 2   # the first micro-batch grew L slots
    assert e.terms["unsloth_staging"] == 2 * x
    assert host_bytes(e) == e.terms["act_offloaded"]
    # against torch's non-reentrant checkpointing of the same run: the card holds 30 inputs less, 2 buffers more
    plain = _run(method="lora", seq=T, checkpoint_impl="non-reentrant", loss_impl="unsloth")
    assert plain.terms["act_checkpoints"] - e.terms["act_checkpoints"] == 30 * x
    assert plain.moments["forward_loss"] - e.moments["forward_loss"] == 28 * x
    # full fine-tuning: the embedding trains, so its output is no leaf and is offloaded as well
    full = _run(method="full", seq=T, loss_impl="torch")
    assert full.terms["act_checkpoints"] == x + 8 * T


def test_small_inputs_stay_on_the_card():
    """MINIMUM_SIZE = 2 MiB, strictly exceeded (gradient_checkpointing.py:1399): at T·h = 1 Mi elements (2 MiB)
    nothing is offloaded and no staging buffer is made; one token more and it is."""
    at = _run(method="lora", seq=256, checkpoint_impl="unsloth")
    assert at.terms["act_checkpoints"] == L * 256 * h * 2 + 8 * 256
    assert at.terms["unsloth_staging"] == 0 and at.terms["act_offloaded"] == 200 * 256 * 1024
    above = _run(method="lora", seq=257, checkpoint_impl="unsloth")
    assert above.terms["unsloth_staging"] == 2 * 257 * h * 2


def test_traffic_is_priced():
    """Each offloaded input crosses PCIe twice per micro-batch: 2 · 31 · 32 MiB."""
    from symvram.ledger.comm import build_comm

    sc = Scenario.create(load_model("llama-3.1-8b"), stack="unsloth", method="lora", seq=4096)
    term = next(t for t in build_comm(sc.structure).terms if t.key == "offload_activation_copies")
    assert _value(sc, term.expr) == 2 * 31 * 4096 * h * 2


@pytest.mark.parametrize("seq, rows", [(4096, 512), (65536, 2048), (131072, 4096), (1000, 512), (300, 300)])
def test_fused_loss_rows_by_hand(seq, rows):
    """fused_linear_rows (fused_linear.py:140-154): the power of two ≤ T·h/V (T = 4096: 130.8 → 128; 65536: 2093 →
    2048; 131072: 4186 → 4096), raised to the floor (pow2 ≤ 512·151936/128256 = 606.5 → 512), at most 4096 and
    2 GiB of fp32 logits (2^31/(4·128256) = 4186 rows), at most T."""
    from symvram.ledger.activations import unsloth_ce_rows

    sc = Scenario.create(load_model("llama-3.1-8b"), stack="unsloth", method="lora", seq=seq)
    assert _value(sc, unsloth_ce_rows(sc.structure)) == rows
    e = evaluate(sc)
    assert e.terms["logits"] == 4 * rows * V + 2 * rows * h + 4 * seq   # V is a multiple of 8
    assert e.terms["act_logsoftmax"] == 2 * seq * h == e.terms["loss_backward_temp"]


def test_refusals():
    with pytest.raises(UserError, match="--checkpoint-impl unsloth with --offload-activations"):
        Scenario.create(load_model("llama-3.1-8b"), stack="unsloth", method="lora", offload_activations=True)
    with pytest.raises(UserError, match="several GPUs"):
        Scenario.create(load_model("llama-3.1-8b"), stack="unsloth", method="lora", gpus=2, zero=2)
    with pytest.raises(UserError, match="--loss-impl unsloth with full fine-tuning"):
        Scenario.create(load_model("llama-3.1-8b"), stack="unsloth", method="full")


def test_diagnose_prices_the_checkpointer_with_its_terms():
    """Under the unsloth stack with plain checkpointing (use_gradient_checkpointing=True), diagnose offers the
    offloaded checkpointer; its saving at the loss (remedies stack: measured from the one before) is the ledger's: 30
    inputs fewer, two staging buffers more."""
    from symvram.api import diagnose

    kw = dict(stack="unsloth", method="lora", seq=32768, checkpoint_impl="reentrant")
    d = diagnose("llama-3.1-8b", "rtx-4090", **kw)
    remedy = next(r for r in d.remedies if r.key == "unsloth_checkpointing")
    x = 32768 * h * 2
    assert remedy.before.moments["forward_loss"] - remedy.after.moments["forward_loss"] == 30 * x - 2 * x
    assert "PCIe" in remedy.cost and "modelled, not measured" in remedy.cost


RUNS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "unsloth_checkpointer.json"


def _ledger_of(row):
    """The ledger's three terms for a stored run's shape: tiny Llama with its layers and width, b 1, s = tokens."""
    from test_modules_to_save import tiny

    model = tiny(num_hidden_layers=row["layers"], hidden_size=row["hidden"], intermediate_size=2 * row["hidden"],
                 num_attention_heads=8, num_key_value_heads=8)
    e = evaluate(Scenario.create(model, stack="unsloth", method="lora" if row["lora"] else "full", batch=1,
                                 seq=row["tokens"], checkpoint_impl="unsloth", loss_impl="torch", rank=8))
    return {"alive_inputs": (e.terms["act_checkpoints"] - 8 * row["tokens"]) // row["input_bytes"],
            "staging_bytes": e.terms["unsloth_staging"], "host_bytes": e.terms["act_offloaded"]}


@pytest.mark.parametrize("row", json.loads(RUNS.read_text())["rows"], ids=lambda r: "L{layers}-T{tokens}-h{hidden}"
                         "-{}".format("lora" if r["lora"] else "full", **r))
def test_terms_equal_unsloth_zoos_own_checkpointer(row):
    """Measured: unsloth_zoo 2026.10.9's UnslothCheckpointFunction run on the CPU (benchmarks/unsloth_checkpointer.py;
    only its streams, events and device tables stubbed) — the inputs still on the card at the second micro-batch's
    loss, its staging buffers and its host slots — equal the ledger's terms to the byte."""
    assert _ledger_of(row) == {"alive_inputs": len(row["alive_inputs"]), "staging_bytes": row["staging_bytes"],
                               "host_bytes": row["host_bytes"]}


@pytest.mark.skipif(not os.environ.get("UNSLOTH_ZOO_SRC"), reason="re-running the stored traces needs unsloth_zoo's "
                    "unpacked wheel in UNSLOTH_ZOO_SRC (it is not a dependency)")
def test_stored_traces_are_current():
    import sys

    sys.path.insert(0, str(RUNS.parents[1]))
    from unsloth_checkpointer import CASES, trace

    stored = json.loads(RUNS.read_text())["rows"]
    for (n, t, w, lora), row in zip(CASES, stored, strict=True):
        assert {"layers": n, "tokens": t, "hidden": w, "lora": lora, **trace(os.environ["UNSLOTH_ZOO_SRC"], n, t, w, lora)} == row


def test_fused_lora_kernels_save_one_input_per_block():
    """Llama-3.1-8B, LoRA on all seven projections, T = 4096, bf16 under autocast (Unsloth's kernels, by hand from
    kernels/fast_lora.py and rms_layernorm.py): two RMSNorms keep their 16-bit input and the fp32 1/rms; SDPA keeps
    q, k, v, its output and the fp32 lse; LoRA_QKV keeps the norm's output, LoRA_W SDPA's output as a contiguous
    copy, LoRA_MLP the MLP's input and e, g — no r-wide tensor, no fp32 copy of an input, no autocast cast."""
    T, f, nh, nkv, d = 4096, 14336, 32, 8, 128
    e = _run(method="lora", seq=T)
    assert e.scenario.unsloth_kernels
    by_hand = (2 * (2 * T * h + 4 * T) + 2 * T * d * (nh + 2 * nkv) + 2 * T * nh * d + 4 * nh * T
               + 2 * T * (2 * h + nh * d) + 2 * 2 * T * f)
    assert e.terms["one_layer"] == by_hand
    peft = _run(method="lora", seq=T, targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj")   # no down_proj
    assert not peft.scenario.unsloth_kernels   # a partial set: PEFT's eager layers, and the header says so
    from symvram.stacks import summary

    assert "PEFT's eager LoRA layers" in summary(peft.scenario)
    # LoRA_MLP's backward (DW, the incoming gradient, r-wide products, six 16-bit adapter gradients, r = 16) and its
    # forward working set (h, down's result, h·A); Unsloth's RMSNorm backward makes one 16-bit gradient
    r = 16
    assert e.terms["layer_backward_temp"] == 2 * T * f + 2 * T * h + 3 * 2 * T * r + 3 * 2 * r * (h + f)
    assert e.terms["ws_mlp"] == 2 * T * f + 2 * T * h + 2 * T * r
    assert e.terms["norm_backward_temp"] == 2 * T * h
    assert "fused LoRA QKV/O/MLP" in summary(e.scenario)


def test_llamafactory_use_unsloth_reads_as_the_stack(tmp_path):
    """LLaMA-Factory 0.9.5's use_unsloth loads through FastLanguageModel and its get_peft_model with
    use_gradient_checkpointing="unsloth" (model/model_utils/unsloth.py), the file's own rank and quantization kept."""
    from symvram.readers.read import read_files

    f = tmp_path / "lf.yaml"
    f.write_text("model_name_or_path: meta-llama/Llama-3.1-8B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                 "lora_target: all\nlora_rank: 32\nquantization_bit: 4\nuse_unsloth: true\ncutoff_len: 4096\n"
                 "bf16: true\noutput_dir: out\n")
    got = read_files([str(f)]).settings
    assert (got["stack"].value, got["rank"].value, got["method"].value) == ("unsloth", 32, "qlora")
    f.write_text(f.read_text().replace("use_unsloth: true", "use_unsloth: false"))
    assert read_files([str(f)]).settings["stack"].value == "hf"


def test_validate_refuses_what_it_cannot_run(capsys):
    from symvram.cli import main

    for flags, says in ((["--stack", "unsloth", "--method", "lora"], "--loss-impl unsloth runs GPU kernels only"),
                        (["--stack", "unsloth", "--method", "lora", "--loss-impl", "torch"], "fused LoRA kernels"),
                        (["--stack", "hf", "--method", "lora", "--grad-checkpointing", "--checkpoint-impl", "unsloth"],
                         "benchmarks/unsloth_checkpointer.py")):
        assert main(["validate", "tinyllama-1.1b", "--seq", "1024", *flags]) == 2
        assert says in capsys.readouterr().err


def test_each_buffer_is_one_tensor_in_the_schedule():
    """The allocator schedule reads a monomial's integer coefficient as a count of tensors: the staging buffers, the
    offloaded inputs and the loss's [R, V] buffer are written as one factor each (a 2 MiB constant as a coefficient
    made a million 2-byte tensors). The unsloth stack's schedule is no longer than the trl stack's."""
    from symvram.card_memory import schedule_events

    kw = dict(method="lora", seq=4096)
    unsloth = schedule_events(Scenario.create(load_model("llama-3.1-8b"), stack="unsloth", **kw))
    trl = schedule_events(Scenario.create(load_model("llama-3.1-8b"), stack="trl", **kw))
    assert len(unsloth) <= len(trl)
