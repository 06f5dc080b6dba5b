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
    assert 'pip install -q -e ".[validate,integrations,test]"' in ci and ci.rstrip().endswith("python -m pytest -q")
    assert first[1].startswith('pip install -e ".[validate,integrations,test]" && python -m pytest -q')


@pytest.mark.parametrize("n", range(len(re.findall(r"```python\n", README))))
def test_python_examples_run(n):
    code = re.findall(r"```python\n(.*?)```", README, re.S)[n]
    exec(compile(code, f"README.md python block {n + 1}", "exec"), {})


def test_linked_files_exist():
    targets = re.findall(r"\]\(((?!https?:|#)[^)\s]+)\)", README)
    assert "docs/tour/breakdown.png" in targets and "benchmarks/results/accuracy.md" in targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert missing == []


def test_the_readme_is_short_and_its_outputs_are_generated():
    """≤ 10 KB: what it is, the set-up commands, three commands with their output, the breakdown figure
    and the page's screenshot, the accuracy summary; everything else is on the docs site (docs/, mkdocs.yml)."""
    assert len(README.encode("utf-8")) <= 10 * 1024
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README)
    assert images == ["docs/tour/breakdown.png", "docs/page.png"]
    assert "reference answer" in README
    assert not re.search(r"(?m)^#{1,2} (?!symvram$|How accurate|More$)", README), "a pasted heading at the top level"


def test_every_docs_page_is_in_the_site_and_its_links_resolve():
    docs = ROOT / "docs"
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in docs.glob("*.md"):
        assert page.name in config, f"{page.name} is not in mkdocs.yml's nav"
        for target in re.findall(r"\]\(((?!https?:|#)[^)\s#]+)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{page.name} links to a missing {target}"
    hooks = (ROOT / "scripts" / "docs_hooks.py").read_text(encoding="utf-8")
    for page in docs.glob("*.md"):
        text = page.read_text(encoding="utf-8")
        # a placeholder reads on GitHub: a ```generated block naming its command and a note, never a bare comment
        assert "<!-- symvram" not in text and "<!-- cli-reference" not in text, page.name
        for name, note in re.findall(r"```generated\n([\w-]+)[^\n]*\n([^\n]*)\n```", text):
            assert f'"{name}"' in hooks, f"{page.name}: the placeholder {name} is not filled at build time"
            assert "made when the docs site builds" in note, f"{page.name}: {name} says nothing to a raw reader"


def test_docs_placeholder_is_one_fenced_block():
    import sys
    sys.path.insert(0, str(ROOT / "scripts"))
    from docs_hooks import PLACEHOLDER

    page = "a\n```generated\ncli-reference\n(made when the docs site builds)\n```\nb\n```text\nkept\n```\n"
    assert PLACEHOLDER.sub(lambda m: f"[{m.group(1)}]", page) == "a\n[cli-reference]\nb\n```text\nkept\n```\n"
