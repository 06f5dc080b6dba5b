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
from symvram.presets import load_card
from symvram.analysis.plan import plan
from symvram.cli import main
from symvram.errors import UserError
from symvram.analysis import explain
from symvram.present import documents
from symvram.present import tex as toolchain
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
    return explain.explain_context(Scenario.create(model, **settings))


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
        ckpt = estimate(model, grad_checkpointing=True, **recipe)
        figures = [e.blocks["base"], e.blocks["trainable"], e.blocks["activations"], e.ledger_total,
                   e.terms.get("optimizer_temp", 0), e.peak, ckpt.peak]
        assert [gib(c) for c in row[1:8]] == [round(b / GIB, 2) for b in figures]
    assert [integer(r[8].split()[0]) for r in rows] == [12, 16, 12, 12]   # bf16 2+2+8, + fp32 master 4; LoRA 2+2+8
    # the foreach AdamW temporary is one fp32 state per trainable parameter: 4 B · P for full fine-tuning
    P = estimate(model).derived["P"]
    assert gib(rows[0][5]) == round(4 * P / GIB, 2)

    # 6: the other scale (7b <-> 70b): peaks without and with checkpointing, then analysis.plan's fewest cards
    other = "70b" if model == "7b" else "7b"
    for row, recipe in zip(table_rows(section(text, other_h), 0), RECIPES):
        assert gib(row[5]) == round(estimate(other, **recipe).peak / GIB, 2)
        assert gib(row[6]) == round(estimate(other, grad_checkpointing=True, **recipe).peak / GIB, 2)
    result = plan(Scenario.create(other), load_card("a100-80g"))
    with_ckpt = plan(Scenario.create(other, grad_checkpointing=True), load_card("a100-80g"))
    ckpt_rows = {(r.method, r.strategy.key): r for r in with_ckpt.rows}
    order = list(dict.fromkeys(r.strategy.key for r in result.rows))     # the table lists strategies in plan's order
    cells = dict(zip(order, (row[1:] for row in table_rows(section(text, other_h), 1))))
    for r in result.rows:
        cell = cells[r.strategy.key][["full", "lora", "qlora"].index(r.method)]
        k = ckpt_rows[(r.method, r.strategy.key)]
        without, rest = cell.split(" / ")
        assert without == (str(r.gpus) if r.fits else "–")
        assert rest.startswith(str(k.gpus) if k.fits else "–")
    if other == "70b":   # the interview count: 70e9 · 12 B = 840 GB of parameter side over ZeRO-3 → 10 cards, 8 are not enough
        zero3 = cells["zero3"][0]
        # per GPU: usable less two threads' cuBLAS + cuBLASLt workspaces (8.125 + 1 MiB) and 16 NCCL channels × 4 MiB
        per_gpu = usable - 2 * (8519680 + 2**20) - 16 * 4 * 2**20
        assert zero3.endswith(("(10)", "（10）")) and math.ceil(840e9 / per_gpu) == 10
        # ZeRO-3: 14 cards with checkpointing; without, the next-to-last layer's end of backward (every layer's
        # activations, its unsharded gradients, the reduce-scatter input above: FSDP2's buffers as measured,
        # benchmarks/results/fsdp.md) first fits the 78.52 GiB per-GPU budget at 59 cards
        assert zero3.startswith("59 / 14")

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
    assert f"= {explain.group_digits(spec.layers * sum(per_matrix) // 64, chr(92) + ',')}" + r"\ \mathrm{params}" in text


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
    assert r"\textless{}script\textgreater{}alert(1)\textless{}/script\textgreater{}\&\_\allowbreak{}\%\$\#" in tex


@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason="pdflatex is not installed (Debian: texlive-latex-base latex-cjk-chinese "
                           "latex-cjk-chinese-arphic-gbsn00lp, as .ci/run installs)")
@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("settings", [{}, dict(method="qlora"), dict(method="lora", batch=4, seq=4096),
                                      dict(zero=3, gpus=8)],   # a layer end at the peak, A_saved defined below it
                         ids=["full", "qlora", "lora-4096", "zero3"])
def test_tex_compiles_with_pdflatex(lang, settings, tmp_path):
    """Both languages compile, and no line or table sticks out of the text block by more than 1 pt (the old
    documents had 151 pt of "up_proj, down_proj" off the edge of the zh QLoRA page, and tables squeezed
    into unbreakable \\resizebox-es)."""
    pdf, log = toolchain.compile_tex(render(Scenario.create("7b", **settings), fmt="tex", lang=lang))
    assert pdf.startswith(b"%PDF") and len(pdf) > 10_000
    assert [pt for pt in toolchain.overfull_boxes(log) if pt > 1.0] == []


