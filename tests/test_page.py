"""The calculator page without a browser: self-contained, escaped, its formulas and arithmetic printed
from the ledger, and its lookup tables equal to what Scenario builds for every combination tried."""
from __future__ import annotations

import itertools
import json
import random
import re
from dataclasses import asdict

import pytest
from latex2mathml.converter import convert
from sympy.printing.jscode import jscode

from symvram.analysis.whatif import ledger_symbols
from symvram.cli import main
from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.ledger import build_ledger
from symvram.present.page import _mathml, page_data, render_page
from symvram.symbols import latex
from symvram.present.tables import term_latex
from symvram.scenario import Scenario

HOSTILE = '</script><script>alert(1)</script><img src=x onerror="alert(2)">&amp; \u2028'


def embedded_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def lora_page():
    sc = Scenario.create("7b", method="lora", rank=16, batch=2, seq=1024)
    return sc, render_page(sc, gpu="l4")


@pytest.fixture(scope="module")
def lora_data(lora_page):
    return page_data(lora_page[0], gpu="l4")


def test_page_needs_no_network(lora_page):
    html = lora_page[1]
    assert "http://" not in html and "https://" not in html and "//cdn" not in html
    assert not re.search(r"<(link|img|iframe|object|embed)\b|\bsrc=", html)
    assert "default-src 'none'" in html  # and the browser is told to load nothing


def test_formulas_are_the_documents_latex_as_mathml(lora_page):
    sc, html = lora_page
    mathml = embedded_data(html)["mathml"]
    for bd in (evaluate(sc), evaluate(sc.with_changes(zero=3, gpus=2))):   # ZeRO-3: FSDP2's long sums too
        for t in bd.ledger.terms:  # the same LaTeX `estimate --format json` prints, through latex2mathml whole
            expected = convert(term_latex(bd, t.key)).replace(' xmlns="http://www.w3.org/1998/Math/MathML"', "")
            assert expected in mathml, t.key
    assert all(m.startswith("<math") for m in mathml)


@pytest.mark.parametrize("model", ["llama-3-8b", "gemma-2-9b", "mixtral-8x7b"])
def test_mathml_pieces_make_latex2mathmls_whole(model):
    """The page converts a formula piece by piece (top-level operators, then inside whole parentheses): the
    same MathML as latex2mathml's of the whole formula, for every term of varied ledgers."""
    formulas = set()
    for method, kw in itertools.product(("full", "lora", "qlora"), ({}, {"zero": 3, "gpus": 2},
                                                                    {"grad_checkpointing": True, "attention": "eager"})):
        for t in build_ledger(Scenario.create(model, method=method, **kw).structure).terms:
            formulas.add(f"{t.label} = {latex(t.expr)}")
    assert sum(r"\left(" in f for f in formulas) > 10
    for f in formulas:
        assert _mathml(f) == convert(f).replace(' xmlns="http://www.w3.org/1998/Math/MathML"', ""), f


def test_arithmetic_is_printed_from_the_ledger(lora_page):
    sc, html = lora_page
    for t in build_ledger(sc.structure).terms:
        assert f"return {jscode(t.expr, order='none')};" in html, t.key


def test_initial_settings_come_from_the_command_line(lora_page):
    data = embedded_data(lora_page[1])
    picked = {name: c["values"][c["initial"]] for name, c in data["controls"].items()}
    assert picked["method"] == "lora" and picked["targets"] == ["q_proj", "k_proj", "v_proj", "o_proj",
                                                                "gate_proj", "up_proj", "down_proj"]
    assert {k: c["initial"] for k, c in data["continuous"].items()} == {"batch": 2, "seq": 1024, "rank": 16, "gpus": 1}
    assert data["gpu"] == "l4"


def _lookup(data: dict, functions: list[str], chosen: dict, numbers: dict):
    """What the page's script does, in Python: (term key, block, JS code) triples, moments and values."""
    def index(names):
        i = 0
        for n in names:
            i = i * len(data["controls"][n]["options"]) + chosen[n]
        return i
    recipe, shape = data["recipeTable"][index(data["recipe"])], data["shapeTable"][index(data["shape"])]
    if isinstance(recipe, str) or isinstance(shape, str) or numbers["rank"] > shape[1]:
        return None
    st = data["structures"][data["pairs"][f"{shape[0]},{recipe[0]}"]]
    terms = [data["terms"][i] for lst in st[0] for i in data["lists"][lst]]
    values = {**data["common"], **data["vals"][recipe[1]]}
    for name, c in data["continuous"].items():
        values.update({s: numbers[name] for s in c["symbols"]})
    return ({(t["key"], t["block"], functions[t["fn"]]) for t in terms},
            [(data["moments"][m]["key"], tuple(data["moments"][m]["terms"])) for m in data["lists"][st[1]]],
            values, [data["defs"][d]["symbol"] for d in data["lists"][st[2]]])


