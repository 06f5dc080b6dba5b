"""``symvram explain``: documents whose every number is the engine's, in three formats and two languages.

Numbers are parsed back from the rendered text and compared with ``estimate`` (the engine) and with
hand derivations written here; snapshots pin whole documents (regenerate: scripts/regen_snapshots.py).
"""
from __future__ import annotations

import functools
import json
import math
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from symvram import estimate
from symvram.analysis.fit import load_card
from symvram.analysis.plan import plan
from symvram.cli import main
from symvram.errors import UserError
from symvram.present import documents
from symvram.present.documents import render
from symvram.presets import load_gpu
from symvram.scenario import Scenario

GIB = 2**30
SNAPSHOT_DIR = Path(__file__).parent / "snapshots"
# snapshot file -> (model, scenario settings, format, language); the version field is pinned
SNAPSHOTS = {
    "explain-7b-full.en.md": ("7b", {}, "markdown", "en"),
    "explain-7b-full.zh.md": ("7b", {}, "markdown", "zh"),
    "explain-llama-3-8b-lora-r16-seq4096.en.md": ("llama-3-8b", dict(method="lora", rank=16, seq=4096, stack="interview"), "markdown", "en"),
    "explain-70b-qlora-ckpt.zh.tex": ("70b", dict(method="qlora", grad_checkpointing=True), "tex", "zh"),
}
HEADINGS = {"en": ("## 3. ", "## 5. ", "## 6. "), "zh": ("## 三、", "## 五、", "## 六、")}


@functools.cache
def context(model: str, **settings) -> dict:
    """The engine's numbers for one scenario, computed once and rendered in several languages/formats."""
    return documents.explain_context(Scenario.create(model, **settings))


def snapshot_text(name: str) -> str:
    model, settings, fmt, lang = SNAPSHOTS[name]
    return render(Scenario.create(model, **settings), fmt=fmt, lang=lang, version="SNAPSHOT")


@pytest.mark.parametrize("name", sorted(SNAPSHOTS))
def test_snapshot(name):
    expected = (SNAPSHOT_DIR / name).read_text(encoding="utf-8")
    assert snapshot_text(name) == expected, f"{name} changed; if intended, run: python3 scripts/regen_snapshots.py"


# ---------------------------------------------------------------- numbers parsed back from the text

def section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def table_rows(text: str, n: int = 0) -> list[list[str]]:
    """The body rows of the n-th Markdown table in ``text``."""
    tables = [chunk for chunk in text.split("\n\n") if chunk.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in tables[n].splitlines()[2:]]


def gib(cell: str) -> float:
    m = re.fullmatch(r"\**([\d,]+\.\d\d) GiB\**", cell)
    assert m, cell
    return float(m.group(1).replace(",", ""))


def integer(cell: str) -> int:
    return int(cell.strip("*").replace(",", ""))


RECIPES = [dict(method="full", master="none"), dict(method="full", master="fp32"), dict(method="lora"),
           dict(method="qlora")]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("model", ["7b", "70b"])
