"""--from a LitGPT 0.5.13 finetune YAML (``litgpt finetune lora|full --config FILE``): its setup() keys
(finetune/lora.py:49-82) read into the --stack litgpt scenario, the defaults its own, the quantized base refused."""
from __future__ import annotations

import pytest

from symvram.cli import main
from symvram.evaluate import evaluate
from symvram.readers.read import read_files
from symvram.scenario import Scenario

# config_hub/finetune/llama-3.2-1B/lora.yaml of litgpt 0.5.13, its comments and the keys that change no memory cut
HUB_LORA = """\
checkpoint_dir: checkpoints/meta-llama/Llama-3.2-1B
out_dir: out/finetune/lora-llama-3.2-1B
precision: bf16-true
quantize:
devices: 1
num_nodes: 1
lora_r: 32
lora_alpha: 16
lora_dropout: 0.05
lora_query: true
lora_key: false
lora_value: true
lora_projection: false
lora_mlp: false
lora_head: false
data:
  class_path: litgpt.data.Alpaca2k
  init_args: {mask_prompt: false, prompt_style: alpaca, ignore_index: -100, seed: 42, num_workers: 4}
train:
  save_interval: 200
  log_interval: 1
  global_batch_size: 8
  micro_batch_size: 1
  lr_warmup_steps: 10
  epochs: 2
  max_tokens:
  max_steps:
  max_seq_length: 512
  tie_embeddings:
  max_norm:
  min_lr: 6.0e-05
eval: {interval: 100, max_new_tokens: 100, max_iters: 100, initial_validation: false, final_validation: true}
logger_name: csv
seed: 1337
optimizer:
  class_path: torch.optim.AdamW
  init_args: {lr: 0.0002, weight_decay: 0.0, betas: [0.9, 0.95]}
"""


def _write(tmp_path, text, name="lora.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_config_hubs_lora_file(tmp_path):
    """Read as LitGPT's, every key known; the same estimate as the flags it states."""
    r = read_files([_write(tmp_path, HUB_LORA)])
    assert r.files[0][1] == "litgpt" and r.unread == [] and r.warnings == []
    assert r.model.value == "meta-llama/Llama-3.2-1B"   # litgpt download's checkpoints/<org>/<name>
    kw = r.kwargs()
    assert kw == dict(stack="litgpt", method="lora", rank=32, lora_dropout=0.05, targets=("q_proj", "v_proj"),
                      seq=512, batch=1, gpus=1, dtype="bf16", autocast="none", optimizer="adamw",
                      optimizer_impl="foreach")
    by_hand = Scenario.create("llama-3.2-1b", stack="litgpt", method="lora", rank=32, seq=512, batch=1)
    assert evaluate(Scenario.create("llama-3.2-1b", **kw)).peak == evaluate(by_hand).peak


def test_a_file_without_lora_keys_is_finetune_full(tmp_path):
    text = "checkpoint_dir: checkpoints/meta-llama/Llama-3.2-1B\nprecision: bf16-true\ntrain:\n  micro_batch_size: 4\n" \
           "  max_seq_length: 512\n"
    r = read_files([_write(tmp_path, text, "full.yaml")])
    assert r.settings["method"].value == "full" and "no lora_* key" in r.settings["method"].source
    assert "targets" not in r.settings and r.kwargs()["batch"] == 4


def test_finetune_loras_defaults_where_the_file_is_silent(tmp_path):
    """finetune/lora.py:49-82: r 8, dropout 0.05, q and v, micro_batch_size 1, devices 1; no precision is
    get_default_supported_precision(training=True)'s bf16-mixed (utils.py:363-380): fp32 weights under autocast; no
    max_seq_length is the data's longest sample (a warning)."""
    r = read_files([_write(tmp_path, "checkpoint_dir: checkpoints/meta-llama/Llama-3.2-1B\nlora_alpha: 32\n")])
    kw = r.kwargs()
    assert (kw["method"], kw["rank"], kw["lora_dropout"], kw["targets"], kw["batch"], kw["gpus"]) == \
        ("lora", 8, 0.05, ("q_proj", "v_proj"), 1, 1)
    assert (kw["dtype"], kw["autocast"]) == ("fp32", "bf16") and "bf16-mixed" in r.settings["dtype"].source
    assert len(r.warnings) == 1 and "train.max_seq_length is not set" in r.warnings[0]


@pytest.mark.parametrize("text,setting,value", [
    ("lora_mlp: true\n", "targets", ("q_proj", "v_proj", "gate_proj", "up_proj", "down_proj")),
    ("lora_query: false\nlora_key: true\nlora_projection: true\n", "targets", ("k_proj", "v_proj", "o_proj")),
    ("lora_head: true\n", "targets", ("q_proj", "v_proj", "lm_head")),
    ("precision: 32-true\n", "dtype", "fp32"),
    ("precision: bf16-true\n", "autocast", "none"),
    ("devices: 2\n", "gpus", 2),
    ("optimizer: AdamW\n", "optimizer_impl", "foreach"),
    ("optimizer: {class_path: torch.optim.AdamW, init_args: {fused: true}}\n", "optimizer_impl", "fused"),
    ("optimizer: torch.optim.SGD\n", "optimizer", "sgd"),
    ("train: {micro_batch_size: 3, max_seq_length: 1024}\n", "seq", 1024),
])
def test_litgpt_rows(tmp_path, text, setting, value):
    r = read_files([_write(tmp_path, "checkpoint_dir: checkpoints/meta-llama/Llama-3.2-1B\nlora_r: 8\n" + text)])
    assert r.settings[setting].value == value


def test_an_unknown_key_is_listed_not_read(tmp_path):
    r = read_files([_write(tmp_path, HUB_LORA + "my_own_key: 3\n")])
    assert r.unread == [f"{tmp_path / 'lora.yaml'}:my_own_key"]


@pytest.mark.parametrize("text, fragment", [
    ("quantize: bnb.nf4\n", "quantize: 'bnb.nf4': LitGPT's quantized base"),
    ("precision: bf16-mixed\n", "--stack litgpt with --dtype fp32 (bf16-true is modelled)"),
    ("devices: auto\n", "devices: 'auto' is every GPU of the machine"),
    ("lora_query: false\nlora_value: false\n", "every lora_* switch is off"),
    ("lora_r: eight\n", "lora_r: expected a positive integer"),
])
def test_what_is_not_modelled_is_refused_in_one_line(tmp_path, capsys, text, fragment):
    path = _write(tmp_path, HUB_LORA.replace("precision: bf16-true\n", "").replace("quantize:\n", "")
                  .replace("lora_head: false\n", "").replace("lora_query: true\n", "").replace("lora_value: true\n", "")
                  .replace("lora_r: 32\n", "").replace("devices: 1\n", "") + text)
    rc = main(["estimate", "--from", path])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1 and fragment in err, err
