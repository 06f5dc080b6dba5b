"""Training stacks (symvram/data/stacks.toml): the defaults a real run has, resolved in one place for the
estimate and the measurement, and named in every header."""
from __future__ import annotations

import pytest

from symvram import estimate
from symvram.cli import main
from symvram.errors import UserError
from symvram.scenario import Scenario
from symvram.validate.spec import from_scenario, normalize_spec, to_scenario

GIB = 2**30


def test_default_stack_is_interview_for_nominal_presets_and_hf_for_real_models():
    assert Scenario.create("7b", method="lora").stack == "interview"
    assert Scenario.create("llama-3.1-8b", method="lora").stack == "hf"


def test_the_issue_numbers_llama_3_1_8b_lora_r16_seq4096():
    """The issue's new-user run: interview's 43.8 GiB, PEFT's fp32 adapters 57.4, Trainer bf16=True 47.9."""
    peak = {st: estimate("llama-3.1-8b", method="lora", rank=16, seq=4096, stack=st).peak / GIB
            for st in ("interview", "torch", "hf")}
    assert round(peak["interview"], 1) == 43.8 and round(peak["torch"], 1) == 57.4 and round(peak["hf"], 1) == 47.9
    assert estimate("llama-3.1-8b", method="lora", rank=16, seq=4096).peak == \
        estimate("llama-3.1-8b", method="lora", rank=16, seq=4096, stack="hf").peak


@pytest.mark.parametrize("stack, expected", [
    ("interview", dict(adapter_dtype="bf16", autocast="none", optimizer_impl="foreach", state_dtype="fp32")),
    ("torch", dict(adapter_dtype="fp32", autocast="none", optimizer_impl="foreach", state_dtype="fp32")),
    ("hf", dict(adapter_dtype="fp32", autocast="bf16", optimizer_impl="fused", state_dtype="fp32")),
])
def test_each_stack_sets_its_defaults(stack, expected):
    sc = Scenario.create("llama-3-8b", method="lora", stack=stack)
    assert {k: getattr(sc, k) for k in expected} == expected


def test_states_follow_the_parameter_dtype_under_torch_stacks():
    assert Scenario.create("qwen2.5-0.5b", method="full").state_dtype == "bf16"
    assert Scenario.create("qwen2.5-0.5b", method="full", dtype="fp32").state_dtype == "fp32"
    assert Scenario.create("qwen2.5-0.5b", method="full", stack="interview").state_dtype == "fp32"


def test_explicit_flags_win_over_the_stack():
    sc = Scenario.create("llama-3-8b", method="lora", stack="hf", autocast="none", adapter_dtype="bf16",
                         optimizer_impl="foreach")
    assert (sc.autocast, sc.adapter_dtype, sc.optimizer_impl, sc.state_dtype) == ("none", "bf16", "foreach", "bf16")


def test_changing_the_stack_changes_what_it_implied_only():
    sc = Scenario.create("llama-3-8b", method="lora", rank=16)
    torch_sc = sc.with_changes(stack="torch")
    assert torch_sc == Scenario.create("llama-3-8b", method="lora", rank=16, stack="torch")
    kept = Scenario.create("llama-3-8b", method="lora", optimizer_impl="forloop").with_changes(stack="torch")
    assert kept.optimizer_impl == "forloop"


def test_unknown_stack_is_refused():
    with pytest.raises(UserError, match="--stack must be one of interview, torch, hf"):
        Scenario.create("llama-3-8b", stack="megatron")


def test_the_measurement_spec_describes_the_same_run():
    """validate's spec comes from the scenario and back: the same settings, the same estimate."""
    for st in ("torch", "hf"):  # interview's fp32 states on 16-bit weights are no torch AdamW run
        for method in ("full", "lora"):
            sc = Scenario.create("qwen2.5-0.5b", method=method, stack=st, device="cpu")
            back = to_scenario({**from_scenario(sc), "device": "fake"})
            assert back.structure == sc.structure and back.values() == sc.values(), (st, method)


def test_a_spec_names_its_stack_only_when_it_is_not_torch():
    arch = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}
    plain = normalize_spec({"arch": arch})
    assert "stack" not in plain and plain["autocast"] is None and plain["optimizer_impl"] == "foreach"
    hf = normalize_spec({"arch": arch, "stack": "hf"})
    assert hf["stack"] == "hf" and hf["autocast"] == "bf16" and hf["optimizer_impl"] == "fused"
    assert to_scenario({"arch": arch, "stack": "hf"}).stack == "hf"


