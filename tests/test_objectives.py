"""--objective dpo (TRL 1.16's DPOTrainer): the ledger by hand, bad settings, and the estimate against TRL's own
_compute_loss traced under FakeTensorMode (symvram.validate.objectives; needs trl, which CI does not install)."""
from __future__ import annotations

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.scenario import Scenario
from symvram.validate.spec import to_scenario

ARCH = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}


def test_dpo_by_hand():
    """Llama-2-7B, full fine-tuning, 2 pairs of 1024 tokens with 256-token prompts: the reference is a second copy
    of the weights and buffers; chosen + rejected double every saved activation (SFT at batch 4 saves the same);
    the per-token outputs are 3 fp32 and one bool per position of the [2b, s - 1] grid; the fused head scores
    2b·(s - p) positions."""
    kw = dict(method="full", seq=1024, grad_checkpointing=True)
    dpo = evaluate(Scenario.create("llama-2-7b", objective="dpo", batch=2, prompt=256, **kw))
    sft = evaluate(Scenario.create("llama-2-7b", stack="trl", batch=4, **kw))
    assert dpo.scenario.stack == "trl" and dpo.scenario.loss_impl == "trl" and dpo.scenario.reference == "copy"
    assert dpo.terms["ref_weights"] == dpo.terms["weights"] + dpo.terms["buffers"] == 6_738_415_616 * 2 + 128 * 2
    assert dpo.terms["act_checkpoints"] == sft.terms["act_checkpoints"]
    assert dpo.terms["dpo_outputs"] == (3 * 4 + 1) * 4 * 1023
    n = 4 * (1024 - 256)
    assert dpo.terms["act_logsoftmax"] == 2 * n * 4096 + 8 * n + 2 * 4 * n + 4 * 1023   # + the positions' mask
    assert dpo.terms["act_tokens"] == 3 * 8 * 4 * 1024   # input ids, attention mask, completion mask
    assert "reference_forward" in dpo.moments


def test_peft_and_precomputed_references():
    """A PEFT policy is its own reference (adapters disabled): no second copy; precomputed log-probs: no reference
    forward either."""
    lora = evaluate(Scenario.create("llama-2-7b", objective="dpo", method="lora", seq=512))
    pre = evaluate(Scenario.create("llama-2-7b", objective="dpo", method="full", seq=512, precompute_ref=True))
    assert lora.scenario.reference == "adapters" and "ref_weights" not in lora.terms and "ref_forward" in lora.terms
    assert pre.scenario.reference == "precomputed"
    assert "ref_weights" not in pre.terms and "ref_forward" not in pre.terms and "reference_forward" not in pre.moments


@pytest.mark.parametrize("kw, message", [
    (dict(objective="grpo"), "--objective"),
    (dict(objective="dpo", loss_impl="torch"), "--loss-impl torch contradicts"),
    (dict(objective="dpo", seq=512, prompt=512), "--prompt"),
    (dict(prompt=8), "use --objective dpo"),
    (dict(precompute_ref=True), "use --objective dpo"),
])
def test_bad_settings(kw, message):
    with pytest.raises(UserError, match=message):
        Scenario.create("llama-2-7b", **kw)


@pytest.mark.parametrize("model, words", [
    ("qwen1.5-moe-a2.7b", "shared_expert"), ("gpt-oss-20b", "router_topk_softmax"), ("deepseek-v3", "router_fp32"),
    ("llama-4-scout", "experts_dense")])
def test_unmodelled_moe_blocks_refused(model, words):
    """Routed experts are modelled (Mixtral's and Qwen3-MoE's blocks); other MoE blocks are refused by name."""
    with pytest.raises(UserError, match=words):
        Scenario.create(model, objective="dpo", method="lora")


def test_moe_grpo_refused():
    with pytest.raises(UserError, match="mixture-of-experts"):
        Scenario.create("mixtral-8x7b", objective="grpo", method="lora", prompt=32, max_completion_length=32,
                        num_generations=2, batch=2)