def test_numbers_in_the_text_are_the_engines(model, lang):
    text = documents.render_context(context(model), fmt="markdown", lang=lang)
    lora_h, table_h, other_h = HEADINGS[lang]
    usable = load_gpu("a100-80g").usable_bytes

    # 5: full 12 / 16, LoRA, QLoRA — every GiB figure equals the engine's bytes, rounded to the cent
    rows = table_rows(section(text, table_h))
    assert len(rows) == 4
    for row, recipe in zip(rows, RECIPES):
        e = estimate(model, **recipe)
        figures = [e.blocks["base"], e.blocks["trainable"], e.blocks["activations"], e.ledger_total, e.peak]
        assert [gib(c) for c in row[1:6]] == [round(b / GIB, 2) for b in figures]
    assert [integer(r[6].split()[0]) for r in rows] == [12, 16, 12, 12]   # bf16 2+2+8, + fp32 master 4; LoRA 2+2+8

    # 6: the other scale (7b <-> 70b): peaks without and with checkpointing, then analysis.plan's fewest cards
    other = "70b" if model == "7b" else "7b"
    for row, recipe in zip(table_rows(section(text, other_h), 0), RECIPES):
        assert gib(row[4]) == round(estimate(other, **recipe).peak / GIB, 2)
        assert gib(row[5]) == round(estimate(other, grad_checkpointing=True, **recipe).peak / GIB, 2)
    result = plan(Scenario.create(other), load_card("a100-80g"))
    order = list(dict.fromkeys(r.strategy.key for r in result.rows))     # the table lists strategies in plan's order
    cells = dict(zip(order, (row[1:] for row in table_rows(section(text, other_h), 1))))
    for r in result.rows:
        cell = cells[r.strategy.key][["full", "lora", "qlora"].index(r.method)]
        assert cell == (f"{r.gpus} ({r.params_gpus})" if lang == "en" else f"{r.gpus}（{r.params_gpus}）") \
            if r.fits else cell in ("does not fit", "放不下")
    if other == "70b":   # the interview count: 70e9 · 12 B = 840 GB of parameter side over ZeRO-3 → 11 cards, 8 are not enough
        zero3 = cells["zero3"][0]
        assert zero3.endswith(("(11)", "（11）")) and math.ceil(840e9 / (usable - GIB)) == 11

    # 3: LoRA r=64 all-linear, by hand: r·(d_in + d_out) per matrix from the preset's shape
    spec = Scenario.create(model).model
    kv = spec.kv_heads * spec.head_dim
    shapes = [(spec.hidden, spec.heads * spec.head_dim), (spec.hidden, kv), (spec.hidden, kv),
              (spec.heads * spec.head_dim, spec.hidden), (spec.hidden, spec.intermediate),
              (spec.hidden, spec.intermediate), (spec.intermediate, spec.hidden)]
    rows = table_rows(section(text, lora_h))
    per_matrix = [64 * (d_in + d_out) for d_in, d_out in shapes]
    assert [integer(r[4]) for r in rows[:7]] == per_matrix
    assert [(integer(r[1]), integer(r[2])) for r in rows[:7]] == shapes
    assert integer(rows[7][4]) == sum(per_matrix)
    assert integer(rows[8][4]) == spec.layers * sum(per_matrix) == estimate(model, method="lora").derived["P_lora"]
    # the derivative ∂P_LoRA/∂r, printed as its result line, is the per-rank count L·Σ(d_in + d_out)
    assert f"= {documents.group_digits(spec.layers * sum(per_matrix) // 64, chr(92) + ',')}" + r"\ \mathrm{params}" in text


def test_bytes_per_param_follow_the_recipe():
    """8-bit optimizer states: 2 (weight) + 2 (grad) + 2·1 (m, v) = 6 B/param, 10 with the fp32 master."""
    text = render(Scenario.create("7b", state_dtype="int8"), fmt="markdown", lang="zh")
    assert "**6 还是 10？**" in text and "= 2 + 1 \\cdot 2 + 2" in text


def test_decimal_units():
    """--units GB: the reference answer's arithmetic, 7e9 bf16 weights = 14 GB, 12 B/param = 84 GB with the grads
    and states (70 GB trainable)."""
    text = render(Scenario.create("7b"), fmt="markdown", units="GB")
    full = table_rows(section(text, "## 5. "))[0]
    assert full[1:3] == ["14.00 GB", "70.00 GB"]
    assert r"= 14\,000\,000\,000\ \mathrm{B} \approx 14.00\ \mathrm{GB}" in text


def test_a_change_of_input_changes_the_document_consistently():
    """r=16 at seq 4096: the LoRA count, the r-rescaling follow-up and the comparison all move together."""
    text = render(Scenario.create("7b", method="lora", rank=16, seq=4096), fmt="markdown", lang="en")
    assert "39,976,960" in text                        # 32 · 16 · (4·8192 + 3·15104), by hand
    assert "**LoRA at r = 64?**" in text and "= 159,907,840" in text
    lora = table_rows(section(text, "## 5. "), 0)[2]
    assert gib(lora[3]) == round(estimate("7b", method="lora", rank=16, seq=4096).blocks["activations"] / GIB, 2)


# ---------------------------------------------------------------- formats

