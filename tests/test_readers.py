"""--from: the user's own training configs read into a Scenario (issue 17).

For each sample in examples/configs (one per tool: axolotl QLoRA, LLaMA-Factory LoRA, TRL full with
DeepSpeed ZeRO-3, Trainer full with accelerate FSDP) the test states the settings by hand, from the
file and the tool's documented defaults, asserts the reader maps exactly those, and then that the
peak symvram prints equals the peak of Scenario.create(...) with those settings written out.
"""
import json
from pathlib import Path

import pytest

from symvram.cli import main
from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.readers.edits import edits
from symvram.readers.read import read_files
from symvram.readers.tools import PENDING, TOOLS
from symvram.scenario import Scenario

CONFIGS = Path(__file__).resolve().parent.parent / "examples" / "configs"
ALL_LINEAR = ("linear-names",)   # the tools' nn.Linear leaf names: a family group resolved with the model (Llama: all-linear)

# sample files → (model given on the command line or None, the settings stated by hand)
SAMPLES = {
    "axolotl-qlora.yml": (None, "llama-3.1-8b", dict(
        stack="hf", method="qlora", rank=32, lora_dropout=0.05, targets=ALL_LINEAR, seq=4096, batch=2, grad_checkpointing=True,
        attention="sdpa", double_quant=True,
        # bf16: auto → AMP in bf16 on a bf16-loaded base; PEFT's fp32 adapters; bitsandbytes 8-bit AdamW
        dtype="bf16", autocast="bf16", adapter_dtype="fp32", master="none", state_dtype="int8",
        optimizer="adamw8bit", optimizer_impl="fused", checkpoint_impl="reentrant",
        kbit_prep="none")),   # axolotl casts norms and embeddings back to bf16 after PEFT's k-bit preparation
    "llamafactory-lora.yaml": (None, "qwen2.5-7b", dict(
        stack="hf", method="lora", rank=16, lora_dropout=0.0, targets=ALL_LINEAR, seq=2048, batch=4, double_quant=True,
        grad_checkpointing=True,            # LLaMA-Factory checkpoints unless disable_gradient_checkpointing
        attention="sdpa", dtype="bf16", autocast="bf16", adapter_dtype="fp32", master="none", state_dtype="fp32",
        optimizer="adamw", optimizer_impl="fused")),   # the Trainer's default optim with torch >= 2.8
    "trl-sft-zero3.json": ("qwen2.5-7b", "qwen2.5-7b", dict(
        # packing: true (bfd): TRL's padding-free collator flattens the 2 × 4096 tokens into one row
        stack="deepspeed", method="full", seq=8192, batch=1, packing=8192, grad_checkpointing=True, attention="sdpa",
        liger=False, offload_activations=False,
        # DeepSpeed's bf16 engine (from ds-zero3.json, which the TRL file names): fp32 master and states
        dtype="bf16", autocast="none", master="fp32", state_dtype="fp32", zero=3,
        # SFTTrainer installs its fused LM head whatever runs the parallelism (trl 1.16 sft_trainer.py)
        optimizer="adamw", optimizer_impl="fused", loss_impl="trl")),
    "trainer-full.json+accelerate-fsdp.yaml": ("llama-3-8b", "llama-3-8b", dict(
        stack="fsdp", method="full", batch=4, grad_checkpointing=True, gpus=8, zero=3,
        # the Trainer's bf16 on an fp32 model under FSDP: FSDP2's MixedPrecisionPolicy, not autocast
        dtype="fp32", autocast="none", mp_policy="bf16", master="none", state_dtype="fp32", liger=False,
        optimizer="adamw", optimizer_impl="foreach", checkpoint_impl="non-reentrant", loss_impl="torch")),
}


def _files(name):
    return [str(CONFIGS / n) for n in name.split("+")]