def test_tables_give_the_structure_and_values_scenario_gives(lora_page, lora_data):
    """Random control settings: the page's tables pick exactly the ledger (term by term, as JavaScript)
    and the numbers that Scenario.create builds for them — or refuse where it refuses."""
    sc = lora_page[0]
    data, functions = lora_data
    rng = random.Random(8)
    valid = refused = 0
    for _ in range(150):
        chosen = {name: rng.randrange(len(c["options"])) for name, c in data["controls"].items()}
        numbers = {"batch": rng.randint(1, 64), "seq": rng.randint(1, 70000), "rank": rng.choice([1, 8, 4096, 5000]),
                   "gpus": rng.randint(1, 100)}
        settings = {name: data["controls"][name]["values"][i] for name, i in chosen.items()}
        try:
            expected = sc.with_changes(**settings, **numbers)
        except UserError:
            expected = None
        got = _lookup(data, functions, chosen, numbers)
        if expected is None:
            assert got is None, settings
            refused += 1
            continue
        assert got is not None, settings
        led = build_ledger(expected.structure)
        js = {(t.key, t.block, f"function(v){{const {{{', '.join(sorted(map(str, t.expr.free_symbols)))}}} = v; "
                                f"return {jscode(t.expr, order='none')};}}") for t in led.terms}
        assert got[0] == js, asdict(expected.structure)
        assert got[1] == [(m.key, m.terms) for m in led.moments]
        assert got[2] == expected.values()
        assert got[3] == [str(symbol) for symbol, _ in led.definitions]   # FSDP2's A_saved included
        valid += 1
    assert valid >= 40 and refused >= 20, (valid, refused)


def test_hostile_model_name_is_escaped(tmp_path, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "_name_or_path": HOSTILE, "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}))
    out = tmp_path / "page.html"
    assert main(["page", str(folder), "--method", "lora", "--rank", "4", "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert html.count("<script") == 2 and html.count("</script>") == 2
    assert "<img" not in html and "alert(1)</script>" not in html
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in html  # the name shows, as text
    assert embedded_data(html)["model"] == HOSTILE
    # and the page is never written over without --force
    capsys.readouterr()
    assert main(["page", str(folder), "-o", str(out)]) == 2
    assert "exists" in capsys.readouterr().err


def test_unknown_card_is_one_line_error(capsys):
    assert main(["page", "7b", "--gpu", "no-such-card"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("symvram: error: unknown GPU 'no-such-card'") and err.count("\n") == 1


def test_page_colours_are_the_figures(lora_page):
    """One colour language: the page's CSS variables are present/style.py's hex values, as the plots use."""
    from symvram.present import style

    root = re.search(r":root \{([^}]*)\}", lora_page[1]).group(1)
    declared = dict(re.findall(r"--([\w-]+): (#[0-9A-Fa-f]{6});", root))
    assert {k: declared[k] for k in style.BLOCK_COLORS} == style.BLOCK_COLORS
    assert (declared["fits"], declared["nofit"]) == (style.FIT_COLORS["fits"], style.FIT_COLORS["does not fit"])
    assert "#4e79a7" not in lora_page[1]   # no second palette


def test_card_menu_names_and_lora_only_controls(lora_page, lora_data):
    """Short card names for the menu; the controls greyed out without adapters change nothing there: under
    full fine-tuning, each leaves the structure and every number its ledger reads as they were."""
    data = lora_data[0]
    assert data["gpus"]["rtx-4090"]["short"] == "RTX 4090 24GB" and data["gpus"]["mi300x"]["short"] == "MI300X 192GB"
    assert data["loraMethods"] == ["lora", "qlora"]
    full = lora_page[0].with_changes(method="full")
    read = ledger_symbols(build_ledger(full.structure))   # derived quantities expanded
    for name, other in (("targets", ("q_proj", "v_proj")), ("adapter_dtype", "fp32"), ("rank", 8)):
        assert name in data["loraOnly"]
        changed = full.with_changes(**{name: other})
        assert changed.structure == full.structure, name
        assert {k: v for k, v in changed.values().items() if k in read} == \
            {k: v for k, v in full.values().items() if k in read}, name
