"""Results display themselves: short reprs in a console, Markdown/LaTeX in Jupyter (through IPython's
own display formatter), and none of that machinery is loaded by ``import symvram``.

Expected numbers are derived by hand here from the reference answer's 7B shape."""
import base64
import re
import subprocess
import sys

import pytest
from IPython.core.formatters import DisplayFormatter
from latex2mathml.converter import convert

from symvram import compare, estimate

GIB = 2**30
P_LORA_R64 = 32 * 64 * (4 * (4096 + 4096) + 2 * (4096 + 11008) + (11008 + 4096))   # r(d+k) per matrix
ADAMW_STEP_COUNTERS = 32 * 7 * 2 * 4      # one fp32 step counter per A and B, 7 targets, 32 layers


def mime(obj) -> dict:
    data, _ = DisplayFormatter().format(obj)
    return data


def tables(markdown: str) -> list[list[list[str]]]:
    """The Markdown tables, each a list of rows of cells (an unescaped | separates cells)."""
    found, current = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            if not line.startswith("|---"):
                current.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
        elif current:
            found, current = found + [current], []
    return found


def table_rows(markdown: str) -> list[list[str]]:
    return [row for table in tables(markdown) for row in table]


def test_breakdown_in_a_console_and_in_jupyter():
    bd = estimate("7b", method="lora", rank=64)
    assert P_LORA_R64 == 159_907_840
    trainable = (P_LORA_R64 * (2 + 2 + 8) + ADAMW_STEP_COUNTERS) / GIB     # adapter, grad, m and v
    data = mime(bd)
    assert set(data) == {"text/plain", "text/markdown"}
    plain = data["text/plain"]
    assert plain.startswith("<Breakdown 7b lora: peak ") and "\n" not in plain
    assert f"base {14e9 / GIB:.2f} GiB" in plain and f"trainable {trainable:.2f} GiB" in plain
    assert f"peak {bd.peak / GIB:.2f} GiB at start of the loss backward" in plain

    md = data["text/markdown"]
    assert f"{P_LORA_R64:,} trainable ({100 * P_LORA_R64 / 7e9:.2f} %)" in md
    rows = table_rows(md)
    term_rows = {r[1]: r for r in rows if len(r) == 5 and r[0] in ("base", "trainable", "activations", "transient")}
    assert set(term_rows) == {t.key for t in bd.ledger.terms}
    assert term_rows["weights"][2:4] == [f"{14e9 / GIB:.2f}", r"$P \cdot \beta_{w}$"]
    assert term_rows["grads"][2] == f"{P_LORA_R64 * 2 / GIB:.2f}"
    assert term_rows["optimizer_states"][2] == f"{P_LORA_R64 * 8 / GIB:.2f}"
    assert [len(t[0]) for t in tables(md)] == [5, 2, 3]    # terms; block sums; moments
    for table in tables(md):                                  # no stray | splits a cell
        assert {len(row) for row in table} == {len(table[0])}
    peak_rows = [r for r in rows if "← peak" in r[0]]
    assert len(peak_rows) == 1 and peak_rows[0][1] == f"{bd.peak / GIB:.2f} GiB"
    # the formulas' derived quantities are defined: r(d_in + d_out) summed over the seven matrices
    assert (r"$P_{\mathrm{LoRA}} = L \cdot r \cdot \left(2 \cdot d_{head} \cdot n_{h} + 2 \cdot d_{head} \cdot "
            r"n_{kv} + 7 \cdot h + 3 \cdot d_{ff}\right)$") in md


def test_every_displayed_formula_is_valid_latex():
    """latex2mathml, an independent LaTeX parser, reads every $…$ of the Markdown."""
    for method in ("full", "lora", "qlora"):
        bd = estimate("llama-3-8b", method=method, grad_checkpointing=True)
        formulas = re.findall(r"\$([^$]+)\$", bd._repr_markdown_() + bd.ledger._repr_markdown_())
        assert len(formulas) > len(bd.ledger.terms)
        for f in formulas:
            assert "<math" in convert(f)


def test_term_shows_its_formula():
    t = estimate("7b", method="full", master="fp32").ledger.by_key["master"]
    assert repr(t) == "Term('master', trainable: P_train*bytes_master)"
    assert mime(t)["text/latex"] == r"$M_{\mathrm{master}} = P_{\mathrm{train}} \cdot \beta_{m}$"


def test_ledger_lists_terms_and_moments_without_numbers():
    led = estimate("llama-2-7b", method="full").ledger
    text = repr(led)
    assert text.startswith(f"<Ledger {len(led.terms)} terms (base 2, ") and "optimizer_step" in text  # weights, buffers
    md = mime(led)["text/markdown"]
    assert all(f"| {t.key} |" in md for t in led.terms)
    assert r"$M_{\mathrm{grad}} = P_{\mathrm{train}} \cdot \beta_{g}$" in md
    assert "GiB" not in md


def test_comparison_is_the_reference_table():
    c = compare("7b")
    rows = table_rows(mime(c)["text/markdown"])
    assert [r[0] for r in rows] == ["method", "full", "full + fp32 master", "LoRA", "QLoRA"]
    # base 14 GB of bf16 weights (+ a 256-byte rotary buffer) for full and LoRA
    assert [r[1] for r in rows[1:4]] == [f"{14e9 / GIB:.2f}"] * 3
    assert "full + fp32 master" in repr(c)