def _run(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_maps_every_field(name):
    given, model, expected = SAMPLES[name]
    r = read_files(_files(name))
    assert r.kwargs() == expected
    if given is None:
        assert Scenario.create(r.model.value).model.name == model   # the Hub id resolves to the preset


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_peak_is_the_explicit_scenarios(name, capsys):
    given, model, expected = SAMPLES[name]
    argv = ["estimate", *[a for f in _files(name) for a in ("--from", f)], "--format", "json"]
    rc, out, err = _run(argv + ([given] if given else []), capsys)
    assert rc == 0, err
    data = json.loads(out)
    assert data["bytes"]["peak"] == evaluate(Scenario.create(model, **expected)).peak
    read = data["scenario_read"]
    assert [f["format"] for f in read["files"]][0] in ("axolotl", "llamafactory", "trl", "trainer")
    for key in ("batch", "dtype", "optimizer"):
        assert read["settings"][key]["source"]


def test_provenance_comes_first_and_fits_100_columns(capsys):
    rc, out, err = _run(["estimate", "--from", str(CONFIGS / "axolotl-qlora.yml"), "--gpu", "rtx-4090"], capsys)
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("scenario read from ") and "(axolotl)" in lines[0]
    table = out.split("\n\n")[0]
    assert max(len(line) for line in table.splitlines()) <= 100
    rows = {line.split()[0]: line for line in table.splitlines()[3:]}
    assert rows["batch"].split()[1] == "2" and rows["batch"].endswith("axolotl-qlora.yml:micro_batch_size")
    assert rows["model"].endswith("→ preset llama-3.1-8b")
    assert rows["double_quant"].endswith("axolotl 0.19 default")
    assert rows["gpus"].endswith("symvram default")
    # axolotl runs prepare_model_for_kbit_training, then casts the norms and embeddings back to bf16 (its
    # loaders/model.py): no fp32 residual stream, so its 24 GB recipe fits at seq 4096
    assert rows["kbit_prep"].split()[1] == "none"
    # the tensors fit the card, and so do two steps of the default allocator's replay on it (modelled, not
    # measured: unbounded it would cache more than the card, on the card it frees cached blocks and retries, as
    # CUDACachingAllocator does before an OOM): the verdict says fits, as axolotl's 24 GB recipe does
    rc, js, _ = _run(["estimate", "--from", str(CONFIGS / "axolotl-qlora.yml"), "--gpu", "rtx-4090", "--format",
                      "json"], capsys)
    memory = json.loads(js)["bytes"]
    assert memory["reserved_peaks"]["default"] > 24 * 10**9 > memory["reserved_peak"] >= memory["peak"]
    verdict = " ".join(out[out.index("verdict on NVIDIA GeForce RTX 4090 24GB"):].split())
    assert verdict.startswith("verdict on NVIDIA GeForce RTX 4090 24GB: fits")
    assert "over by -" not in verdict and "none of these is enough" not in verdict


def test_flags_win_over_the_files(capsys):
    argv = ["estimate", "--from", str(CONFIGS / "axolotl-qlora.yml"), "--batch", "1", "--method", "lora",
            "--format", "json"]
    rc, out, err = _run(argv, capsys)
    data = json.loads(out)
    settings = data["scenario_read"]["settings"]
    assert settings["batch"] == {"value": "1", "source": "command line"}
    assert settings["method"] == {"value": "lora", "source": "command line"}
    assert data["inputs"]["seq"] == 4096          # the rest still from the file
    # --method lora is applied before the recipe is derived: a LoRA base in bf16, adapters in fp32
    assert (data["inputs"]["dtype"], data["inputs"]["adapter_dtype"]) == ("bf16", "fp32")


def test_the_model_on_the_command_line_wins(capsys):
    rc, out, err = _run(["estimate", "--from", str(CONFIGS / "llamafactory-lora.yaml"), "llama-3-8b",
                         "--format", "json"], capsys)
    assert json.loads(out)["scenario_read"]["settings"]["model"] == {"value": "llama-3-8b", "source": "command line"}


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_tool_defaults_apply_where_the_file_is_silent(tmp_path):
    """axolotl 0.19: sequence_len 512, micro_batch_size 1, no adapter (full), adamw_torch_fused, bf16 auto.
    LLaMA-Factory 0.9.5: LoRA r=8 on every linear layer, cutoff_len 2048, the Trainer's batch 8,
    checkpointing on. TRL 1.16: max_length 1024, checkpointing on, bf16 unless fp16, an fp32 model."""
    ax = read_files([_write(tmp_path, "a.yml", "base_model: llama-3-8b\n")]).kwargs()
    assert ax == dict(stack="hf", method="full", seq=512, batch=1, grad_checkpointing=False, attention="sdpa", dtype="bf16",
                      autocast="bf16", master="none", state_dtype="bf16", optimizer="adamw", optimizer_impl="fused",
                      rank=8, lora_dropout=0.0, targets=("q_proj", "v_proj"), double_quant=True)
    lf = read_files([_write(tmp_path, "l.yaml", "model_name_or_path: llama-3-8b\nstage: sft\n")]).kwargs()
    assert (lf["method"], lf["rank"], lf["targets"], lf["seq"], lf["batch"], lf["grad_checkpointing"]) == \
        ("lora", 8, ALL_LINEAR, 2048, 8, True)
    assert (lf["dtype"], lf["autocast"], lf["adapter_dtype"]) == ("bf16", "none", "fp32")   # inferred bf16, no AMP
    trl = read_files([_write(tmp_path, "t.json", json.dumps({"output_dir": "o", "packing": False}))]).kwargs()
    assert (trl["seq"], trl["grad_checkpointing"], trl["dtype"], trl["autocast"], trl["batch"]) == \
        (1024, True, "fp32", "bf16", 8)


def test_every_row_names_a_known_target():
    """Each row's setting is a Scenario setting, a fact the rules combine, a pending setting, INFO,
    a reference to another table, or None (not modelled, with a reason)."""
    from symvram.readers.read import _SETTINGS
    from symvram.readers.tools import FACTS, INFO, SYMBOL
    from symvram.symbols import SYMBOLS

    from symvram.scenario import CREATE_SETTINGS

    fields = set(Scenario.__dataclass_fields__) - {"model"} | set(CREATE_SETTINGS)
    for tool in TOOLS.values():
        for row in tool.rows:
            if row.setting is None:
                assert row.why, (tool.name, row.key)
            elif row.setting.startswith("@"):
                assert row.setting[1:] in TOOLS
            elif row.setting.startswith(SYMBOL):   # a ledger symbol's value, as --set
                assert row.setting[len(SYMBOL):] in SYMBOLS, (tool.name, row.key)
            else:
                assert row.setting in fields | set(FACTS) | set(PENDING) | {INFO}, (tool.name, row.key)
                assert row.setting != "model" or row.key in ("base_model", "model_name_or_path", "model._component_",
                                                                 "checkpoint_dir")
                # a Scenario field is set from the files, unless its values there are still pending (loss_impl)
                assert row.setting not in fields or row.setting in _SETTINGS or row.setting in PENDING, \
                    (tool.name, row.key)


@pytest.mark.parametrize("text,setting,value", [
    ("lora_target_modules: [q_proj, k_proj]\nadapter: lora\n", "targets", ("q_proj", "k_proj")),
    ("adapter: lora\nlora_target_modules: q_proj\nlora_target_linear: true\n", "targets", ALL_LINEAR),
    ("eager_attention: true\n", "attention", "eager"),
    ("attn_implementation: eager\n", "attention", "eager"),
    ("sdp_attention: true\n", "attention", "sdpa"),
    ("optimizer: adamw_torch\n", "optimizer_impl", "foreach"),
    ("optimizer: adafactor\n", "optimizer", "adafactor"),
    ("optimizer: lion_8bit\n", "state_dtype", "int8"),
    ("optimizer: sgd\n", "optimizer", "sgd"),
    ("bf16: false\nfp16: true\nadapter: lora\n", "dtype", "fp16"),
    ("bf16: false\n", "dtype", "fp32"),
    ("bfloat16: true\nbf16: false\n", "autocast", "none"),
    ("gradient_checkpointing: offload\n", "grad_checkpointing", True),
    ("tensor_parallel_size: 2\n", "tp", 2),
    ("load_in_4bit: true\nadapter: lora\n", "method", "qlora"),
    ("bnb_config_kwargs: {bnb_4bit_use_double_quant: false}\nadapter: qlora\n", "double_quant", False),
    ("fsdp: [full_shard, auto_wrap, offload]\n", "offload", "optimizer+params"),
    ("fsdp_version: 2\nfsdp_config: {reshard_after_forward: false}\n", "zero", 2),
    ("fsdp_config: {offload_params: true}\n", "zero", 3),
    ("adapter: lora\nlora_modules_to_save: [lm_head, model.embed_tokens]\n", "modules_to_save", ("embed_tokens", "lm_head")),
])
def test_axolotl_rows(tmp_path, text, setting, value):
    r = read_files([_write(tmp_path, "a.yml", "base_model: llama-3-8b\n" + text)])
    assert r.settings[setting].value == value


@pytest.mark.parametrize("text,setting,value", [
    ("finetuning_type: full\nbf16: true\n", "dtype", "fp32"),           # trainable parameters upcast to fp32
    ("finetuning_type: full\nbf16: true\n", "autocast", "bf16"),
    ("finetuning_type: full\npure_bf16: true\n", "dtype", "bf16"),
    ("quantization_bit: 4\nbf16: true\n", "method", "qlora"),
    ("double_quantization: false\nquantization_bit: 4\n", "double_quant", False),
    ("disable_gradient_checkpointing: true\n", "grad_checkpointing", False),
    ("lora_target: q_proj,v_proj\n", "targets", ("q_proj", "v_proj")),
    ("flash_attn: disabled\n", "attention", "eager"),
    ("optim: paged_adamw_8bit\n", "state_dtype", "int8"),
    ("optim: paged_adamw_32bit\n", "optimizer", "paged-adamw"),   # the Trainer's bnb AdamW(optim_bits=32, is_paged)
    ("lora_dropout: 0.1\n", "lora_dropout", 0.1),
    ("additional_target: embed_tokens,lm_head\n", "modules_to_save", ("embed_tokens", "lm_head")),
])
def test_llamafactory_rows(tmp_path, text, setting, value):
    r = read_files([_write(tmp_path, "l.yaml", "model_name_or_path: llama-3-8b\nstage: sft\n" + text)])
    assert r.settings[setting].value == value


@pytest.mark.parametrize("doc,setting,value", [
    ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}, "offload", "optimizer"),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}, "offload", "optimizer+params"),
    ({"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": 3}, "batch", 3),
    ({"zero_optimization": {"stage": 1}, "fp16": {"enabled": True}}, "master", "fp32"),
    ({"zero_optimization": {"stage": 1}, "bf16": {"enabled": "auto"}}, "dtype", "fp32"),   # auto: the trainer's
    ({"zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW"}}, "optimizer_impl", "fused"),
])
def test_deepspeed_rows(tmp_path, doc, setting, value):
    r = read_files([_write(tmp_path, "ds.json", json.dumps(doc))])
    assert r.settings[setting].value == value