def test_pdf_without_pdflatex_says_so(monkeypatch):
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="needs pdflatex, which is not installed"):
        toolchain.compile_pdf(r"\documentclass{article}\begin{document}x\end{document}")


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


# ---------------------------------------------------------------- issue 13: the worked answer an interviewer would sign

def test_headline_answer_in_the_questions_units():
    """The reference: 7B full is 7e9 × 12 = 84 GB, × 16 = 112 GB, and does not fit one 80 GB card; 70B is 840 GB.
    Both appear in the default (GiB) document, with the GiB figures next to them."""
    text = render(Scenario.create("7b"), fmt="markdown", lang="en")
    head = text.split("## 1. ")[0]
    assert f"**{7 * 12} GB** ({7e9 * 12 / GIB:.2f} GiB)" in head and f"**{7 * 16} GB**" in head
    assert "does not fit one NVIDIA A100 80GB" in head
    assert '"80GB" has 80 GiB' in head                        # why a card's "80GB" is GiB-sized
    assert f"**{70 * 12} GB**" in render(Scenario.create("70b"), fmt="markdown", lang="en")
    # the other scale: 840e9 B over a 78.58 GiB budget (usable less two threads' cuBLAS + cuBLASLt workspaces,
    # 8.125 + 1 MiB) is ⌈9.96⌉ = 10 cards of parameter side, so eight are not enough; 7B's 84e9 B needs
    # ⌈0.996⌉ = 1 (and nobody says "eight" there)
    budget = load_gpu("a100-80g").usable_bytes - 2 * (8519680 + 2**20)
    assert math.ceil(840e9 / budget) == 10 and math.ceil(84e9 / budget) == 1
    six = section(text, "## 6. ")
    assert "at least 10 cards of 78.58 GiB for that alone, so eight are not enough" in six
    other = section(render(Scenario.create("70b"), fmt="markdown", lang="en"), "## 6. ")
    assert "at least 1 card of 78.58 GiB for that alone;" in other and "eight" not in other
    zh = render(Scenario.create("7b"), fmt="markdown", lang="zh")
    assert "**84 GB**" in zh and "**112 GB**" in zh and "放不下" in zh.split("## 一、")[0]


def test_explain_and_diagnose_are_one_triage():
    """llama-3-8b LoRA, batch 4, seq 4096 on an RTX 4090: the document lists exactly diagnose's remedies, with
    the same peaks, and never claims that something fits that diagnose says does not."""
    from symvram.analysis.diagnose import diagnose

    sc = Scenario.create("llama-3-8b", method="lora", batch=4, seq=4096)
    d = diagnose(sc, load_card("rtx-4090"))
    text = render(sc, fmt="markdown", lang="en", gpu="rtx-4090")
    triage = text[text.index("**It ran out of memory"):]
    items = [line for line in triage.splitlines() if re.match(r"\d+\. ", line)]
    assert len(items) == len(d.proposals)
    for line, r in zip(items, d.proposals):
        assert r.title.split(" (")[0] in line
        if r.modelled:
            assert f"peak {r.after.peak / GIB:.2f} GiB" in line
            assert ("which fits" in line) == (r.after.peak <= d.budget)
    assert "factor of two" not in text


def test_optimizer_temporary_is_its_own_line_and_not_activations():
    """7B full at the optimizer step: the 26.08 GiB (7e9 · 4 B) is foreach AdamW's buffer, listed as a temporary,
    and the triage does not blame activations for it."""
    text = render(Scenario.create("7b"), fmt="markdown", lang="en")
    rows = table_rows(section(text, "## 1. "), 0)
    temp = [r for r in rows if r[0] == "temporary at the peak"]
    assert len(temp) == 1 and gib(temp[0][3]) == round(7e9 * 4 / GIB, 2)
    assert "activation side adds" not in text
    assert "**Activations do not set this peak**" in text


def test_peak_and_ledger_total_are_reconciled():
    """70B LoRA: the ledger total (195.69 GiB) exceeds the peak (194.64 GiB); the document shows the moment
    table and the reconciliation total − freed + temporaries = peak."""
    e = estimate("70b", method="lora")
    assert e.ledger_total > e.peak
    text = render(Scenario.create("70b", method="lora"), fmt="markdown", lang="en")
    line = next(x for x in text.splitlines() if x.startswith("Reconciled:"))
    numbers = [float(n.replace(",", "")) for n in re.findall(r"([\d,]+\.\d\d) GiB", line)]
    total, freed, temps, peak = numbers
    assert total == round(e.ledger_total / GIB, 2) and peak == round(e.peak / GIB, 2)
    assert abs(total - freed + temps - peak) <= 0.02


