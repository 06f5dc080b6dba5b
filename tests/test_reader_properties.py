"""Random values of every JSON/YAML type in every field a reader reads (issue 29): the contract holds for
each — exit 2 with one short line, or an answer (strict JSON, a positive peak) in which a value the file
gave for batch, seq, rank, GPUs or tp is the value estimated — in bounded time and memory.

Fields: every row of every tool's table (``readers.tools``), written into a minimal file of that tool,
and every config.json field a family entry reads. Values: null, booleans, integers (also past 2^63 and
past Python's 4300-digit limit), floats (NaN, infinities), strings (the tools' own words among them),
lists and mappings nested, and YAML's own scalars (dates, hex, !!binary, !!set …) written raw.
"""
import json
import resource
import time

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, event, given, settings, strategies as st  # noqa: E402

from symvram.cli import main  # noqa: E402
from symvram.errors import UserError  # noqa: E402
from symvram.ledger.architecture import family  # noqa: E402
from symvram.presets import load_model  # noqa: E402
from symvram.readers import convert as c  # noqa: E402
from symvram.readers.tools import TOOLS  # noqa: E402
from symvram.scenario import Scenario  # noqa: E402

from test_bad_inputs import LLAMA  # noqa: E402

MODEL = "tinyllama-1.1b"
# a minimal file of each tool the reader detects, and how it is written
BASE = {"axolotl": ("yml", {"base_model": MODEL, "micro_batch_size": 1}),
        "llamafactory": ("yaml", {"model_name_or_path": MODEL, "finetuning_type": "lora", "cutoff_len": 256}),
        "trl": ("json", {"output_dir": "o", "max_length": 256}),
        "trainer": ("json", {"output_dir": "o", "per_device_train_batch_size": 1}),
        "deepspeed": ("json", {"zero_optimization": {"stage": 0}, "train_micro_batch_size_per_gpu": 1}),
        "accelerate": ("yaml", {"distributed_type": "NO", "num_processes": 1})}
FIELDS = sorted({(tool, row.key) for tool in BASE for row in TOOLS[tool].rows})
WORDS = ["lora", "qlora", "full", "auto", "cpu", "none", "nvme", "bfloat16", "float16", "torch.float32", "all-linear",
         "q_proj", "q_proj,v_proj", "embed_tokens", "lm_head", "full_shard auto_wrap", "full_shard offload", "offload",
         "FSDP", "DEEPSPEED", "NO", "bf16", "fp16", "fp8", "sdpa", "eager", "flash_attention_2", "fa2", "disabled",
         "adamw_torch", "paged_adamw_8bit", "adamw_bnb_8bit", "sft", "dpo", "FULL_SHARD", "SHARD_GRAD_OP", "true", "",
         "ds.json", ".", "/", "x" * 3000, "ünïcödé ≈ →", "\x00"]
RAW_YAML = ["2024-01-31", "0x1F", "0o17", "1_000", "yes", "off", "~", ".nan", "-.inf", "1.0e+400", "9" * 5000,
            "!!binary aGVsbG8=", "!!set {a, b}", "!!str 7", "'%s'" % ("y" * 2000)]
RAW_JSON = ["NaN", "-Infinity", "1e400", "9" * 5000, "-0", "1E+2", "123456789012345678901234567890"]

scalars = (st.none() | st.booleans() | st.integers(-3, 70000) | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(WORDS) | st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.sampled_from(["a", "stage", "device", "load_in_4bit", "use_reentrant",
                                                         "enabled", "1"]) | st.text(max_size=6), inner, max_size=4),
                      max_leaves=12)


class Raw(str):
    """A literal written into the file as it is (a YAML tag, a number no float holds)."""


def _placeholders(value, raws):
    if isinstance(value, Raw):
        raws.append(str(value))
        return f"RAW{len(raws) - 1}RAW"
    if isinstance(value, list):
        return [_placeholders(v, raws) for v in value]
    if isinstance(value, dict):
        return {k: _placeholders(v, raws) for k, v in value.items()}
    return value


def _text(doc, kind: str) -> str:
    raws: list[str] = []
    doc = _placeholders(doc, raws)
    text = json.dumps(doc) if kind == "json" else yaml.safe_dump(doc, allow_unicode=True)
    for i, raw in enumerate(raws):
        for quoted in (f'"RAW{i}RAW"', f"'RAW{i}RAW'", f"RAW{i}RAW"):
            text = text.replace(quoted, raw)
    return text


def _put(doc: dict, key: str, value) -> dict:
    """``doc`` with the dotted ``key`` set to ``value`` (the mappings on the way made)."""
    out = json.loads(json.dumps(doc))
    node = out
    *parents, last = key.split(".")
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[last] = value
    return out


SECONDS, MEGABYTES = 20, 1024


def _peak_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # the process's high-water mark, KiB on Linux