@pytest.mark.parametrize("text,setting,value", [
    ("distributed_type: DEEPSPEED\nnum_processes: 4\ndeepspeed_config: {zero_stage: 2, offload_optimizer_device: cpu}\n",
     "offload", "optimizer"),
    ("distributed_type: DEEPSPEED\nnum_processes: 4\ndeepspeed_config: {zero_stage: 2}\n", "zero", 2),
    ("distributed_type: FSDP\nnum_processes: 2\nfsdp_config: {fsdp_sharding_strategy: SHARD_GRAD_OP}\n", "zero", 2),
    ("distributed_type: FSDP\nnum_processes: 2\nfsdp_config: {fsdp_version: 2, fsdp_reshard_after_forward: true}\n",
     "zero", 3),
    ("distributed_type: FSDP\nnum_processes: 2\nfsdp_config: {fsdp_activation_checkpointing: true}\n",
     "grad_checkpointing", True),
    ("distributed_type: MULTI_GPU\nnum_processes: 4\nmixed_precision: fp16\n", "autocast", "fp16"),
])
def test_accelerate_rows(tmp_path, text, setting, value):
    r = read_files([_write(tmp_path, "acc.yaml", text)])
    assert r.settings[setting].value == value


def test_a_training_file_beats_accelerates_mixed_precision(tmp_path):
    acc = _write(tmp_path, "acc.yaml", "distributed_type: MULTI_GPU\nnum_processes: 2\nmixed_precision: fp16\n")
    ax = _write(tmp_path, "a.yml", "base_model: llama-3-8b\nbf16: true\n")
    r = read_files([ax, acc])
    assert r.settings["autocast"].value == "bf16" and not r.warnings