class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.maths, self.outside, self.tags, self.sources = [], 0, [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.sources += [value for name, value in attrs if name in ("src", "href")]
        if tag == "math":
            self.maths += 1
        self.stack.append(tag)

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop() != tag:
            pass

    def handle_data(self, data):
        if "math" not in self.stack and "style" not in self.stack:
            self.outside.append(data)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_html_is_self_contained_and_every_formula_is_mathml(lang):
    html = documents.render_context(context("7b", method="lora"), fmt="html", lang=lang)
    parser = _Collect()
    parser.feed(html)
    prose = "".join(parser.outside)
    # no LaTeX left outside <math>: every formula became MathML
    assert not re.search(r"\\(cdot|frac|mathrm|beta|left|approx)|\$", prose)
    assert parser.maths >= 40
    assert not {"script", "link", "iframe"} & set(parser.tags)
    # the plot is embedded: nothing is loaded from elsewhere
    assert parser.tags.count("img") == 1 and all(src.startswith("data:image/svg+xml;base64,") for src in parser.sources)


def test_html_escapes_a_model_name_from_config_json(tmp_path):
    cfg = json.loads(json.dumps({"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024,
                                 "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 1000,
                                 "_name_or_path": "<script>alert(1)</script>&_%$#"}))
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    sc = Scenario.create(str(tmp_path / "config.json"), rank=8)
    parser = _Collect()
    parser.feed(render(sc, fmt="html"))
    assert "script" not in parser.tags
    assert "<script>alert(1)</script>&_%$#" in "".join(parser.outside)
    tex = render(sc, fmt="tex")
    assert r"\textless{}script\textgreater{}alert(1)\textless{}/script\textgreater{}\&\_\%\$\#" in tex


@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason="pdflatex is not installed (Debian: texlive-latex-base latex-cjk-chinese "
                           "latex-cjk-chinese-arphic-gbsn00lp, as .ci/run installs)")
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_tex_compiles_with_pdflatex(lang, tmp_path):
    pdf = documents.compile_pdf(render(Scenario.create("7b"), fmt="tex", lang=lang))
    assert pdf.startswith(b"%PDF") and len(pdf) > 10_000


def test_pdf_without_pdflatex_says_so(monkeypatch):
    monkeypatch.setattr(documents.shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="needs pdflatex, which is not installed"):
        documents.compile_pdf(r"\documentclass{article}\begin{document}x\end{document}")


def test_template_dir_comes_first(tmp_path):
    (tmp_path / "explain.en.j2").write_text("Peak of << model.name >>: << peak|bytes >>, "
                                            "<< m.m(ledger.by_key['weights_16bit']|latex) >>\n")
    text = render(Scenario.create("7b", method="qlora"), template_dir=str(tmp_path))
    assert text.startswith(f"Peak of 7b: {estimate('7b', method='qlora').peak / GIB:.2f} GiB, "
                           r"$M_{16} = P_{16} \cdot \beta_{w}$")
    (tmp_path / "explain.en.j2").write_text("<< no_such_value >>\n")
    with pytest.raises(UserError, match="template error"):
        render(Scenario.create("7b"), template_dir=str(tmp_path))


# ---------------------------------------------------------------- the command line

def test_cli_never_overwrites_without_force(tmp_path, capsys):
    out = tmp_path / "answer.md"
    out.write_text("keep me")
    assert main(["explain", "7b", "--lang", "zh", "-o", str(out)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err and out.read_text() == "keep me"
    assert main(["explain", "7b", "--lang", "zh", "-o", str(out), "--force"]) == 0
    assert out.read_text(encoding="utf-8").startswith("# 7b 微调要多少显存")


def test_cli_unwritable_path_is_a_clear_error(tmp_path, capsys):
    assert main(["explain", "7b", "-o", str(tmp_path / "missing" / "answer.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("symvram: error: cannot write") and err.count("\n") == 1


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
def test_cli_pdf(tmp_path):
    out = tmp_path / "a.pdf"
    assert main(["explain", "7b", "--method", "qlora", "--lang", "zh", "--format", "pdf", "-o", str(out)]) == 0
    assert out.read_bytes().startswith(b"%PDF")


def test_markdown_code_span_holds_backticks(tmp_path):
    """A config.json name with backticks stays inside one code span (CommonMark: a longer fence),
    so it cannot close the span and inject HTML."""
    import json

    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
           "_name_or_path": "evil`<img src=x onerror=alert(1)>`x"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    text = render(Scenario.create(str(tmp_path / "config.json"), method="lora", rank=8), fmt="markdown")
    assert "``evil`<img src=x onerror=alert(1)>`x``" in text
