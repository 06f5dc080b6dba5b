"""--offload-activations: TRL 1.16's activation offloading (``OffloadActivations`` around the training step) over
checkpointed layers. Each layer's checkpointed input goes to pinned host memory; the final norm's and the loss's
saved tensors stay on the device (host copies made anyway); in backward each input comes back for its recompute.
By hand, and against validate.offload (TRL's rules applied to the saved tensors autograd really keeps, traced
under FakeTensorMode)."""
from __future__ import annotations

import pytest

from symvram.analysis.host import host_bytes
from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.scenario import Scenario
from test_modules_to_save import tiny

KW = dict(stack="torch", method="lora", rank=8, batch=2, seq=64, grad_checkpointing=True)


def test_by_hand():
    """Tiny Llama, L = 8, T = 128, h = 64, V = 1000, bf16: the host holds 8 bf16 layer inputs (16,384 B each), the
    final norm's fp32 upcast (32,768; its 1/rms, 512 B, is under TRL's 1024-byte floor), the fp32 log-softmax
    (512,000) and the int64 labels (1,024). The device keeps the embedding output (a leaf under LoRA), and at the
    loss the 4 newest inputs of the forward stash (5 offloads back; the norm's upcast is the 5th)."""
    plain = evaluate(Scenario.create(tiny(num_hidden_layers=8), **KW))
    off = evaluate(Scenario.create(tiny(num_hidden_layers=8), offload_activations=True, **KW))
    T, h, V = 128, 64, 1000
    assert off.terms["act_offloaded"] == 8 * 2 * T * h
    assert host_bytes(off) == 8 * 2 * T * h + 4 * T * h + 4 * T * V + 8 * T == 676_864   # measured below
    assert off.terms["act_checkpoints"] == 2 * T * h + 8 * 64
    assert off.terms["offload_forward_stash"] == 4 * 2 * T * h
    assert plain.moments["loss_backward"] - off.moments["loss_backward"] == 7 * 2 * T * h
    long = evaluate(Scenario.create(tiny(num_hidden_layers=8), offload_activations=True, **{**KW, "seq": 128}))
    assert long.terms["offload_forward_stash"] == 3 * 2 * 256 * h   # T ≥ 256: 1/rms is an offload of its own


def test_refusals_and_reading(tmp_path):
    with pytest.raises(UserError, match="without gradient checkpointing"):
        Scenario.create(tiny(), method="lora", rank=8, offload_activations=True)
    with pytest.raises(UserError, match="reentrant"):
        Scenario.create(tiny(), offload_activations=True, **{**KW, "checkpoint_impl": "reentrant"})
    with pytest.raises(UserError, match="must be True or False"):
        Scenario.create(tiny(), offload_activations="yes", **KW)
    from symvram.readers.read import read_files

    f = tmp_path / "sft.yaml"
    f.write_text("model_name_or_path: llama-3.1-8b\noutput_dir: out\nmax_length: 2048\nuse_peft: true\n"
                 "activation_offloading: true\n")
    assert read_files([str(f)]).settings["offload_activations"].value is True
    ax = tmp_path / "ax.yml"   # axolotl checkpoints every layer itself when it offloads
    ax.write_text("base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nactivation_offloading: true\n")
    got = read_files([str(ax)]).settings
    assert got["offload_activations"].value is True and got["grad_checkpointing"].value is True


def test_diagnose_offers_it(tmp_path, capsys):
    """A TRL run over an A100 40GB by its checkpointed inputs, peaking in the last layer's recompute: at that moment
    the remedy saves every input but the leaf and the one brought back for that recompute (the peak then moves to
    the first layer's recompute, where every adapter gradient exists), and is written as the file's key."""
    from symvram.api import diagnose
    from symvram.cli import main

    kw = dict(stack="trl", method="lora", rank=64, batch=2, seq=32768, dtype="bf16")
    d = diagnose("llama-3.1-8b", "a100-40g", **kw)
    remedy = next(r for r in d.remedies if r.key == "offload_activations")
    T, h, L = 2 * 32768, 4096, 32
    at = "recompute_lora_output"
    assert remedy.before.peak_moment == at and remedy.after.peak_moment == "first_recompute_lora_output"
    assert remedy.before.moments[at] - remedy.after.moments[at] == (L - 2) * 2 * T * h
    f = tmp_path / "sft.yaml"
    f.write_text("model_name_or_path: meta-llama/Llama-3.1-8B\noutput_dir: out\nmax_length: 32768\n"
                 "per_device_train_batch_size: 2\nuse_peft: true\nlora_target_modules: all-linear\n"
                 "model_init_kwargs:\n  dtype: bfloat16\n")
    main(["diagnose", "--from", str(f), "--gpu", "a100-40g"])
    assert f"{f}: activation_offloading: true" in capsys.readouterr().out.replace("\n       ", " ")


MEASURED = [dict(), dict(arch=dict(num_hidden_layers=8)),
            dict(arch=dict(num_hidden_layers=4, hidden_size=256, intermediate_size=1024, vocab_size=200, head_dim=64))]


@pytest.mark.parametrize("settings", MEASURED, ids=[str(i) for i in range(len(MEASURED))])
def test_estimate_against_the_traced_offloading(settings):
    """The host bytes exactly; the device peak to the loss scalar where the loss backward peaks, and where the
    first layer's backward does (a small vocabulary, a wide layer) short by what the ledger is short there without
    offloading (two inputs brought back, the layer above's still in the backward stash, are exact)."""
    pytest.importorskip("peft")
    kw = {**KW, **settings}
    arch = kw.pop("arch", {})
    sc = Scenario.create(tiny(**arch), device="cpu", offload_activations=True, **kw)
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    measured = measure({**from_scenario(sc), "steps": 2})
    est = evaluate(sc)
    assert measured["host_peak_bytes"] == host_bytes(est)
    gap = 0
    if est.peak_moment != "loss_backward":
        plain = Scenario.create(tiny(**arch), device="cpu", **kw)
        gap = measure({**from_scenario(plain), "steps": 2})["peak_bytes"] - evaluate(plain).peak
    assert abs(measured["peak_bytes"] - est.peak - gap) <= 8


@pytest.mark.parametrize("stack, method", [("hf", "lora"), ("torch", "full")])
def test_host_bytes_other_stacks(stack, method):
    """Autocast and full fine-tuning (the trainable norm weight's input and the embedding's ids copied too)."""
    pytest.importorskip("peft")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    sc = Scenario.create(tiny(), device="cpu", offload_activations=True, **{**KW, "stack": stack, "method": method})
    assert measure({**from_scenario(sc), "steps": 2})["host_peak_bytes"] == host_bytes(evaluate(sc))


def test_checkpointing_off_turns_offloading_off():
    """explain compares with and without checkpointing: offloading goes with it."""
    sc = Scenario.create(tiny(), offload_activations=True, **KW)
    assert not sc.with_changes(grad_checkpointing=False).offload_activations