@pytest.mark.parametrize("text,named", [
    ("lora_modules_to_save: [embed_tokens, score]\nadapter: lora\n", "modules_to_save beyond embed_tokens"),
    ("gradient_checkpointing: offload\n", "gradient_checkpointing = offload"),
    ("liger_cross_entropy: true\n", "liger_cross_entropy = true"),
    ("torch_compile: true\n", "torch_compile = true: torch.compile"),
    ("optimizer: paged_lion_8bit\n", "paged_lion_8bit: not modelled yet (paged"),
    ("optimizer: galore_adamw\n", "galore_adamw: this optimizer is not modelled"),
    ("load_in_8bit: true\nadapter: lora\n", "8-bit (LLM.int8) base is not modelled"),
    ("context_parallel_size: 2\n", "context parallelism"),
])
def test_memory_keys_not_modelled_warn_in_one_line(tmp_path, capsys, text, named):
    path = _write(tmp_path, "a.yml", "base_model: llama-3-8b\n" + text)
    rc, out, err = _run(["estimate", "--from", path], capsys)
    assert rc == 0
    warnings = [line for line in err.splitlines() if line.startswith("symvram: warning: ")]
    assert len(warnings) == 1 and named in warnings[0], err


def test_deepspeed_buffers_warn_once(tmp_path):
    """The sizes the ledger holds as symbols (reduce_bucket_size, sub_group_size) are read into them, never
    warned as left out; the prefetch bucket, which the ledger does not hold, is warned once."""
    doc = {"zero_optimization": {"stage": 3, "reduce_bucket_size": 2e8, "sub_group_size": 1e8,
                                 "stage3_prefetch_bucket_size": 5e8}, "bf16": {"enabled": True}}
    r = read_files([_write(tmp_path, "ds.json", json.dumps(doc))])
    assert len(r.warnings) == 1 and "stage3_prefetch" in r.warnings[0] and "reduce_bucket" not in r.warnings[0]
    assert r.kwargs()["overrides"] == {"ds_reduce_bucket": 2e8, "ds_sub_group": 1e8}
    bd = evaluate(Scenario.create("llama-3-8b", method="full", gpus=8, **r.kwargs()))
    assert bd.terms["ds_reduce_bucket"] == 2e8 * 2     # reduce_bucket_size elements of bf16 gradients


