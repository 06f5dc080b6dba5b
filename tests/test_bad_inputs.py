"""Bad input through the CLI: exit 2, one line on stderr starting "symvram: error:", nothing on stdout,
no traceback — and the line says what was wrong (each case names a fragment the message must hold).

The table is the contract of issue 7; every command that takes a model gets the shared scenario cases.
"""
import json

import pytest

from symvram.cli import COMMANDS, main
from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.units import parse_size
from symvram.presets import load_model
from symvram.scenario import Scenario

LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000}


def _with(**changes):
    cfg = dict(LLAMA, **changes)
    return json.dumps({k: v for k, v in cfg.items() if v is not ...})


# name -> file content (str) written under tmp_path; "{tmp}/name" in a case refers to it
FILES = {
    "gpt2.json": json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12}),
    "no_type.json": _with(model_type=...),
    "array.json": "[1, 2, 3]",
    "null.json": "null",
    "string.json": '"llama"',
    "truncated.json": '{"model_type": "llama", "hidden_size": 40',
    "latin1.json": b'{"model_type": "llama\xff"}',
    "empty.json": "",
    "huge.json": '{"model_type": "llama", "pad": "' + "x" * ((1 << 20) + 10) + '"}',
    "deep.json": "[" * 100_000 + "]" * 100_000,
    "bigint.json": '{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}",
    "missing_hidden.json": _with(hidden_size=...),
    "missing_vocab.json": _with(vocab_size=...),
    "missing_layers.json": _with(num_hidden_layers=...),
    "hidden_string.json": _with(hidden_size="4096"),
    "hidden_float.json": _with(hidden_size=4096.5),
    "hidden_zero.json": _with(hidden_size=0),
    "hidden_negative.json": _with(hidden_size=-4096),
    "hidden_absurd.json": _with(hidden_size=10**12),
    "hidden_bool.json": _with(hidden_size=True),
    "heads_indivisible.json": _with(num_attention_heads=33, num_key_value_heads=...),
    "kv_not_divisor.json": _with(num_key_value_heads=5),
    "kv_zero.json": _with(num_key_value_heads=0),
    "tie_string.json": _with(tie_word_embeddings="false"),
    "max_position_string.json": _with(max_position_embeddings="4k"),
    "config_dir/config.json": "{not json",
    "empty_dir/.keep": "",
}

# (id, argv, fragment of the one error line — lower-cased comparison; "a|b": either)
MODEL_CASES = [
    ("unknown-preset", ["nosuchmodel"], "unknown model preset 'nosuchmodel'"),
    ("unknown-preset-close", ["llama3-8b"], "did you mean llama-3-8b"),
    ("unknown-preset-close-2", ["mistral7b"], "did you mean mistral-7b"),
    ("blank-preset", [" "], "unknown model preset"),
    ("name-too-long", ["x" * 5000], "unknown model preset"),
    ("missing-config", ["{tmp}/nope/config.json"], "no config.json"),
    ("folder-without-config", ["{tmp}/empty_dir"], "no config.json"),
    ("folder-bad-config", ["{tmp}/config_dir"], "not valid json"),
    ("unsupported-model-type", ["{tmp}/gpt2.json"], "model_type 'gpt2' is not supported; supported: "),
    ("no-model-type", ["{tmp}/no_type.json"], "model_type none is not supported"),
    ("json-array", ["{tmp}/array.json"], "expected a json object"),
    ("json-null", ["{tmp}/null.json"], "expected a json object"),
    ("json-string", ["{tmp}/string.json"], "expected a json object"),
    ("truncated-json", ["{tmp}/truncated.json"], "not valid json"),
    ("not-utf8", ["{tmp}/latin1.json"], "not valid json"),
    ("empty-file", ["{tmp}/empty.json"], "not valid json"),
    ("huge-file", ["{tmp}/huge.json"], "too large for a config.json"),
    ("deeply-nested", ["{tmp}/deep.json"], "not valid json"),
    ("5000-digit-int", ["{tmp}/bigint.json"], "not valid json"),
    ("missing-hidden", ["{tmp}/missing_hidden.json"], "missing required field 'hidden_size'"),
    ("missing-vocab", ["{tmp}/missing_vocab.json"], "missing required field 'vocab_size'"),
    ("missing-layers", ["{tmp}/missing_layers.json"], "missing required field 'num_hidden_layers'"),
    ("hidden-string", ["{tmp}/hidden_string.json"], "'hidden_size' must be a positive integer"),
    ("hidden-float", ["{tmp}/hidden_float.json"], "'hidden_size' must be a positive integer"),
    ("hidden-zero", ["{tmp}/hidden_zero.json"], "'hidden_size' must be a positive integer"),
    ("hidden-negative", ["{tmp}/hidden_negative.json"], "'hidden_size' must be a positive integer"),
    ("hidden-bool", ["{tmp}/hidden_bool.json"], "'hidden_size' must be a positive integer"),
    ("hidden-absurd", ["{tmp}/hidden_absurd.json"], "not a plausible model dimension"),
    ("heads-indivisible", ["{tmp}/heads_indivisible.json"], "not divisible by num_attention_heads"),
    ("kv-not-divisor", ["{tmp}/kv_not_divisor.json"], "not a multiple of num_key_value_heads"),
    ("kv-zero", ["{tmp}/kv_zero.json"], "'num_key_value_heads' must be a positive integer"),
    ("tie-as-string", ["{tmp}/tie_string.json"], "'tie_word_embeddings' must be true or false"),
    ("max-position-string", ["{tmp}/max_position_string.json"], "'max_position_embeddings' must be a positive"),
]

