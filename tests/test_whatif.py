"""whatif: deltas checked against hand derivations and against two independent estimates."""
import json

import pytest

from symvram import estimate
from symvram.analysis.whatif import whatif
from symvram.cli import main
from symvram.errors import UserError
from symvram.scenario import Scenario


def test_rank_64_to_16_on_7b():
    w = whatif(Scenario.create("7b", method="lora", rank=64), {"rank": 16})
    # r·(d_in + d_out) per matrix: q,k,v,o 4·(4096+4096), gate,up 2·(4096+11008), down 11008+4096; 32 layers
    p16 = 32 * 16 * (4 * 8192 + 2 * 15104 + 15104)
    assert p16 == 39_976_960
    dp = p16 - 159_907_840
    assert w.term_delta("adapters") == 2 * dp            # bf16 adapters
    assert w.term_delta("grads") == 2 * dp
    assert w.term_delta("optimizer_states") == 8 * dp    # AdamW m, v in fp32
    assert w.block_delta("base") == 0                     # the frozen base does not see the rank


def test_doubling_seq_doubles_sdpa_activations():
    # with SDPA every saved tensor is b·s·(something) (RoPE's cos/sin: s·d_head), so all of block 3 doubles
    w = whatif(Scenario.create("llama-3-8b", method="lora", batch=2, seq=1024, stack="torch"), {"seq": 2048})
    assert w.after.blocks["activations"] == 2 * w.before.blocks["activations"]
    assert w.block_delta("trainable") == 0 and w.block_delta("base") == 0


def test_8bit_optimizer_states_full_7b():
    w = whatif(Scenario.create("7b", method="full"), {"bytes_state": 1})
    assert w.term_delta("optimizer_states") == 7e9 * 2 * (1 - 4)      # m and v: 4 bytes -> 1 byte
    assert w.term_delta("optimizer_temp") == 7e9 * (1 - 4)            # foreach sqrt(v) buffer follows the state dtype


def test_vocab_on_an_exact_model_changes_P():
    w = whatif(Scenario.create("llama-2-7b", method="full"), {"vocab": 64000})
    # untied: embeddings and lm_head both grow by 32000 × 4096
    assert w.after.derived["P"] - w.before.derived["P"] == 2 * 32000 * 4096
    assert w.term_delta("weights") == 2 * 2 * 32000 * 4096


def test_peak_delta_is_the_difference_of_two_estimates():
    w = whatif(Scenario.create("7b", method="qlora", rank=64), {"seq": 4096, "rank": 16})
    before = estimate("7b", method="qlora", rank=64)
    after = estimate("7b", method="qlora", rank=16, seq=4096)
    assert w.peak_delta == after.peak - before.peak
    assert w.moment_delta(before.peak_moment) == after.moments[before.peak_moment] - before.peak


def test_tensor_parallel_change_compares_two_ledgers():
    # tp 2 -> 1 changes the structure (no tensor parallelism): the deltas still come from both estimates
    w = whatif(Scenario.create("7b", method="full", tp=2), {"tp": 1})
    before, after = estimate("7b", method="full", tp=2), estimate("7b", method="full")
    assert w.peak_delta == after.peak - before.peak
    assert {t.key: w.term_delta(t.key) for t in w.terms()} == {
        k: after.terms.get(k, 0) - before.terms.get(k, 0) for k in set(before.terms) | set(after.terms)}
    # t = 2 split every weight but the RMSNorm vectors (2 per layer + the final one, replicated on each
    # rank) in two; back at t = 1 the other half returns: (7e9 − norms) · 2 bytes / 2
    norms = 32 * 2 * 4096 + 4096
    assert w.term_delta("weights") == (7_000_000_000 - norms) * 2 // 2


@pytest.mark.parametrize("sc_kw,changes,needle", [
    (dict(method="lora"), {"hiden": 4096}, "did you mean hidden"),
    (dict(method="full"), {"rank": 16}, "does not apply to --method full"),
    (dict(method="lora"), {"quant_bits": 8}, "does not apply to --method lora"),
    (dict(method="lora"), {"P_train": 10}, "derived here"),
    (dict(method="lora"), {"layers": 40.5}, "must be an integer"),
    (dict(method="full"), {"mfu": 0.5}, "prices the step time, not memory"),          # a card figure of the roofline
    (dict(method="full"), {"step_flops": 1e15}, "prices the step time, not memory"),  # one of its derived parts
])
def test_refused_changes(sc_kw, changes, needle):
    with pytest.raises(UserError, match=needle):
        whatif(Scenario.create("llama-3-8b", **sc_kw), changes)


def test_cli_json(capsys):
    assert main(["whatif", "llama-3-8b", "--method", "lora", "--set", "seq=4096", "--set", "rank=16",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    before = estimate("llama-3-8b", method="lora")
    after = estimate("llama-3-8b", method="lora", seq=4096, rank=16)
    assert data["changes"] == {"seq": {"before": 2048, "after": 4096}, "rank": {"before": 64, "after": 16}}
    assert data["delta"]["peak"] == after.peak - before.peak
    assert data["delta"]["blocks"]["activations"] == after.blocks["activations"] - before.blocks["activations"]


def test_cli_table_shows_both_ledgers(capsys):
    assert main(["whatif", "7b", "--method", "full", "--set", "bytes_state=1"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("trainable") and "optimizer_states" in line)
    # 7e9 × 2 states × 4 B = 52.15 GiB before, × 1 B = 13.04 GiB after
    assert row.split()[-3:] == ["52.15", "13.04", "-39.12"]


@pytest.mark.parametrize("argv,needle", [
    (["7b", "--set", "foo=1"], "unknown symbol 'foo'"),
    (["7b", "--set", "rank=16"], "does not apply to --method full"),
    (["7b", "--method", "lora"], "at least one --set"),
    (["7b", "--set", "seq=x"], "is not a number"),
])
def test_cli_errors_are_one_line_exit_2(capsys, argv, needle):
    assert main(["whatif", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_set_tp_is_the_tp_option():
    """--set tp=2 changes the ledger's structure as --tp 2 does: the same peak, by an independent estimate."""
    from symvram.analysis.whatif import whatif as run_whatif
    from symvram.evaluate import evaluate
    from symvram.scenario import Scenario

    sc = Scenario.create("7b", method="full")
    w = run_whatif(sc, {"tp": 2})
    assert w.after.peak == evaluate(Scenario.create("7b", method="full", tp=2)).peak < w.before.peak