def test_levers_are_ranked_by_what_they_save_at_the_peak():
    """Full fine-tuning peaks at the optimizer step: halving the sequence saves ~0, fused AdamW saves the foreach
    buffer; for LoRA at 4096 tokens the activations set the peak and checkpointing ranks above halving r."""
    text = render(Scenario.create("7b"), fmt="markdown", lang="en")
    levers = text[text.index("**Which lever"):text.index("**It ran out")]
    items = [x for x in levers.splitlines() if re.match(r"\d+\. ", x)]
    saved = [float(re.search(r"([\d,]+\.\d\d) GiB saved", x).group(1).replace(",", "")) for x in items
             if "GiB saved" in x]
    assert saved == sorted(saved, reverse=True)
    fused = next(x for x in items if x.split(". ", 1)[1].startswith("fused AdamW"))
    assert f"{(estimate('7b').peak - estimate('7b', optimizer_impl='fused').peak) / GIB:.2f} GiB saved" in fused
    assert "0.00 GiB saved" in next(x for x in items if "half the sequence" in x)
    lora = render(Scenario.create("7b", method="lora", seq=4096), fmt="markdown", lang="en")
    levers = lora[lora.index("**Which lever"):lora.index("**It ran out")]
    assert "Activations do not set" not in levers
    keys = [x.split(". ", 1)[1] for x in levers.splitlines() if re.match(r"\d+\. ", x)]
    assert keys.index(next(k for k in keys if k.startswith("gradient checkpointing"))) < \
        keys.index(next(k for k in keys if k.startswith("half the LoRA rank")))


def test_sdpa_against_eager_is_quantified():
    """Eager attention saves the fp32 softmax and its 16-bit copy, L · b · n_h · s² · (4 + 2) bytes, and no fp32
    log-sum-exp (L · b · n_h · s · 4); q, k, v are the same size here (n_kv = n_h on the 7B preset)."""
    text = render(Scenario.create("7b", method="lora"), fmt="markdown", lang="en")
    sdpa, eager = estimate("7b", method="lora"), estimate("7b", method="lora", attention="eager")
    extra = eager.blocks["activations"] - sdpa.blocks["activations"]
    assert extra == 32 * 32 * 2048**2 * (4 + 2) - 32 * 32 * 2048 * 4
    assert f"{extra / GIB:.2f} GiB more" in text


def test_70b_paragraph_is_built_on_the_plan_with_checkpointing():
    """The reference: QLoRA 70B runs on one 80 GB card (with checkpointing, no offload); full fine-tuning's headline
    is the fewest cards without offload, with offload the alternative and its host memory without the foreach
    buffer: 1 card with parameter offload keeps 70e9 · (2 weight + 2 grad + 8 states) B and the for-loop step's two
    fp32 temporaries of the largest parameter (the 32000 × 8192 embedding: torch's AdamW on CPU tensors is the
    for-loop) ≈ 784 GiB on the host, not the 1,043 GiB that counted foreach AdamW's 4 B/param."""
    text = render(Scenario.create("7b"), fmt="markdown", lang="en")
    bullets = {x.split("**")[1]: x for x in section(text, "## 6. ").splitlines() if x.startswith("- **")}
    assert bullets["QLoRA"].startswith("- **QLoRA**: 1 card with DDP and gradient checkpointing, no offload")
    assert bullets["full"].startswith("- **full**: 14 cards with ZeRO-3")
    host = float(re.search(r"([\d,]+\.\d\d) GiB of CPU memory", bullets["full"]).group(1).replace(",", ""))
    assert "ZeRO-3 + parameter offload" in bullets["full"] and abs(host - (70e9 * 12 + 2 * 4 * 32000 * 8192) / GIB) < 0.01


def test_bf16_fp16_mechanism():
    text = render(Scenario.create("7b"), fmt="markdown", lang="en")
    assert "bf16 (8) is worse than fp16 (11)" in text and "fp16's problem is range" in text
    zh = render(Scenario.create("7b"), fmt="markdown", lang="zh")
    assert "BF16（8 位）反而比 FP16（11 位）差" in zh and "FP16 的毛病在范围" in zh
    with pytest.raises(UserError, match="range"):
        Scenario.create("7b", dtype="fp16")


