"""Inside the training run (issue 31): a real transformers Trainer, an accelerate loop (and TRL's SFTTrainer and
Lightning where installed) on a tiny llama on the CPU, real tensors.

- the live reader (``symvram.from_training``) gives the Scenario that the CLI builds from the same setup written
  as files and flags (``--from args.json`` + the flags a user would add);
- the callback's prediction is held against the peak the run really had, measured by validate's tracker
  (PyTorch's MemTracker on the real CPU tensors) in place of the CUDA counters;
- over budget, the check stops the run before step 1 with the triage written as TrainingArguments edits.
"""
from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch", reason="symvram[integrations] extra not installed (torch)")
transformers = pytest.importorskip("transformers", reason="symvram[integrations] extra not installed")
peft = pytest.importorskip("peft", reason="symvram[integrations] extra not installed (peft)")
pytest.importorskip("accelerate", reason="symvram[integrations] extra not installed (accelerate)")

from symvram.cli import build_parser, main  # noqa: E402
from symvram.cli.common import scenario_from_args  # noqa: E402
from symvram.integrations.check import REPORT, MemoryExceeded  # noqa: E402
from symvram.integrations.transformers import MemoryCheckCallback  # noqa: E402
from symvram.readers.live import from_training  # noqa: E402

b, s = 2, 40
ARCH = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, vocab_size=1000, tie_word_embeddings=False, use_cache=False, pad_token_id=0, bos_token_id=1,
            eos_token_id=2)
ROWS = [{"input_ids": list(range(3, 3 + n)), "labels": list(range(3, 3 + n))} for n in (s, s // 2, s)] * 2
TOLERANCE = 1e-3   # the Trainer's own small tensors (the batch dict, loss accumulators): < 0.1 % of these peaks


def tiny(dtype=torch.bfloat16, lora=True, **lora_kw):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**ARCH), dtype=dtype,
                                                          attn_implementation="sdpa")
    if lora:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            model = peft.get_peft_model(model, peft.LoraConfig(r=8, task_type="CAUSAL_LM", **lora_kw))
    return model


def collate(rows):
    """Pad to the longest row of the batch (what transformers' padding collators do)."""
    n = max(len(r["input_ids"]) for r in rows)
    ids = torch.tensor([r["input_ids"] + [0] * (n - len(r["input_ids"])) for r in rows])
    labels = torch.tensor([r["labels"] + [-100] * (n - len(r["labels"])) for r in rows])
    return {"input_ids": ids, "labels": labels}


def trainer_args(tmp, **kw):
    return transformers.TrainingArguments(**{"output_dir": str(tmp), "per_device_train_batch_size": b, "bf16": True,
                                             "use_cpu": True, "max_steps": 2, "report_to": [], "logging_strategy": "no",
                                             "save_strategy": "no", "disable_tqdm": True, **kw})


def cli_scenario(argv):
    args = build_parser().parse_args(argv)
    return scenario_from_args(args)


