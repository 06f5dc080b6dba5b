"""fit: the largest seq / batch / rank under a card, checked against a hand derivation and by
re-estimating (evaluate) at the answer and the answer + 1."""
import json

import pytest
from hypothesis import given, settings, strategies as st

from symvram.analysis import fit as fit_module
from symvram.analysis.fit import fit, headroom_bytes, knob_limit
from symvram.card_memory import card_memory
from symvram.presets import load_card
from symvram.cli import main
from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.scenario import Scenario

GIB = 1 << 30


def test_seq_from_two_estimates_7b_lora():
    # With SDPA every term of every moment is affine in s (b·s·(…) saved tensors, s·d_head RoPE tables,
    # s-free weights and optimizer states), so each moment is c + k·s: two estimates (s = 1, 2) give c and
    # k, and the longest fitting s is the smallest floor((budget − c) / k) over the moments.
    sc = Scenario.create("7b", method="lora", rank=64, batch=4)
    one, two = evaluate(sc.with_changes(seq=1)), evaluate(sc.with_changes(seq=2))
    capacity = 80 * GIB
    expected = {}
    for m, at1 in one.moments.items():
        k = two.moments[m] - at1
        expected[m] = (capacity - (at1 - k)) // k
    bounds, how = fit_module._moment_bounds(sc, "seq", capacity, 100_000)
    # each term is rounded up to whole bytes in an estimate: allow one token either way
    assert how == "solved" and abs(min(bounds.values()) - min(expected.values())) <= 1
    assert min(bounds, key=bounds.get) == min(expected, key=expected.get)
    # the allocator reserves at least what is allocated: its answer is at most the moments' one
    r = fit(sc, capacity, solve="seq", headroom=0, limit=100_000)
    assert r.status == "fits" and r.value <= min(expected.values()) + 1


CASES = [
    ("7b", dict(method="lora", rank=64, batch=4), "a100-80g", "seq"),
    ("7b", dict(method="lora", rank=64, batch=4), "a100-80g", "batch"),
    ("7b", dict(method="lora", batch=2, seq=512), "a100-40g", "rank"),
    ("llama-3-8b", dict(method="qlora", attention="eager"), "rtx-4090", "seq"),
    ("llama-3-8b", dict(method="qlora", optimizer_impl="forloop", seq=256), "l4", "rank"),
    ("llama-2-7b", dict(method="full", grad_checkpointing=True), "h200", "batch"),
]


@pytest.mark.parametrize("model,kw,card,knob", CASES)
def test_answer_fits_and_next_does_not(model, kw, card, knob):
    sc = Scenario.create(model, **kw)
    gpu = load_card(card)
    r = fit(sc, gpu, solve=knob)
    assert r.status == "fits"
    # the replay of two steps on the card fits at the answer and runs out of memory one above it
    assert card_memory(sc.with_changes(**{knob: r.value}), gpu).fits
    assert not card_memory(sc.with_changes(**{knob: r.value + 1}), gpu).fits
    # what the allocator may reserve is the card less the CUDA context (one GPU: no NCCL buffers)
    assert r.budget == gpu.memory_bytes - (gpu.memory_bytes - gpu.usable_bytes)
    assert evaluate(sc.with_changes(**{knob: r.value})).peak <= r.budget
    assert (r.at.peak, r.above.peak) == (evaluate(sc.with_changes(**{knob: r.value})).peak,
                                         evaluate(sc.with_changes(**{knob: r.value + 1})).peak)


def test_search_agrees_with_solve(monkeypatch):
    sc = Scenario.create("llama-3-8b", method="lora", attention="eager", batch=2)
    solved = fit(sc, load_card("a100-80g"), solve="seq")
    monkeypatch.setattr(fit_module, "_monotone_poly", lambda expr, x: None)
    searched = fit(sc, load_card("a100-80g"), solve="seq")
    assert (solved.how, searched.how) == ("solved", "searched")
    assert searched.value == solved.value and searched.bounds == solved.bounds


def test_search_on_a_hand_function():
    assert fit_module._search(lambda x: x * x, 1000, 10_000) == 31      # 31² = 961, 32² = 1024
    assert fit_module._search(lambda x: x, 0, 100) == 0
    assert fit_module._search(lambda x: x, 10**9, 100) == 100