def test_modules_to_save_from_each_tool(tmp_path):
    """axolotl lora_modules_to_save, LLaMA-Factory additional_target, TRL's ModelConfig lora_modules_to_save (with
    use_peft): the embedding and lm_head copies are modelled; other modules warn; full fine-tuning ignores it."""
    trl = read_files([_write(tmp_path, "t.json", json.dumps({
        "output_dir": "o", "max_length": 512, "dataset_text_field": "text", "use_peft": True, "lora_r": 16,
        "lora_target_modules": ["q_proj", "v_proj"], "lora_modules_to_save": ["lm_head", "score"]}))])
    assert (trl.settings["method"].value, trl.settings["rank"].value, trl.settings["modules_to_save"].value) == \
        ("lora", 16, ("lm_head",))
    assert trl.settings["modules_to_save"].source.endswith("t.json:lora_modules_to_save")
    assert any("score" in w and "not modelled" in w for w in trl.warnings)
    sc = Scenario.create("qwen2.5-0.5b", **trl.kwargs())
    assert sc.modules_to_save == ("lm_head",)
    full = read_files([_write(tmp_path, "f.yml", "base_model: llama-3-8b\nlora_modules_to_save: [lm_head]\n")])
    assert "modules_to_save" not in full.settings and any("full fine-tuning" in w for w in full.warnings)


def test_the_stack_a_file_implies(tmp_path):
    """Every training tool here runs transformers' Trainer: the hf stack; a DeepSpeed or FSDP run too (with its
    ZeRO stage), as long as symvram has no stack of that name."""
    from symvram.stacks import stacks

    for name, expected in (("axolotl-qlora.yml", "axolotl 0.19: runs transformers' Trainer"),
                           ("trl-sft-zero3.json", "TRL 1.16 SFTConfig: runs transformers' Trainer with DeepSpeed"),
                           ("trainer-full.json+accelerate-fsdp.yaml",
                            "transformers 5.24 Trainer: runs transformers' Trainer with FSDP")):
        got = read_files(_files(name)).settings["stack"]
        parallel = {"trl-sft-zero3.json": "deepspeed", "trainer-full.json+accelerate-fsdp.yaml": "fsdp"}.get(name)
        if parallel in stacks():
            assert got.value == parallel
        else:
            assert got.value == "hf" and got.source.startswith(expected.split(":")[0]) and \
                expected.split(": ")[1] in got.source and got.priority == 0
    ds = read_files([_write(tmp_path, "ds.json", json.dumps({"zero_optimization": {"stage": 2}}))])
    assert ds.settings["stack"].value in ("hf", "deepspeed")


def test_pending_settings_stay_silent_at_their_defaults(tmp_path):
    r = read_files([_write(tmp_path, "a.yml", "base_model: llama-3-8b\npeft_use_dora: false\nliger_rms_norm: false\n"
                                               "lora_modules_to_save: []\n")])
    assert r.warnings == []


def test_verbose_lists_the_keys_not_read(tmp_path, capsys):
    path = _write(tmp_path, "a.yml", "base_model: llama-3-8b\nmy_own_key: 1\nlearning_rate: 0.001\n")
    rc, out, err = _run(["estimate", "--from", path], capsys)
    assert err == ""
    rc, out, err = _run(["estimate", "--from", path, "--verbose"], capsys)
    assert "not read (not known to change memory)" in err and "a.yml:my_own_key" in err
    assert "learning_rate" not in err           # known, and harmless


def test_a_referenced_file_is_followed_and_shown(capsys):
    r = read_files([str(CONFIGS / "trl-sft-zero3.json")])
    assert [t for _, t in r.files] == ["trl", "deepspeed"]
    assert r.settings["zero"].source.endswith("ds-zero3.json:zero_optimization.stage")


