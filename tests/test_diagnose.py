"""OOM triage: the side, the probe, the remedies' order and savings, each against an independent
re-estimate written out here (the cumulative settings spelled by hand), and the measured overhead."""
import json

import pytest

from symvram import estimate
from symvram.analysis.diagnose import diagnose
from symvram.analysis.fit import load_card
from symvram.errors import UserError
from symvram.scenario import Scenario

GIB = 2**30
JOB = dict(method="lora", batch=4, seq=4096)                 # the reference's "24 GB card, OOM" job


@pytest.fixture(scope="module")
def lora24():
    return diagnose(Scenario.create("llama-3-8b", **JOB), 24 * GIB, p95_seq=1800)


def test_activation_side_and_probe(lora24):
    e = estimate("llama-3-8b", **JOB)
    assert lora24.side == "activation"
    assert lora24.budget == 23 * GIB                          # 24 GiB − 1 GiB default headroom
    assert lora24.parameter_bytes == e.blocks["base"] + e.blocks["trainable"] < lora24.budget < e.peak
    assert lora24.probe.peak == estimate("llama-3-8b", method="lora", batch=1, seq=512).peak


def test_remedies_free_ones_first_with_their_savings_and_prices(lora24):
    # free in time first (the reference order among them), then the priced ones: checkpointing costs
    # one more forward of LoRA's matmuls, derived from the FLOPs ledger
    steps = [
        ("seq_p95", dict(method="lora", batch=4, seq=1800)),
        ("batch1", dict(method="lora", batch=1, seq=1800)),
        ("precision", dict(method="lora", batch=1, seq=1800, state_dtype="int8")),
        ("checkpointing", dict(method="lora", batch=1, seq=1800, grad_checkpointing=True, state_dtype="int8")),
        ("qlora", dict(method="qlora", batch=1, seq=1800, grad_checkpointing=True, state_dtype="int8")),
    ]
    got = [r.key for r in lora24.remedies]
    assert got == [k for k, _ in steps][:len(got)]             # a prefix of the order: it stops where it fits
    previous = estimate("llama-3-8b", **JOB).peak
    for remedy, (key, kw) in zip(lora24.remedies, steps):
        after = estimate("llama-3-8b", **kw).peak
        assert remedy.after.peak == after and remedy.saving == previous - after
        previous = after
    assert lora24.remedies[-1].after.peak <= lora24.budget < lora24.remedies[-2].after.peak
    assert lora24.cards is None
    prices = {r.key: r.price for r in lora24.remedies}
    assert prices["seq_p95"] < 0 and prices["batch1"] == prices["precision"] == 0   # fewer FLOPs per token; none
    assert 40 < prices["checkpointing"] < 50


def test_without_p95_the_sequence_step_is_explained_not_guessed():
    d = diagnose(Scenario.create("llama-3-8b", **JOB), 24 * GIB)
    assert d.skipped and "--p95-seq" in d.skipped[0][1]
    assert d.remedies[0].key == "batch1"        # free in time: the same FLOPs per token
    assert d.remedies[0].after.peak == estimate("llama-3-8b", method="lora", batch=1, seq=4096).peak


def test_parameter_side_of_70b_full():
    d = diagnose(Scenario.create("70b", method="full"), load_card("a100-80g"))
    assert d.side == "parameter"
    # 12 B/param: the reference answer's 840 GB
    assert d.parameter_bytes == 70e9 * (2 + 2 + 8) == 840e9


def test_more_cards_when_every_remedy_falls_short():
    d = diagnose(Scenario.create("7b", method="lora"), 6 * GIB)
    assert [r.key for r in d.remedies] == ["precision", "checkpointing", "qlora"]   # batch is already 1; free first
    assert not d.fixed and d.cards is not None
    c = d.cards
    # the cards are counted for LoRA (the job's method) with the earlier fixes, per GPU
    kw = dict(method="lora", grad_checkpointing=True, state_dtype="int8", zero=c.strategy.zero,
              offload=c.strategy.offload, tp=c.tp, sequence_parallel=c.tp > 1)
    n = c.gpus // c.tp
    assert estimate("7b", gpus=n, **kw).peak == c.at.peak <= d.budget
    if n > 1:
        assert estimate("7b", gpus=n - 1, **kw).peak > d.budget


def test_measured_overhead_is_fitted():
    measured = round(23.5 * GIB)
    d = diagnose(Scenario.create("llama-3-8b", **JOB), 24 * GIB, measured_peak=measured,
                 measured_at={"batch": 1, "seq": 512})
    at = estimate("llama-3-8b", method="lora", batch=1, seq=512).peak
    assert d.overhead == measured - at > 0
    assert d.budget == 23 * GIB - d.overhead
    assert d.remedies[-1].after.peak <= d.budget


def test_cli(capsys):
    from symvram.cli import main

    assert main(["diagnose", "llama-3-8b", "--method", "lora", "--gpu", "24GiB", "--batch", "4", "--seq", "4096",
                 "--measured-peak", "23.5GiB", "--measured-at", "batch=1,seq=512", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["side"] == "activation"
    assert data["measured"]["estimate_bytes"] == estimate("llama-3-8b", method="lora", batch=1, seq=512).peak
    assert main(["diagnose", "7b", "--gpu", "24GiB", "--measured-at", "heads=3", "--measured-peak", "20GiB"]) == 2
    assert "--measured-at" in capsys.readouterr().err


def test_bad_p95():
    with pytest.raises(UserError, match="--p95-seq"):
        diagnose(Scenario.create("7b"), 24 * GIB, p95_seq=0)
