"""OOM triage: the side, the probe, the remedies' order and savings, each against an independent
re-estimate written out here (the cumulative settings spelled by hand), and the measured overhead."""
import json

import pytest

from symvram import estimate
from symvram.analysis.diagnose import diagnose
from symvram.presets import load_card
from symvram.errors import UserError
from symvram.scenario import Scenario

MIB = 1 << 20
GIB = 2**30
JOB = dict(method="lora", batch=4, seq=4096, stack="interview")  # the reference's "24 GB card, OOM" job (its recipe)


@pytest.fixture(scope="module")
def lora24():
    return diagnose(Scenario.create("llama-3-8b", **JOB), 24 * GIB, p95_seq=1800)


def test_activation_side_and_probe(lora24):
    e = estimate("llama-3-8b", **JOB)
    assert lora24.side == "activation"
    # 24 GiB given in bytes (no context to take off) − two threads' cuBLAS (32 MiB) and cuBLASLt (1 MiB)
    # workspaces, which the caching allocator holds
    assert lora24.budget == 24 * GIB - 2 * (32 + 1) * MIB
    assert lora24.parameter_bytes == e.blocks["base"] + e.blocks["trainable"] < lora24.budget < e.peak
    assert lora24.probe.peak == estimate("llama-3-8b", stack="interview", method="lora", batch=1, seq=512).peak


def test_remedies_in_the_reference_order_with_their_savings(lora24):
    steps = [
        ("seq_p95", dict(method="lora", batch=4, seq=1800)),
        ("chunked_loss", dict(method="lora", batch=4, seq=1800, loss_impl="liger")),   # Liger FLCE, free
        ("checkpointing", dict(method="lora", batch=4, seq=1800, loss_impl="liger", grad_checkpointing=True)),
    ]
    assert [r.key for r in lora24.remedies] == [k for k, _ in steps]   # stops at the first that fits
    previous = estimate("llama-3-8b", **JOB).peak
    for remedy, (key, kw) in zip(lora24.remedies, steps):
        after = estimate("llama-3-8b", stack="interview", **kw).peak
        assert remedy.after.peak == after and remedy.saving == previous - after
        previous = after
    assert lora24.remedies[-1].after.peak <= lora24.budget < lora24.remedies[-2].after.peak
    assert lora24.cards is None


def test_without_p95_the_sequence_step_is_explained_not_guessed():
    d = diagnose(Scenario.create("llama-3-8b", **JOB), 24 * GIB)
    assert d.skipped and "--p95-seq" in d.skipped[0][1]
    assert [r.key for r in d.remedies[:2]] == ["chunked_loss", "checkpointing"]
    assert d.remedies[1].after.peak == estimate("llama-3-8b", stack="interview", method="lora", batch=4, seq=4096,
                                                loss_impl="liger", grad_checkpointing=True).peak


# ---------------------------------------------------------------- the five causes (issue 13)

def test_full_fine_tuning_at_the_optimizer_step():
    """llama-3.1-8b, full, bf16 AdamW states, checkpointing, on 72 GiB: the peak is the optimizer step, where the
    activations are freed; foreach AdamW's sqrt(v) buffer (one state: P · 2 B) is what does not fit, and fused
    AdamW — free — removes it. Parameter side by hand: P · (2 weight + 2 grad + 2 · 2 states) = 8 B/param."""
    sc = Scenario.create("llama-3.1-8b", stack="interview", method="full", state_dtype="bf16", grad_checkpointing=True)
    d = diagnose(sc, load_card("72GiB"))
    P = estimate("llama-3.1-8b", stack="interview").derived["P"]
    assert d.cause == "optimizer" and d.moment == "optimizer_step"
    assert sum(d.parts["optimizer"].values()) == 2 * P
    assert 8 * P <= d.parameter_bytes < 8 * P + 2**20 <= d.budget           # + AdamW's fp32 step counters
    assert set(d.parts["activation"]) <= {"act_rope", "act_tokens"}          # freed: rotary cache and ids only
    first = d.proposals[0]
    assert first.key == "fused_adamw" and first.modelled and first.after.peak <= d.budget
    assert first.after.peak == estimate("llama-3.1-8b", stack="interview", method="full", state_dtype="bf16", grad_checkpointing=True,
                                        optimizer_impl="fused").peak
    assert len(d.proposals) == 1                                              # it stops at the first that fits