def _contract(argv, capsys):
    """exit 2 with one short line, or 0 with strict JSON; within SECONDS, the process's peak memory raised by
    less than MEGABYTES."""
    start, rss = time.perf_counter(), _peak_rss_kib()
    rc = main(argv)
    out, err = capsys.readouterr()
    assert time.perf_counter() - start < SECONDS
    assert _peak_rss_kib() - rss < MEGABYTES * 1024
    assert rc in (0, 2), err
    event("estimated" if rc == 0 else "refused")   # pytest --hypothesis-show-statistics: how many of each
    if rc == 2:
        assert out == "" and err.startswith("symvram: error: ") and err.count("\n") == 1, err
        assert len(err) < 1000 and "Traceback" not in err
        return None
    data = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))
    # one estimate, or (no method given) one per method estimate compares
    estimates = [data] if "bytes" in data else [v for v in data.values() if "bytes" in v]
    assert estimates and all(e["bytes"]["peak"] > 0 for e in estimates)
    return estimates


DIRECT = {"batch", "seq", "rank", "gpus", "tp"}    # Scenario settings a row sets as they are
# derandomize: the same examples each CI run (a failure reproduces); deadline: SECONDS is checked per call. An
# estimate that succeeds builds its structure's ledger (~0.3 s the first time): the field test runs fewer.
PROFILE = settings(max_examples=250, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


@settings(PROFILE, max_examples=120)
@given(field=st.sampled_from(FIELDS), value=values | st.sampled_from(RAW_YAML + RAW_JSON).map(Raw))
def test_any_value_in_any_reader_field(field, value, tmp_path_factory, capsys):
    tool, key = field
    kind, base = BASE[tool]
    if isinstance(value, Raw) and str(value) not in (RAW_JSON if kind == "json" else RAW_YAML):
        value = Raw(RAW_JSON[0] if kind == "json" else RAW_YAML[0])
    path = tmp_path_factory.mktemp("field") / f"run.{kind}"
    path.write_text(_text(_put(base, key, value), kind), encoding="utf-8")
    data = _contract(["estimate", "--from", str(path), MODEL, "--format", "json"], capsys)
    rows = [r for r in TOOLS[tool].rows if r.key == key and r.setting in DIRECT and r.convert is c.integer]
    number = value if isinstance(value, int) and not isinstance(value, bool) else \
        int(value) if isinstance(value, float) and value.is_integer() else None
    if data is not None and rows and number is not None:
        assert {e["inputs"][rows[0].setting] for e in data} == {number}   # the file's value is the value estimated


@PROFILE
@given(doc=values, kind=st.sampled_from(["json", "yaml"]))
def test_any_document_as_a_whole_file(doc, kind, tmp_path_factory, capsys):
    path = tmp_path_factory.mktemp("doc") / f"run.{kind}"
    path.write_text(_text(doc, kind), encoding="utf-8")
    _contract(["estimate", "--from", str(path), MODEL, "--format", "json"], capsys)


GEMMA3 = {"model_type": "gemma3_text", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
          "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64, "vocab_size": 1000}
CONFIG_FIELDS = sorted({("llama", k) for _, keys, _ in family("llama").dims for k in keys.split("|")}
                       | {("llama", o) for o, _ in family("llama").options}
                       | {("llama", k) for k in ("model_type", "max_position_embeddings", "_name_or_path",
                                                 "text_config")}
                       | {("gemma3_text", k) for k in ("layer_types", "sliding_window_pattern", "sliding_window")})
INT_FIELDS = {k: s for fam in ("llama", "gemma3_text") for s, keys, _ in family(fam).dims for k in keys.split("|")
              if keys != "layer_types"}


PLAUSIBLE = st.sampled_from([1, 2, 4, 64, 128, 256, 4096, True, False, None, "llama", "gemma3_text", "org/name",
                             ["sliding_attention", "full_attention"] * 2, {"model_type": "llama"}])


@PROFILE
@given(field=st.sampled_from(CONFIG_FIELDS), value=PLAUSIBLE | values | st.sampled_from(RAW_JSON).map(Raw))
def test_any_value_in_any_config_field(field, value, tmp_path_factory, capsys):
    fam, key = field
    base = {**(LLAMA if fam == "llama" else GEMMA3), "max_position_embeddings": 4096}
    path = tmp_path_factory.mktemp("config") / "config.json"
    path.write_text(_text({**base, key: value}, "json"), encoding="utf-8")
    data = _contract(["estimate", str(path), "--seq", "256", "--format", "json"], capsys)
    if data is not None and key in INT_FIELDS and isinstance(value, int) and not isinstance(value, bool):
        assert load_model(str(path)).dims[INT_FIELDS[key]] == value   # the file's dimension is the one estimated
    if data is None:
        with pytest.raises(UserError):   # the API refuses what the command line refuses
            Scenario.create(str(path), seq=256)
