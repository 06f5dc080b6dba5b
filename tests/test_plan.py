"""`plan` reproduces the reference answer's 70B paragraph, and its answers are the true minima.

The reference (shared/reference, 70B follow-up): full fine-tuning is 70 × 12 = 840 GB, more than eight
80 GB cards (640 GB) hold, so ZeRO-3 sharding plus offload; LoRA is a 140 GB base, two 80 GB cards
"barely", four in practice; QLoRA is a 35 GB base and runs on one 80 GB card.
"""
import json
import math

import pytest

from symvram import estimate
from symvram.presets import load_card
from symvram.analysis.plan import plan
from symvram.errors import UserError
from symvram.scenario import Scenario

GIB = 2**30
A100 = load_card("a100-80g")
MIB = 2**20
# usable memory of gpus.toml less the device block of a multi-GPU job: two threads' cuBLAS + cuBLASLt workspaces
# (compute capability 8.0: 8.125 + 1 MiB) and one NCCL communicator's 16 channels × 4 MiB (no headroom by default)
BUDGET = round(78.6 * GIB) - 2 * (8519680 + MIB) - 16 * 4 * MIB
STEPS_70B = 4 * (9 * 80 + 3)               # AdamW's fp32 step counters, one per parameter tensor


@pytest.fixture(scope="module")
def ckpt():
    return plan(Scenario.create("70b", grad_checkpointing=True), A100)


@pytest.fixture(scope="module")
def plain():
    return plan(Scenario.create("70b"), A100, methods=("lora",), strategies=("zero3",))


def row(result, method, strategy):
    return next(r for r in result.rows if r.method == method and r.strategy.key == strategy)


def test_budget(ckpt):
    assert ckpt.budget == BUDGET


def test_full_70b_needs_zero3_across_more_than_eight_cards(ckpt):
    assert 70e9 * 12 == 840e9 > 8 * 80e9
    for strategy in ("ddp", "zero1", "zero2"):
        assert not row(ckpt, "full", strategy).fits          # unsharded weights + grads exceed one card
    z3 = row(ckpt, "full", "zero3")
    # parameter side alone: 12 B/param over N cards (step counters replicated)
    hand = next(n for n in range(1, 65) if math.ceil(840e9 / n) + STEPS_70B <= BUDGET)
    assert z3.params_gpus == hand == 10 > 8                    # 840e9 / 10 = 84.0e9 ≤ 84.3e9
    assert z3.gpus >= hand
    offload = row(ckpt, "full", "zero3_offload")
    assert offload.fits and offload.gpus < z3.gpus and offload.host_total > 0


def test_lora_70b_two_cards_barely_more_with_activations(ckpt, plain):
    assert estimate("70b", method="lora").terms["weights"] == 140e9
    z3 = row(ckpt, "lora", "zero3")
    assert z3.params_gpus == 2                                # 140 GB / 2 = 70 GB per card
    assert 140e9 > BUDGET >= 140e9 / 2
    assert z3.gpus == 2 and BUDGET - z3.at.peak < 0.05 * BUDGET   # barely, even with checkpointing
    assert row(plain, "lora", "zero3").gpus > 2              # activations of a plain run need more cards


def test_qlora_70b_one_card(ckpt):
    base = estimate("70b", method="qlora").blocks["base"]
    assert 35e9 < base < 35e9 * 1.1
    ddp = row(ckpt, "qlora", "ddp")
    assert ddp.gpus == 1 and ddp.at.peak <= BUDGET
    assert ckpt.best("qlora").gpus == 1


@pytest.mark.parametrize("method,strategy", [("full", "zero3"), ("lora", "zero3"), ("full", "zero3_offload")])
def test_answers_are_minimal(ckpt, method, strategy):
    r = row(ckpt, method, strategy)
    kw = dict(method=method, zero=3, offload=r.strategy.offload, grad_checkpointing=True)
    assert estimate("70b", gpus=r.gpus, **kw).peak == r.at.peak <= BUDGET
    if r.gpus > 1:
        assert estimate("70b", gpus=r.gpus - 1, **kw).peak > BUDGET


def test_tensor_parallel_row_uses_a_valid_degree(ckpt):
    r = row(ckpt, "full", "tp")
    assert r.tp in (2, 4, 8) and 64 % r.tp == 0 and 8 % r.tp == 0
    n = r.gpus // r.tp
    e = estimate("70b", method="full", tp=r.tp, sequence_parallel=True, zero=1, gpus=n, grad_checkpointing=True)
    assert e.peak == r.at.peak <= BUDGET


