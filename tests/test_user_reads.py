"""What a user reads (issue 28): every sentence true for the setup it describes, one answer per question,
configs read right. Each test is the sentence, field or agreement a new user saw wrong."""
from __future__ import annotations

import json

import pytest

from symvram.analysis.diagnose import diagnose, part_bytes
from symvram.cli import main
from symvram.presets import load_card
from symvram.present.reports import verdict
from symvram.readers.read import read_files
from symvram.scenario import Scenario
from symvram.units import fmt_bytes


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ------------------------------------------------------------------------------------- false sentences
def test_verdict_says_largest_only_when_it_is():
    """Qwen3-8B LoRA on a 4090: the saved activations are the cause (the parameter side alone fits) but the
    parameter side is the bigger part of the peak; the verdict must not call the activations the largest."""
    d = diagnose(Scenario.create("qwen3-8b", method="lora", rank=16), load_card("rtx-4090"))
    sizes = part_bytes(d.estimate)
    assert d.cause == "activation" and sizes["parameter"] > sizes["activation"]     # the case of the issue
    text = verdict(d, lambda n: fmt_bytes(n, "GiB"))
    assert "are the largest part of the peak" not in text
    assert f"beside the parameter side ({fmt_bytes(sizes['parameter'], 'GiB')})" in text


def test_verdict_largest_when_true():
    """Batch 8 × 4096 on the same card: the activations outgrow the parameter side; then 'largest' is true."""
    d = diagnose(Scenario.create("qwen3-8b", method="lora", rank=16, batch=8, seq=4096), load_card("rtx-4090"))
    sizes = part_bytes(d.estimate)
    assert sizes[d.cause] > sizes["parameter"]
    assert "are the largest part of the peak" in verdict(d, lambda n: fmt_bytes(n, "GiB"))


def test_parameter_verdict_names_every_kind_of_remedy_it_offers():
    """Qwen3-32B QLoRA on a 4090: the parameter side alone is over, and the first remedy is the precision of the
    non-quantized weights (no k-bit upcast), the last the optimizer in backward; the verdict's list of what can
    fix it must hold both, not only "the optimizer's precision, the method or more cards"."""
    d = diagnose(Scenario.create("qwen3-32b", method="qlora"), load_card("rtx-4090"))
    keys = [r.key for r in d.remedies]
    assert d.cause == "parameter" and keys[0] == "kbit_prep" and "in_backward" in keys
    text = verdict(d, lambda n: fmt_bytes(n, "GiB"))
    assert "only the precision of the weights or the optimizer, the optimizer's place (CPU offload, one step per " \
           "parameter in backward), the method or more cards can" in text


def test_parameter_verdict_says_which_moment_its_figure_is():
    """Qwen3-32B QLoRA on 24 GiB: the parts at the peak (the loss backward) list the parameter side without
    gradients, the verdict counts weights + gradients + states at the optimizer step. Two figures under one
    name read as a contradiction: the verdict's figure must say what it holds and when."""
    d = diagnose(Scenario.create("qwen3-32b", method="qlora"), load_card("24GiB"))
    assert d.cause == "parameter"
    at_peak = part_bytes(d.estimate)["parameter"]
    assert d.parameter_bytes - at_peak == d.estimate.terms["grads"]   # not yet alive at the loss backward
    text = verdict(d, lambda n: fmt_bytes(n, "GiB"))
    assert f"all alive at the optimizer step: {fmt_bytes(d.parameter_bytes, 'GiB')}" in text