@pytest.mark.parametrize("settings", [{}, dict(method="qlora"), dict(method="lora", seq=4096, batch=4)])
def test_chinese_is_chinese(settings):
    """No English prose left in the zh document (code spans, formulas and units aside), full-width quotes,
    a QLoRA base called NF4, no "from X to X, unchanged"."""
    text = render(Scenario.create("7b", **settings), fmt="markdown", lang="zh")
    prose = re.sub(r"`[^`]*`|\$\$.*?\$\$|\$[^$]*\$", "", text, flags=re.S)
    prose = prose.split("\n---\n")[0]
    assert '"' not in prose and "方法 **" not in prose
    words = set(re.findall(r"[A-Za-z]{4,}", prose))
    allowed = {"AdamW", "BF16", "FP16", "FP32", "LoRA", "QLoRA", "NVIDIA", "fused", "foreach", "NVLink", "batch",
               "token", "loss", "norm", "hidden", "scaling", "Kahan", "ZeRO", "FSDP", "offload", "decoder", "adapter",
               "embedding", "query", "bitsandbytes", "SiLU", "eager", "SDPA", "FlashAttention", "attention",
               "memory", "efficient", "kernel", "stage", "step", "softmax", "float", "logits", "inv_freq", "absmax",
               "head", "proj", "gate", "down", "lora", "PEFT", "DeepSpeed", "sqrt", "_foreach_sqrt", "rope",
               "RoPE", "RMSNorm", "int64", "PCIe", "DDP", "Adam", "nf4", "max_seq_len", "torch", "cuda", "GiB",
               "allocated", "symvram", "diagnose", "measured", "peak", "explain", "Linear4bit", "lse", "efficient",
               "FULL_SHARD", "SHARD_GRAD_OP", "param"}   # FSDP option names, B/param
    leftover = {w for w in words if w not in allowed and not any(w in a for a in allowed)}
    assert not leftover, leftover
    if settings.get("method") == "qlora":
        assert "权重 BF16" not in text and "4-bit NF4" in text.split("\n\n")[1]
    assert not re.search(r"从 ([\d.]+ GiB) 变成 \1", text)
    en = render(Scenario.create("7b", **settings), fmt="markdown", lang="en")
    assert not re.search(r"from ([\d.]+ GiB) to \1", en)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_tex_markup(lang):
    """Derivations aligned on '=' (align*), tables that break across pages (longtable), no bare % (a TeX
    comment that cut the units sentence short), straight quotes and --master kept as typed."""
    tex = render(Scenario.create("7b", method="qlora"), fmt="tex", lang=lang)
    body = tex[tex.index(r"\begin{document}"):]
    assert body.count(r"\begin{align*}") >= 8 and "&= " in body and r"\begin{flushleft}" not in body
    assert r"\begin{longtable}" in body and r"\resizebox" not in body
    assert not re.search(r"(?<!\\)%", body)
    assert r"--master" not in body and "\"" not in body.replace(r"\texttt{\"}", "")
    assert r"d_{\mathrm{head}}" in body and "d_{head}" not in body
    full = render(Scenario.create("7b"), fmt="tex", lang="en")
    assert r"``12 to 16 bytes per parameter" in full and "-{}-master fp32" in full


def test_html_derivations_are_aligned_math_blocks():
    """One <math display="block"> per derivation, an <mtable> aligned right|left on '=', units upright
    (\\mathrm{B} as text, not an italic <mi>B</mi>), multi-letter subscripts upright."""
    ctx = context("7b", method="lora")
    html = documents.render_context(ctx, fmt="html", lang="en")
    blocks = re.findall(r'<math[^>]*display="block">(.*?)</math>', html, re.S)
    derivations = 3 + 1 + 1 + 1 + 1 + 1 + 1 + 1   # base, trainable, β (3), P_LoRA, ∂P/∂r, A_layer, A_ckpt, r=16
    assert len(blocks) == derivations
    assert all(b.startswith('<mtable columnalign="right left"') for b in blocks)
    assert "<mi>B</mi>" not in html and "<mtext>B</mtext>" in html
    assert "<mi>h</mi><mi>e</mi><mi>a</mi><mi>d</mi>" not in html
    # A_layer's long sum is cut into rows (each continuation row starts with +), so it does not run off the page
    rows = sorted(b.count("<mtr>") for b in blocks)
    assert rows[0] == 3 and rows[-1] >= 5


