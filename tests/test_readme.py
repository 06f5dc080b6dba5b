"""The README keeps its promises: the test command is the one CI runs, its Python examples run, and
every file it links to or shows exists."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_first_two_commands_install_run_and_test():
    first = re.search(r"```bash\n(.*?)\n```", README, re.S).group(1).splitlines()
    assert first[0].startswith("pip install -e . && symvram estimate 7b")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert 'pip install -q -e ".[validate,test]"' in ci and ci.rstrip().endswith("python -m pytest -q")
    assert first[1].startswith('pip install -e ".[validate,test]" && python -m pytest -q')


@pytest.mark.parametrize("n", range(len(re.findall(r"```python\n", README))))
def test_python_examples_run(n):
    code = re.findall(r"```python\n(.*?)```", README, re.S)[n]
    exec(compile(code, f"README.md python block {n + 1}", "exec"), {})


def test_linked_files_exist():
    targets = re.findall(r"\]\(((?!https?:|#)[^)\s]+)\)", README)
    assert "docs/tour/seq_curve.png" in targets and "benchmarks/results/accuracy.md" in targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert missing == []
