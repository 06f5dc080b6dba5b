"""Terminal output: every command's default table output fits 100 columns (``--wide`` keeps lines whole),
sharded results say they are per GPU, and a card name that several cards share is refused."""
from __future__ import annotations

import pytest

from symvram.cli import main

COMMANDS = [
    "estimate 7b", "estimate 7b --method lora", "estimate 7b --method full --gpus 8 --zero 3 --offload optimizer",
    "estimate 70b --method full --gpu a100-80g", "whatif 7b --set seq=4096", "sensitivity 7b --method lora",
    "diagnose llama-3-8b --method lora --gpu 24GiB --batch 4 --seq 4096", "fit 7b --gpu a100-80g",
    "plan 70b --gpu a100-80g",
]


def _out(capsys, argv: str) -> list[str]:
    assert main(argv.split()) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("argv", COMMANDS)
def test_default_output_fits_100_columns(capsys, argv):
    lines = _out(capsys, argv)
    wide = [line for line in lines if len(line) > 100]
    assert not wide, f"{argv}: {len(wide)} lines over 100 columns, e.g. {wide[0]!r}"


def test_wide_keeps_formulas_whole(capsys):
    lines = _out(capsys, "--wide estimate 7b --method lora")
    assert max(map(len, lines)) > 100
    assert any("L*(b*d_head*n_h*s*β_c + b*d_head*s*β_c*(n_h + 2*n_kv))" in line for line in lines)
    assert max(map(len, _out(capsys, "estimate 7b --method lora"))) <= 100  # and the next call is narrow again


def test_whatif_prints_the_same_notation_as_estimate(capsys):
    text = "\n".join(_out(capsys, "whatif 7b --set seq=4096"))
    assert "P*β_w" in text and "\\cdot" not in text and "\\beta" not in text


def test_sharded_results_are_labelled_per_gpu(capsys):
    text = "\n".join(_out(capsys, "--wide estimate 7b --method full --gpus 8 --zero 3 --offload optimizer"))
    assert "bytes per GPU (GiB)" in text and "live per GPU (GiB)" in text and "peak per GPU:" in text
    assert "host memory of the whole job (8 GPUs)" in text
    single = "\n".join(_out(capsys, "--wide estimate 7b --method full"))
    assert "per GPU" not in single
    assert "peak per GPU (GiB)" in "\n".join(_out(capsys, "--wide estimate 7b --gpus 4 --zero 3"))


def test_an_ambiguous_card_name_is_refused_with_the_choices(capsys):
    assert main(["fit", "7b", "--gpu", "a100"]) == 2
    err = capsys.readouterr().err
    assert "a100-40g" in err and "a100-80g" in err and err.count("\n") == 1
    assert main(["fit", "7b", "--gpu", "h100"]) == 0  # one card of that name: taken


def test_grammar_of_counts(capsys):
    from symvram.analysis.fit import fit
    from symvram.analysis.plan import plan
    from symvram.present.reports import fit_text, plan_summary
    from symvram.presets import load_card
    from symvram.scenario import Scenario

    sc = Scenario.create("70b", method="full", seq=4096)
    r = fit(sc, load_card("h200"), solve="batch")
    assert "1 sequences" not in fit_text(r, "GiB")
    p = plan(Scenario.create("7b"), load_card("rtx-4090"), max_gpus=2, strategies=("ddp", "zero3"))
    for m in ("full", "lora"):
        text = plan_summary(p, m, "GiB")
        assert "DDP do not fit" not in text and "ZeRO-3 / FSDP FULL_SHARD do not fit" not in text
