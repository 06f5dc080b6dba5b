"""--liger: Liger's layer kernels as apply_liger_kernel_to_<family> patches them (liger-kernel 0.8.5). Its RMSNorm
saves the input as it comes and the fp32 1/rms (ops/rms_norm.py:674-676), its SwiGLU / GeGLU the gate and up
outputs (ops/swiglu.py:272, ops/geglu.py:138); RoPE saves only the shared cos and sin (ops/rope.py:289), which the
step holds anyway. Triton kernels: modelled, not measured — these tests derive the terms by hand."""
from __future__ import annotations

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.scenario import Scenario


def test_by_hand():
    """Llama-3.1-8B, LoRA (all-linear), bf16, batch 1 × 4096 tokens: per layer the two norms keep a bf16 input
    instead of an fp32 copy (2 B less per element) and the MLP two d_ff-wide tensors instead of three."""
    kw = dict(method="lora", seq=4096, stack="torch")
    torch_, liger = (evaluate(Scenario.create("llama-3.1-8b", liger=on, **kw)) for on in (False, True))
    T, h, f, L = 4096, 4096, 14336, 32
    assert torch_.terms["act_norms"] - liger.terms["act_norms"] == L * 2 * 2 * T * h   # per layer, before the
    # first layer's correction: its input norm saves nothing under LoRA (its input needs no gradient)
    assert liger.terms["act_first_layer"] - torch_.terms["act_first_layer"] == 2 * T * h
    assert torch_.terms["act_mlp"] - liger.terms["act_mlp"] == L * 2 * T * f
    assert liger.terms["act_final_norm"] == 2 * T * h + 4 * T
    full = evaluate(Scenario.create("llama-3.1-8b", method="full", seq=4096, liger=True, stack="torch"))
    assert "act_norm_weight_input" not in full.terms   # Liger recomputes the normalized tensor for dW


def test_refusals_and_reading(tmp_path):
    with pytest.raises(UserError, match="not modelled"):
        Scenario.create("mixtral-8x7b", method="lora", liger=True)
    from symvram.readers.read import read_files
    from symvram.validate.spec import from_scenario

    with pytest.raises(UserError, match="modelled, not measured"):
        from_scenario(Scenario.create("llama-3.1-8b", method="lora", liger=True))
    f = tmp_path / "args.json"
    f.write_text('{"model_name_or_path": "llama-3.1-8b", "output_dir": "out", "use_liger_kernel": true}')
    got = read_files([str(f)]).settings
    assert got["liger"].value is True and got["loss_impl"].value == "liger"
