"""--objective grpo (TRL 1.16's GRPOTrainer with transformers' generation): the ledger by hand, TRL's own checks,
and the estimate against TRL's _compute_loss and transformers' generate traced under FakeTensorMode
(symvram.validate.grpo; needs trl, which CI does not install)."""
from __future__ import annotations

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.scenario import Scenario
from symvram.validate.spec import to_scenario

ARCH = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}


def test_grpo_by_hand():
    """Qwen2.5-7B LoRA, 8 completions per micro-step, 4 steps per generation, 256-token prompts and 1024-token
    completions: generate holds 32 rows' KV cache (28 layers, 4 KV heads of 128, bf16) — the prompts' at the
    prefill, every position but the last at the last decoding step; the buffered batch is 32 rows of int64 ids
    and masks with the old policy's log-probs; beta 0 loads no reference; the fused head scores the 8 x 1024 completion positions."""
    sc = Scenario.create("qwen2.5-7b", objective="grpo", method="lora", batch=8, prompt=256,
                         max_completion_length=1024, steps_per_generation=4)
    bd = evaluate(sc)
    n, per_position = 8 * 4, 2 * 28 * 4 * 128 * 2
    assert sc.seq == 1280 and sc.reference == "none" and "ref_weights" not in bd.terms
    assert bd.terms["grpo_kv_cache"] == n * 256 * per_position
    assert bd.terms["grpo_kv_cache_completion"] == n * (1024 - 1) * per_position
    # ids and masks, advantages, the item count, and the old log-probs (accumulation 1 is not a multiple of 4)
    assert bd.terms["grpo_generation_batch"] == 2 * 8 * n * 1280 + 4 * n + 8 + 4 * n * 1024
    assert bd.terms["act_tokens"] == 8 * 8 * 1280
    V = 152064   # the decoding step's end: logits (bf16) and three fp32 [n, V]; its attention: one layer's values
    assert bd.terms["grpo_decode_step"] == max(n * 4 * 128 * 1278 * 2 + 8 * n * V + 6 * n * 3584 + 2 * n * 32 * 128
                                               + 16 * n * 1279, n * V * 14 + 8 * n * 2559) + 24 * n
    decode = {m.key: m for m in bd.ledger.moments}["generation_decode"]
    assert "grads" not in decode.terms and "act_checkpoints" not in decode.terms and "weights" in decode.terms
    assert {"generation_prefill", "generation_decode", "forward_loss"} <= set(bd.moments)


def test_reference_and_old_log_probs():
    """beta > 0 keeps a reference (a second copy for full fine-tuning, none for LoRA: the adapters are disabled);
    the old policy's log-probs exist when the accumulation steps are not a multiple of steps_per_generation ×
    num_iterations (grpo_trainer.py:2641-2655)."""
    kw = dict(objective="grpo", prompt=64, seq=512, batch=4, num_generations=4)
    full = evaluate(Scenario.create("qwen2.5-0.5b", method="full", beta=0.04, **kw))
    lora = evaluate(Scenario.create("qwen2.5-0.5b", method="lora", beta=0.04, **kw))
    assert full.terms["ref_weights"] == full.terms["weights"] + full.terms["buffers"]
    assert lora.scenario.reference == "adapters" and "ref_weights" not in lora.terms
    old = evaluate(Scenario.create("qwen2.5-0.5b", method="lora", steps_per_generation=2, **kw))
    aligned = evaluate(Scenario.create("qwen2.5-0.5b", method="lora", steps_per_generation=2,
                                       gradient_accumulation_steps=2, **kw))
    assert old.terms["grpo_generation_batch"] - aligned.terms["grpo_generation_batch"] == 4 * 8 * (512 - 64)
    assert lora.terms["grpo_generation_batch"] - evaluate(Scenario.create(
        "qwen2.5-0.5b", method="lora", **kw)).terms["grpo_generation_batch"] == 4 * 4 * (512 - 64)