def test_deepspeed_header_says_its_engine_precision_and_offload(capsys):
    """A DeepSpeed config whose bf16 is off (the Trainer's "auto" with bf16=False) runs DeepSpeed's fp32 engine; the
    header must not call it "with bf16". Offloading moves the optimizer to DeepSpeed's CPU Adam: the header says so
    instead of "DeepSpeed's ZeRO optimizer" with no word of the CPU."""
    assert main(["estimate", "qwen3-8b", "--stack", "deepspeed", "--zero", "3", "--dtype", "fp32", "--method",
                 "full"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "with bf16" not in out and "DeepSpeed ZeRO-3 over 1 GPU, fp32 (bf16 off in its config) engine" in out
    assert main(["estimate", "qwen3-8b", "--stack", "deepspeed", "--offload", "optimizer", "--method", "full"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "adamw (DeepSpeed's CPU Adam)" in out and "bf16 engine, the optimizer offloaded to the CPU" in out


def test_batch_one_remedy_keeps_the_files_effective_batch(tmp_path, capsys):
    """axolotl micro-batch 2 × accumulation 8: batch 1 needs accumulation 16; the text never says the
    effective batch is the micro-batch."""
    f = _write(tmp_path, "ax.yml", "base_model: qwen3-8b\nadapter: lora\nlora_r: 16\nlora_target_linear: true\n"
                                   "micro_batch_size: 2\ngradient_accumulation_steps: 8\nsequence_len: 4096\n"
                                   "gradient_checkpointing: true\nliger_fused_linear_cross_entropy: true\n"
                                   "liger_rms_norm: true\nliger_glu_activation: true\nactivation_offloading: true\n")
    assert main(["diagnose", "--from", f, "--gpu", "12GiB"]) == 0
    out = capsys.readouterr().out
    assert "batch 1, with 2× the gradient accumulation steps" in out
    assert "gradient_accumulation_steps: 16" in out              # 2 × 8 micro-batches, one at a time
    assert "effective batch (2)" not in out


def test_liger_is_read_as_its_loss_and_its_layer_kernels(tmp_path, capsys):
    """LLaMA-Factory's enable_liger_kernel turns on Liger's fused cross-entropy (loss liger) and its layer kernels
    (--liger): both modelled, so no warning names it."""
    f = _write(tmp_path, "lf.yml", "model_name_or_path: qwen3-8b\nstage: sft\nfinetuning_type: lora\n"
                                   "enable_liger_kernel: true\ncutoff_len: 1024\n")
    r = read_files([f])
    assert r.settings["loss_impl"].value == "liger" and r.settings["liger"].value is True
    assert not [w for w in r.warnings if "enable_liger_kernel" in w]


@pytest.mark.parametrize("name,text,key,value", [
    ("lf.yml", "model_name_or_path: qwen3-8b\nstage: dpo\nfinetuning_type: lora\ncutoff_len: 1024\n", "stage", "dpo"),
    ("ax.yml", "base_model: qwen3-8b\nadapter: lora\nrl: ppo\nsequence_len: 1024\n", "rl", "ppo"),
])
def test_objectives_other_than_sft_are_refused(tmp_path, capsys, name, text, key, value):
    """A PPO file, or LLaMA-Factory's own DPO (full fp32 logits), is not estimated as SFT: exit 2, one line naming
    the key and the objective (TRL's and axolotl's DPO, ORPO, SimPO and GRPO are read: tests/test_objectives*.py)."""
    assert main(["estimate", "--from", _write(tmp_path, name, text)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{key}: '{value}'" in err[0] and ("not yet" in err[0] or "refused" in err[0])


def test_sft_stage_still_reads(tmp_path):
    r = read_files([_write(tmp_path, "lf.yml", "model_name_or_path: qwen3-8b\nstage: sft\nfinetuning_type: lora\n")])
    assert r.settings["method"].value == "lora" and not r.warnings


def test_measured_peak_below_the_estimate_says_what_it_implies(capsys):
    """A measurement below the ledger is information: the text says the run holds less than the ledger
    counts, by how much, and that the verdicts stay on the (pessimistic) estimate."""
    sc = Scenario.create("qwen3-8b", method="lora", rank=16)
    at = diagnose(sc, load_card("rtx-4090"), measured_peak=1, measured_at={"batch": 1, "seq": 512}).measured[1]
    measured = int(at.peak * 0.885)                     # 11.5 % below, as the issue saw
    assert main(["diagnose", "qwen3-8b", "--method", "lora", "--rank", "16", "--gpu", "rtx-4090",
                 "--measured-peak", str(measured), "--measured-at", "batch=1,seq=512"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(-11.5 %) below the estimate" in out
    assert "the run holds less than the ledger counts" in out
    assert f"pessimistic by up to {fmt_bytes(at.peak - measured, 'GiB')}" in out


@pytest.mark.parametrize("lang,wrong,right", [
    ("en", "the two fp32 moments are", "paged to CUDA unified memory"),
    ("zh", "两个 fp32 动量是", "分页（paged）到 CUDA 统一内存"),
])
def test_explain_paged_8bit_says_what_the_figure_counts(tmp_path, lang, wrong, right):
    """A paged 8-bit AdamW: the per-parameter figure is weights + gradients; the int8 states are paged and
    held apart, and both languages say so."""
    out = tmp_path / f"e.{lang}.md"
    assert main(["explain", "llama-3-8b", "--optimizer", "paged-adamw8bit", "--gpu", "80GiB", "--lang", lang,
                 "-o", str(out)]) == 0
    text = out.read_text()
    assert wrong not in text and right in text
    assert ("weights and gradients are 4 B/param" if lang == "en" else "权重、梯度是每参数 4 字节") in text


@pytest.mark.parametrize("lang,product,master", [
    ("en", "70,000,000,000 parameters × 4 B + {rest} of optimizer states in torch's allocator = **{total}**",
     "with an fp32 master copy, 8 B/param and those states, a parameter side of **{f16}**"),
    ("zh", "70,000,000,000 个参数 × 4 字节 + {rest} torch 分配器里的优化器状态 = **{total}**",
     "再留一份 fp32 主权重就是每参数 8 字节，连同这些状态合 **{f16}**"),
])
def test_explain_8bit_products_add_up(tmp_path, lang, product, master):
    """With 8-bit states the per-parameter figure leaves the states out (4 B/param), so "P × 4 B = total" and
    "8 B/param = total" are false products; each says the states it adds. By hand: 70e9 × 4 B of bf16 weights and
    gradients, the rest of the parameter side being the allocator's 8-bit states."""
    from symvram import estimate
    from symvram.analysis.diagnose import parameter_side
    from symvram.units import fmt_bytes as fb

    out = tmp_path / f"e.{lang}.md"
    assert main(["explain", "qwen3-8b", "--method", "full", "--optimizer", "adamw8bit", "--gpu", "h100", "--lang",
                 lang, "-o", str(out)]) == 0
    text = out.read_text()
    total = parameter_side(estimate("70b", method="full", master="none", optimizer="adamw8bit", stack="hf"))
    assert product.format(rest=fb(total - 70e9 * 4, "GB"), total=fb(total, "GB")) in text
    f16 = parameter_side(estimate("qwen3-8b", method="full", master="fp32", optimizer="adamw8bit", stack="hf"))
    assert master.format(f16=fb(f16, "GB")) in text


def test_explain_states_in_the_parameter_dtype():
    """The hf stack keeps AdamW's moments in the parameters' bf16: the sentence says bf16, with 2+2+2+2 = 8."""
    from symvram.analysis.explain import per_param
    from symvram.evaluate import evaluate

    pp = per_param(evaluate(Scenario.create("llama-3-8b", method="full", stack="hf", master="none")))
    assert pp["state_dtype"] == "bf16" and pp["total"].value == 2 + 2 + 2 * 2 and not pp["uncounted"]


# ------------------------------------------------------------------------------------- configs read right
TRL_CLI = """model_name_or_path: Qwen/Qwen3-8B
dtype: bfloat16
dataset_name: trl-lib/Capybara
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
max_length: 2048
use_peft: true
lora_r: 16
lora_target_modules: all-linear
output_dir: out
"""


def test_trl_cli_yaml_reads_the_model_and_its_dtype(tmp_path, capsys):
    """`trl sft --config` YAML: ModelConfig's model_name_or_path and dtype (trl/trainer/model_config.py) decide
    the model and a bf16 base; read as fp32 the Qwen3-8B LoRA 'did not fit' a 24 GB card."""
    f = _write(tmp_path, "trl.yml", TRL_CLI)
    r = read_files([f])
    assert r.model.value == "Qwen/Qwen3-8B" and r.settings["dtype"].value == "bf16"
    assert r.settings["method"].value == "lora" and not r.unread and not r.warnings
    assert main(["estimate", "--from", f, "--gpu", "rtx-4090"]) == 0
    assert "does not fit" not in capsys.readouterr().out


def test_trl_model_init_kwargs_win_over_the_top_level_dtype(tmp_path):
    """trl/scripts/sft.py: model_init_kwargs.update(training_args.model_init_kwargs) — the file's own wins."""
    f = _write(tmp_path, "trl.yml", TRL_CLI + "model_init_kwargs:\n  dtype: float16\n")
    assert read_files([f]).settings["dtype"].value == "fp16"


def test_a_silent_fp32_model_is_said(tmp_path):
    """A TRL file that names no dtype: TRL loads fp32, and the reading says so in a warning line."""
    f = _write(tmp_path, "trl.yml", TRL_CLI.replace("dtype: bfloat16\n", ""))
    r = read_files([f])
    assert r.settings["dtype"].value == "fp32"
    assert any("no model dtype" in w and "fp32" in w for w in r.warnings)
    assert not any("no model dtype" in w for w in read_files([f], {"dtype": "bf16"}).warnings)


AXOLOTL_CCE = """base_model: Qwen/Qwen3-8B
load_in_4bit: true
adapter: qlora
lora_r: 16
lora_target_linear: true
sequence_len: 2048
micro_batch_size: 1
gradient_checkpointing: true
bf16: auto
plugins:
  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin
"""


@pytest.mark.parametrize("extra", ["", "cut_cross_entropy: true\n"])
def test_axolotl_qlora_with_cut_cross_entropy(tmp_path, capsys, extra):
    """axolotl's QLoRA + CCE recipe: the plugin alone turns CCE on (CutCrossEntropyArgs.cut_cross_entropy
    defaults to True), and axolotl casts norms and embeddings back to 16 bits after PEFT's k-bit preparation
    (loaders/model.py), so the 16-bit hidden states CCE needs are there: estimated, not refused."""
    f = _write(tmp_path, "ax.yml", AXOLOTL_CCE + extra)
    r = read_files([f])
    assert r.settings["loss_impl"].value == "cce" and r.settings["kbit_prep"].value == "none"
    assert main(["estimate", "--from", f]) == 0
    out = capsys.readouterr().out
    assert "loss cce" in out and "prepare_model_for_kbit_training" in out   # the table's source says why


def test_python_api_takes_what_the_cli_takes(tmp_path, capsys):
    """estimate(from_file=…, gpu=…) is `symvram estimate --from … --gpu …`: the same peak, the same verdict."""
    import symvram

    f = _write(tmp_path, "trl.yml", TRL_CLI)
    assert main(["estimate", "--from", f, "--format", "json"]) == 0
    cli_peak = json.loads(capsys.readouterr().out)["bytes"]["peak"]
    assert symvram.estimate(from_file=f).peak == cli_peak
    verdict_ = symvram.estimate(from_file=f, gpu="rtx-4090")
    assert verdict_.estimate.peak == cli_peak and verdict_.cause == "fits"
    assert symvram.estimate(from_file=[f], batch=2).scenario.batch == 2      # keywords win, as flags do


# ------------------------------------------------------------------------------------- one question, one answer
def test_qlora_step_time_in_the_cli(capsys):
    """QLoRA's matmuls run in the autocast dtype (bf16) even though PEFT's k-bit preparation keeps an fp32
    residual stream: the CLI prints a step time on a card with a bf16 figure, the roofline's number."""
    from symvram.timing import step_time

    assert main(["estimate", "qwen3-8b", "--method", "qlora", "--gpu", "rtx-4090"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    sc = Scenario.create("qwen3-8b", method="qlora")
    assert sc.compute_dtype == "fp32" and sc.matmul_dtype == "bf16"
    st = step_time(sc, load_card("rtx-4090"))
    assert f"{st.seconds_per_step:.2f} s/step" in out and "no step time" not in out


def _fsdp_door(tmp_path, door):
    if door == "axolotl":
        f = _write(tmp_path, "ax.yml", "base_model: llama-3.1-8b\nsequence_len: 2048\nbf16: true\nfsdp_version: 2\n"
                                       "fsdp_config:\n  reshard_after_forward: true\n")
        return Scenario.create("llama-3.1-8b", gpus=8, **read_files([f]).kwargs())
    if door == "trainer":
        f = _write(tmp_path, "args.json", json.dumps({"output_dir": "o", "per_device_train_batch_size": 1,
                                                      "bf16": True, "fsdp": "full_shard"}))
        r = read_files([f])
        assert not any("no model dtype" in w for w in r.warnings)    # accelerate decides it: fp32
        return Scenario.create("llama-3.1-8b", gpus=8, **r.kwargs())
    return Scenario.create("llama-3.1-8b", method="full", stack="fsdp", gpus=8, zero=3)


@pytest.mark.parametrize("door,dtype,mp_policy,state", [
    # axolotl replaces accelerate's fsdp2_prepare_model with one without an fp32 upcast (its
    # monkeypatch/accelerate/fsdp2.py): the bf16-loaded parameters, and torch AdamW's states in their dtype
    ("axolotl", "bf16", "none", "bf16"),
    # accelerate 1.15 fsdp_utils.py:814-820 upcasts every trainable parameter to fp32 under mixed precision,
    # even when the code loads bf16; the 16-bit compute is FSDP2's MixedPrecisionPolicy
    ("trainer", "fp32", "bf16", "fp32"),
    ("stack", "fp32", "bf16", "fp32"),
])
def test_fsdp2_precision_follows_each_tool(tmp_path, door, dtype, mp_policy, state):
    sc = _fsdp_door(tmp_path, door)
    assert (sc.zero, sc.dtype, sc.mp_policy, sc.state_dtype) == (3, dtype, mp_policy, state)
    from symvram.stacks import summary
    line = " ".join(summary(sc).split())
    assert ("parameters stored and gathered in bf16" if dtype == "bf16" else
            "parameters stored fp32, MixedPrecisionPolicy(param_dtype=bf16") in line


def test_hf_full_states_sentence():
    """The hf stack's full fine-tuning: 2 + 2 + 2·2 = 8 B/param, said beside the textbook's 12/16."""
    from symvram.stacks import summary

    line = " ".join(summary(Scenario.create("llama-3.1-8b", method="full", stack="hf")).split())
    assert "= 8 B/param, where the 12 or 16 of the textbook answer assume fp32 states" in line
    assert "B/param" not in summary(Scenario.create("llama-3.1-8b", method="full", stack="interview"))


def test_kbit_prep_none_says_checkpointing_went_with_it():
    from symvram.stacks import summary

    sc = Scenario.create("qwen3-8b", method="qlora", kbit_prep="none")
    assert not sc.grad_checkpointing
    assert "nor the checkpointing it turns on: add --grad-checkpointing" in " ".join(summary(sc).split())
    kept = Scenario.create("qwen3-8b", method="qlora", kbit_prep="none", grad_checkpointing=True)
    assert "nor the checkpointing" not in summary(kept)


# ------------------------------------------------------------------------------------- advice that exists
def test_diagnose_offers_dropping_the_kbit_upcast():
    """Qwen3-32B QLoRA on a 4090: PEFT's k-bit preparation holds the embeddings and lm_head in fp32; dropping
    it (checkpointing kept, which the preparation had turned on) with a fused loss fits — diagnose says so."""
    sc = Scenario.create("qwen3-32b", method="qlora", rank=16)
    d = diagnose(sc, load_card("rtx-4090"))
    keys = [r.key for r in d.proposals]
    assert "kbit_prep" in keys and d.fixed
    r = d.proposals[keys.index("kbit_prep")]
    after = r.after.scenario
    assert after.kbit_prep == "none" and after.grad_checkpointing and after.checkpoint_impl == sc.checkpoint_impl
    # the 16-bit weights it keeps: the non-quantized parameters at 2 bytes instead of 4
    assert r.before.terms["weights_16bit"] - r.after.terms["weights_16bit"] >= 2 * (r.before.derived["P_keep"] - 1024)
    assert r.after.peak < r.before.peak


def test_moe_lora_and_qlora_say_what_the_experts_do():
    from symvram.evaluate import evaluate
    from symvram.present.tables import moe_notes

    lora = evaluate(Scenario.create("qwen3-30b-a3b", method="lora", rank=16))
    (line,) = moe_notes(lora)
    # attention only, by hand: 48 layers × r × (q 2048+4096, k 2048+512, v 2048+512, o 4096+2048)
    attention = 48 * 16 * ((2048 + 4096) + 2 * (2048 + 512) + (4096 + 2048))
    assert f"without them (--targets q_proj,k_proj,v_proj,o_proj) {attention:,}" in line
    assert f"{lora.derived['P_lora'] - attention:,} of the {lora.derived['P_lora']:,} trainable" in line
    qlora = evaluate(Scenario.create("qwen3-30b-a3b", method="qlora", rank=16, kbit_prep="none"))
    q_line = moe_notes(qlora)[1]
    assert "bitsandbytes quantizes nn.Linear modules only" in q_line and f"{qlora.derived['P_keep']:,}" in q_line
    assert not moe_notes(evaluate(Scenario.create("qwen3-8b", method="qlora")))


# ------------------------------------------------------------------------------------- the cards of 2026
# datasheet figures, typed here from the vendors' pages independently of gpus.toml: (bf16 dense TFLOP/s, GB/s)
DATASHEETS = {"rtx-5090": (209.5, 1792), "b200": (2250, 8000), "gb200": (2500, 8000), "h100pcie": (756, 2000),
              "l4": (121, 300), "rtx-6000-ada": (364.2, 960), "rtx-pro-6000": (500, 1792),
              "mi300x": (1307, 5300), "mi325x": (1307.4, 6000), "mi355x": (2516.6, 8000)}


@pytest.mark.parametrize("key", sorted(DATASHEETS))
def test_cards_of_2026(key):
    from symvram.presets import gpu_presets
    from symvram.timing import card_figures

    card = load_card(key)
    flops, hbm, link, host_link, host = card_figures(card, "bf16")
    assert (flops / 1e12, hbm / 1e9) == DATASHEETS[key]
    assert 0 < card.memory_bytes - card.usable_bytes < 2**30   # the context off, under a GiB
    assert {link, host_link} <= set(__import__("symvram.timing", fromlist=["interconnects"]).interconnects())
    assert host in __import__("symvram.timing", fromlist=["hosts"]).hosts()   # the CPU memory offload updates in
    assert key in gpu_presets()


def test_h100_still_names_the_sxm_card():
    assert load_card("h100").key == "h100-80g" and load_card("h100-pcie").key == "h100pcie"


def test_cards_and_models_commands_list_what_is_known(capsys):
    from symvram.presets import gpu_presets, model_presets

    assert main(["cards", "--format", "json"]) == 0
    cards = json.loads(capsys.readouterr().out)
    assert [c["key"] for c in cards] == list(gpu_presets())
    assert next(c for c in cards if c["key"] == "b200")["hbm_gbps"] == 8000
    assert main(["cards"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100 and "rtx-5090" in out and "mi355x" in out
    assert main(["models", "--format", "json"]) == 0
    models = json.loads(capsys.readouterr().out)
    assert [m["key"] for m in models] == list(model_presets())
    # llama-2-7b by hand: 32 × (4·4096² + 3·4096·11008 + 2·4096) + 2·32000·4096 + 4096
    assert next(m for m in models if m["key"] == "llama-2-7b")["params"] == \
        32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 2 * 32000 * 4096 + 4096
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    # each preset one row of its own, every name it answers to whole (a Hub id cut as "deepseek-ai/deep" /
    # "seek-v3" cannot be copied)
    starts = [line.split()[0] for line in out.splitlines()[2:] if line and not line.startswith(" ")]
    assert starts[:len(models)] == [m["key"] for m in models]
    words = set(out.replace(",", " ").split())
    assert all(a in words for m in models for a in m["aliases"])


def test_a_card_given_as_a_size_takes_its_figures(capsys):
    """40GiB with an A100's 312 TFLOP/s and 1,555 GB/s: the A100 40GB's step time (the same roofline)."""
    from symvram.timing import step_time

    sc = Scenario.create("qwen3-8b", method="qlora")
    named = step_time(sc, load_card("a100-40g")).seconds_per_step
    assert main(["estimate", "qwen3-8b", "--method", "qlora", "--gpu", "40GiB", "--tflops", "312",
                 "--hbm-gbps", "1555"]) == 0
    assert f"{named:.3g} s/step" in capsys.readouterr().out
    assert main(["estimate", "qwen3-8b", "--method", "qlora", "--gpu", "40GiB", "--tflops", "312"]) == 2
    assert "needs both --tflops and --hbm-gbps" in capsys.readouterr().err
    assert main(["estimate", "qwen3-8b", "--method", "qlora", "--gpu", "h100", "--tflops", "312",
                 "--hbm-gbps", "3000"]) == 2


# ------------------------------------------------------------------------------------- layout
@pytest.mark.parametrize("optimizer", ["adamw8bit", "paged-adamw8bit"])
def test_estimate_table_with_8bit_states_fits_100_columns(capsys, optimizer):
    """The 8-bit states' formula has words wider than any column: the formula breaks inside them, the row
    stays a row (no 'why' column of one character per line)."""
    assert main(["estimate", "llama-3-8b", "--method", "full", "--optimizer", optimizer]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 100
    assert sum(len(line.strip()) == 1 for line in lines) == 0
    start = next(i for i, line in enumerate(lines) if line.startswith("trainable    optimizer_states"))
    assert lines[start].endswith("bitsandbytes") or "bitsandbytes 8-bit" in lines[start]   # the why starts here


def test_sensitivity_rows_stay_whole(capsys):
    from symvram.analysis.sensitivity import sensitivity

    assert main(["sensitivity", "llama-3-8b", "--method", "lora", "--rank", "16"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 100
    res = sensitivity(Scenario.create("llama-3-8b", method="lora", rank=16))
    for n, r in enumerate(res.rows, 1):   # each knob's row holds all its numbers, time elasticity last
        row = next(line for line in lines if line.startswith(f"{n:>2}  {r.knob} "))
        assert row.endswith(f"{r.time_elasticity:.4f}")


def test_plan_drops_zero_on_one_gpu_and_explains_its_columns(capsys):
    from symvram.analysis.plan import plan

    assert main(["plan", "llama-3-8b", "--gpu", "rtx-4090"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("qlora ")]
    assert not [r for r in rows if r[1].startswith("ZeRO-") and "offload" not in r and r[-6] == "1"]
    assert "GPUs for params: the fewest GPUs the parameter side alone" in " ".join(out.split())
    assert "not shown: ZeRO without offload on 1 GPU for qlora" in " ".join(out.split())
    # the JSON keeps every row: the analysis is unchanged, only the table is
    result = plan(Scenario.create("llama-3-8b"), load_card("rtx-4090"))
    assert any(x.method == "qlora" and x.strategy.zero == 1 and x.gpus == 1 for x in result.rows)


def test_dpo_prompt_survives_the_shorter_sequences_the_tools_try(tmp_path, capsys):
    """DPO with --prompt 512 at seq 2048: diagnose's probe (seq 512), the seq-curve (from 256) and the page (seq 1)
    try sequences the prompt does not fit in; they used to exit 2 ("seq - 1 = 511"), so `estimate --gpu` did too.
    The prompt keeps its share of a sequence it no longer fits: 512/2048 of 512 = 128 at the probe."""
    sc = Scenario.create("qwen3-8b", method="lora", objective="dpo", seq=2048, prompt=512)
    d = diagnose(sc, load_card("rtx-4090"))
    assert (d.probe.scenario.seq, d.probe.scenario.prompt) == (512, 128)
    assert sc.with_changes(seq=1024).prompt == 512          # a prompt that still fits stays as given
    base = ["qwen3-8b", "--method", "lora", "--objective", "dpo", "--prompt", "512"]
    assert main(["estimate", *base, "--gpu", "rtx-4090"]) == 0
    assert main(["plot", *base, "--gpu", "rtx-4090", "--kind", "seq-curve", "-o", str(tmp_path / "c.png")]) == 0
    assert main(["page", *base, "-o", str(tmp_path / "p.html")]) == 0


def test_plan_states_the_time_assumptions_of_every_row(capsys):
    """plan ranks offload rows by tokens/s too; their time rests on PCIe and the CPU's update, which the
    "time assumes" line must state (it used to state only the fastest row's: MFU and HBM)."""
    assert main(["plan", "qwen3-8b", "--method", "full", "--gpu", "h100", "--max-gpus", "8"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "optimizer offload" in out
    assumed = out[out.index("time assumes:"):]
    assert "PCIe Gen5 x16 at 64 GB/s to the CPU" in assumed and "76.8 GB/s of host memory per GPU" in assumed


def test_in_backward_refusal_names_zero_not_several_gpus(capsys):
    """DeepSpeed's ZeRO-2 on one GPU with --optimizer-in-backward: the refusal said "several GPUs" of a one-GPU run;
    it names what is not modelled (the ZeRO stage the stack implies), in one line."""
    assert main(["estimate", "qwen3-8b", "--method", "full", "--stack", "deepspeed", "--optimizer-in-backward"]) == 2
    err = capsys.readouterr().err
    assert "several GPUs" not in err and "ZeRO-2" in err and len(err.strip().splitlines()) == 1


def test_the_settings_table_shows_the_objective_a_file_sets(tmp_path, capsys):
    """axolotl `rl: dpo` makes a DPO run: the table of what was read shows the objective and where it came from (the
    header said "objective dpo" while the table had no such row), and the loss TRL's trainers force is not called a
    "symvram default"."""
    f = _write(tmp_path, "rl.yml", "base_model: Qwen/Qwen3-8B\nadapter: qlora\nload_in_4bit: true\nrl: dpo\n"
                                   "micro_batch_size: 1\nsequence_len: 2048\n")
    assert main(["estimate", "--from", f]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert rows["objective"].split()[1] == "dpo" and rows["objective"].endswith("rl.yml:rl")
    assert "symvram default" not in rows["loss_impl"] and "TRL's fused LM head" in rows["loss_impl"]
    assert main(["estimate", "qwen3-8b", "--from", "examples/configs/llamafactory-lora.yaml"]) == 0
    assert "\nobjective " not in capsys.readouterr().out    # SFT files keep the table as it was


def test_header_says_the_optimizer_steps_in_backward(capsys):
    """--optimizer-in-backward changes what is held (one gradient at a time) but no header said so, and the hf
    stack's sentence still summed "weights + gradients + states = 8 B/param". By hand: bf16 weights 2 + two bf16
    moments 4 = 6 B/param, the gradients one tensor at a time."""
    assert main(["estimate", "qwen3-8b", "--method", "full", "--optimizer-in-backward"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "weights + states = 6 B/param" in out and "weights + gradients + states" not in out
    assert "stepped in backward (one optimizer per parameter" in out


@pytest.mark.parametrize("lang,short,product", [
    ("en", "are 12 B/param, 10 of them in CPU memory under offload ({host}), so the GPU holds 2 B/param = **{gpu}**",
     "70,000,000,000 parameters × 2 B on the GPU (the other 10 of its 12 B/param offloaded to CPU memory) = **140 GB**"),
    ("zh", "是每参数 12 字节，其中 10 字节 offload 到 CPU 内存（{host}），GPU 上每参数 2 字节，合 **{gpu}**",
     "70,000,000,000 个参数 × 2 字节（GPU 上的；每参数 12 字节里另外 10 字节 offload 到 CPU 内存） = **140 GB**"),
])
def test_explain_under_offload_says_where_the_bytes_per_parameter_live(tmp_path, lang, short, product):
    """ZeRO-Offload: "12 B/param = 16.38 GB" multiplied to a figure 6× too small (the GPU holds the bf16 weights
    only). By hand: bf16 weights 2 B/param on the GPU (8,190,735,360 × 2 = 16.38 GB), gradients 2 and the two fp32
    moments 8 in CPU memory (10 × P = 81.91 GB); for 70e9 parameters 2 B each on the GPU, 140 GB."""
    out = tmp_path / f"o.{lang}.md"
    assert main(["explain", "qwen3-8b", "--method", "full", "--stack", "deepspeed", "--offload", "optimizer",
                 "--gpu", "rtx-4090", "--grad-checkpointing", "--lang", lang, "-o", str(out)]) == 0
    text = out.read_text()
    p = 8_190_735_360
    assert short.format(host=fmt_bytes(10 * p, "GB"), gpu=fmt_bytes(2 * p, "GB")) in text
    assert product in text
