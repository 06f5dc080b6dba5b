"""Hub model ids (org/name): a preset of that name, the local Hugging Face cache, a download of config.json
alone — tested without a network (HF_HUB_OFFLINE=1, or a stand-in huggingface_hub module)."""
import json
import sys
import types

import pytest

from symvram.cli import main
from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram import hub
from symvram.presets import hub_model, load_model
from symvram.scenario import Scenario

UNREACHABLE = hub.unreachable
resolve = hub_model

CONFIG = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
          "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048,
          "_name_or_path": "acme/tiny-llama"}


@pytest.fixture(autouse=True)
def _offline_cache(tmp_path, monkeypatch):
    """Every test: an empty cache of its own, offline, no huggingface_hub unless a test puts one in."""
    for var in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_OFFLINE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SYMVRAM_DEBUG", raising=False)


def lay_out(root, repo_id, config, commit="0123abcd", ref=True):
    """A cache entry as huggingface_hub lays it out: refs/main names the snapshot holding config.json."""
    folder = root / ("models--" + repo_id.replace("/", "--"))
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(config))
    if ref:
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(commit)
    return snap / "config.json"


def test_an_id_that_names_a_preset():
    m = load_model("meta-llama/Llama-3.1-8B")
    assert m.name == "llama-3.1-8b" and m == load_model("llama-3.1-8b")
    assert load_model("Qwen/Qwen2.5-7B").name == "qwen2.5-7b"
    assert load_model("TinyLlama/tinyllama").name == "tinyllama-1.1b"   # an alias
    assert load_model("allenai/OLMo-2-1124-7B").name == "olmo-2-7b"      # the repo its description names
    assert load_model("mistralai/Mixtral-8x7B-v0.1").name == "mixtral-8x7b"
    peak = evaluate(Scenario.create("meta-llama/Llama-3.1-8B", method="lora")).peak
    assert peak == evaluate(Scenario.create("llama-3.1-8b", method="lora")).peak


def test_the_local_cache(tmp_path):
    lay_out(tmp_path / "hf" / "hub", "acme/tiny-llama", CONFIG)
    m = load_model("acme/tiny-llama")
    assert (m.name, m.kind, m.hidden, m.layers, m.kv_heads, m.max_position) == \
        ("acme/tiny-llama", "config", 2048, 22, 4, 2048)
    assert load_model("ACME/Tiny-Llama").hidden == 2048          # the Hub's ids are case-insensitive


def test_hf_hub_cache_wins_over_hf_home(tmp_path, monkeypatch):
    lay_out(tmp_path / "elsewhere", "acme/tiny-llama", dict(CONFIG, num_hidden_layers=4))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert load_model("acme/tiny-llama").layers == 4


def test_without_refs_the_newest_snapshot(tmp_path):
    lay_out(tmp_path / "hf" / "hub", "acme/tiny-llama", CONFIG, ref=False)
    assert load_model("acme/tiny-llama").layers == 22


