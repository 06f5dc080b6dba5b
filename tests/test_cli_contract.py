"""The CLI's error contract end to end: a real process prints one line and no traceback; only --debug or
SYMVRAM_DEBUG=1 shows one; a bug is an "internal error" (exit 1); -o never clobbers a file.
"""
import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from symvram.cli import estimate as estimate_cmd
from symvram.cli import main
from symvram.cli.common import write_output
from symvram.errors import UserError
from symvram.present.documents import environment

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*argv, debug_env=None):
    env = {k: v for k, v in os.environ.items() if k != "SYMVRAM_DEBUG"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if debug_env is not None:
        env["SYMVRAM_DEBUG"] = debug_env
    return subprocess.run([sys.executable, "-m", "symvram.cli", *argv], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv("SYMVRAM_DEBUG", raising=False)


def test_only_a_one_shot_process_pauses_the_collector():
    """``main`` (tests, scripts) leaves the garbage collector alone; ``entry`` (the console script, ``python -m
    symvram``) imports with it paused, then freezes the imported objects and resumes it."""
    import gc

    from symvram.cli import imports_frozen

    with imports_frozen():
        assert gc.isenabled()
    code = ("import gc, sys; from symvram.cli import entry; sys.argv[1:] = ['estimate', '7b', '--format', 'json']; "
            "rc = entry(); print(rc, gc.isenabled(), gc.get_freeze_count() > 10000, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.stderr.split() == ["0", "True", "True"] and json.loads(p.stdout)["full"]


@pytest.mark.parametrize("argv", [  # an argparse error and an engine error (it overflowed a float once)
    ["estimate", "7b", "--batch", "0"],
    ["estimate", "7b", "--set", "bytes_state=1e308"],
])
def test_a_real_process_prints_one_line(argv):
    p = run_cli(*argv)
    assert p.returncode == 2
    assert p.stdout == ""
    assert "Traceback" not in p.stderr
    assert p.stderr.startswith("symvram: error: ") and p.stderr.count("\n") == 1


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_flag_shows_the_traceback(where):
    argv = ["--debug", "estimate", "llama3-8b"] if where == "before" else ["estimate", "llama3-8b", "--debug"]
    p = run_cli(*argv)
    assert p.returncode != 0
    assert "Traceback" in p.stderr and "UserError: unknown model preset 'llama3-8b'" in p.stderr


@pytest.mark.parametrize("value,shows", [("1", True), ("0", False)])
def test_debug_environment_variable(value, shows):
    p = run_cli("estimate", "llama3-8b", debug_env=value)
    assert ("Traceback" in p.stderr) is shows
    if not shows:
        assert p.returncode == 2 and p.stderr.count("\n") == 1


def test_debug_in_process_raises_the_error():
    with pytest.raises(UserError, match="unknown model preset"):
        main(["--debug", "estimate", "llama3-8b"])


def test_env_debug_in_process_raises_the_error(monkeypatch):
    monkeypatch.setenv("SYMVRAM_DEBUG", "1")
    with pytest.raises(UserError, match="--batch"):
        main(["estimate", "7b", "--batch", "0"])


def _bug(args):
    raise ZeroDivisionError("a bug\nspread over two lines")


def test_a_bug_is_an_internal_error_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(estimate_cmd, "run", _bug)
    assert main(["estimate", "7b"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and err.count("\n") == 1
    assert err.startswith("symvram: internal error: ZeroDivisionError: a bug spread over two lines")


def test_a_bug_with_debug_raises(monkeypatch):
    monkeypatch.setattr(estimate_cmd, "run", _bug)
    with pytest.raises(ZeroDivisionError):
        main(["estimate", "7b", "--debug"])


def test_an_error_message_with_a_newline_stays_one_line(tmp_path, capsys):
    folder = tmp_path / "two\nlines"
    folder.mkdir()
    (folder / "config.json").write_text("{oops")
    assert main(["estimate", str(folder)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "not valid JSON" in err


# -o: never over an existing file without --force; a path that cannot be written is a user error

def _estimate_to(path, *extra):
    return main(["estimate", "7b", "--method", "lora", "--format", "json", "-o", str(path), *extra])


def test_existing_output_is_kept_without_force(tmp_path, capsys):
    target = tmp_path / "out.json"
    target.write_bytes(b"precious\x00bytes")
    assert _estimate_to(target) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"symvram: error: {target} exists; pass --force to overwrite it\n"
    assert target.read_bytes() == b"precious\x00bytes"


def test_force_overwrites_with_what_stdout_would_show(tmp_path, capsys):
    target = tmp_path / "out.json"
    target.write_text("old")
    assert _estimate_to(target, "--force") == 0
    assert capsys.readouterr().out == ""
    assert main(["estimate", "7b", "--method", "lora", "--format", "json"]) == 0
    assert target.read_text() == capsys.readouterr().out


def test_a_dangling_link_is_not_followed(tmp_path, capsys):
    link, elsewhere = tmp_path / "link.json", tmp_path / "elsewhere.json"
    link.symlink_to(elsewhere)
    assert _estimate_to(link) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert not elsewhere.exists()


@pytest.mark.parametrize("make,fragment", [
    (lambda t: t / "missing" / "out.json", "cannot write"),
    (lambda t: t, "is a directory"),
    (lambda t: (t / "file").write_text("x") and t / "file" / "out.json", "cannot write"),
])
@pytest.mark.parametrize("force", [False, True])
def test_unwritable_output(tmp_path, capsys, make, fragment, force):
    target = make(tmp_path)
    assert _estimate_to(target, *(["--force"] if force else [])) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("symvram: error: ") and fragment in err
    assert not (tmp_path / "missing").exists()


class _Terminal:
    """A text stdout that says it is a terminal, with a binary buffer behind it."""

    def __init__(self):
        self.buffer = io.BytesIO()

    def isatty(self):
        return True

    def flush(self):
        pass


def test_binary_output_is_not_printed_to_a_terminal(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    with pytest.raises(UserError, match="binary .* give -o FILE"):
        write_output(b"%PDF-1.5\x00\xff", None, False)
    assert terminal.buffer.getvalue() == b""


def test_binary_output_goes_through_a_pipe_unchanged(capfdbinary):
    write_output(b"%PDF-1.5\x00\xff", None, False)
    assert capfdbinary.readouterr().out == b"%PDF-1.5\x00\xff"


# Documents: a template's undefined variable is an error (StrictUndefined), never a silent blank;
# a model's name from config.json is escaped for HTML, TeX and Markdown.

EVIL = "<script>alert(1)</script> \\input{/etc/passwd}"


@pytest.fixture
def evil_model(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
           "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000, "_name_or_path": EVIL}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


def test_an_undefined_template_variable_is_an_error(tmp_path, capsys):
    (tmp_path / "explain.en.j2").write_text("memory of << model_nmae >>\n")
    assert main(["explain", "7b", "--template-dir", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "symvram: error: template error: 'model_nmae' is undefined\n"


@pytest.mark.parametrize("fmt,raw,escaped", [
    ("html", "<script>alert(1)", "&lt;script&gt;alert(1)&lt;/script&gt;"),
    ("tex", "\\input{/etc/passwd}", "\\textbackslash{}input\\{/etc/passwd\\}"),
])
def test_documents_escape_the_model_name(evil_model, capsys, fmt, raw, escaped):
    assert main(["explain", evil_model, "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert escaped in out
    assert raw not in out


def test_the_document_environment_is_strict():
    with pytest.raises(jinja2.UndefinedError):
        environment().from_string("<< misspelled >>").render()


def test_zero3_on_one_gpu_is_explained_not_refused(capsys):
    assert main(["estimate", "7b", "--method", "full", "--zero", "3", "--gpus", "1"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "note: ZeRO-3 on one GPU shards nothing" in out


def test_cli_json_parses_and_adds_up(capsys):
    assert main(["estimate", "llama-3-8b", "--method", "qlora", "--zero", "2", "--gpus", "4", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    b = data["bytes"]
    assert b["base"] + b["trainable"] + b["activations"] == b["ledger_total"]
    assert b["peak"] == max(m["bytes"] for m in data["moments"])


# Any mix of documented options, sensible or not: it runs (exit 0, nothing on stderr) or it is refused
# by the contract (exit 2, one line) — never an internal error (exit 1) or a traceback.

NUMBERS = ["0", "1", "2", "3", "8", "64", "4096", "-1", "1.5", "1e9", "x"]
OPTIONS = {
    "--method": ["full", "lora", "qlora"], "--rank": NUMBERS, "--targets": ["qv", "mlp", "o", "gate,up", "lm_head"],
    "--lora-dropout": ["0", "0.1", "1"], "--no-double-quant": None, "--dtype": ["bf16", "fp16", "fp32"],
    "--master": ["none", "fp32"], "--state-dtype": ["fp32", "bf16", "int8"],
    "--optimizer": ["adamw", "sgd", "sgd-momentum", "lion", "adafactor"], "--optimizer-impl": ["foreach", "fused", "forloop"],
    "--adapter-dtype": ["bf16", "fp16", "fp32"], "--autocast": ["none", "bf16", "fp16"], "--batch": NUMBERS,
    "--seq": NUMBERS, "--grad-checkpointing": None, "--attention": ["sdpa", "eager"], "--device": ["cuda", "cpu"],
    "--kernels": ["auto", "torch", "fla"],
    "--gpus": NUMBERS, "--zero": ["0", "1", "2", "3"], "--offload": ["none", "optimizer", "optimizer+params"],
    "--tp": ["1", "2", "3", "8"], "--sequence-parallel": None, "--units": ["GiB", "GB"], "--format": ["table", "json"],
    "--set": ["layers=1", "kv_heads=1", "heads=64", "vocab=1", "bytes_state=1", "quant_bits=2", "rank=1", "tp=2",
              "intermediate=1", "head_dim=1", "states_per_param=0.5", "P=1e12", "hidden=-1"],
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["7b", "70b", "llama-3-8b", "qwen2.5-0.5b", "tinyllama-1.1b"]),
       st.lists(st.sampled_from(sorted(OPTIONS)), min_size=1, max_size=6, unique=True), st.data())
def test_no_mix_of_options_is_an_internal_error(model, names, data):
    argv = ["estimate", model]
    for name in names:
        argv += [name] if OPTIONS[name] is None else [name, data.draw(st.sampled_from(OPTIONS[name]), label=name)]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    if rc == 0:
        assert err.getvalue() == "" and out.getvalue()
    else:
        assert rc == 2 and out.getvalue() == ""
        assert err.getvalue().startswith("symvram: error: ") and err.getvalue().count("\n") == 1


@pytest.mark.parametrize("argv,name", [
    (["fit", "7b", "--method", "lora", "--gpu", "24GiB"], "out.txt"),
    (["whatif", "7b", "--set", "seq=4096"], "out.txt"),
    (["sensitivity", "7b", "--method", "lora"], "out.txt"),
    (["plan", "7b", "--gpu", "80GiB", "--max-gpus", "8"], "out.txt"),
    (["diagnose", "7b", "--method", "lora", "--gpu", "24GiB"], "out.txt"),
    (["explain", "7b", "--format", "html"], "out.html"),
    (["plot", "7b", "--kind", "tornado"], "out.png"),
])
def test_every_command_keeps_an_existing_output(tmp_path, capsys, argv, name):
    target = tmp_path / name
    target.write_bytes(b"keep me")
    assert main([*argv, "-o", str(target)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"symvram: error: {target} exists; pass --force to overwrite it\n"
    assert target.read_bytes() == b"keep me"


def _no_constants(name):
    raise AssertionError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


@pytest.mark.parametrize("argv", [
    ["estimate", "70b", "--method", "qlora", "--zero", "3", "--gpus", "8", "--offload", "optimizer+params"],
    ["fit", "7b", "--method", "lora", "--gpu", "141GiB", "--solve", "rank"],  # every moment allows r: no bound
    ["whatif", "7b", "--method", "lora", "--set", "rank=1"],
    ["sensitivity", "7b", "--method", "lora", "--zero", "3", "--gpus", "8", "--knobs", "gpus,seq"],
    ["plan", "70b", "--gpu", "24GiB", "--max-gpus", "4"],  # strategies that never fit
    ["diagnose", "70b", "--gpu", "24GiB", "--measured-peak", "30GiB"],
])
def test_json_outputs_are_strict_json(capsys, argv):
    assert main([*argv, "--format", "json"]) == 0
    json.loads(capsys.readouterr().out, parse_constant=_no_constants)