def test_nothing_fits():
    sc = Scenario.create("70b", method="full")
    r = fit(sc, load_card("rtx-4090"), solve="seq")
    assert (r.status, r.value) == ("none", None)
    assert evaluate(sc.with_changes(seq=1)).peak > load_card("rtx-4090").usable_bytes   # 70e9 weights alone


def test_everything_fits_up_to_max_position():
    sc = Scenario.create("7b", method="qlora", rank=8)
    r = fit(sc, load_card("mi300x"), solve="seq")
    assert (r.status, r.value, r.above) == ("all", 4096, None)                   # 7b: max_position_embeddings 4096
    assert "max_position_embeddings" in r.limit_reason
    assert evaluate(sc.with_changes(seq=4096)).peak <= load_card("mi300x").usable_bytes


def test_rank_limit_is_smallest_matrix_side():
    # Llama-3-8B: k_proj and v_proj map 4096 -> 8 kv heads × 128 = 1024
    assert knob_limit(Scenario.create("llama-3-8b", method="lora"), "rank") == (
        1024, "min(d_in, d_out) of the targeted matrices")
    assert knob_limit(Scenario.create("llama-3-8b", method="lora", targets="mlp"), "rank")[0] == 4096


def test_headroom_forms():
    assert headroom_bytes("5%", 80 * GIB) == 4 * GIB
    assert headroom_bytes("2GiB", 80 * GIB) == 2 * GIB
    assert headroom_bytes("0", 80 * GIB) == 0
    with pytest.raises(UserError):
        headroom_bytes("100%", 80 * GIB)


def test_sized_card():
    # a size is the physical memory, as a named card's: the named cards' median context (memory − usable of
    # data/gpus.toml: 12 cards, the 7th of the sorted differences, 0.49 GiB) is taken off
    import tomllib
    from importlib import resources
    cards = tomllib.loads(resources.files("symvram.data").joinpath("gpus.toml").read_text())
    contexts = sorted(round(c["memory_gib"] * GIB) - round(c["usable_gib"] * GIB) for c in cards.values())
    context = contexts[len(contexts) // 2]
    assert (load_card("24GiB").memory_bytes, load_card("24GiB").usable_bytes) == (24 * GIB, 24 * GIB - context)
    assert load_card("80GB").usable_bytes == 80 * 10**9 - context


@settings(max_examples=6, deadline=None)   # each example runs the allocator replay a dozen times
@given(st.integers(min_value=14, max_value=200), st.integers(min_value=1, max_value=60),
       st.sampled_from(["seq", "batch", "rank"]))
def test_monotone_in_card_size(small_gib, extra_gib, knob):
    sc = Scenario.create("7b", method="lora", rank=16, batch=2, seq=1024)

    def answer(gib):
        r = fit(sc, gib * GIB, solve=knob)
        return 0 if r.status == "none" else r.value

    assert answer(small_gib) <= answer(small_gib + extra_gib)


def test_cli_json_is_the_api_answer(capsys):
    assert main(["fit", "7b", "--method", "lora", "--batch", "4", "--gpu", "a100-80g", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    r = fit(Scenario.create("7b", method="lora", batch=4), load_card("a100-80g"), solve="seq")
    assert (data["value"], data["peak_at_value"]["bytes"], data["peak_above"]["bytes"]) == (
        r.value, r.at.peak, r.above.peak)
    assert data["budget_bytes"] == load_card("a100-80g").usable_bytes == r.budget
    assert data["peak_at_value"]["reserved_peak"] == r.memory.reserved_peak <= r.budget


@pytest.mark.parametrize("argv,needle", [
    (["--gpu", "banana"], "unknown GPU 'banana'"),
    (["--gpu", "24"], "24 bytes is not a GPU's memory"),
    (["--gpu", "0GiB"], "--gpu 0GiB"),
    (["--gpu", "24GiB", "--solve", "rank"], "--solve rank does not apply to --method full"),
    (["--gpu", "24GiB", "--headroom", "30GiB"], "leaves nothing"),
    (["--solve", "seq"], "--gpu"),
])
def test_cli_errors_are_one_line_exit_2(capsys, argv, needle):
    assert main(["fit", "7b", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
