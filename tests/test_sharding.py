"""Per-GPU memory under ZeRO / FSDP, offload and tensor parallelism, against hand derivations.

The ZeRO paper (Rajbhandari et al. 2020, §5) gives the model states per GPU for Ψ parameters, K
bytes of optimizer state per parameter and N_d data-parallel GPUs:
stage 1: 4Ψ + KΨ/N, stage 2: 2Ψ + (2 + K)Ψ/N, stage 3: (2 + 2 + K)Ψ/N; K = 12 with the fp32 master
(4 + m 4 + v 4), K = 8 for our default recipe (no master). Step counters (0-d fp32 tensors, one per
parameter tensor) stay replicated and are taken out before comparing.
"""
import pytest

from symvram import estimate
from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.present.tables import host_bytes, to_json
from symvram.scenario import Scenario

P7 = 7_000_000_000
H, F, V, L = 4096, 11008, 32000, 32          # the 7b preset's shape


def model_states(e) -> int:
    """Weights, gradients, master and optimizer states on the GPU (step counters left out)."""
    keys = ("weights", "grads", "master", "optimizer_states")
    return sum(e.terms[k] for k in keys if k in e.terms and e.ledger.by_key[k].block != "host")


@pytest.mark.parametrize("n", [1, 2, 8, 64])
def test_zero_paper_formulas_with_master_k12(n):
    k = 12
    stage = {z: model_states(estimate("7b", method="full", master="fp32", zero=z, gpus=n)) for z in (0, 1, 2, 3)}
    assert stage[0] == (2 + 2 + k) * P7
    assert stage[1] == pytest.approx(4 * P7 + k * P7 / n, abs=4)
    assert stage[2] == pytest.approx(2 * P7 + (2 * P7 + k * P7) / n, abs=4)
    assert stage[3] == pytest.approx((2 + 2 + k) * P7 / n, abs=4)


@pytest.mark.parametrize("n", [2, 16])
def test_our_recipe_k8(n):
    z2 = estimate("7b", method="full", zero=2, gpus=n)
    assert model_states(z2) == pytest.approx(2 * P7 + (2 * P7 + 8 * P7) / n, abs=4)
    real = estimate("llama-2-7b", method="full", zero=2, gpus=n)  # step counters are replicated, not sharded
    assert real.terms["optimizer_steps"] == estimate("llama-2-7b", method="full").terms["optimizer_steps"]


@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
@pytest.mark.parametrize("zero", [1, 2])
def test_zero_on_one_gpu_is_no_zero(method, zero):
    plain, sharded = estimate("7b", method=method), estimate("7b", method=method, zero=zero, gpus=1)
    assert sharded.terms == plain.terms and sharded.moments == plain.moments


LAYER_7B = 4 * H * H + 3 * H * F + 2 * H              # q, k, v, o; gate, up, down; two norms
ROOT_7B = 2 * V * H + H                                # embeddings, lm_head, final norm


def test_zero3_on_one_gpu_costs_fsdp2_buffers():
    """FSDP2's buffers by hand for the 7B shape in bf16 (no policy: gathered, reduced and sharded in bf16)."""
    plain, z3 = estimate("7b", method="full"), estimate("7b", method="full", zero=3, gpus=1)
    t = z3.terms
    assert t["gathered_root"] == 2 * ROOT_7B
    assert t["gathered_layer"] == t["allgather_buffer"] == t["layer_grads_unsharded"] == 2 * LAYER_7B
    assert t["reduce_scatter_buffer"] == 2 * LAYER_7B
    assert t["root_grads_unsharded"] == 2 * (V * H + H)                     # lm_head and final norm, unsharded
    # the root's reduce-scatter: its input, then either every root gradient (copy-in; the sharded output, in
    # "grads", not yet) or the embedding's gradient the autograd engine still holds beside the output
    assert t["root_reduce"] == 2 * ROOT_7B + max(2 * ROOT_7B - 2 * ROOT_7B, 2 * V * H)
    # the first layer's all-gather: the root's all-gather output is freed only after the layer's copy-out
    assert t["allgather_root"] == 2 * ROOT_7B and t["first_layer_input"] == 2 * 2048 * H
    assert z3.moments["first_layer_forward"] == sum(t[k] for k in (
        "weights", "optimizer_states", "act_rope", "act_tokens", "first_layer_input")) + 2 * 2 * (ROOT_7B + LAYER_7B)
    # end of forward: the root and the last layer's all-gather output (freed at the root's post-forward)
    assert z3.moments["forward_loss"] == plain.moments["forward_loss"] + 2 * (ROOT_7B + LAYER_7B)
    assert z3.moments["optimizer_step"] == plain.moments["optimizer_step"]   # resharded before the step