def test_cli_json(capsys):
    from symvram.cli import main

    assert main(["plan", "70b", "--gpu", "a100-80g", "--method", "qlora", "--grad-checkpointing",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ddp = next(r for r in data["rows"] if r["strategy"] == "ddp")
    assert ddp["gpus"] == 1 and data["best"]["qlora"] == "ddp"
    assert ddp["per_gpu_peak_bytes"] == estimate("70b", method="qlora", grad_checkpointing=True).peak


def test_bad_max_gpus():
    with pytest.raises(UserError, match="--max-gpus"):
        plan(Scenario.create("7b"), A100, max_gpus=0)


def test_summary_points_at_activations_when_they_cost_cards(plain):
    from symvram.present.reports import plan_summary as summary

    z3 = row(plain, "lora", "zero3")
    assert z3.params_gpus == 2 < z3.gpus                       # the parameters alone fit on two
    text = summary(plain, "lora", "GiB")
    assert "--grad-checkpointing" in text and "2 for the parameters alone" in text


def test_cli_refuses_the_settings_it_searches(capsys):
    from symvram.cli import main

    assert main(["plan", "7b", "--gpu", "a100-80g", "--zero", "3"]) == 2
    assert "--zero" in capsys.readouterr().err


def test_plan_ranks_the_fitting_setups_by_predicted_tokens_per_second(capsys):
    from symvram.cli import main

    assert main(["plan", "70b", "--gpu", "a100-80g", "--grad-checkpointing", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    timed = sorted((r for r in data["rows"] if r["speed_rank"]), key=lambda r: r["speed_rank"])
    assert timed and all(r["fits"] for r in timed)
    speeds = [r["tokens_per_second_per_gpu"] for r in timed]
    assert speeds == sorted(speeds, reverse=True)
    for r in timed:   # tokens/s in all: every data-parallel rank's micro-batch per step
        assert r["tokens_per_second"] == pytest.approx(r["tokens_per_second_per_gpu"] * r["gpus"])
    assert "fastest per GPU" not in data["fastest_why"] and data["fastest_why"].startswith(timed[0]["method"])
    assert data["time_assumptions"]


def test_plan_on_a_card_without_figures_keeps_strategy_order(capsys):
    from symvram.cli import main

    assert main(["plan", "7b", "--gpu", "t4", "--method", "qlora"]) == 0
    assert "no step times" in capsys.readouterr().out


def test_tensor_parallelism_needs_nvlink():
    """data/gpus.toml gives every card its interconnect (a link of data/interconnects.toml, whose kind is nvlink,
    pcie or infinity-fabric); TP is not planned on PCIe-only cards (RTX 4090)."""
    import tomllib
    from importlib import resources

    from symvram.analysis.plan import interconnect

    cards = tomllib.loads(resources.files("symvram.data").joinpath("gpus.toml").read_text(encoding="utf-8"))
    assert all(interconnect(load_card(k)) in ("nvlink", "pcie", "infinity-fabric") for k in cards)
    assert interconnect(load_card("rtx-4090")) == "pcie" and interconnect(load_card("a100-80g")) == "nvlink"
    # --interconnect overrides the card's link, for TP too
    assert interconnect(load_card("a100-80g"), "pcie4") == "pcie"
    r = plan(Scenario.create("70b", grad_checkpointing=True), load_card("rtx-4090"), methods=("lora",))
    assert "tp" not in {row.strategy.key for row in r.rows}
    assert "tp" in {row.strategy.key for row in plan(Scenario.create("7b"), A100, methods=("lora",)).rows}


def test_tp_parameter_count_is_the_minimum_over_degrees():
    """70B LoRA, parameter side per rank at t = 2: (P − R)/2 + R bf16 weights (R: the replicated norms) plus
    the adapters' triple halved — below the 77.6 GiB budget, so 2 cards hold the parameters alone."""
    at2 = estimate("70b", method="lora", tp=2, sequence_parallel=True, zero=1)
    assert at2.blocks["base"] + at2.blocks["trainable"] <= BUDGET
    norms = 80 * 2 * 8192 + 8192
    assert at2.blocks["base"] == pytest.approx(((70e9 - norms) / 2 + norms) * 2, rel=1e-6)
    r = plan(Scenario.create("70b"), A100, methods=("lora",), strategies=("tp",))
    assert row(r, "lora", "tp").params_gpus == 2 < row(r, "lora", "tp").gpus


def test_offload_host_memory_holds_the_for_loop_step_not_the_foreach_buffer():
    """Offloaded (FSDP2's CPU offload), torch's AdamW steps CPU tensors, and torch picks foreach only when every
    parameter is on a CUDA-like device (optimizer.py:178-185): the for-loop, whose two temporaries are the largest
    parameter's (the 32000 × 8192 embedding, fp32 states), sharded. The host holds 70e9 · (2 grad + 8 states)
    bytes plus those 2 · 32000 · 8192 · 4 B and the step counters, not the 4 B/param foreach buffer (about 654 GiB,
    not 912)."""
    r = plan(Scenario.create("70b"), A100, methods=("full",), strategies=("zero3_offload",))
    host = r.rows[0].host_total
    n = r.rows[0].at.scenario.gpus
    assert 0 <= host - 70e9 * (2 + 8) - 2 * 32000 * 8192 * 4 <= n * (4 * STEPS_70B + 8)   # + counters, rounding


def test_deepspeed_offload_host_memory_has_no_torch_step():
    """DeepSpeed's CPU Adam (cpu_adam_impl.cpp Step_1) updates in place: no optimizer_temp on the host."""
    from symvram.api import estimate

    bd = estimate("7b", method="full", gpus=4, zero=3, offload="optimizer", stack="deepspeed")
    assert "optimizer_temp" not in {t.key for t in bd.ledger.block_terms("host")}


def test_plan_with_an_allocator_replays_each_rank_on_the_card():
    """With --allocator a count fits only once one rank's schedule replays on the card: by a scan over N, the
    fewest N whose tensors fit the budget and whose replay fits (70B LoRA under ZeRO-3 on A100s: 77.6 GiB of
    tensors per GPU at 8 fit the budget, but the allocator's segments do not; 9 do)."""
    from symvram.analysis.plan import _on, plan
    from symvram.card_memory import fits_on_card
    from symvram.evaluate import evaluate
    from symvram.presets import load_card
    from symvram.scenario import Scenario

    card = load_card("a100-80g")
    sc = Scenario.create("70b")
    plain = plan(sc, card, methods=("lora",), strategies=("zero3",), step_times=False).rows[0]
    replayed = plan(sc, card, methods=("lora",), strategies=("zero3",), step_times=False, allocator="default")
    row = replayed.rows[0]
    base = row.at.scenario
    scan = next(n for n in range(1, 65) if evaluate(_on(base, n)).peak <= replayed.budget
                and fits_on_card(_on(base, n), card, "default"))
    assert (plain.gpus, row.gpus, scan) == (8, 9, 9)