def test_llama3_qlora_long_sequence_the_loss_dominates():
    """Llama-3 QLoRA, batch 4 × seq 4096, checkpointing, RTX 4090: at the start of the loss backward the fp32
    log-softmax output and the two fp32 gradients of the loss are 3 · 4 B · T · V = 3 × 7.8 GiB; the first remedy
    is a chunked cross-entropy, free."""
    sc = Scenario.create("llama-3-8b", stack="interview", method="qlora", batch=4, seq=4096, grad_checkpointing=True)
    d = diagnose(sc, load_card("rtx-4090"))
    T, V = 4 * 4096, 128256
    assert d.cause == "loss" and d.moment == "loss_backward"
    assert sum(d.parts["loss"].values()) == 3 * 4 * T * V
    chunked = estimate("llama-3-8b", stack="interview", method="qlora", batch=4, seq=4096, grad_checkpointing=True,
                       loss_impl="liger")  # Liger FLCE (modelled)
    assert d.proposals[0].key == "chunked_loss" and d.proposals[0].saving == d.estimate.peak - chunked.peak
    if not d.proposals[0].modelled:       # until Scenario has loss_impl the later steps are estimated without it
        assert "loss_impl" not in Scenario.__dataclass_fields__
    assert d.cards is None or d.cards.strategy.key != "tp"                   # RTX 4090: PCIe, no TP


def test_lora_where_the_activations_dominate():
    """llama-3-8b LoRA at batch 4 × 4096 on 24 GiB: the saved activations (the MLP's three d_ff-wide tensors alone
    are 3 · 2 B · T · d_ff · L = 42 GiB) dominate; with the data's P95 the first remedy is the shorter sequence."""
    d = diagnose(Scenario.create("llama-3-8b", **JOB), 24 * GIB, p95_seq=1800)
    assert d.cause == "activation"
    assert d.parts["activation"]["act_mlp"] == 3 * 2 * (4 * 4096) * 14336 * 32
    assert d.proposals[0].key == "seq_p95"
    d = diagnose(Scenario.create("llama-3-8b", **JOB), load_card("rtx-4090"))
    assert d.cause == "activation" and [r.key for r in d.remedies[:2]] == ["chunked_loss", "checkpointing"]
    assert d.cards is None or d.cards.strategy.key != "tp"


def test_a_setting_that_fits_gets_no_remedy():
    d = diagnose(Scenario.create("7b", method="lora"), load_card("a100-80g"))
    assert d.cause == "fits" and d.proposals == () and d.cards is None
    # the A100's usable 78.6 GiB less its two threads' workspaces (compute capability 8.0: 8.125 + 1 MiB)
    assert d.estimate.peak <= d.budget == round(78.6 * GIB) - 2 * (8.125 + 1) * MIB
    assert d.memory.fits


def test_parameter_side_no_activation_remedy_can_fix():
    """70B full: 70e9 · (2 + 2 + 8) = 840 GB of parameter side on a 77.6 GiB budget. No batch, sequence, loss or
    optimizer-temporary remedy is offered until the parameter side fits; the first is the optimizer's precision."""
    d = diagnose(Scenario.create("70b", method="full"), load_card("a100-80g"))
    assert d.cause == "parameter" and d.parameter_bytes == 840e9 > d.budget
    assert d.proposals[0].key == "precision"
    for r in d.proposals:
        if r.before.blocks["base"] + r.before.blocks["trainable"] > d.budget:
            assert r.tier in ("precision", "method"), r.key
    assert "checkpointing" not in [r.key for r in d.proposals][:2]
    assert d.cards is not None and d.cards.gpus > 1 and d.changes_method    # keeping full: more cards


def test_parameter_side_of_70b_full():
    d = diagnose(Scenario.create("70b", method="full"), load_card("a100-80g"))
    assert d.side == "parameter"
    # 12 B/param: the reference answer's 840 GB
    assert d.parameter_bytes == 70e9 * (2 + 2 + 8) == 840e9


def test_more_cards_when_every_remedy_falls_short():
    d = diagnose(Scenario.create("7b", method="lora"), 6 * GIB, headroom="1GiB")   # a margin of 1 GiB: no remedy is enough
    # the parameter side (13 GiB of bf16 base) is over 5 GiB: precision and QLoRA first, then checkpointing
    assert [r.key for r in d.remedies] == ["precision", "qlora", "chunked_loss", "checkpointing"]
    assert not d.fixed and d.cards is not None
    c = d.cards
    # the cards are counted for LoRA (the job's method) with the earlier fixes, per GPU
    kw = dict(method="lora", grad_checkpointing=True, state_dtype="int8", optimizer_impl="fused", loss_impl="liger",
              zero=c.strategy.zero,
              offload=c.strategy.offload, tp=c.tp, sequence_parallel=c.tp > 1)
    n = c.gpus // c.tp
    assert estimate("7b", gpus=n, **kw).peak == c.at.peak <= d.budget
    if n > 1:
        assert estimate("7b", gpus=n - 1, **kw).peak > d.budget