def test_offline_and_not_cached_is_one_line(capsys):
    rc = main(["estimate", "meta-llama/Llama-3.1-8B-Guard"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "meta-llama/Llama-3.1-8B-Guard: not in the local Hugging Face cache and HF_HUB_OFFLINE is set" in err
    assert "`hf download meta-llama/Llama-3.1-8B-Guard config.json`" in err
    assert "presets that match: llama-3.1-8b" in err


@pytest.mark.parametrize("repo_id,preset", [("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
                                            ("Qwen/Qwen3-8B-Base", "qwen3-8b"), ("google/gemma-2-9b-it", "gemma-2-9b"),
                                            ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b")])
def test_release_suffixes_map_to_the_base_preset(repo_id, preset):
    """An instruction-tuned or '-Base' release has its base's config.json: the base's preset, offline."""
    assert resolve(repo_id).name == preset


def test_unreachable_hub_fails_at_once(monkeypatch, capsys):
    """No network: one line within the probe's few seconds, never huggingface_hub's ~25 s of retries."""
    import socket
    import time

    def refuse(*a, **k):
        raise OSError(-2, "Name or service not known")

    asked = []
    _fake_hub(monkeypatch, lambda *a: asked.append(a))
    monkeypatch.setattr(hub, "unreachable", UNREACHABLE)   # the real probe, not _fake_hub's stand-in
    monkeypatch.setattr(socket, "create_connection", refuse)
    start = time.monotonic()
    assert main(["estimate", "acme/tiny-llama"]) == 2
    err = capsys.readouterr().err
    assert time.monotonic() - start < hub.PROBE_SECONDS + 2 and not asked and err.count("\n") == 1
    assert "the Hub cannot be reached (huggingface.co: Name or service not known)" in err


def _fake_hub(monkeypatch, download):
    errors = types.SimpleNamespace(**{n: type(n, (Exception,), {}) for n in (
        "GatedRepoError", "RepositoryNotFoundError", "RevisionNotFoundError", "EntryNotFoundError")})
    module = types.ModuleType("huggingface_hub")
    module.errors = errors
    module.hf_hub_download = lambda repo_id, filename, cache_dir=None: download(errors, repo_id, filename, cache_dir)
    monkeypatch.setitem(sys.modules, "huggingface_hub", module)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(hub, "unreachable", lambda: None)   # this machine has no network: the fake hub answers
    return errors


def test_download_fetches_config_json_alone_into_the_cache(tmp_path, monkeypatch):
    asked = []

    def download(errors, repo_id, filename, cache_dir):
        asked.append((repo_id, filename, cache_dir))
        return str(lay_out(tmp_path / "hf" / "hub", repo_id, CONFIG))

    _fake_hub(monkeypatch, download)
    assert load_model("acme/tiny-llama").hidden == 2048
    assert asked == [("acme/tiny-llama", "config.json", str(tmp_path / "hf" / "hub"))]
    assert load_model("acme/tiny-llama").hidden == 2048 and len(asked) == 1   # the second time: from the cache


@pytest.mark.parametrize("error,fragment", [
    ("GatedRepoError", "gated on the Hub: accept its licence"),
    ("RepositoryNotFoundError", "no such model on the Hub (or it is private)"),
    ("ConnectionError", "cannot reach the Hub (ConnectionError)"),
])
def test_gated_missing_or_unreachable(monkeypatch, capsys, error, fragment):
    def download(errors, repo_id, filename, cache_dir):
        raise getattr(errors, error, ConnectionError)("details")

    _fake_hub(monkeypatch, download)
    rc = main(["estimate", "acme/private-llama", "--method", "lora"])
    out, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1 and fragment in err, err
    assert "`hf download acme/private-llama config.json`" in err


def test_without_the_hub_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)   # import fails
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(UserError, match=r"downloading needs pip install 'symvram\[hub\]'"):
        load_model("acme/tiny-llama")


def test_real_paths_keep_their_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="no config.json at 'nope/config.json'"):
        load_model("nope/config.json")
    with pytest.raises(UserError, match="no config.json at 'acme/tiny-llama'"):  # ./ says: a path
        load_model("./acme/tiny-llama")
    (tmp_path / "acme" / "tiny-llama").mkdir(parents=True)   # a folder of that name is a path, not an id
    (tmp_path / "acme" / "tiny-llama" / "config.json").write_text(json.dumps(dict(CONFIG, num_hidden_layers=3)))
    assert load_model("acme/tiny-llama").layers == 3


@pytest.mark.parametrize("text,expected", [
    ("meta-llama/Llama-3.1-8B", True), ("Qwen/Qwen2.5-7B-Instruct", True), ("org/name.v2", True),
    ("./models/x", False), ("/abs/path", False), ("a/b/c", False), ("org/config.json", False), ("a/..", False),
    ("noslash", False), ("-org/name", False),
])
def test_what_is_a_hub_id(text, expected):
    assert hub.is_hub_id(text) is expected


def test_from_file_with_a_hub_id_in_the_cache(tmp_path, capsys):
    lay_out(tmp_path / "hf" / "hub", "acme/tiny-llama", CONFIG)
    run = tmp_path / "run.yml"
    run.write_text("base_model: acme/tiny-llama\nadapter: lora\nsequence_len: 4096\n")
    rc = main(["estimate", "--from", str(run), "--format", "json"])
    out, err = capsys.readouterr()
    assert rc == 0
    # sequence_len 4096 beyond max_position_embeddings 2048: estimated, with one warning line
    assert err == ("symvram: warning: seq 4096 is longer than acme/tiny-llama's context "
                   "(max_position_embeddings 2048); estimated as given\n")
    assert json.loads(out)["scenario_read"]["settings"]["model"]["value"] == "acme/tiny-llama"