def test_fsdp2_layer_ends_by_hand():
    """The end of layer i's backward: i layers' saved tensors below, L−1−i layers' sharded gradients above,
    the reduce-scatter input of the layer above (if any), the layer below prefetched (if any)."""
    n, layers = 4, 32
    t = estimate("7b", method="full", zero=3, gpus=n).terms
    a, g, rs, ag = t["one_layer"], 2 * LAYER_7B // n, 2 * LAYER_7B, 2 * LAYER_7B
    assert t["last_layer_end"] == (layers - 1) * a + ag
    assert t["next_layer_end"] == (layers - 2) * a + g + rs + ag
    assert t["second_layer_end"] == a + (layers - 2) * g + rs + ag
    assert t["first_layer_end"] == (layers - 1) * g + rs
    e = estimate("7b", method="full", zero=3, gpus=n)
    shared = sum(t[k] for k in ("weights", "optimizer_states", "act_rope", "act_tokens", "gathered_root",
                                "gathered_layer", "layer_grads_unsharded", "input_norm_backward_temp", "layer_end_temp",
                                "root_grads_unsharded"))
    for which in ("last", "next", "second", "first"):
        assert e.moments[f"{which}_layer_end"] == shared + t[f"{which}_layer_end"]


def test_fsdp2_policy_gathers_in_bf16_and_reduces_in_fp32():
    """MixedPrecisionPolicy(bf16, fp32) on fp32 storage: shards in fp32, everything unsharded in bf16."""
    n = 4
    e = estimate("7b", stack="fsdp", method="full", gpus=n)
    t = e.terms
    assert (e.scenario.dtype, e.scenario.mp_policy, e.scenario.zero) == ("fp32", "bf16", 3)
    assert t["weights"] == t["grads"] == 4 * P7 // n and t["optimizer_states"] == 8 * P7 // n
    assert t["gathered_layer"] == t["layer_grads_unsharded"] == 2 * LAYER_7B
    assert t["reduce_scatter_buffer"] == 4 * LAYER_7B
    bf16 = estimate("7b", method="full", zero=3, gpus=n).terms          # the modules compute as a bf16 run does
    assert all(t[k] == bf16[k] for k in bf16 if k.startswith("act_"))
    assert t["root_reduce"] == 4 * ROOT_7B + max(2 * ROOT_7B - 4 * ROOT_7B // n, 2 * V * H)


@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
@pytest.mark.parametrize("zero,offload", [(0, "none"), (1, "none"), (2, "none"), (3, "none"),
                                          (2, "optimizer"), (3, "optimizer"), (3, "optimizer+params")])
def test_per_gpu_peak_non_increasing_in_n(method, zero, offload):
    peaks = [estimate("7b", method=method, zero=zero, offload=offload, gpus=n).peak for n in (1, 2, 3, 4, 8, 64)]
    assert peaks == sorted(peaks, reverse=True)


def test_lora_adapters_follow_the_same_rules():
    one, z3 = estimate("7b", method="lora"), estimate("7b", method="lora", zero=3, gpus=4)
    for key in ("weights", "adapters", "grads", "optimizer_states"):
        assert z3.terms[key] == pytest.approx(one.terms[key] / 4, abs=1)
    z1 = estimate("7b", method="lora", zero=1, gpus=4)
    assert z1.terms["adapters"] == one.terms["adapters"] and z1.terms["grads"] == one.terms["grads"]


def test_optimizer_offload_moves_states_to_host():
    n = 8
    e = estimate("7b", method="full", zero=3, gpus=n, offload="optimizer")
    # gradients 2 + m, v 8, and the step on CPU tensors: torch's for-loop AdamW (foreach is picked only on CUDA,
    # torch/optim/optimizer.py:178-185), two fp32 temporaries of the largest parameter (the embedding, V·h), all sharded
    assert host_bytes(e) == pytest.approx(((2 + 8) * P7 + 2 * 4 * V * H) / n, abs=4)
    assert to_json(e)["bytes"]["host"] == host_bytes(e)
    live = {k for m in e.ledger.moments for k in m.terms}
    assert not live & {"grads", "optimizer_states", "optimizer_temp"}
    assert e.terms["weights"] == 2 * P7 // n


def test_param_offload_leaves_only_the_working_set():
    e = estimate("7b", method="full", zero=3, gpus=8, offload="optimizer+params")
    assert e.blocks["base"] == 0
    assert host_bytes(e) == pytest.approx(((2 + 2 + 8) * P7 + 2 * 4 * V * H) / 8, abs=8)   # the for-loop step's two


def test_deepspeed_zero3_offload_gpu_formulas():
    """DeepSpeed's estimate_zero3_model_states_mem_needs: GPU = 4·LL with parameter offload and
    4·LL + 2Ψ/N with optimizer offload, LL = the largest single module's parameters (here the
    embedding, V·h). The sharded part agrees; the gathered part is FSDP2's root + two layers instead."""
    n = 8
    ll = max(V * H, H * F)
    params = estimate("7b", method="full", zero=3, gpus=n, offload="optimizer+params")
    opt = estimate("7b", method="full", zero=3, gpus=n, offload="optimizer")
    assert opt.terms["weights"] == 2 * P7 // n                                    # DeepSpeed's 2Ψ/N
    gathered = sum(params.terms[k] for k in ("gathered_root", "gathered_layer", "allgather_buffer"))
    assert gathered - 4 * ll == 2 * H + 4 * LAYER_7B       # = 2·(final norm + 2 layers) beyond DeepSpeed's 4·LL


def test_tensor_parallel_megatron_split():
    t = 4
    one = estimate("llama-2-7b", method="full")
    tp = estimate("llama-2-7b", method="full", tp=t)
    sp = estimate("llama-2-7b", method="full", tp=t, sequence_parallel=True)
    P = one.derived["P"]
    norms = L * 2 * H + H                                    # RMSNorm weights stay replicated
    assert tp.terms["weights"] == pytest.approx(((P - norms) / t + norms) * 2, abs=1)
    assert tp.terms["act_mlp"] == one.terms["act_mlp"] // t
    assert tp.terms["act_attention"] == one.terms["act_attention"] // t
    assert tp.terms["act_norms"] == one.terms["act_norms"]   # residual stream whole without SP
    assert sp.terms["act_norms"] == one.terms["act_norms"] // t
    # linear inputs: q/k/v and gate/up read the h-wide norm outputs (whole); down_proj's d_ff input is split
    b, s = 1, 2048
    assert tp.terms["act_linear_inputs"] == 2 * b * s * L * (2 * H + F // t)
    assert tp.terms["act_logsoftmax"] == one.terms["act_logsoftmax"] // t   # vocab-parallel cross-entropy


@pytest.mark.parametrize("kw,match", [
    (dict(zero=0, offload="optimizer"), "needs --zero"),
    (dict(zero=2, offload="optimizer+params"), "needs --zero 3"),
    (dict(tp=3), "does not divide heads"),
    (dict(sequence_parallel=True), "needs --tp"),
])
def test_refused_setups(kw, match):
    with pytest.raises(UserError, match=match):
        estimate("7b", method="full", **kw)


def test_cli_reports_per_gpu_peak_and_host_bytes(capsys):
    import json

    from symvram.cli import main

    assert main(["estimate", "70b", "--method", "full", "--gpus", "16", "--zero", "3", "--offload", "optimizer",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    e = estimate("70b", method="full", gpus=16, zero=3, offload="optimizer")
    assert data["bytes"]["peak"] == e.peak and data["bytes"]["host"] == host_bytes(e) > 0
    assert data["inputs"]["gpus"] == 16 and data["inputs"]["zero"] == 3


def test_zero3_on_one_gpu_is_explained_not_refused():
    e = estimate("7b", method="full", zero=3, gpus=1)
    assert any("ZeRO-3 on one GPU" in n for n in to_json(e)["notes"])
    assert to_json(estimate("7b", method="full", zero=3, gpus=2))["notes"] == []


@pytest.mark.parametrize("n", [2, 4, 8, 64])
def test_deepspeed_differences_are_the_documented_ones(n):
    """docs/sharding.md: DeepSpeed's estimate_zero2/zero3_model_states_mem_needs (no offload) against
    our fp32-master recipe (k = 12): ZeRO-2 differs by 2Ψ + 2Ψ/N (full 16-bit grads + fp32 grad
    partition), ZeRO-3's sharded part by 2Ψ/N (fp32 grad partition)."""
    psi = P7
    ds_zero2 = 4 * psi + 16 * psi / n
    ds_zero3_sharded = 18 * psi / n
    z2 = estimate("7b", method="full", master="fp32", zero=2, gpus=n)
    z3 = estimate("7b", method="full", master="fp32", zero=3, gpus=n)
    assert ds_zero2 - model_states(z2) == pytest.approx(2 * psi + 2 * psi / n, abs=8)
    assert ds_zero3_sharded - model_states(z3) == pytest.approx(2 * psi / n, abs=8)


@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
@pytest.mark.parametrize("kw", [{}, {"grad_checkpointing": True}, {"optimizer_impl": "forloop"}])
def test_every_parameter_sized_term_is_known_to_the_sharding(method, kw):
    """A new term proportional to a parameter count must have a parameter-side role (its row says how ZeRO, TP
    and offload treat it): tensor parallelism splits it by the per-rank parameter counts."""
    from symvram.symbols import sym

    counts = {sym(n) for n in ("P", "P_train", "P_lora", "P_quant", "P_keep")}
    for term in estimate("7b", method=method, **kw).ledger.terms:
        if term.expr.free_symbols & counts:
            assert term.info.tp == "parameters", term.key


# DeepSpeed's ZeRO with bf16 (--stack deepspeed), from its source (deepspeed 0.19.8, runtime/zero/): by hand

@pytest.mark.parametrize("zero", [1, 2, 3])
def test_deepspeed_bf16_by_hand(zero):
    n = 8
    e = estimate("7b", stack="deepspeed", method="full", zero=zero, gpus=n)
    t = e.terms
    assert t["weights"] == (2 * P7 // n if zero == 3 else 2 * P7)            # the bf16 model, partitioned at stage 3
    assert t["grads"] == (2 * P7 // n if zero >= 2 else 2 * P7)             # bf16 gradients (grad_accum_dtype = bf16)
    assert t["master"] == 4 * P7 // n and t["optimizer_states"] == 8 * P7 // n  # fp32 master, Adam m and v
    assert t["ds_reduce_bucket"] == 2 * 500_000_000                         # reduce_bucket_size 5e8, allocated whole
    assert "optimizer_temp" not in t                                        # FusedAdam: no step temporaries
    if zero == 3:
        assert t["ds_gathered"] == 2 * 1_000_000_000                         # max_live_parameters 1e9 < P
        assert t["ds_step_grad"] == 6 * min(P7 // n, 1_000_000_000)          # one sub-group: fp32 + bf16 gradients
    else:
        assert t["ds_step_grad"] == 6 * P7 // n                              # the partition: .to(fp32) beside bf16
    step = sum(t[k] for k in e.ledger.moments[-1].terms)
    assert e.moments["optimizer_step"] == step
    assert {"ds_reduce_bucket", "ds_step_grad"} <= set(next(m for m in e.ledger.moments
                                                            if m.key == "optimizer_step").terms)


def test_deepspeed_casts_from_pretrained_fp32_routers():
    """DeepSpeed's bf16 engine casts every parameter (engine.py _configure_distributed_model), so GLM-4.5-Air's 45
    fp32 routers (128 × 4096, _keep_in_fp32_modules_strict) are bf16 there: no fp32 weights, gradients or states
    beyond the bf16 ones, and each MoE layer's router, F.linear(x.float(), W.float()), keeps a 4-byte copy of W."""
    ds = evaluate(Scenario.create("glm-4.5-air", method="full", stack="deepspeed", gpus=8)).terms
    assert not {"weights_fp32", "grads_fp32", "optimizer_states_fp32"} & set(ds)
    plain = evaluate(Scenario.create("glm-4.5-air", method="full", stack="torch", dtype="bf16", state_dtype="bf16")).terms
    assert plain["weights_fp32"] == 2 * 45 * 128 * 4096
    assert ds["act_moe_router_input"] - plain["act_moe_router_input"] == 45 * 4 * 128 * 4096