def test_an_inline_deepspeed_mapping(tmp_path):
    r = read_files([_write(tmp_path, "a.yml", "base_model: llama-3-8b\ndeepspeed:\n  zero_optimization: {stage: 2}\n")])
    assert r.settings["zero"].value == 2 and r.settings["zero"].source.endswith("a.yml:deepspeed.zero_optimization.stage")


# ------------------------------------------------------------------ remedies as edits to the file
def test_diagnose_writes_remedies_as_edits(tmp_path, capsys):
    path = _write(tmp_path, "run.yml", "base_model: llama-3-8b\nadapter: lora\nsequence_len: 4096\n"
                                       "micro_batch_size: 4\ngradient_accumulation_steps: 2\n")
    rc, out, err = _run(["diagnose", "--from", path, "--gpu", "24GiB", "--headroom", "1GiB"], capsys)
    assert rc == 0, err
    assert out.startswith("scenario read from ")
    assert f"{path}: gradient_checkpointing: true" in out
    assert f"{path}: liger_rms_norm: true" in out   # Liger's layer kernels, free, before checkpointing
    rc, out, err = _run(["diagnose", "--from", path, "--gpu", "24GiB", "--format", "json"], capsys)
    data = json.loads(out)
    assert data["remedies"][0]["edits"] == [  # a fused loss first: axolotl's Liger plugin
        f"{path}: plugins: [axolotl.integrations.liger.LigerPlugin]", f"{path}: liger_fused_linear_cross_entropy: true"]
    assert data["remedies"][1]["edits"][1:] == [f"{path}: liger_rms_norm: true", f"{path}: liger_glu_activation: true",
                                                f"{path}: liger_rope: true"]
    assert data["remedies"][2]["edits"] == [f"{path}: gradient_checkpointing: true"]
    assert data["scenario_read"]["settings"]["batch"]["source"] == f"{path}:micro_batch_size"