SCENARIO_CASES = [
    ("batch-zero", ["7b", "--batch", "0"], "--batch: expected a positive integer"),
    ("batch-negative", ["7b", "--batch", "-4"], "--batch: expected a positive integer"),
    ("batch-fraction", ["7b", "--batch", "1.5"], "--batch: expected a positive integer"),
    ("batch-word", ["7b", "--batch", "four"], "--batch: expected a positive integer"),
    ("batch-absurd", ["7b", "--batch", "10000000000"], "--batch = 10000000000 is beyond"),
    ("seq-zero", ["7b", "--seq", "0"], "--seq: expected a positive integer"),
    ("seq-negative", ["7b", "--seq", "-2048"], "--seq: expected a positive integer"),
    ("seq-float", ["7b", "--seq", "2048.0"], "--seq: expected a positive integer"),
    ("seq-absurd", ["7b", "--seq", "100000000000"], "--seq = 100000000000 is beyond"),
    ("rank-zero", ["7b", "--method", "lora", "--rank", "0"], "--rank: expected a positive integer"),
    ("rank-negative", ["7b", "--method", "lora", "--rank", "-8"], "--rank: expected a positive integer"),
    ("rank-fraction", ["7b", "--method", "lora", "--rank", "8.5"], "--rank: expected a positive integer"),
    ("rank-absurd", ["7b", "--method", "lora", "--rank", "99999999999"], "beyond any real training run"),
    ("rank-over-min-dk", ["7b", "--method", "lora", "--rank", "4097"], "larger than min(d, k) = 4096"),
    ("rank-over-min-dk-gqa", ["llama-3-8b", "--method", "lora", "--rank", "2048", "--targets", "k_proj"],
     "min(d, k) = 1024"),
    ("rank-over-min-dk-qlora", ["tinyllama-1.1b", "--method", "qlora", "--rank", "512"], "min(d, k) = 256"),
    ("unknown-target", ["7b", "--method", "lora", "--targets", "q_proj,score"], "unknown lora target 'score'"),
    ("unknown-target-set", ["7b", "--method", "lora", "--targets", "everything"], "all-linear, attention"),
    ("empty-targets", ["7b", "--method", "lora", "--targets", ","], "no lora target modules"),
    ("fp16-without-master", ["7b", "--method", "full", "--dtype", "fp16"], "need --master fp32"),
    ("fp16-adapters-without-master", ["7b", "--method", "lora", "--dtype", "fp16", "--adapter-dtype", "fp16"],
     "need --master fp32"),
    ("qlora-fp32", ["7b", "--method", "qlora", "--dtype", "fp32"], "qlora stores the base in 4-bit"),
    ("master-on-fp32", ["7b", "--method", "full", "--dtype", "fp32", "--master", "fp32"], "duplicates weights"),
    ("autocast-fp16-on-bf16", ["7b", "--method", "full", "--autocast", "fp16"], "--dtype fp32"),
    ("unknown-method", ["7b", "--method", "dora"], "invalid choice: 'dora'"),
    ("unknown-dtype", ["7b", "--dtype", "fp8"], "invalid choice: 'fp8'"),
    ("dropout-one", ["7b", "--method", "lora", "--lora-dropout", "1"], "--lora-dropout must be in [0, 1)"),
    ("dropout-nan", ["7b", "--method", "lora", "--lora-dropout", "nan"], "--lora-dropout must be in [0, 1)"),
    ("dropout-word", ["7b", "--method", "lora", "--lora-dropout", "half"], "invalid float value"),
    ("set-unknown-symbol", ["7b", "--set", "hiden=4096"], "unknown symbol 'hiden' (did you mean hidden"),
    ("set-derived-symbol", ["7b", "--set", "P_train=5"], "P_train"),
    ("set-no-equals", ["7b", "--set", "hidden"], "--set takes symbol=value"),
    ("set-no-name", ["7b", "--set", "=4096"], "unknown symbol ''"),
    ("set-not-number", ["7b", "--set", "hidden=big"], "'big' is not a number"),
    ("set-zero", ["7b", "--set", "layers=0"], "value must be a positive number"),
    ("set-negative", ["7b", "--set", "bytes_state=-1"], "value must be a positive number"),
    ("set-nan", ["7b", "--set", "hidden=nan"], "value must be a positive number"),
    ("set-inf", ["7b", "--set", "hidden=inf"], "value must be a positive number"),
    ("set-fractional-count", ["7b", "--set", "layers=32.5"], "must be an integer"),
    ("set-absurd-dim", ["7b", "--set", "hidden=1e300"], "is not plausible"),
    ("set-absurd-bytes", ["7b", "--set", "bytes_state=1e308"], "is not plausible"),
    ("set-absurd-P", ["7b", "--set", "P=1e40"], "is not plausible"),
    ("set-absurd-seq", ["7b", "--set", "seq=1e20"], "is beyond any real training run"),
    ("set-rank-over-min-dk", ["7b", "--method", "lora", "--set", "rank=100000"], "larger than min(d, k)"),
    ("set-kv-not-divisor", ["7b", "--set", "kv_heads=3"], "not a multiple of kv_heads = 3"),
    # whatif refuses a symbol its "before" ledger lacks (tp with --tp 1), before the divisibility check
    ("set-tp-not-divisor", ["7b", "--set", "tp=3"], "--tp 3 does not divide heads = 32|--set tp: "),
    ("set-rank-fraction", ["7b", "--method", "lora", "--set", "rank=8.5"], "must be a positive integer"),
    ("gpus-zero", ["7b", "--gpus", "0"], "--gpus: expected a positive integer"),
    ("gpus-negative", ["7b", "--gpus", "-2"], "--gpus: expected a positive integer"),
    ("gpus-fraction", ["7b", "--gpus", "2.5"], "--gpus: expected a positive integer"),
    ("gpus-absurd", ["7b", "--gpus", "99999999999"], "--gpus = 99999999999 is beyond"),
    ("zero-stage-4", ["7b", "--zero", "4"], "--zero: invalid choice: 4"),
    ("tp-zero", ["7b", "--tp", "0"], "--tp: expected a positive integer"),
    ("tp-not-divisor", ["7b", "--tp", "3"], "--tp 3 does not divide heads = 32"),
    ("tp-absurd", ["7b", "--tp", "5000"], "--tp = 5000 is beyond"),
    ("offload-without-zero", ["7b", "--offload", "optimizer"], "--offload needs --zero"),
    ("offload-params-zero-2", ["7b", "--zero", "2", "--gpus", "8", "--offload", "optimizer+params"],
     "needs --zero 3"),
    ("sequence-parallel-without-tp", ["7b", "--sequence-parallel"], "needs --tp 2 or more"),
    ("units-unknown", ["7b", "--units", "bananas"], "invalid choice: 'bananas'"),
    ("unknown-option", ["7b", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    ("abbreviated-option", ["7b", "--grad-check"], "unrecognized arguments: --grad-check"),
]

ESTIMATE_ONLY = [
    ("no-model", [], "the following arguments are required: model"),
    ("format-unknown", ["7b", "--format", "xml"], "invalid choice: 'xml'"),
    # the reference table replays no allocator, but an unknown one is refused as everywhere
    ("allocator-unknown-table", ["7b", "--allocator", "cudaMallocAsync"], "expected one of default, expandable"),
    ("allocator-unknown", ["7b", "--method", "lora", "--allocator", "foo"], "expected one of default, expandable"),
    ("versions-malformed", ["7b", "--versions", "torch"], "expected a version such as"),
]

TOP_LEVEL = [
    ("no-command", [], "no command given"),
    ("unknown-command", ["estimat"], "invalid choice: 'estimat'"),
]

# Every other command that reads a model and a scenario gets all the cases above; these are the
# arguments it needs besides them (placed before the case's own, so a case's --set wins).
NEEDS = {"fit": ["--gpu", "80GiB"], "whatif": ["--set", "vocab=32000"], "sensitivity": [], "explain": [],
         "plan": ["--gpu", "80GiB"], "diagnose": ["--gpu", "80GiB"], "page": [],
         "plot": ["--kind", "tornado", "-o", "{tmp}/never-written.png"], "validate": ["--state-dtype", "bf16"]}

COMMAND_CASES = {
    "fit": [
        ("no-card", ["7b", "--method", "lora"], "the following arguments are required: --gpu"),
        ("card-without-unit", ["7b", "--gpu", "24"], "write the unit"),
        ("card-bananas", ["7b", "--gpu", "24 bananas"], "unknown unit 'bananas'"),
        ("card-unknown-name", ["7b", "--gpu", "rtx4090x"], "did you mean rtx-4090"),
        ("card-zero", ["7b", "--gpu", "0GiB"], "must be positive"),
        ("card-half-byte", ["7b", "--gpu", "0.5"], "less than one byte"),
        ("card-infinite", ["7b", "--gpu", "1e400"], "--gpu 1e400"),
        ("card-absurd", ["7b", "--gpu", "2000TiB"], "larger than any accelerator"),
        ("card-negative", ["7b", "--gpu=-24GiB"], "cannot read '-24GiB' as a memory size"),
        ("headroom-over-card", ["7b", "--gpu", "24GiB", "--headroom", "30GiB"], "leaves nothing"),
        ("headroom-200-percent", ["7b", "--gpu", "24GiB", "--headroom", "200%"], "leaves nothing"),
        ("headroom-bananas", ["7b", "--gpu", "24GiB", "--headroom", "bananas"], "cannot read 'bananas'"),
        ("solve-rank-full", ["7b", "--method", "full", "--gpu", "80GiB", "--solve", "rank"], "no lora adapters"),
        ("solve-unknown", ["7b", "--gpu", "80GiB", "--solve", "layers"], "invalid choice: 'layers'"),
        ("limit-zero", ["7b", "--gpu", "80GiB", "--limit", "0"], "--limit: expected a positive integer"),
    ],
    "whatif": [
        ("no-change", ["7b"], "needs at least one --set"),
    ],
    "plan": [
        ("parallel-flag", ["7b", "--gpu", "80GiB", "--zero", "3"], "plan searches --zero itself"),
    ],
    "sensitivity": [
        ("knob-unknown", ["7b", "--knobs", "foo"], "--knobs: unknown symbol 'foo'"),
        ("knobs-empty", ["7b", "--knobs", ","], "expected a comma list"),
        ("knob-derived", ["7b", "--knobs", "P_train"], "is derived here"),
        ("knob-rank-full", ["7b", "--method", "full", "--knobs", "rank"], "does not apply to --method full"),
        ("compare-one", ["7b", "--compare", "seq"], "--compare takes two knobs"),
        ("compare-three", ["7b", "--compare", "seq,rank,batch"], "--compare takes two knobs"),
        ("compare-unknown", ["7b", "--compare", "seq,foo"], "not among the knobs"),
    ],
    "explain": [
        ("card-unknown", ["7b", "--gpu", "bananas"], "unknown gpu 'bananas'"),
        ("card-half-byte", ["7b", "--gpu", "0.5"], "less than one byte"),
        ("other-unknown", ["7b", "--other", "nosuch"], "unknown model preset 'nosuch'"),
        ("lang-unknown", ["7b", "--lang", "fr"], "invalid choice: 'fr'"),
        ("format-unknown", ["7b", "--format", "docx"], "invalid choice: 'docx'"),
        ("template-dir-missing", ["7b", "--template-dir", "{tmp}/nope"], "is not a folder"),
        ("template-dir-file", ["7b", "--template-dir", "{tmp}/null.json"], "is not a folder"),
    ],
}


MODEL_SAMPLE = {"unknown-preset-close", "missing-config", "unsupported-model-type", "json-array", "truncated-json",
                "huge-file", "missing-hidden", "hidden-string"}


# plan refuses the parallel options outright (it searches them), before checking their values
NOT_FOR = {"plan": {"gpus-absurd", "tp-not-divisor", "tp-absurd", "offload-without-zero", "offload-params-zero-2",
                    "sequence-parallel-without-tp"}}


def _cases():
    for cid, argv, frag in MODEL_CASES + SCENARIO_CASES + ESTIMATE_ONLY:
        yield pytest.param(["estimate", *argv], frag, id=f"estimate-{cid}")
    for cid, argv, frag in TOP_LEVEL:
        yield pytest.param(argv, frag, id=cid)
    for command in (c for c in COMMANDS if c in NEEDS):  # every command reads the model through load_model
        for cid, argv, frag in [c for c in MODEL_CASES if c[0] in MODEL_SAMPLE] + SCENARIO_CASES:
            if cid in NOT_FOR.get(command, ()):
                continue
            yield pytest.param([command, *NEEDS[command], *argv], frag, id=f"{command}-{cid}")
        for cid, argv, frag in COMMAND_CASES.get(command, []):
            yield pytest.param([command, *argv], frag, id=f"{command}-{cid}")


CASES = list(_cases())


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    for name, content in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv("SYMVRAM_DEBUG", raising=False)


def assert_contract(rc, out, err, fragment):
    assert rc == 2
    assert out == ""
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("symvram: error: ")
    assert any(f.lower() in err.lower() for f in fragment.split("|")), err  # a|b: either names the problem


def test_the_list_is_long_enough():
    assert len(CASES) >= 50


@pytest.mark.parametrize("argv,fragment", CASES)
def test_bad_input(argv, fragment, tmp, capsys):
    rc = main([a.replace("{tmp}", str(tmp)) for a in argv])
    out, err = capsys.readouterr()
    assert_contract(rc, out, err, fragment)


@pytest.mark.parametrize("text", ["24 bananas", "", "GiB", "-1g", "nan", "24 G B", "1e400", "2 PiB", "0"])
def test_unparseable_sizes(text):
    with pytest.raises(UserError):
        parse_size(text)


@pytest.mark.parametrize("text,expected", [
    ("24GB", 24 * 10**9), ("24 GiB", 24 * 2**30), ("24g", 24 * 2**30), ("24G", 24 * 2**30),
    ("80e9", 80 * 10**9), ("512 MiB", 512 * 2**20), ("1.5TiB", 3 * 2**39),
])
def test_sizes_that_parse(text, expected):
    assert parse_size(text) == expected


# The Python API takes the same inputs without argparse in front: the same checks, the same UserError.


@pytest.mark.parametrize("kw,fragment", [
    ({"bacth": 4}, "unknown scenario setting bacth"),
    ({"grad_checkpointing": "false"}, "grad_checkpointing must be True or False"),
    ({"double_quant": 0}, "double_quant must be True or False"),
    ({"zero": True}, "--zero must be 0, 1, 2 or 3"),
    ({"batch": True}, "--batch must be a positive integer"),
    ({"seq": "2048"}, "--seq must be a positive integer"),
    ({"seq": 2048.5}, "--seq must be a positive integer"),
    ({"method": "lora", "rank": 0}, "--rank must be a positive integer"),
    ({"lora_dropout": True}, "--lora-dropout must be in [0, 1)"),
    ({"overrides": {"layers": float("nan")}}, "value must be a positive number"),
    ({"overrides": {"hidden": "4096"}}, "value must be a positive number"),
    ({"overrides": {"heads": "x"}, "tp": 2}, "value must be a positive number"),  # a TypeError in the tp check once
    ({"overrides": {"intermediate": float("nan")}}, "value must be a positive number"),
    ({"method": "lora", "overrides": {"rank": 5000}}, "larger than min(d, k) = 4096"),
    ({"overrides": {"tp": 3}}, "--tp 3 does not divide heads = 32"),
])
def test_api_bad_input(kw, fragment):
    with pytest.raises(UserError) as err:
        Scenario.create("7b", **kw)
    assert fragment in str(err.value)


def test_set_of_a_run_symbol_is_the_option_itself():
    """--set rank=8 is --rank 8: checked like it, and the same ledger and numbers."""
    via_set = Scenario.create("llama-3-8b", method="lora", overrides={"rank": 8, "seq": 1024, "tp": 2})
    via_option = Scenario.create("llama-3-8b", method="lora", rank=8, seq=1024, tp=2)
    assert via_set == via_option
    assert via_set.structure.tensor_parallel  # the structure follows --set tp=2 (it ignored it once)
    assert evaluate(via_set).peak == evaluate(via_option).peak


def test_set_dims_are_checked_as_the_model():
    """A --set that changes the model's shape is checked against the new shape."""
    with pytest.raises(UserError, match="min\\(d, k\\) = 256"):  # k_proj: 2 kv heads x 128 after the change
        Scenario.create("llama-3-8b", method="lora", rank=512, overrides={"kv_heads": 2})
    assert Scenario.create("llama-3-8b", method="lora", rank=512, overrides={"kv_heads": 4}).rank == 512


def test_null_fields_read_as_absent(tmp_path):
    """transformers' LlamaConfig: num_key_value_heads None means num_attention_heads (MHA); a null
    head_dim means hidden / heads. Such a config.json is not bad input."""
    path = tmp_path / "config.json"
    path.write_text(_with(num_key_value_heads=None, head_dim=None, tie_word_embeddings=None))
    m = load_model(str(path))
    assert (m.kv_heads, m.head_dim, m.tied) == (32, 128, False)