def test_every_header_names_the_stack(capsys):
    assert main(["estimate", "llama-3-8b", "--method", "lora"]) == 0
    out = capsys.readouterr().out
    assert "stack hf (transformers Trainer): adapters fp32, autocast bf16, adamw (torch fused)" in out
    assert main(["estimate", "7b"]) == 0
    assert "stack interview (the reference answer's arithmetic): adapters bf16, no autocast" in capsys.readouterr().out
    assert main(["estimate", "llama-3-8b", "--method", "lora", "--stack", "torch", "--grad-checkpointing"]) == 0
    assert "checkpointing non-reentrant, loss torch" in capsys.readouterr().out


# fsdp and deepspeed: the sharded stacks (symvram.ledger.sharding)

def test_fsdp_stack_implies_zero3_fp32_storage_and_the_bf16_policy():
    sc = Scenario.create("llama-3-8b", method="lora", stack="fsdp", gpus=8)
    assert (sc.zero, sc.dtype, sc.mp_policy, sc.compute_dtype) == (3, "fp32", "bf16", "bf16")
    assert (sc.adapter_dtype, sc.state_dtype, sc.autocast) == ("fp32", "fp32", "none")   # adapters as the base is stored
    assert not sc.structure.adapter_upcast and sc.structure.fsdp_mixed_precision


def test_fsdp_stack_explicit_flags_win():
    bf16 = Scenario.create("llama-3-8b", method="full", stack="fsdp", dtype="bf16", gpus=4)
    assert (bf16.dtype, bf16.mp_policy, bf16.state_dtype, bf16.zero) == ("bf16", "none", "bf16", 3)  # no policy
    z2 = Scenario.create("llama-3-8b", method="full", stack="fsdp", zero=2, gpus=4)
    assert (z2.zero, z2.mp_policy) == (2, "none")
    with pytest.raises(UserError, match="MixedPrecisionPolicy"):
        Scenario.create("llama-3-8b", method="full", stack="fsdp", dtype="bf16", mp_policy="bf16")
    # another stack with --zero 3 is FSDP2 too, with that stack's own defaults and no policy
    hf = Scenario.create("llama-3-8b", method="full", zero=3, gpus=4)
    assert (hf.stack, hf.dtype, hf.mp_policy, hf.structure.zero_impl) == ("hf", "bf16", "none", "fsdp2")


def test_deepspeed_stack_defaults_and_flags():
    sc = Scenario.create("llama-3-8b", method="full", stack="deepspeed", gpus=8)
    assert (sc.zero, sc.dtype, sc.master, sc.state_dtype, sc.optimizer_impl) == (2, "bf16", "fp32", "fp32", "fused")
    assert sc.structure.zero_impl == "deepspeed"
    assert Scenario.create("llama-3-8b", method="full", stack="deepspeed", zero=3).zero == 3
    assert Scenario.create("llama-3-8b", method="full", stack="deepspeed", dtype="fp32").master == "none"


def test_headers_name_the_sharded_stacks_and_their_assumptions(capsys):
    assert main(["estimate", "tinyllama-1.1b", "--stack", "fsdp", "--gpus", "4", "--method", "full"]) == 0
    out = " ".join(capsys.readouterr().out.split())   # the header may wrap
    assert "stack fsdp (torch FSDP2" in out
    assert "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)" in out and "over 4 GPUs" in out
    assert main(["estimate", "tinyllama-1.1b", "--stack", "deepspeed", "--gpus", "4", "--method", "full"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "stack deepspeed (DeepSpeed ZeRO)" in out and "fp32 master" in out
    assert "DeepSpeed ZeRO-2 over 4 GPUs, bf16 engine" in out and "modelled from source, not measured" in out


def test_validate_refuses_deepspeed_with_the_reason(capsys):
    assert main(["validate", "tinyllama-1.1b", "--stack", "deepspeed", "--gpus", "2"]) == 2
    err = capsys.readouterr().err
    assert "need CUDA" in err and "modelled from its source, not measured" in err


def test_fsdp_stack_spec_round_trip():
    """validate runs the stack the estimate assumes: the spec carries fp32 storage and the policy."""
    sc = Scenario.create("tinyllama-1.1b", method="lora", rank=8, stack="fsdp", gpus=2, device="cpu")
    spec = from_scenario(sc)
    assert spec["dtype"] == "fp32" and spec["mp_policy"] == "bf16" and spec["stack"] == "fsdp"
    assert normalize_spec(spec)["mp_policy"] == "bf16"