def test_edits_in_each_tools_keys(tmp_path):
    lf = read_files([_write(tmp_path, "l.yaml", "model_name_or_path: llama-3-8b\nstage: sft\n")])
    assert edits(lf, {"grad_checkpointing": True}) == [f"{tmp_path}/l.yaml: disable_gradient_checkpointing: false"]
    assert edits(lf, {"method": "qlora"}) == [f"{tmp_path}/l.yaml: finetuning_type: lora",
                                              f"{tmp_path}/l.yaml: quantization_bit: 4"]
    assert edits(lf, {"loss_impl": "liger"}) == [f"{tmp_path}/l.yaml: enable_liger_kernel: true"]
    assert edits(lf, {"loss_impl": "cce"}) == ["--loss-impl cce"]  # no LLaMA-Factory key for it: the flag
    trl = read_files([str(CONFIGS / "trl-sft-zero3.json")])
    path = str(CONFIGS / "trl-sft-zero3.json")
    assert edits(trl, {"state_dtype": "int8"}) == [f'{path}: "optim": "adamw_bnb_8bit"']
    assert edits(trl, {"method": "qlora"}) == [
        f'{path}: "model_init_kwargs": {{"quantization_config": {{"load_in_4bit": true}}}}']
    assert edits(trl, {"master": "none"})[0].startswith("(DeepSpeed's bf16/fp16 engine always keeps")
    assert edits(trl, {"loss_impl": "liger"}) == ["--loss-impl liger"]  # SFTTrainer turns Liger's fused loss off
    ds = _write(tmp_path, "ds.json", json.dumps({"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 8}))
    only_ds = read_files([ds])
    assert edits(only_ds, {"batch": 2}, batch_before=8) == [f"{ds}: \"train_micro_batch_size_per_gpu\": 2",
                                                             f"{ds}: \"gradient_accumulation_steps\": 4"]
    assert edits(only_ds, {"seq": 1024}) == ["--seq 1024"]     # no key for it: the flag


def test_estimate_gpu_gives_remedy_edits_when_it_does_not_fit(tmp_path, capsys):
    path = _write(tmp_path, "run.yml", "base_model: llama-3-8b\nadapter: lora\nsequence_len: 4096\nmicro_batch_size: 4\n")
    rc, out, err = _run(["estimate", "--from", path, "--gpu", "rtx-4090", "--format", "json"], capsys)
    verdict = json.loads(out)["verdict"]
    assert verdict["fits"] is False
    plugin = f"{path}: plugins: [axolotl.integrations.liger.LigerPlugin]"
    assert [r["edits"] for r in verdict["remedies"][:3]] == [
        [plugin, f"{path}: liger_fused_linear_cross_entropy: true"],
        [plugin, f"{path}: liger_rms_norm: true", f"{path}: liger_glu_activation: true", f"{path}: liger_rope: true"],
        [f"{path}: gradient_checkpointing: true"]]


# ------------------------------------------------------------------ bad input: one line, exit 2
BAD = {
    "notes.yml": ("title: my notes\nitems: [1, 2]\n", "notes.yml: not a training config symvram reads"),
    "broken.yml": ("base_model: llama-3-8b\nmicro_batch_size: [1\n", "broken.yml: not valid YAML (line"),
    "list.yml": ("- base_model: x\n", "list.yml: expected a mapping of settings at the top level"),
    "broken.json": ('{"zero_optimization": {"stage": 3}', "broken.json: not valid JSON"),
    "missing_ds.yml": ("base_model: llama-3-8b\ndeepspeed: nowhere/ds.json\n",
                       "missing_ds.yml: deepspeed: no such file 'nowhere/ds.json'"),
    "both.yml": ("base_model: llama-3-8b\nbf16: true\nfp16: true\n", "both.yml:bf16 and"),
    "wrongtype.yml": ("base_model: llama-3-8b\nmicro_batch_size: four\n",
                      "wrongtype.yml: micro_batch_size: expected a positive integer, got 'four'"),
    "boolstring.yml": ("base_model: llama-3-8b\ngradient_checkpointing: 'yes'\n",
                       "boolstring.yml: gradient_checkpointing: expected one of"),
    "badstage.json": ('{"zero_optimization": {"stage": 4}}', "badstage.json: zero_optimization.stage: expected a ZeRO stage"),
    "badtarget.yml": ("base_model: llama-3-8b\nadapter: lora\nlora_target_modules: [wq]\n",
                      "badtarget.yml: lora_target_modules: unknown LoRA target 'wq'"),
    "nomodel.yml": ("micro_batch_size: 2\nsequence_len: 1024\n", "names no base model"),
    "rank.yml": ("base_model: llama-3-8b\nadapter: lora\nlora_r: 100000\n",
                 "--rank 100000 is larger than min(d, k) = 1024 of the targeted matrices; a LoRA update of that "
                 "rank is no longer low-rank (rank from rank.yml:lora_r)"),
    "ds_and_fsdp.yml": ("base_model: llama-3-8b\ndeepspeed: {zero_optimization: {stage: 2}}\nfsdp: [full_shard]\n",
                        "configure both DeepSpeed and FSDP"),
    "not_utf8.yml": (b"base_model: \xff\n", "not_utf8.yml: not UTF-8 text"),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_config_is_one_line_exit_2(tmp_path, capsys, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    text, fragment = BAD[name]
    (tmp_path / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    rc, out, err = _run(["estimate", "--from", name], capsys)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("symvram: error: "), err
    assert fragment in err, err


def test_a_missing_from_file(capsys):
    rc, out, err = _run(["estimate", "--from", "/nonexistent/run.yml"], capsys)
    assert rc == 2 and "--from /nonexistent/run.yml: no such file" in err


@pytest.mark.parametrize("command", ["fit", "plan", "whatif", "sensitivity", "explain", "diagnose"])
def test_every_command_takes_from(command, capsys, tmp_path):
    extra = {"fit": ["--gpu", "a100-80g"], "plan": ["--gpu", "a100-80g"], "diagnose": ["--gpu", "a100-80g"],
             "whatif": ["--set", "rank=8"], "sensitivity": [], "explain": []}[command]
    rc, out, err = _run([command, "--from", str(CONFIGS / "llamafactory-lora.yaml"), *extra], capsys)
    assert rc == 0, err
    assert "scenario read from" in (out if command == "diagnose" else err)


@pytest.mark.parametrize("command,extra", [("fit", ["--gpu", "a100-80g"]), ("plan", ["--gpu", "a100-80g"]),
                                           ("whatif", ["--set", "rank=8"]), ("sensitivity", [])])
def test_json_carries_the_scenario_read(command, extra, capsys):
    rc, out, err = _run([command, "--from", str(CONFIGS / "llamafactory-lora.yaml"), *extra, "--format", "json"], capsys)
    assert rc == 0 and err == ""
    read = json.loads(out)["scenario_read"]
    assert read["settings"]["seq"] == {"value": "2048", "source": f"{CONFIGS / 'llamafactory-lora.yaml'}:cutoff_len"}


def test_seq_beyond_the_context_warns(capsys):
    rc, out, err = _run(["estimate", "llama-2-7b", "--method", "lora", "--seq", "8192"], capsys)
    assert rc == 0
    assert err == ("symvram: warning: seq 8192 is longer than llama-2-7b's context (max_position_embeddings 4096); "
                   "estimated as given\n")


def test_the_default_seq_beyond_a_short_context_does_not_warn(tmp_path, capsys):
    """symvram's default seq 2048 on a 512-token config is not the user's choice: no warning line."""
    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    rc, out, err = _run(["estimate", str(path), "--method", "lora", "--rank", "8"], capsys)
    assert rc == 0 and err == ""
    rc, out, err = _run(["estimate", str(path), "--method", "lora", "--rank", "8", "--seq", "1024"], capsys)
    assert "seq 1024 is longer than" in err


def test_trl_runs_its_fused_lm_head_and_says_when_fewer_tokens_are_labelled(tmp_path):
    """A TRL SFTConfig reads the trl stack (SFTTrainer's fused LM head, trl 1.16 sft_trainer.py add_fused_lm_head)
    whatever use_liger_kernel says (SFTTrainer turns Liger's fused loss off); a completion-only loss labels fewer
    tokens than the estimate counts, and the reading says so."""
    plain = read_files([_write(tmp_path, "a.json", json.dumps({"output_dir": "o", "max_length": 2048, "use_liger_kernel": True}))])
    assert plain.kwargs()["stack"] == "trl" and "loss_impl" not in plain.kwargs()
    assert Scenario.create("llama-3-8b", **plain.kwargs()).loss_impl == "trl"
    assert not any("labelled" in w for w in plain.warnings)
    partial = read_files([_write(tmp_path, "b.json", json.dumps({"output_dir": "o", "max_length": 2048, "completion_only_loss": True}))])
    assert any("completion_only_loss" in w and "upper bound" in w for w in partial.warnings)


def test_deepspeed_allgather_bucket_is_not_called_a_prefetch_buffer(tmp_path):
    """ZeRO-2's allgather_bucket_size chunks the all-gather of the updated weights (stage_1_and_2.py); the warning
    said "ZeRO's prefetch and persistence buffers", which are ZeRO-3's."""
    doc = {"zero_optimization": {"stage": 2, "allgather_bucket_size": 5e8}, "bf16": {"enabled": True}}
    r = read_files([_write(tmp_path, "ds.json", json.dumps(doc))])
    assert len(r.warnings) == 1 and "prefetch" not in r.warnings[0]
    assert "ZeRO-1/2's chunks of the updated weights' all-gather" in r.warnings[0]


def test_the_load_balancing_weight_from_trl_and_llamafactory(tmp_path):
    """TRL's SFTConfig.router_aux_loss_coef (sft_config.py:161-168: None, the config's) and LLaMA-Factory's
    moe_aux_loss_coef (model/model_utils/moe.py:160-199) are read: 0 leaves the MoE load-balancing loss out, a
    non-zero weight puts it in (under LLaMA-Factory's Trainer too, whose model then returns its router logits)."""
    def aux_terms(path):
        sc = Scenario.create("qwen3-30b-a3b", **read_files([path]).kwargs())
        return sorted(k for k in evaluate(sc).terms if "aux" in k)

    trl = {"output_dir": "o", "max_length": 512, "per_device_train_batch_size": 1, "use_peft": True}
    assert aux_terms(_write(tmp_path, "t.json", json.dumps(trl))) == ["sft_router_aux", "sft_router_aux_grads"]
    off = read_files([_write(tmp_path, "t0.json", json.dumps({**trl, "router_aux_loss_coef": 0.0}))])
    assert off.settings["router_aux_loss_coef"].value == 0.0
    assert aux_terms(_write(tmp_path, "t0.json", json.dumps({**trl, "router_aux_loss_coef": 0.0}))) == []
    lf = "model_name_or_path: qwen3-30b-a3b\nstage: sft\ncutoff_len: 512\nper_device_train_batch_size: 1\n"
    assert aux_terms(_write(tmp_path, "l.yaml", lf)) == []   # output_router_logits stays False
    assert aux_terms(_write(tmp_path, "l1.yaml", lf + "moe_aux_loss_coef: 0.001\n")) == \
        ["sft_router_aux", "sft_router_aux_grads"]
    with pytest.raises(UserError, match="not a Mixture-of-Experts"):
        Scenario.create("llama-3-8b", **read_files([_write(tmp_path, "d.json", json.dumps(
            {"output_dir": "o", "max_length": 512, "router_aux_loss_coef": 0.01}))]).kwargs())