def test_measured_overhead_is_fitted():
    measured = round(23.5 * GIB)
    d = diagnose(Scenario.create("llama-3-8b", **JOB), 24 * GIB, measured_peak=measured,
                 measured_at={"batch": 1, "seq": 512})
    at = estimate("llama-3-8b", stack="interview", method="lora", batch=1, seq=512).peak
    assert d.overhead == measured - at > 0
    assert d.budget == 24 * GIB - 2 * (32 + 1) * MIB - d.overhead
    assert d.remedies[-1].after.peak <= d.budget


def test_cli(capsys):
    from symvram.cli import main

    assert main(["diagnose", "llama-3-8b", "--stack", "interview", "--method", "lora", "--gpu", "24GiB", "--batch", "4",
                 "--seq", "4096", "--measured-peak", "23.5GiB", "--measured-at", "batch=1,seq=512", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["side"] == "activation"
    assert data["measured"]["estimate_bytes"] == estimate("llama-3-8b", stack="interview", method="lora", batch=1, seq=512).peak
    assert main(["diagnose", "7b", "--gpu", "24GiB", "--measured-at", "heads=3", "--measured-peak", "20GiB"]) == 2
    assert "--measured-at" in capsys.readouterr().err


def test_bad_p95():
    with pytest.raises(UserError, match="--p95-seq"):
        diagnose(Scenario.create("7b"), 24 * GIB, p95_seq=0)


def test_a_full_run_is_not_told_to_check_lora_targets(capsys):
    from symvram.cli import main

    assert main(["diagnose", "llama-3-8b", "--method", "full", "--gpu", "h200", "--batch", "8", "--seq", "4096"]) == 0
    full = capsys.readouterr().out
    assert "probe:" in full and "LoRA" not in full.split("probe:")[1].split("\n")[0]
    assert main(["diagnose", "llama-3-8b", "--stack", "interview", "--method", "lora", "--gpu", "rtx-4090",
                 "--batch", "8", "--seq", "20480"]) == 0   # long enough that LoRA's own remedies are not enough
    lora = capsys.readouterr().out
    assert "LoRA target modules" in lora and "no tensor parallelism" in lora


def test_8bit_states_carry_no_foreach_buffer():
    """bitsandbytes' AdamW8bit updates in a fused kernel: 7B full with 8-bit states is 2 + 2 + 2 · 1 = 6 B/param
    = 42e9 B of parameter side and no 7e9 · 1 B foreach buffer on top (the ledger's foreach 8-bit figure is
    about 6.5 GiB higher)."""
    d = diagnose(Scenario.create("7b", method="full"), load_card("a100-80g"), headroom="1GiB")
    r = d.proposals[0]
    assert r.key == "precision" and r.changes == {"state_dtype": "int8", "optimizer_impl": "fused"}
    assert "optimizer_temp" not in r.after.terms
    assert r.after.blocks["base"] + r.after.blocks["trainable"] == 7e9 * (2 + 2 + 2)


def test_fp16_keeps_its_master_and_still_gets_8bit_states():
    """fp16 weights cannot drop the fp32 master (the engine refuses it), so the precision remedy is 8-bit states
    alone: 7B full fp16 with master, 2 + 2 + 4 + 2 · 1 = 10 B/param of parameter side after it."""
    d = diagnose(Scenario.create("7b", dtype="fp16", master="fp32"), 24 * GIB)
    r = d.proposals[0]
    assert d.cause == "parameter" and r.key == "precision" and "master" not in r.changes
    assert r.after.blocks["base"] + r.after.blocks["trainable"] == 7e9 * (2 + 2 + 4 + 2)


def test_each_remedy_carries_its_time_price():
    """Checkpointing's price comes from the FLOPs ledger (one more forward of LoRA's matmuls); on a card with
    peak figures the price is the predicted step time per token, otherwise the matmul FLOPs per token."""
    from symvram.timing import flops

    sc = Scenario.create("llama-3-8b", method="lora", batch=4, seq=4096)
    share = 100 * flops(sc).recompute_share_if_checkpointed
    for card in (load_card("rtx-4090"), 24 * GIB):
        d = diagnose(sc, card)
        ckpt = next(r for r in d.remedies if r.key == "checkpointing")
        assert f"+{share:.0f} % matmul FLOPs" in ckpt.cost
        assert ckpt.price == pytest.approx(share, abs=3)   # the step is matmul-bound
        assert ckpt.price_basis == ("step time" if card != 24 * GIB else "matmul FLOPs per token")
        assert all(r.price is not None for r in d.remedies)


@pytest.fixture(scope="module")
def full8b_on_4090():
    """Qwen3-8B full fine-tuning under the Trainer on an RTX 4090: the parameter side alone is over the card."""
    return diagnose(Scenario.create("qwen3-8b", method="full", stack="hf"), load_card("rtx-4090"))


def test_zero_offload_is_a_remedy_after_the_cheaper_ones(full8b_on_4090):
    """The optimizer on the CPU (DeepSpeed ZeRO-Offload) is offered once 8-bit states fall short, before any change of
    method (LoRA), and undoes the 8-bit states (DeepSpeed's CPU Adam keeps fp32 moments): on the GPU, bf16 weights
    and no gradients, states or master (ZeRO-2 streams the gradients out in buckets)."""
    keys = [r.key for r in full8b_on_4090.remedies]
    assert keys[:2] == ["precision", "offload"] and "lora" not in keys and full8b_on_4090.fixed
    r = full8b_on_4090.remedies[1]
    after = r.after.scenario
    assert (after.stack, after.zero, after.offload, after.state_dtype, after.master) == ("deepspeed", 2, "optimizer",
                                                                                          "fp32", "fp32")
    assert "fp32 moments instead of the 8-bit ones above" in r.cost and "modelled, not measured" in r.cost
    assert r.after.blocks["trainable"] == 0 and r.after.terms["weights"] == r.after.derived["P"] * 2


def test_zero_offload_time_price_is_its_pcie_traffic_and_the_cpu_update(full8b_on_4090):
    """By hand: per step the bf16 gradients go out and the bf16 weights come back over the 4090's PCIe Gen4 x16
    (32 GB/s per direction, never hidden): 2 · 2 B/param; DeepSpeed's CPU Adam reads the fp32 master, gradient and
    two moments and writes back master and moments: 4 + 4 + 8 + 4 + 8 = 28 B/param at a desktop's 2 × DDR5-5600
    (89.6 GB/s). The price is the step time per token after over before, less one."""
    from symvram.timing import step_time

    r = full8b_on_4090.remedies[1]
    card = load_card("rtx-4090")
    before, after = step_time(r.before.scenario, card), step_time(r.after.scenario, card)
    p = r.after.derived["P"]
    assert after.seconds["host"] == pytest.approx(2 * 2 * p / 32e9)
    assert after.seconds["cpu"] == pytest.approx(28 * p / 89.6e9)
    assert before.seconds["host"] == before.seconds["cpu"] == 0
    assert r.price == pytest.approx(100 * (after.seconds_per_step / before.seconds_per_step - 1))
    assert r.price > 100   # 8.2e9 params: 1.0 s of PCIe and 2.6 s of CPU update against ~1.6 s of matmuls
    assert any("89.6 GB/s of host memory per GPU" in a and "modelled, not measured" in a for a in after.assumptions())


def test_zero_offload_on_a_bare_size_card_is_not_free_in_time(capsys):
    """Without a card's figures only the matmul FLOPs are priced; offloading leaves them unchanged, so the sentence
    says what is unpriced instead of "free in time"."""
    from symvram.cli import main

    assert main(["diagnose", "qwen3-8b", "--method", "full", "--stack", "hf", "--gpu", "24GiB"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    offload = out[out.index("the optimizer on the CPU"):].split(" 3. ")[0]
    assert "free in time" not in offload and "PCIe traffic and the CPU's optimizer update" in offload
    assert "unpriced without a card's figures" in offload


def test_zero_offload_as_edits_to_a_trainer_file(capsys):
    """With --from, the remedy is a DeepSpeed config the Trainer file names (TrainingArguments(deepspeed=...)), not
    a list of symvram flags; and bitsandbytes' 8-bit AdamW is one edit (its fused kernel needs no optimizer_impl)."""
    from symvram.cli import main

    assert main(["diagnose", "qwen3-8b", "--from", "examples/configs/trainer-full.json", "--gpu", "rtx-4090"]) == 0
    out = capsys.readouterr().out
    assert 'trainer-full.json: "deepspeed": "ds_offload.json"' in out
    assert ('ds_offload.json: {"bf16": {"enabled": true}, "zero_optimization": {"stage": 2, "offload_optimizer": '
            '{"device": "cpu"}}}') in out
    assert "--stack deepspeed" not in out and "--optimizer-impl" not in out
    # the optimizer in backward came first (no time price) and fell short: ZeRO-Offload steps after the backward
    flat = " ".join(out.split())
    assert flat.index("optimizer in backward (") < flat.index("the optimizer on the CPU")
    assert "one step after the backward instead of the optimizer in backward" in flat


def test_a_method_change_after_offload_brings_the_optimizer_back():
    """Llama-3-70B full on 8 × H100 under DeepSpeed: 8-bit states and ZeRO-Offload fall short; QLoRA's adapters then
    keep their small optimizer on the GPU (no offload to pay for)."""
    d = diagnose(Scenario.create("llama-3-70b", method="full", gpus=8, stack="deepspeed"), load_card("h100"))
    keys = [r.key for r in d.remedies]
    assert keys.index("offload") < keys.index("qlora")
    method = next(r for r in d.remedies if r.key == "qlora")
    assert method.after.scenario.offload == "none" and method.changes["offload"] == "none"