@pytest.mark.parametrize("code, absent", [
    ("import symvram", ("sympy", "matplotlib", "jinja2")),
    ("import symvram; symvram.estimate('7b', method='lora')",
     ("matplotlib", "jinja2", "symvram.present.display", "IPython")),
    # the ledger and the evaluation carry display methods but import no presentation code until asked
    ("import symvram.ledger, symvram.evaluate", ("symvram.present.display", "symvram.present.tables", "symvram.cli")),
])
def test_import_stays_light(code, absent):
    out = subprocess.run([sys.executable, "-c", f"{code}; import sys; print([m for m in {absent!r} if m in sys.modules])"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_whatif_shows_the_change():
    from symvram import whatif

    w = whatif("7b", {"bytes_state": 1}, method="full")          # AdamW's m, v in 8 bits instead of fp32
    assert repr(w).startswith("<WhatIf 7b full: bytes_state 4 → 1: peak ")
    row = next(r for r in table_rows(mime(w)["text/markdown"]) if r[1] == "optimizer_states")
    assert row[3:] == [f"{7e9 * 2 * 4 / GIB:.2f}", f"{7e9 * 2 * 1 / GIB:.2f}", f"{-7e9 * 2 * 3 / GIB:.2f}"]


def test_fit_prints_its_answer():
    from symvram import fit

    r = fit("7b", "rtx-4090", solve="seq", method="qlora")
    text = repr(r)
    # the card's memory less its context (data/gpus.toml: 23.99 − 23.5 GiB) is what the allocator may reserve
    assert "23.99 GiB memory − 0.49 GiB CUDA context = 23.50 GiB for the caching allocator" in text
    assert f"largest seq that fits: {r.value:,} tokens" in text


def test_sensitivity_ranks_knobs_with_their_derivatives():
    from symvram import sensitivity

    res = sensitivity("7b", method="lora", batch=4)
    assert repr(res).startswith("<SensitivityResult 7b lora: peak ") and "elasticities" in repr(res)
    md = mime(res)["text/markdown"]
    row = next(r for r in table_rows(md) if "`bytes_weight`" in r[1])
    # the base weights are P·β_w, so ∂peak/∂β_w = P = 7·10⁹ B per byte, and β_w·∂peak/∂β_w = 14·10⁹ B
    assert row[3:5] == ["2 B/elem", f"{7e9 / GIB:.2f} GiB"] and row[6] == f"{14e9 / GIB:.2f}"
    assert r"$$\frac{\partial\,\mathrm{peak}}{\partial \beta_{w}} = P$$" in md
    for f in re.findall(r"\$\$?([^$]+)\$\$?", md):
        assert "<math" in convert(f)


def test_plan_names_the_fewest_gpus():
    from symvram import plan

    # the reference answer: a 70B QLoRA base is ≈ 35 GB of NF4 weights, so one 80 GB card runs it
    # (with checkpointing: 80 layers of saved activations at 2048 tokens would not leave room)
    r = plan("70b", "a100-80g", methods=("qlora",), strategies=("ddp",), grad_checkpointing=True)
    assert repr(r) == "<PlanResult 70b on NVIDIA A100 80GB, 78.52 GiB per GPU: fewest GPUs qlora 1 (DDP)>"
    rows = table_rows(mime(r)["text/markdown"])
    assert rows[0][:3] == ["method", "strategy", "GPUs"] and rows[1][:3] == ["qlora", "DDP", "1"]


def test_diagnosis_gives_the_verdict_and_the_triage():
    from symvram import diagnose

    d = diagnose("llama-3-8b", "24GiB", method="lora", batch=4, seq=4096)
    # budget: the 24 GiB card less the named cards' median context (data/gpus.toml memory − usable) and two
    # threads' cuBLAS and cuBLASLt workspaces (32 + 1 MiB each)
    assert repr(d).startswith("<Diagnosis llama-3-8b lora on 24.00 GiB card: activation side over at the start of "
                              "the loss backward, peak ")
    import tomllib
    from importlib import resources
    cards = tomllib.loads(resources.files("symvram.data").joinpath("gpus.toml").read_text())
    contexts = sorted(round(c["memory_gib"] * 2**30) - round(c["usable_gib"] * 2**30) for c in cards.values())
    budget = 24 * 2**30 - contexts[len(contexts) // 2] - 2 * (32 + 1) * 2**20
    assert f"> budget {budget / 2**30:.2f} GiB; fits after" in repr(d)
    md = mime(d)["text/markdown"]
    assert md.startswith("```text\n") and md.endswith("\n```") and "cheapest first" in md


def test_plot_returns_a_figure_that_jupyter_shows_as_png():
    from IPython.core.pylabtools import select_figure_formats
    from IPython.core.interactiveshell import InteractiveShell

    from symvram import plot

    fig = plot("7b", "breakdown")
    assert fig.axes[0].get_ylabel() == "memory (GiB)"
    shell = InteractiveShell.instance()
    select_figure_formats(shell, {"png"})              # what %matplotlib inline does
    data, _ = shell.display_formatter.format(fig)
    assert base64.b64decode(data["image/png"])[:4] == b"\x89PNG"


def test_explain_document_shows_as_markdown_or_as_an_isolated_page():
    from html import unescape

    from symvram import explain

    md = explain("7b", method="lora")
    assert f"{P_LORA_R64:,}" in str(md)                         # the hand count appears in the derivation
    assert set(mime(md)) == {"text/plain", "text/markdown"} and mime(md)["text/markdown"] == md.text
    page = explain("7b", method="lora", fmt="html", lang="zh")
    shown = mime(page)["text/html"]
    assert shown.startswith('<iframe srcdoc="') and unescape(shown.split('"')[1]) == page.text
    assert repr(page).startswith(f"<Document html, {len(page.text):,} characters: ")
