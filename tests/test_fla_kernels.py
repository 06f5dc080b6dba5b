"""--kernels fla: a Gated DeltaNet mixer on flash-linear-attention's and causal-conv1d's kernels (ledger.activations.
_fla_deltanet), against a hand derivation from their source: fla-core 0.6.0 fla/ops/gated_delta_rule/chunk.py
ChunkGatedDeltaRuleFunction.forward (:253-335, ctx.save_for_backward :310-326) and causal-conv1d
causal_conv1d_interface.py CausalConv1dFn.forward (:59, github Dao-AILab/causal-conv1d at 0d2252d). The kernels are
Triton/CUDA: nothing here runs them (the torch path's terms are measured in tests/test_hybrids.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.presets import spec_from_config
from symvram.scenario import Scenario

from test_hybrids import NEXT, OLMO, TINY

ROOT = Path(__file__).resolve().parents[1]
B, S = 2, 96   # two rows of 96 tokens: two chunks of C_Δ = 64, the last one partial (fla masks it, no padding)


def _scenario(cfg: dict, kernels: str | None, **kw) -> Scenario:
    return Scenario.create(spec_from_config(cfg, "tiny", "config", "test"), stack="torch", batch=B, seq=S,
                           method="lora", rank=8, targets="all-linear", kernels=kernels, **kw)


def _per_layer(sc: Scenario, key: str) -> int:
    bd = evaluate(sc)
    layers = int(bd.values["linear_layers"])
    assert layers == 3 and bd.terms[key] % layers == 0
    return bd.terms[key] // layers


@pytest.mark.parametrize("cfg", [TINY, NEXT, OLMO], ids=lambda c: c["model_type"])
def test_what_chunk_gated_delta_rule_saves_by_hand(cfg):
    """The tiny config's mixer (n_k = 2 heads of d_k = 12, n_v = 4 of d_v = 20) in bf16, b·s = 192 tokens: what
    ChunkGatedDeltaRuleFunction saves, tensor by tensor (chunk.py:310-326), and what CausalConv1dFn saves."""
    n_k, n_v, d_k, d_v, tokens, bf16, fp32 = 2, 4, 12, 20, B * S, 2, 4
    saved = {
        "q": tokens * n_k * d_k * bf16,          # l2norm_fwd's y = empty_like(q) (l2norm.py:117), n_k heads
        "q_rstd": tokens * n_k * fp32,           # rstd: fp32, one per row (l2norm.py:128)
        "k": tokens * n_k * d_k * bf16,
        "k_rstd": tokens * n_k * fp32,
        "v": tokens * n_v * d_v * bf16,          # input_guard's contiguous copy of the conv output's v columns
        "g": tokens * n_v * fp32,                # chunk_local_cumsum(output_dtype=torch.float) (cumsum.py:459)
        # beta_raw is beta (use_beta_sigmoid_in_kernel False): sigmoid's own output, counted with the gates —
        # except OLMo Hybrid's 2·sigmoid(b) (allow_neg_eigval, the config default), a tensor of its own
        "beta": tokens * n_v * bf16 if cfg is OLMO else 0,
        "A": tokens * n_v * 64 * bf16,           # torch.zeros(B, T, HV, BT, dtype=k.dtype) (chunk_fwd.py:385)
        # initial_state, cu_seqlens, chunk_indices, g_input, A_log, dt_bias: None; h is recomputed (chunk.py:160)
    }
    sc = _scenario(cfg, "fla")
    assert sc.structure.kernels == "fla"
    assert _per_layer(sc, "act_deltanet_rule") == sum(saved.values())
    # CausalConv1dFn saves x (in_proj's output, channel-last: no copy) and the parameters; not its SiLU output
    assert _per_layer(sc, "act_deltanet_conv") == tokens * (2 * n_k * d_k + n_v * d_v) * bf16


def test_the_torch_path_is_unchanged_and_the_gates_and_norm_are_shared():
    """--kernels torch is today's ledger (the measured terms of tests/test_hybrids.py); the gates and the gated
    RMSNorm are torch ops on both paths (transformers takes FusedRMSNormGated only from the kernels hub)."""
    fla, torch = evaluate(_scenario(TINY, "fla")), evaluate(_scenario(TINY, "torch"))
    cpu = evaluate(_scenario(TINY, None, device="cpu"))
    assert torch.terms == cpu.terms
    for key in ("act_deltanet_gates", "act_deltanet_norm"):
        assert fla.terms[key] == torch.terms[key]
    assert fla.terms["act_deltanet_rule"] < torch.terms["act_deltanet_rule"]


def test_auto_takes_fla_on_cuda_and_torch_on_cpu():
    assert _scenario(TINY, None).structure.kernels == "fla"
    assert _scenario(TINY, None, device="cpu").structure.kernels == "torch"
    assert _scenario(TINY, None).with_changes(device="cpu").structure.kernels == "torch"
    llama = Scenario.create("llama-2-7b")
    assert llama.structure.kernels == "torch"   # no Gated DeltaNet: neither path applies


def test_every_stored_deltanet_case_follows_the_torch_path():
    """validate traces on the CPU (FakeTensorMode): every stored case maps to --kernels torch, so keeps its estimate;
    so does a case measured with real CUDA tensors (gpu_session.sh), where the validate extra installs no fla."""
    from symvram.validate.spec import normalize_spec, to_scenario

    cases = [json.loads(line) for line in (ROOT / "benchmarks/cases.jsonl").read_text().splitlines() if line.strip()]
    deltanet = [c for c in cases if c.get("arch", {}).get("model_type") in
                ("qwen3_5_text", "qwen3_5_moe_text", "qwen3_next", "olmo_hybrid")]
    assert deltanet
    for case in deltanet:
        for device in ("fake", "cuda"):
            assert to_scenario(normalize_spec({**case, "device": device})).structure.kernels == "torch", case["name"]


@pytest.mark.parametrize("model, kw, why", [
    ("qwen3.5-27b", dict(device="cpu"), "--device cpu"),
    ("nemotron-h-8b", {}, "Mamba-2 layers"),
    ("llama-2-7b", {}, "no Gated DeltaNet layers"),
])
def test_fla_is_refused_where_it_is_not_modelled(model, kw, why):
    with pytest.raises(UserError, match=why):
        Scenario.create(model, kernels="fla", **kw)


def test_the_cli_flag_and_its_refusal():
    run = [sys.executable, "-m", "symvram", "estimate", "qwen3.5-27b", "--method", "lora"]
    ok = subprocess.run([*run, "--kernels", "fla"], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0 and "modelled from fla 0.6.0 source, not measured (Triton)" in " ".join(ok.stdout.split())
    torch = subprocess.run([*run, "--kernels", "torch"], capture_output=True, text=True, cwd=ROOT)
    assert torch.returncode == 0 and "Gated DeltaNet on transformers' torch path" in " ".join(torch.stdout.split())
    bad = subprocess.run([*run, "--kernels", "fla", "--device", "cpu"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--device cpu" in bad.stderr


def test_a_spec_names_the_path_a_cuda_run_took():
    """A spec's ``kernels`` (default torch, left out of the canonical spec so stored keys stay) is the path the run
    took: gpu_session.sh's fla rows estimate on fla's terms; validate's specs say the scenario's path (its default
    CPU run: torch), and a CUDA run without fla refuses an fla spec (below)."""
    from symvram.validate.spec import from_scenario, normalize_spec, to_scenario

    spec = {"arch": TINY, "method": "lora", "rank": 8, "seq": S, "batch": B}
    assert "kernels" not in normalize_spec(spec) and normalize_spec({**spec, "kernels": "fla"})["kernels"] == "fla"
    assert to_scenario({**spec, "kernels": "fla", "device": "cuda"}).structure.kernels == "fla"
    with pytest.raises(UserError, match="--device cpu"):
        to_scenario({**spec, "kernels": "fla"})   # a fake run is a CPU run
    assert from_scenario(_scenario(TINY, None))["kernels"] == "fla"   # auto on CUDA: validate --device cuda
    assert "kernels" not in from_scenario(_scenario(TINY, None, device="cpu"))


def test_measure_refuses_a_path_the_run_does_not_take():
    """Without flash-linear-attention and causal-conv1d (this machine; FakeTensorMode and the CPU run no Triton) a
    run takes the torch path: a spec saying fla is refused before anything is built."""
    pytest.importorskip("torch")
    import importlib.util

    from symvram.validate.measure import _check_kernels
    from symvram.validate.spec import normalize_spec

    if importlib.util.find_spec("fla") or importlib.util.find_spec("causal_conv1d"):
        pytest.skip("flash-linear-attention or causal-conv1d installed")
    spec = {"arch": TINY, "method": "lora", "rank": 8, "seq": S, "batch": B, "device": "cuda"}
    _check_kernels(normalize_spec(spec))
    with pytest.raises(UserError, match="takes the torch path"):
        _check_kernels(normalize_spec({**spec, "kernels": "fla"}))
    with pytest.raises(UserError, match="no Gated DeltaNet"):
        _check_kernels(normalize_spec({"arch": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                                                "num_hidden_layers": 2, "num_attention_heads": 4,
                                                "vocab_size": 100}, "kernels": "fla"}))