def test_cli_exit_2(capsys):
    from symvram.cli import main

    assert main(["estimate", "llama-2-7b", "--objective", "dpo", "--seq", "64", "--prompt", "64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--prompt" in err[0]
    assert main(["estimate", "llama-2-7b", "--objective", "dpo", "--method", "lora", "--seq", "256"]) == 0
    assert "objective dpo" in capsys.readouterr().out


@pytest.mark.parametrize("objective, method, checkpointing", [
    ("dpo", "lora", True), ("dpo", "lora", False), ("dpo", "full", True), ("kto", "lora", True), ("kto", "full", False),
    ("reward", "full", True), ("reward", "full", False), ("reward", "lora", True), ("reward", "lora", False)])
def test_estimate_is_trls_step(objective, method, checkpointing):
    """The estimate against TRL 1.16's trainer's _compute_loss, backward and AdamW step, traced (two steps)."""
    pytest.importorskip("trl", reason="TRL not installed (pip install 'symvram[trl]')")
    from symvram.validate.objectives import measure_preference

    spec = {"arch": ARCH, "method": method, "rank": 8, "batch": 2, "seq": 32, "prompt": 0 if objective == "reward" else 8, "objective": objective,
            "stack": "trl", "autocast": "bf16", "grad_checkpointing": checkpointing}
    estimate, measured = evaluate(to_scenario(spec)).peak, measure_preference(spec)["peak_bytes"]
    assert abs(estimate - measured) / measured < 0.0025, (estimate, measured)


@pytest.mark.parametrize("objective", ["dpo", "kto"])
def test_no_prompt_is_trls_step(objective):
    """With no prompt tokens TRL's fused head still scores s − 1 positions a row (labels[:, 1:]), as with a
    one-token prompt: the prompt symbol may be 0, so max(p, 1) does not fold to p."""
    spec = {"arch": ARCH, "method": "lora", "rank": 8, "batch": 2, "seq": 32, "prompt": 0, "objective": objective,
            "stack": "trl", "autocast": "bf16", "grad_checkpointing": True}
    sc = to_scenario(spec)
    assert evaluate(sc).terms == evaluate(to_scenario({**spec, "prompt": 1})).terms   # both score s − 1
    pytest.importorskip("trl", reason="TRL not installed (pip install 'symvram[trl]')")
    from symvram.validate.objectives import measure_preference

    estimate, measured = evaluate(sc).peak, measure_preference(spec)["peak_bytes"]
    assert abs(estimate - measured) / measured < 0.0025, (estimate, measured)


def _file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_readers_name_the_objective(tmp_path):
    """axolotl's rl: dpo (and ipo: DPO with another loss) and a TRL DPOConfig are read as --objective dpo, with
    DPOConfig's precompute_ref_log_probs."""
    from symvram.readers.read import read_files

    ax = read_files([_file(tmp_path, "a.yml", "base_model: llama-2-7b\nrl: ipo\nadapter: lora\nsequence_len: 512\n")])
    assert ax.settings["objective"].value == "dpo" and ax.settings["objective"].source.endswith("a.yml:rl")
    trl = read_files([_file(tmp_path, "d.json", '{"output_dir": "o", "max_length": 512, "loss_type": ["sigmoid"], '
                                                '"precompute_ref_log_probs": true}')])
    assert trl.settings["objective"].value == "dpo" and trl.settings["precompute_ref"].value is True
    sc = Scenario.create("llama-2-7b", **trl.kwargs())
    assert sc.reference == "precomputed" and sc.loss_impl == "trl" and sc.seq == 512
    kto = read_files([_file(tmp_path, "k.json", '{"output_dir": "o", "desirable_weight": 1.0, '
                                                '"precompute_ref_log_probs": false}')])
    assert kto.settings["objective"].value == "kto"


def test_kto_by_hand():
    """KTO: b unpaired completions in one forward (rows = 1), six int64 inputs (the completions' and the KL
    completions' ids and masks), three fp32 outputs per position, two fp32 KL log-probs per example; the LoRA
    reference is the policy without its adapters."""
    kto = evaluate(Scenario.create("llama-2-7b", objective="kto", method="lora", batch=4, seq=512, prompt=100))
    sft = evaluate(Scenario.create("llama-2-7b", stack="trl", method="lora", batch=4, seq=512))
    assert kto.terms["act_checkpoints"] == sft.terms["act_checkpoints"]
    assert kto.terms["act_tokens"] == 6 * 8 * 4 * 512
    assert kto.terms["kto_outputs"] == 3 * 4 * 4 * 511 and kto.terms["kto_kl_logps"] == 2 * 4 * 4
    assert "ref_weights" not in kto.terms and "reference_forward" in kto.moments


@pytest.mark.parametrize("text, words", [
    ('{"output_dir": "o", "loss_type": "sigmod", "precompute_ref_log_probs": false}', "not a TRL 1.16 loss type"),
    ('{"output_dir": "o", "num_generations": 8, "max_completion_length": 256}', "give --prompt"),
    ('{"output_dir": "o", "num_generations": 8, "loss_type": "dapoo"}', "not a TRL 1.16 loss type"),
])
def test_bad_or_unmodelled_trl_configs_exit_2(tmp_path, capsys, text, words):
    from symvram.cli import main

    assert main(["estimate", "llama-2-7b", "--from", _file(tmp_path, "t.json", text)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_reward_by_hand():
    """Reward modelling (TRL 1.16 RewardTrainer): a sequence-classification model, so Llama-2-7B's untied lm_head
    (32000 × 4096) gives way to a one-label score head (4096); chosen and rejected run as 2b rows; no vocabulary
    logits: the head's output is one bf16 score per position beside two int32 masks of the positions; two int64
    inputs; no reference."""
    kw = dict(method="full", seq=1024, grad_checkpointing=True)
    rm = evaluate(Scenario.create("llama-2-7b", objective="reward", batch=2, **kw))
    sft = evaluate(Scenario.create("llama-2-7b", stack="trl", batch=4, **kw))
    assert rm.scenario.reference == "none" and "ref_weights" not in rm.terms and "logits_fp32" not in rm.terms
    assert rm.terms["weights"] == 2 * (6_738_415_616 - 32000 * 4096 + 4096)
    assert rm.terms["act_checkpoints"] == sft.terms["act_checkpoints"]
    R = 2 * 2 * 1024
    assert rm.terms["logits"] == 2 * R + 2 * 4 * R and rm.terms["loss_backward_temp"] == 2 * R
    assert rm.terms["act_tokens"] == 2 * 8 * R
    # the final norm keeps its fp32 input and 1/rms; the score head's input and the normalized tensor go first
    assert rm.terms["act_final_norm"] == 4 * R * 4096 + 4 * R and rm.terms["act_score_input"] == 2 * 2 * R * 4096
    # backward reaches the first layer with every gradient but its own and the embedding's (no early lm_head's)
    layer = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
    assert rm.terms["grads_before_first_layer"] == 2 * (6_738_415_616 - 32000 * 4096 + 4096 - 32000 * 4096 - layer)


def test_lora_reward_trains_the_score_copy():
    """LoRA on a reward model: PEFT's SEQ_CLS task adds the score head to modules_to_save (peft_model.py:1830):
    a trainable bf16 copy of its 896 weights (Qwen2.5-0.5B, tied embeddings: nothing but the score replaces the
    head), whose input the loss keeps."""
    rm = evaluate(Scenario.create("qwen2.5-0.5b", objective="reward", method="lora", batch=2, seq=512))
    assert rm.scenario.structure.modules_to_save == ("score",) and rm.terms["saved_modules"] == 2 * 896
    assert rm.terms["weights"] == 2 * (494_032_768 + 896)
    assert rm.terms["act_score_input"] == 2 * (2 * 2 * 512) * 896


@pytest.mark.parametrize("kw, message", [
    (dict(objective="reward", seq=512, prompt=8), "do not apply"),
    (dict(objective="reward", precompute_ref=True), "do not apply"),
    (dict(objective="reward", method="qlora"), "not modelled"),
])
def test_reward_bad_settings(kw, message):
    with pytest.raises(UserError, match=message):
        Scenario.create("llama-2-7b", **kw)


def test_reward_config_is_read(tmp_path, capsys):
    """A TRL RewardConfig names a reward-model run by its center_rewards_coefficient; LLaMA-Factory's stage: rm (a
    value head on the causal LM, which still computes the logits) is refused with the reason, exit 2, one line."""
    from symvram.cli import main
    from symvram.readers.read import read_files

    rc = read_files([_file(tmp_path, "r.json", '{"output_dir": "o", "max_length": 512, '
                                               '"center_rewards_coefficient": 0.01}')])
    assert rc.settings["objective"].value == "reward"
    sc = Scenario.create("llama-2-7b", **rc.kwargs())
    assert sc.structure.score_head and sc.reference == "none" and sc.seq == 512
    lf = _file(tmp_path, "lf.yaml", "model_name_or_path: meta-llama/Llama-2-7b-hf\nstage: rm\nfinetuning_type: lora\n")
    assert main(["estimate", "llama-2-7b", "--from", lf]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "value head" in err[0]


def test_explain_answers_a_reward_model(capsys):
    """explain's worked answer holds for a reward model, whose QLoRA row is not modelled (the interview comparison
    leaves it out)."""
    from symvram.cli import main

    assert main(["explain", "llama-3.2-1b", "--objective", "reward", "--gpu", "24GiB"]) == 0
    out = capsys.readouterr().out
    assert "The short answer" in out and "QLoRA's" not in out


MOE_ARCHS = {
    "mixtral": {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "num_local_experts": 4,
                "num_experts_per_tok": 2},
    "qwen3_moe": {"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 176, "moe_intermediate_size": 40,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                  "vocab_size": 1000, "num_experts": 6, "num_experts_per_tok": 3},
    # the reference's experts block outweighs the fused head's tile: wide experts, few scored positions (60 of 64)
    "mixtral_wide": {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 512, "num_hidden_layers": 3,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "num_local_experts": 4,
                     "num_experts_per_tok": 2},
}


@pytest.mark.parametrize("family, objective, method, checkpointing", [
    ("mixtral", "dpo", "full", True), ("mixtral", "dpo", "full", False), ("mixtral", "kto", "lora", True),
    ("mixtral", "reward", "full", True),
    ("qwen3_moe", "dpo", "lora", True), ("qwen3_moe", "dpo", "lora", False), ("qwen3_moe", "dpo", "full", True),
    ("qwen3_moe", "kto", "full", False),
    ("mixtral_wide", "dpo", "lora", True), ("mixtral_wide", "dpo", "lora", False), ("mixtral_wide", "kto", "lora", True)])
def test_moe_estimate_is_trls_step(family, objective, method, checkpointing):
    """MoE models under TRL's trainers, traced: the reference's no-grad forward through the routed experts
    (grouped_mm), the policy's load-balancing loss that TRL enables from the config (router_aux_loss_coef 0.001),
    its saved softmaxes and the router-logit gradients its backward leaves for every layer."""
    pytest.importorskip("trl", reason="TRL not installed (pip install 'symvram[trl]')")
    from symvram.validate.objectives import measure_preference

    wide = family.endswith("_wide")
    spec = {"arch": MOE_ARCHS[family], "method": method, "rank": 8, "targets": ["q_proj", "k_proj", "v_proj", "o_proj"],
            "batch": 2, "seq": 64 if wide else 32, "prompt": 0 if objective == "reward" else 60 if wide else 8,
            "objective": objective,
            "stack": "trl", "autocast": "bf16", "grad_checkpointing": checkpointing}
    estimate, measured = evaluate(to_scenario(spec)).peak, measure_preference(spec)["peak_bytes"]
    assert abs(estimate - measured) / measured < 0.0025, (estimate, measured)


AUX_SPEC = {"method": "lora", "rank": 8, "targets": ["q_proj", "k_proj", "v_proj", "o_proj"], "batch": 2, "seq": 32,
            "prompt": 8, "objective": "dpo", "stack": "trl", "autocast": "bf16", "grad_checkpointing": True}


@pytest.mark.parametrize("family, fields, aux", [
    ("mixtral", {"router_aux_loss_coef": 0.0}, False), ("qwen3_moe", {"router_aux_loss_coef": 0}, False),
    ("mixtral", {"output_router_logits": False}, True),   # TRL passes output_router_logits=True itself
    ("qwen3_moe", {"router_aux_loss_coef": 0.01, "output_router_logits": True}, True)])
def test_the_load_balancing_loss_follows_the_configs_coefficient(family, fields, aux):
    """TRL's DPOTrainer computes the MoE load-balancing loss only when the config's router_aux_loss_coef is not 0
    (trl 1.16 dpo_trainer.py:895-905; the class default 0.001 where config.json has none): its saved softmaxes and
    router-logit gradients are terms then, and not otherwise."""
    sc = to_scenario({**AUX_SPEC, "arch": {**MOE_ARCHS[family], **fields}})
    assert {"dpo_router_aux", "dpo_router_aux_grads"} <= set(evaluate(sc).terms) if aux else \
        not any("aux" in k for k in evaluate(sc).terms)


def test_a_coefficient_that_is_not_a_number_is_refused():
    with pytest.raises(UserError, match="router_aux_loss_coef"):
        to_scenario({**AUX_SPEC, "arch": {**MOE_ARCHS["mixtral"], "router_aux_loss_coef": "0"}})


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_no_load_balancing_loss_is_trls_step(family):
    """router_aux_loss_coef = 0: TRL leaves the loss out, and the estimate is the traced step (it counted the
    loss's tensors before: +0.03 % on Mixtral's tiny config, +0.05 % on Qwen3-MoE's)."""
    pytest.importorskip("trl", reason="TRL not installed (pip install 'symvram[trl]')")
    from symvram.validate.objectives import measure_preference

    spec = {**AUX_SPEC, "arch": {**MOE_ARCHS[family], "router_aux_loss_coef": 0.0}}
    estimate, measured = evaluate(to_scenario(spec)).peak, measure_preference(spec)["peak_bytes"]
    assert 0 <= measured - estimate <= 32, (estimate, measured)   # the 0-d losses are not terms


SFT_AUX_SPEC = {"rank": 8, "targets": ["q_proj", "k_proj", "v_proj", "o_proj"], "batch": 2, "seq": 32,
                "autocast": "bf16"}


def _sft_aux_arch(family: str) -> dict:
    """The tiny config of a family whose config has router_aux_loss_coef (default 0.001) and whose modeling file has
    load_balancing_loss_func over its router's F.linear logits (OutputRecorder(TopKRouter, index=0))."""
    from test_families import tiny_config
    from test_hybrids import MOE, NEXT

    return {"qwen3_5_moe_text": MOE, "qwen3_next": NEXT}.get(family) or MOE_ARCHS.get(family) or tiny_config(family)


@pytest.mark.parametrize("family, method, checkpointing", [
    ("mixtral", "lora", True), ("mixtral", "full", False), ("qwen3_moe", "lora", True), ("qwen3_moe", "full", False),
    ("gpt_oss", "lora", True), ("gpt_oss", "full", False), ("qwen2_moe", "lora", True), ("qwen2_moe", "full", False),
    ("qwen3_5_moe_text", "lora", True), ("qwen3_next", "full", False)])
def test_sft_load_balancing_loss_is_trls_step(family, method, checkpointing):
    """TRL's SFTTrainer adds the MoE load-balancing loss from the config's coefficient (trl 1.16
    sft_trainer.py:1195-1211, 1566-1629) and SFTConfig(router_aux_loss_coef=0.0) leaves it out, traced: what the loss
    adds to the peak of TRL's own compute_loss is what its terms add to the estimate's (at the backward, every
    layer's router-logit gradient; at the fused head's forward the trace holds the router logits, as many bytes).
    gpt-oss, Qwen2-MoE, Qwen3.5-MoE and Qwen3-Next too (configuration_gpt_oss.py:70, configuration_qwen2_moe.py:102,
    configuration_qwen3_5_moe.py:113, configuration_qwen3_next.py:119): the estimate counted no loss before."""
    pytest.importorskip("trl", reason="TRL not installed (pip install 'symvram[trl]')")
    from symvram.validate.objectives import measure_preference

    spec = {**SFT_AUX_SPEC, "arch": _sft_aux_arch(family), "method": method, "stack": "trl",
            "grad_checkpointing": checkpointing}
    off = {**spec, "router_aux_loss_coef": 0.0}
    on_, off_ = evaluate(to_scenario(spec)), evaluate(to_scenario(off))
    assert {"sft_router_aux", "sft_router_aux_grads"} <= set(on_.terms) and not any("aux" in k for k in off_.terms)
    measured = measure_preference(spec)["peak_bytes"] - measure_preference(off)["peak_bytes"]
    assert on_.peak - off_.peak == measured > 0, (on_.peak - off_.peak, measured)


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_sft_outside_trl_computes_the_loss_when_asked(family):
    """transformers' forward computes the load-balancing loss only under the config's output_router_logits
    (modeling_mixtral.py:600-632), which LLaMA-Factory's non-zero moe_aux_loss_coef sets (model_utils/moe.py:160-199):
    none by default under the Trainer; given a weight, traced (validate.measure), the loss adds to the peak (the
    loss backward's: every layer's router-logit gradient) what its terms add to the estimate's."""
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    spec = {**SFT_AUX_SPEC, "arch": MOE_ARCHS[family], "method": "lora", "stack": "hf", "grad_checkpointing": True}
    off = to_scenario(spec)
    on_ = to_scenario({**spec, "router_aux_loss_coef": 0.01})
    assert not any("aux" in k for k in evaluate(off).terms)
    traced = from_scenario(on_)
    assert traced["arch"]["output_router_logits"] is True
    measured = measure(traced)["peak_bytes"] - measure(from_scenario(off))["peak_bytes"]
    assert evaluate(on_).peak - evaluate(off).peak == measured > 0, (evaluate(on_).peak - evaluate(off).peak, measured)


def test_moe_reference_forward_by_hand():
    """Mixtral-8x7B DPO with LoRA, 1 pair of 1024 tokens: the reference's last MoE block holds, beside the layer's
    four hidden-sized tensors and the RoPE tables, the router's logits, fp32 top-k weights and int64 indices, the
    sorted ids and permutation, the gathered tokens, the fp32 sorted weights and histc input, and the larger of the
    gated product (4·d_E per pair) and the un-permuting gather (3·h per pair and the inverse permutation)."""
    sc = Scenario.create("mixtral-8x7b", objective="dpo", method="lora", batch=1, seq=1024, prompt=256,
                         grad_checkpointing=False)
    R, S, h, f, E = 2 * 1024, 2 * 2 * 1024, 4096, 14336, 8
    block = 2 * R * E + (4 + 8) * R * 2 + 2 * 8 * S + 2 * S * h + 4 * S + 4 * S + 8 * E + max(8 * S * f, 6 * S * h + 8 * S)
    mlp = block + 4 * 2 * R * h + 2 * 2 * 1024 * 128
    n = 2 * (1024 - 256)
    head = (2 * R * h + 2 * n * 32768 + 7 * 4 * n + (2 * 4 + 2 * 4 + 3 * 1) * n + 2 * n * h + 8 * n + 2 * 1023)
    assert evaluate(sc).terms["ref_forward"] == max(mlp, head)
    assert evaluate(sc).terms["dpo_router_aux"] == 32 * 4 * R * E + 4 * R   # fp32 softmaxes under CUDA autocast