def same(live, cli):
    """Every setting equal, and the same model dimensions (the model's name differs: live vs a folder)."""
    a, c = live.inputs(), cli.inputs()
    a.pop("model"), c.pop("model")
    assert a == c
    assert live.model.dims == cli.model.dims


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A LoRA Trainer run of two steps with the callback (checkpointing on, bf16 autocast)."""
    out = tmp_path_factory.mktemp("trainer")
    model = tiny(target_modules=["q_proj", "v_proj", "down_proj"])
    lines = []
    cb = MemoryCheckCallback(log=lines.append, units="MiB")
    args = trainer_args(out, gradient_checkpointing=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=ROWS, data_collator=collate,
                                   callbacks=[cb])
    trainer.train()
    return trainer, cb, lines, json.loads((out / REPORT).read_text())


def test_the_live_reader_gives_the_cli_scenario(trained, tmp_path):
    trainer, cb, _, _ = trained
    (tmp_path / "args.json").write_text(trainer.args.to_json_string())
    trainer.model.get_base_model().config.to_json_file(tmp_path / "config.json")
    cli = cli_scenario([
        "estimate", str(tmp_path / "config.json"), "--from", str(tmp_path / "args.json"), "--method", "lora",
        "--rank", "8", "--targets", "q_proj,v_proj,down_proj", "--dtype", "bf16", "--seq", str(s), "--device", "cpu"])
    same(cb.check.training.scenario, cli)
    sc = cb.check.training.scenario
    assert (sc.stack, sc.autocast, sc.adapter_dtype, sc.optimizer_impl, sc.grad_checkpointing, sc.checkpoint_impl) == \
        ("hf", "bf16", "fp32", "fused", True, "non-reentrant")
    sources = dict((k, src) for k, _, src in cb.check.training.rows())
    assert sources["targets"] == "the 6 modules PEFT wrapped" and sources["seq"].startswith("the longest tokenized")


def test_the_prediction_holds_against_the_measured_cpu_peak(trained):
    _, cb, lines, report = trained
    predicted = report["prediction"]["allocated"]
    steps = {m["step"]: m for m in report["measurement"]}
    assert set(steps) == {1, 2} and steps[2]["source"].startswith("validate's tracker")
    # step 2 holds the optimizer states from step 1: the steady state the ledger predicts
    assert abs(steps[2]["allocated"] - predicted) <= TOLERANCE * predicted
    assert abs(steps[2]["by_phase"]["forward_backward"] - report["prediction"]["by_phase"]["forward_backward"]) \
        <= TOLERANCE * predicted
    # step 1 has no optimizer states yet during its forward and backward (AdamW makes them at its first step)
    assert steps[1]["by_phase"]["forward_backward"] < steps[2]["by_phase"]["forward_backward"]
    assert any("no CUDA device: the device comparison is skipped" in line for line in lines)
    assert [line.split(":")[1].strip() for line in lines if "measured" in line] == ["step 1", "step 2"]
    assert report["versions"]["transformers"] == transformers.__version__ and report["not_modelled"] == []


def test_over_budget_stops_before_step_1_with_the_triage_as_training_arguments(tmp_path):
    from symvram.card_memory import device_block

    budget = device_block(None)["cublas_workspaces"] + 2**20   # the workspaces the allocator holds, and 1 MiB
    trainer = transformers.Trainer(model=tiny(target_modules=["q_proj", "v_proj"]), args=trainer_args(tmp_path),
                                   train_dataset=ROWS * 4, data_collator=collate,
                                   callbacks=[MemoryCheckCallback(on_exceed="raise", gpu=budget, headroom=0,
                                                                  units="MiB", log=lambda *_: None)])
    with pytest.raises(MemoryExceeded) as e:
        trainer.train()
    assert trainer.state.global_step == 0
    text = str(e.value)
    assert "over by" in text and "TrainingArguments(use_liger_kernel=True)" in text   # the first, free remedy
    assert json.loads((tmp_path / REPORT).read_text())["preflight"]["triage"]


def test_qlora_trainer(tmp_path):
    """QLoRA through bitsandbytes' CPU kernels: a 4-bit load, prepare_model_for_kbit_training, LoRA on q and v."""
    pytest.importorskip("bitsandbytes", reason="bitsandbytes not installed")
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**ARCH), dtype=torch.bfloat16) \
        .save_pretrained(tmp_path / "base")
    quant = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                            bnb_4bit_compute_dtype=torch.bfloat16)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base", quantization_config=quant,
                                                              dtype=torch.bfloat16, device_map="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model = peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)
        model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"],
                                                           task_type="CAUSAL_LM"))
    cb = MemoryCheckCallback(log=lambda *_: None)
    args = trainer_args(tmp_path / "out", gradient_checkpointing=True)
    transformers.Trainer(model=model, args=args, train_dataset=ROWS, data_collator=collate, callbacks=[cb]).train()
    (tmp_path / "args.json").write_text(args.to_json_string())
    same(cb.check.training.scenario, cli_scenario([
        "estimate", str(tmp_path / "base" / "config.json"), "--from", str(tmp_path / "args.json"), "--method", "qlora",
        "--rank", "8", "--targets", "q_proj,v_proj", "--dtype", "bf16", "--kbit-prep", "peft", "--seq", str(s),
        "--device", "cpu"]))
    report = json.loads((tmp_path / "out" / REPORT).read_text())
    step2 = next(m for m in report["measurement"] if m["step"] == 2)["allocated"]   # with the 4-bit states
    assert abs(step2 - report["prediction"]["allocated"]) <= TOLERANCE * report["prediction"]["allocated"]