def test_the_loss_is_the_first_lever_for_llama3_qlora_at_4096():
    """Llama-3 QLoRA, batch 4 × 4096 with checkpointing: the fp32 log-softmax and the two fp32 loss gradients are
    3 · 4 B · T · V (T = 16,384 tokens, V = 128,256) = 23.48 GiB of a 34.86 GiB peak; a chunked cross-entropy is
    the first lever and the first remedy."""
    text = render(Scenario.create("llama-3-8b", method="qlora", batch=4, seq=4096, grad_checkpointing=True),
                  fmt="markdown", lang="en", gpu="rtx-4090")
    bound = 3 * 4 * 4 * 4096 * 128256
    levers = text[text.index("**Which lever"):text.index("**It ran out")]
    first = next(x for x in levers.splitlines() if x.startswith("1. "))
    assert first.startswith("1. a chunked / fused cross-entropy")  # modelled now (Liger FLCE): the peak moves to
    assert bound / GIB > 16                                           # the recompute, it saves less than the bound
    triage = text[text.index("**It ran out"):]
    assert next(x for x in triage.splitlines() if x.startswith("1. ")).startswith("1. a chunked / fused cross-entropy")
    assert "What sets it is the loss's vocabulary-sized tensors" in triage


def test_fused_adamw_is_named_in_the_headline():
    """7B full: the 12 B/param peak (112 GB) drops by the foreach buffer, 7e9 · 4 B = 28 GB, with fused AdamW."""
    head = render(Scenario.create("7b"), fmt="markdown", lang="en").split("## 1. ")[0]
    fused = estimate("7b", optimizer_impl="fused").peak
    assert abs((estimate("7b").peak - fused) - 7e9 * 4) < 0.05e9    # the buffer, less the end-of-backward tail
    assert f"{fused / 1e9:.2f} GB ({fused / GIB:.2f} GiB) with fused AdamW" in head


def test_qlora_base_against_the_back_of_envelope_figure():
    """The reference's 3.5 GB is 7e9 × 0.5 B. The ledger's base: NF4 for the linear layers (P_quant / 2 bytes),
    the double-quantized absmax (8 bits per 64 weights + 32 bits per 64 · 256), and the embeddings, lm_head and
    norms in bf16 (P_keep · 2): by hand from the 7B preset's shapes."""
    text = render(Scenario.create("7b"), fmt="markdown", lang="en")
    h, L, V = 4096, 32, 32000
    p_keep = 2 * V * h + (2 * L + 1) * h
    p_quant = 7_000_000_000 - p_keep
    nf4, constants = p_quant // 2, p_quant * (8 / 64 + 32 / (64 * 256)) / 8
    line = next(x for x in text.splitlines() if x.startswith("The QLoRA base is"))
    assert "0.5 B/param × 7,000,000,000 = 3.50 GB" in line
    assert f"{nf4 / 1e9:.2f} GB of 4-bit NF4 weights for the {p_quant:,} linear-layer parameters" in line
    assert f"{constants / 1e9:.2f} GB of quantization constants" in line
    assert f"{p_keep * 2 / 1e9:.2f} GB for the {p_keep:,} parameters that stay in 16 bits" in line


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_tex_of_a_paged_8bit_optimizer_fits_the_page(lang):
    """A paged 8-bit AdamW's states, substituted, are rows of (… + …) · [n ≥ n_8]: each is cut inside its
    parentheses with the bracket kept on its last row (issue 28: 84 pt past the margin)."""
    tex = render(Scenario.create("llama-3-8b", method="full", optimizer="paged-adamw8bit"), fmt="tex", lang=lang)
    pdf, log = toolchain.compile_tex(tex)
    assert [pt for pt in toolchain.overfull_boxes(log) if pt > 1.0] == []


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_tex_of_a_moe_family_fits_the_page(lang):
    """Qwen3-MoE's LoRA count is one product L · r · (… + … + …): its rows are cut inside the parentheses, and the
    experts' term explanations (with Greek letters and √) compile."""
    tex = render(Scenario.create("qwen3-30b-a3b", method="lora", rank=8), fmt="tex", lang=lang)
    pdf, log = toolchain.compile_tex(tex)
    assert [pt for pt in toolchain.overfull_boxes(log) if pt > 1.0] == []
    assert r"\bigl(" in tex and r"\bigr)" in tex


def test_every_moment_has_a_chinese_name():
    """The zh document names the peak's moment from its own table; a moment added to the ledger without an entry
    printed its key (lora_output_forward) in the Chinese prose."""
    from symvram.ledger.terms import MOMENTS

    text = (Path(__file__).resolve().parents[1] / "templates" / "explain.zh.j2").read_text(encoding="utf-8")
    table = text[text.index("set moment_zh"):text.index("%>", text.index("set moment_zh"))]
    assert [m.key for m in MOMENTS if f'"{m.key}":' not in table] == []
