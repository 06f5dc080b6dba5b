"""The import contract of pyproject.toml's [tool.importlinter]: layers one way (core < ledger < model and
scenario < evaluate < analysis < render < api < cli, lazy imports included), validate on the side."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contract_holds(capsys):
    cli = pytest.importorskip("importlinter.cli", reason="import-linter is in the test extra: pip install -e '.[test]'")
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        code = cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True)
    finally:
        os.chdir(here)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "broken" in out and "0 broken" in out


def test_the_render_layer_fills_the_registry():
    """Every result type displays itself through symvram.rendering, in the formats the layers promise."""
    from symvram.analysis.diagnose import Diagnosis
    from symvram.analysis.fit import FitResult
    from symvram.analysis.plan import PlanResult
    from symvram.analysis.sensitivity import SensitivityResult
    from symvram.analysis.whatif import WhatIf
    from symvram.evaluate import Breakdown
    from symvram.ledger.terms import Ledger, Term
    from symvram.rendering import formats

    assert {"repr", "markdown"} <= set(formats(Breakdown)) and {"repr", "markdown"} <= set(formats(Ledger))
    assert {"repr", "latex"} <= set(formats(Term))
    for cls in (WhatIf, FitResult, SensitivityResult, PlanResult, Diagnosis):
        assert {"repr", "text", "json"} <= set(formats(cls)), cls.__name__


def test_no_cli_module_holds_a_renderer():
    """cli/* is argument parsing → analysis or api → render: no report functions defined there."""
    import ast

    for path in (ROOT / "symvram/cli").glob("*.py"):
        names = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}
        assert not names & {"render", "to_json", "to_json_whatif", "summary", "remedy_lines", "explain",
                           "time_lines", "time_json", "compare_time_line"}, path.name