def test_a_wrong_option_is_refused_where_it_is_given():
    with pytest.raises(Exception, match="on_exceed must be one of warn, raise; got 'stop'"):
        MemoryCheckCallback(on_exceed="stop")
    with pytest.raises(Exception, match="steps must be a tuple"):
        MemoryCheckCallback(steps=2)


def test_accelerate_loop(tmp_path):
    import accelerate

    import symvram

    model = tiny(dtype=torch.float32, lora=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    accelerate.state.AcceleratorState._reset_state(True)   # the Trainer tests' bf16 state is a process singleton
    accelerator = accelerate.Accelerator(cpu=True, mixed_precision="bf16")
    loader = torch.utils.data.DataLoader([ROWS[0]] * 4, batch_size=b, collate_fn=collate)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    batch = next(iter(loader))
    check = symvram.preflight(accelerator, model, optimizer, batch, output_dir=str(tmp_path), log=lambda *_: None)
    for batch in loader:
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del loss
    cfg = tmp_path / "config.json"
    accelerator.unwrap_model(model).config.to_json_file(cfg)
    same(check.training.scenario, cli_scenario([
        "estimate", str(cfg), "--stack", "torch", "--method", "full", "--dtype", "fp32", "--autocast", "bf16", "--optimizer-impl",
        "forloop",
        "--batch", str(b), "--seq", str(s), "--device", "cpu"]))
    report = json.loads((tmp_path / REPORT).read_text())
    steps = {m["step"]: m["allocated"] for m in report["measurement"]}
    assert abs(steps[2] - report["prediction"]["allocated"]) <= TOLERANCE * report["prediction"]["allocated"]


def test_sft_trainer(tmp_path):
    trl = pytest.importorskip("trl", reason="TRL not installed (pip install 'symvram[trl]')")
    model = tiny(target_modules=["q_proj", "v_proj"])
    args = trl.SFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=b, max_length=s, bf16=True,
                         use_cpu=True, max_steps=2, report_to=[], logging_strategy="no", save_strategy="no",
                         disable_tqdm=True, gradient_checkpointing=False)
    cb = MemoryCheckCallback(log=lambda *_: None)
    from datasets import Dataset

    from tokenizers import Tokenizer, models

    words = models.WordLevel({str(i): i for i in range(ARCH["vocab_size"])}, unk_token="0")
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(words), pad_token="0", eos_token="2")
    trainer = trl.SFTTrainer(model=model, args=args, processing_class=tokenizer, train_dataset=Dataset.from_list(
        [{"input_ids": r["input_ids"]} for r in ROWS]), callbacks=[cb])
    trainer.train()
    (tmp_path / "sft.json").write_text(args.to_json_string())
    model.get_base_model().config.to_json_file(tmp_path / "config.json")
    same(cb.check.training.scenario, cli_scenario([
        "estimate", str(tmp_path / "config.json"), "--from", str(tmp_path / "sft.json"), "--method", "lora",
        "--rank", "8", "--targets", "q_proj,v_proj", "--dtype", "bf16", "--device", "cpu"]))
    assert cb.check.training.scenario.stack == "trl" and cb.check.measured


def test_lightning(tmp_path):
    L = pytest.importorskip("lightning", reason="lightning not installed (pip install 'symvram[lightning]')")
    from symvram.integrations.lightning import MemoryCheckCallback as LightningCheck

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = tiny(dtype=torch.float32, lora=False)

        def training_step(self, batch, _):
            return self.model(**batch).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4, foreach=False)

    cb = LightningCheck(output_dir=str(tmp_path), log=lambda *_: None)
    trainer = L.Trainer(accelerator="cpu", max_steps=2, callbacks=[cb], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path))
    trainer.fit(Module(), torch.utils.data.DataLoader([ROWS[0]] * 4, batch_size=b, collate_fn=collate))
    sc = cb.check.training.scenario
    assert (sc.stack, sc.method, sc.dtype, sc.optimizer_impl, sc.batch, sc.seq) == ("torch", "full", "fp32", "forloop",
                                                                                     b, s)
    report = json.loads((tmp_path / REPORT).read_text())
    steps = {m["step"]: m for m in report["measurement"]}
    assert set(steps) == {1, 2} and set(steps[2]["by_phase"]) == {"forward_backward", "optimizer"}
    # Lightning zeroes the gradients after the forward: step 2's peak is the end of its forward with step 1's
    # gradients alive (without them the ledger's loss backward is 12.5 % lower on this model)
    assert report["prediction"]["moment"] == "forward_loss + grads"
    assert abs(steps[2]["allocated"] - report["prediction"]["allocated"]) <= TOLERANCE * report["prediction"]["allocated"]