@pytest.mark.parametrize("kw, words", [
    (dict(num_generations=3, batch=4), "must be divisible by num_generations (3)"),
    (dict(num_generations=1, batch=4), "at least 2 generations"),
    (dict(loss_type="grpoo"), "not a TRL 1.16 GRPO loss type"),
    (dict(loss_type="cispo"), "not modelled"),
    (dict(generation="vllm-colocate"), "vLLM"),
    (dict(generation="tgi"), "--generation"),
    (dict(prompt=0), "give --prompt"),
    (dict(beta=-1), "--beta"),
    (dict(steps_per_generation=3, gradient_accumulation_steps=2), "middle of gradient accumulation"),
    (dict(method="qlora"), "not modelled"),
    (dict(seq=512, max_completion_length=100), "contradicts"),
])
def test_bad_settings(kw, words):
    settings = {"objective": "grpo", "prompt": 64, "batch": 8, **kw}
    if "seq" not in kw and "max_completion_length" not in kw:
        settings["seq"] = 512
    with pytest.raises(UserError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Scenario.create("qwen2.5-0.5b", **settings)


def test_grpo_settings_need_grpo_and_ppo_is_refused(capsys):
    from symvram.cli import main

    for argv in (["--beta", "0.1"], ["--num-generations", "4"], ["--objective", "ppo"],
                 ["--objective", "grpo", "--prompt", "64", "--seq", "512", "--num-generations", "3"]):
        assert main(["estimate", "qwen2.5-0.5b", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
    assert main(["estimate", "qwen2.5-0.5b", "--objective", "grpo", "--prompt", "64", "--max-completion-length",
                 "448", "--batch", "8", "--method", "lora"]) == 0
    assert "binds: generation peaks at" in capsys.readouterr().out


def test_a_smaller_batch_keeps_whole_prompt_groups():
    """diagnose's probes change the batch: the steps per generation follow, so TRL's divisibility still holds."""
    sc = Scenario.create("qwen2.5-0.5b", objective="grpo", method="lora", prompt=64, seq=512, batch=8)
    assert sc.with_changes(batch=1).steps_per_generation == 8 and sc.with_changes(batch=3).steps_per_generation == 8


@pytest.mark.parametrize("method, checkpointing, k, beta, batch, seq, prompt", [
    ("lora", True, 2, 0.0, 2, 40, 8),      # the training step binds: TRL's fused head
    ("full", True, 2, 0.1, 2, 40, 8),      # a reference copy, its log-probs buffered
    ("lora", False, 2, 0.1, 2, 40, 8),     # the PEFT reference (adapters disabled), no checkpointing
    ("lora", True, 4, 0.0, 1, 96, 4),      # generation at its last decoding step, the old log-probs
])
def test_estimate_is_trls_step(method, checkpointing, k, beta, batch, seq, prompt):
    """Each phase's estimate against its trace (steps after the first generation): generation (the larger of the
    prefill and the last decoding step) against transformers' generate, the training step against TRL's
    _compute_loss, backward and AdamW step."""
    pytest.importorskip("trl", reason="TRL not installed (pip install 'symvram[trl]')")
    pytest.importorskip("datasets", reason="TRL's trainers import datasets")
    from symvram.validate.grpo import measure_grpo

    spec = {"arch": ARCH, "method": method, "rank": 8, "batch": batch, "seq": seq, "prompt": prompt,
            "objective": "grpo", "stack": "trl", "autocast": "bf16", "grad_checkpointing": checkpointing,
            "steps": k + 1, "steps_per_generation": k, "num_generations": 2, "beta": beta,
            "gradient_accumulation_steps": 1 if k == 4 else k}
    measured, bd = measure_grpo(spec), evaluate(to_scenario(spec))
    phases = {key: v for key, v in measured["peak_bytes_by_phase"].items() if not key.startswith("step1:")}
    generation = max(v for key, v in phases.items() if key.endswith(":generation"))
    training = max(v for key, v in phases.items() if not key.endswith((":generation", ":scoring")))
    before = ("generation_prefill", "generation_decode")
    estimate_generation = max(bd.moments[key] for key in before)
    estimate_training = max(v for key, v in bd.moments.items() if key not in before)
    assert abs(estimate_generation - generation) / generation < 0.0025, (estimate_generation, generation)
    assert abs(estimate_training - training) / training < 0.0025, (estimate_training, training)
    assert max(v for key, v in phases.items() if key.endswith(":scoring")) <= training   # scoring never binds here
    assert abs(bd.peak - measured["peak_bytes"]) / measured["peak_bytes"] < 0.0025


def test_a_grpo_config_is_read(tmp_path):
    """A TRL GRPOConfig names a GRPO run by its generation keys; its beta, loss type and steps per generation reach
    the scenario (a DPOConfig's beta does not: it changes no memory); use_vllm is refused by the scenario."""
    from symvram.readers.read import read_files

    path = tmp_path / "grpo.json"
    path.write_text('{"output_dir": "o", "num_generations": 4, "max_completion_length": 448, "beta": 0.04, '
                    '"loss_type": "grpo", "steps_per_generation": 2, "per_device_train_batch_size": 2}')
    kw = read_files([str(path)]).kwargs()
    sc = Scenario.create("qwen2.5-0.5b", prompt=64, **kw)
    assert (sc.objective, sc.seq, sc.beta, sc.loss_type, sc.steps_per_generation, sc.batch) == \
        ("grpo", 512, 0.04, "grpo", 2, 2)
    dpo = tmp_path / "dpo.json"
    dpo.write_text('{"output_dir": "o", "beta": 0.1, "precompute_ref_log_probs": false, "loss_type": "sigmoid"}')
    assert "beta" not in read_files([str(dpo)]).kwargs()
    vllm = tmp_path / "vllm.json"
    vllm.write_text('{"output_dir": "o", "num_generations": 2, "use_vllm": true, "per_device_train_batch_size": 2}')
    with pytest.raises(UserError, match="vLLM"):
        Scenario.create("qwen2.5-0.5b", prompt=64, **read_files([str(vllm)]).kwargs())


def test_axolotl_rl_grpo_is_read(tmp_path):
    """axolotl's rl: grpo (AxolotlGRPOTrainer subclasses TRL's) with its trl: section; ppo is still refused."""
    from symvram.cli import main
    from symvram.readers.read import read_files

    path = tmp_path / "a.yml"
    path.write_text("base_model: Qwen/Qwen2.5-0.5B\nrl: grpo\nadapter: lora\nmicro_batch_size: 4\n"
                    "trl:\n  num_generations: 4\n  max_completion_length: 256\n  beta: 0.0\n")
    sc = Scenario.create("qwen2.5-0.5b", prompt=64, **read_files([str(path)]).kwargs())
    assert (sc.objective, sc.seq, sc.num_generations, sc.batch, sc.method) == ("grpo", 320, 4, 4, "lora")
    ppo = tmp_path / "o.yml"
    ppo.write_text("base_model: Qwen/Qwen2.5-0.5B\nrl: ppo\n")
    assert main(["estimate", "qwen2.5-0.5b", "--from", str(ppo)]) == 2
