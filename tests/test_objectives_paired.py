"""--objective orpo | cpo | simpo (TRL 1.16's ORPOTrainer and CPOTrainer): the ledger by hand, bad settings, and the
estimate against the trainers' own compute_loss traced under FakeTensorMode (symvram.validate.paired; needs trl)."""
from __future__ import annotations

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.scenario import Scenario
from symvram.validate.spec import to_scenario

ARCH = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}


def test_orpo_by_hand():
    """Llama-2-7B LoRA, 2 pairs of 1024 tokens with 256-token prompts: no reference; chosen + rejected double every
    saved activation (SFT at batch 4 saves the same); the loss holds the fp32 logits of the 4 rows, the chosen rows'
    shifted copy and log-softmax (2 x 1023 positions each), and its backward three fp32 [4, 1024, V] gradients."""
    kw = dict(method="lora", seq=1024, grad_checkpointing=True)
    orpo = evaluate(Scenario.create("llama-2-7b", objective="orpo", batch=2, prompt=256, **kw))
    sft = evaluate(Scenario.create("llama-2-7b", stack="trl", batch=4, **kw))
    assert orpo.scenario.reference == "none" and orpo.scenario.loss_impl == "torch" and orpo.scenario.stack == "trl"
    assert "ref_weights" not in orpo.terms and "reference_forward" not in orpo.moments
    assert orpo.terms["act_checkpoints"] == sft.terms["act_checkpoints"]
    V, logits = 32000, 4 * 4 * 1024 * 32000
    assert orpo.terms["logits"] == logits + 2 * 4 * 2 * 1023 * V + 8 * (3 * 4 * 1024 + 4 * 1024 + 2 * 1023) + 8
    assert orpo.terms["loss_backward_temp"] == 3 * logits + 8
    assert orpo.terms["act_tokens"] == 8 * (6 * 2 * 1024 + 2 * 2 * 256)


def test_cpo_alpha_zero_drops_the_nll():
    """CPO/SimPO with cpo_alpha = 0 compute no NLL: the loss's moment is accelerate's conversion (the 16-bit and the
    fp32 logits), its backward the kernel's gradient beside the logits it saved."""
    with_nll = evaluate(Scenario.create("llama-2-7b", objective="simpo", method="lora", seq=512))
    without = evaluate(Scenario.create("llama-2-7b", objective="simpo", method="lora", seq=512, cpo_alpha=0))
    assert with_nll.scenario.structure.nll and not without.scenario.structure.nll
    assert without.terms["logits"] < with_nll.terms["logits"]
    assert without.terms["loss_backward_temp"] < with_nll.terms["loss_backward_temp"]


@pytest.mark.parametrize("kw, message", [
    (dict(objective="orpo", precompute_ref=True), "no reference model"),
    (dict(objective="orpo", cpo_alpha=0.5), "--cpo-alpha is a CPOTrainer setting"),
    (dict(cpo_alpha=0.0), "--cpo-alpha is a CPOTrainer setting"),
    (dict(objective="simpo", cpo_alpha="x"), "--cpo-alpha must be a number"),
    (dict(objective="cpo", loss_impl="trl"), "--loss-impl trl contradicts"),
])
def test_bad_settings(kw, message):
    with pytest.raises(UserError, match=message):
        Scenario.create("llama-2-7b", method="lora", **kw)


def test_cli_exit_2(capsys):
    from symvram.cli import main

    assert main(["estimate", "llama-2-7b", "--objective", "orpo", "--precompute-ref"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no reference model" in err[0]
    assert main(["estimate", "llama-2-7b", "--objective", "simpo", "--cpo-alpha", "0", "--seq", "256"]) == 0
    assert "objective simpo" in capsys.readouterr().out


@pytest.mark.parametrize("objective, method, checkpointing, cpo_alpha, autocast", [
    ("orpo", "lora", True, 1.0, "bf16"), ("orpo", "lora", False, 1.0, "bf16"), ("orpo", "full", True, 1.0, "bf16"),
    ("orpo", "full", False, 1.0, "bf16"), ("simpo", "lora", True, 1.0, "bf16"), ("simpo", "lora", True, 0.0, "bf16"),
    ("cpo", "full", False, 0.0, "bf16"), ("cpo", "lora", False, 1.0, "bf16"), ("orpo", "lora", False, 1.0, None),
    ("simpo", "full", False, 0.0, None)])
def test_estimate_is_trls_step(objective, method, checkpointing, cpo_alpha, autocast):
    """The estimate against TRL 1.16's ORPOTrainer / CPOTrainer compute_loss, backward and AdamW step, traced (two
    steps), under mixed precision and in pure bf16 (autocast None: no fp32 copy, the loss on the 16-bit logits):
    LoRA to the byte, full fine-tuning within 0.05 %."""
    pytest.importorskip("trl", reason="TRL not installed (pip install 'symvram[trl]')")
    from symvram.validate.objectives import measure_preference

    spec = {"arch": ARCH, "method": method, "rank": 8, "batch": 2, "seq": 32, "prompt": 8, "objective": objective,
            "stack": "trl", "autocast": autocast, "grad_checkpointing": checkpointing, "cpo_alpha": cpo_alpha}
    estimate, measured = evaluate(to_scenario(spec)).peak, measure_preference(spec)["peak_bytes"]
    if method == "lora":
        assert estimate == measured
    assert abs(estimate - measured) / measured < 0.0005, (estimate, measured)


def _file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_readers_name_the_objective(tmp_path, capsys):
    """axolotl's rl: orpo / simpo (with its cpo_alpha), a TRL CPOConfig (cpo_alpha; loss_type simpo, alphapo: SimPO
    with cpo_alpha 0); an unknown loss type and LLaMA-Factory's pref_loss orpo (its own CustomDPOTrainer) exit 2."""
    from symvram.cli import main
    from symvram.readers.read import read_files

    ax = read_files([_file(tmp_path, "a.yml", "base_model: llama-2-7b\nrl: simpo\ncpo_alpha: 0\nadapter: lora\n")])
    assert ax.settings["objective"].value == "simpo" and ax.settings["cpo_alpha"].value == 0
    assert read_files([_file(tmp_path, "o.yml", "base_model: x\nrl: orpo\n")]).settings["objective"].value == "orpo"
    cpo = read_files([_file(tmp_path, "c.json", '{"output_dir": "o", "max_length": 512, "cpo_alpha": 0.5, '
                                                '"loss_type": "hinge"}')])
    sc = Scenario.create("llama-2-7b", **{"method": "lora", **cpo.kwargs()})
    assert sc.objective == "cpo" and sc.cpo_alpha == 0.5 and sc.seq == 512 and sc.loss_impl == "torch"
    alpha = read_files([_file(tmp_path, "s.json", '{"output_dir": "o", "cpo_alpha": 1.0, "loss_type": "alphapo"}')])
    sc = Scenario.create("llama-2-7b", **{"method": "lora", **alpha.kwargs()})
    assert sc.objective == "simpo" and sc.cpo_alpha == 0 and not sc.structure.nll
    for text, words in (('{"output_dir": "o", "cpo_alpha": 1.0, "loss_type": "simpoo"}', "not a TRL 1.16 loss type"),
                        ("model_name_or_path: m\nstage: dpo\npref_loss: orpo\n", "CustomDPOTrainer"),
                        ("model_name_or_path: m\nstage: kto\n", "CustomKTOTrainer"),
                        ("model_name_or_path: m\nstage: ppo\n", "CustomPPOTrainer")):
        assert main(["estimate", "llama-2-7b", "--from", _file(tmp_path, "t.yaml", text)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