def test_check_gates_a_launcher_by_its_exit_status(tmp_path, capsys):
    f = tmp_path / "axolotl.yml"
    f.write_text("base_model: llama-3-8b\nadapter: lora\nlora_r: 16\nmicro_batch_size: 8\nsequence_len: 4096\n"
                 "bf16: true\n")
    assert main(["check", str(f), "--gpu", "h100"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("check: DOES NOT FIT") and "gradient_checkpointing: true" in out
    assert main(["check", str(f), "--gpu", "400GiB"]) == 0
    assert capsys.readouterr().out.startswith("check: FITS")
    assert main(["check", str(f), "--gpu", "h100", "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["exit_status"] == 1
    (tmp_path / "sft.json").write_text(json.dumps({"per_device_train_batch_size": 1, "max_length": 512}))
    assert main(["check", str(tmp_path / "sft.json"), "--model", "llama-3-8b", "--gpu", "400GiB"]) == 0
    assert main(["check", str(tmp_path / "sft.json"), "--gpu", "h100"]) == 2   # no model in the file, none given
    assert main(["check", str(tmp_path / "nope.yml"), "--gpu", "h100"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_integrations_import_nothing_heavy():
    code = ("import sys, symvram.integrations.transformers, symvram.integrations.accelerate, "
            "symvram.integrations.lightning, symvram.readers.live; "
            "print(sorted(m for m in ('torch', 'transformers', 'peft', 'lightning') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_reader_names_what_it_does_not_model(tmp_path):
    """Read, not trained: DoRA, dropout and modules_to_save as PEFT made them; ranks that differ by module, an
    optimizer class symvram has no ledger for and torch_compile named, not dropped; Liger's layer kernels read."""
    model = tiny(target_modules=["q_proj", "k_proj", "v_proj"], use_dora=True, lora_dropout=0.1,
                 modules_to_save=["lm_head"], rank_pattern={"k_proj": 4})
    args = trainer_args(tmp_path, torch_compile=True, use_liger_kernel=True, per_device_train_batch_size=3)
    t = from_training(model, args, torch.optim.RMSprop(model.parameters()), dataset=ROWS)
    sc = t.scenario
    assert (sc.method, sc.dora, sc.lora_dropout, sc.modules_to_save, sc.rank, sc.targets, sc.batch, sc.optimizer) == \
        ("lora", True, 0.1, ("lm_head",), 8, ("q_proj", "k_proj", "v_proj"), 3, "adamw")
    named = " | ".join(t.unmodelled)
    for fragment in ("ranks differ by module (4, 8", "torch.optim.rmsprop.RMSprop: not modelled",
                     "torch_compile = true"):
        assert fragment in named
    assert sc.liger and "liger" not in named.lower()


def test_the_reader_finds_lora_on_the_head_modules():
    """PEFT's lora.Embedding keeps its adapters in lora_embedding_A/B (its lora_A is empty): both head targets read."""
    model = tiny(target_modules=["q_proj", "v_proj", "lm_head", "embed_tokens"])
    sc = from_training(model).scenario
    assert (sc.targets, sc.head_targets) == (("q_proj", "v_proj"), ("embed_tokens", "lm_head"))


@pytest.mark.parametrize("make, kind", [
    (lambda bnb, ps: bnb.optim.PagedAdamW32bit(ps), "paged-adamw"),
    (lambda bnb, ps: bnb.optim.AdamW(ps, optim_bits=32, is_paged=True), "paged-adamw"),   # the Trainer's paged_adamw_32bit
    (lambda bnb, ps: bnb.optim.AdamW(ps, optim_bits=8, is_paged=True), "paged-adamw8bit"),
], ids=["PagedAdamW32bit", "AdamW-32-paged", "AdamW-8-paged"])
def test_bitsandbytes_optimizers_are_read_by_their_bits_and_paging(make, kind):
    """bitsandbytes keeps optim_bits in opt.args and is_paged on the optimizer (not in .defaults)."""
    bnb = pytest.importorskip("bitsandbytes")
    model = tiny(lora=False)
    assert from_training(model, None, make(bnb, model.parameters())).scenario.optimizer == kind


def test_a_deepspeed_config_in_the_arguments_is_read_as_the_cli_reads_its_file(tmp_path):
    ds = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}, "bf16": {"enabled": "auto"},
          "train_micro_batch_size_per_gpu": "auto"}
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    model = tiny(target_modules=["q_proj", "v_proj"])
    args = trainer_args(tmp_path)
    args.deepspeed = str(tmp_path / "ds.json")   # set after construction: building it would start DeepSpeed
    live = from_training(model, args, gpus=4, batch=collate(ROWS[:b]))
    (tmp_path / "args.json").write_text(json.dumps({**json.loads(args.to_json_string()), "deepspeed": args.deepspeed}))
    model.get_base_model().config.to_json_file(tmp_path / "config.json")
    same(live.scenario, cli_scenario([
        "estimate", str(tmp_path / "config.json"), "--from", str(tmp_path / "args.json"), "--method", "lora", "--rank",
        "8", "--targets", "q_proj,v_proj", "--dtype", "bf16", "--seq", str(s), "--gpus", "4", "--device", "cpu"]))
    assert (live.scenario.stack, live.scenario.zero, live.scenario.offload) == ("deepspeed", 2, "optimizer")


class FakeCuda:
    """torch.cuda as a process with one 24 GiB card would see it: 20 GiB free, 2 GiB reserved by this process."""

    def __init__(self):
        self.free, self.total, self.reserved = 20 * 2**30, 24 * 2**30, 2 * 2**30

    def is_available(self):
        return True

    def current_device(self):
        return 0

    def mem_get_info(self, i):
        return self.free, self.total

    def memory_reserved(self, i):
        return self.reserved

    def get_device_name(self, i):
        return "Fake 24GB"


@pytest.mark.parametrize("batch, seq, fits", [(1, 256, True), (8, 8192, False)])
def test_the_device_check_counts_free_plus_reserved_less_headroom(monkeypatch, batch, seq, fits):
    from symvram import Scenario
    from symvram.card_memory import card_memory
    from symvram.integrations.check import MemoryCheck
    from symvram.readers.live import Training

    monkeypatch.setattr(torch, "cuda", FakeCuda())
    sc = Scenario.create("llama-3-8b", method="lora", batch=batch, seq=seq)
    lines = []
    check = MemoryCheck(Training(sc, {}, tool="trainer"), on_exceed="warn", log=lines.append)
    if fits:
        assert check.preflight() is True
    else:
        with pytest.warns(UserWarning, match="over by"):
            assert check.preflight() is False
        assert "TrainingArguments(gradient_checkpointing=True)" in check.triage
    budget = 20 * 2**30 + 2 * 2**30 - 2**30          # free + reserved − the 1 GiB headroom, by hand
    assert check.devices[0].available == budget
    reserved = card_memory(sc).reserved["default"]   # the caching allocator's peak is what the device must hold
    assert check.prediction.reserved == reserved and (reserved <= budget) is fits
    assert lines[0].endswith("fits" if fits else f"over by {(reserved - budget) / 2**30:,.2f} GiB")


def test_a_run_symvram_cannot_read_goes_on_unchecked(tmp_path):
    """GPT-2 has no ledger family: one warning naming why, and the training runs its steps."""
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=1000,
                                                                 n_positions=64))
    lines = []
    trainer = transformers.Trainer(model=model, args=trainer_args(tmp_path, bf16=False), train_dataset=ROWS,
                                   data_collator=collate, callbacks=[MemoryCheckCallback(on_exceed="raise",
                                                                                         log=lines.append)])
    with pytest.warns(UserWarning, match="this run is not checked: .*gpt2"):
        trainer.train()
    assert trainer.state.global_step == 2 and len(lines) == 1 and not (tmp_path / REPORT).exists()


def test_a_run_shorter_than_the_steps_measured_still_leaves_the_tracker_and_reports(tmp_path):
    cb = MemoryCheckCallback(log=lambda *_: None, steps=(1, 2))
    transformers.Trainer(model=tiny(target_modules=["q_proj"]), args=trainer_args(tmp_path, max_steps=1),
                         train_dataset=ROWS, data_collator=collate, callbacks=[cb]).train()
    assert not cb.check.measuring and cb.check._tracker is None
    assert [m["step"] for m in json.loads((tmp_path / REPORT).read_text())["measurement"]] == [1]
