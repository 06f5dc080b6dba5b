"""The ZeRO-3 terms against PyTorch's own FSDP2 (fully_shard per decoder layer, then the root) over a
fake process group of N ranks, under FakeTensorMode; skipped without torch/transformers/peft."""
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from symvram.presets import spec_from_config  # noqa: E402
from symvram.scenario import Scenario  # noqa: E402
from symvram.validate.fsdp import compare_fsdp  # noqa: E402

ARCH = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}
H, F, V, L, KV = 64, 176, 1000, 2, 2 * 16
TINY = spec_from_config(ARCH, name="tiny-llama", kind="config", source="test")
LAYER = 2 * H * H + 2 * KV * H + 3 * H * F + 2 * H        # q, o; k, v (GQA); gate, up, down; two norms
ROOT = 2 * V * H + H                                       # embeddings, lm_head, final norm
P = ROOT + L * LAYER


@pytest.mark.parametrize("n", [2, 4, 8])
def test_full_fine_tuning_per_rank(n):
    r = compare_fsdp(Scenario.create(TINY, stack="torch", method="full", seq=32, state_dtype="bf16"), n)
    rows = r["rows"]
    for row in rows.values():
        assert row["estimate"] == row["measured"]
    # and by hand: bf16 shards of every parameter; torch AdamW's m, v in bf16 plus fp32 step counters
    assert rows["sharded_params"]["measured"] == rows["sharded_grads"]["measured"] == 2 * P // n
    assert rows["optimizer_states"]["measured"] == 2 * 2 * P // n + 4 * (L * 9 + 3)
    # unsharded at most: the root unit and one layer (the all-gather outputs are a category of their own)
    assert rows["unsharded_params"]["measured"] == 2 * (ROOT + LAYER)
    assert r["peak"]["estimate"] == pytest.approx(r["peak"]["measured"], rel=0.005)
    # bytes each rank sends (the collectives FSDP2 dispatched): every layer gathered in forward and again
    # in backward, the root once; every gradient reduce-scattered — equal to the communication ledger
    comm = r["comm"]
    for row in comm.values():
        assert row["estimate"] == row["measured"]
    assert comm["allgather"]["measured"] == (n - 1) * 2 * (ROOT + 2 * L * LAYER) // n
    assert comm["reduce_scatter"]["measured"] == (n - 1) * 2 * P // n


def test_lora_per_rank():
    n, rank = 4, 8
    sc = Scenario.create(TINY, stack="torch", method="lora", rank=rank, seq=32, adapter_dtype="bf16", state_dtype="bf16")
    r = compare_fsdp(sc, n)
    rows = r["rows"]
    for row in rows.values():
        assert row["estimate"] == row["measured"]
    lora = L * rank * (2 * (H + H) + 2 * (H + KV) + 2 * (H + F) + (F + H))
    assert rows["sharded_grads"]["measured"] == 2 * lora // n
    assert rows["sharded_params"]["measured"] == 2 * (P + lora) // n
    comm = r["comm"]
    assert comm["reduce_scatter"]["measured"] == comm["reduce_scatter"]["estimate"] == (n - 1) * 2 * lora // n
    assert comm["allgather"]["measured"] == comm["allgather"]["estimate"]
    assert r["peak"]["estimate"] == pytest.approx(r["peak"]["measured"], rel=0.005)


@pytest.mark.parametrize("method", ["full", "lora"])
def test_fsdp_stack_fp32_storage_bf16_policy(method):
    """--stack fsdp: fp32 shards, MixedPrecisionPolicy(bf16, fp32); the measurement runs the same policy."""
    n = 2
    sc = Scenario.create(TINY, stack="fsdp", method=method, rank=8, seq=32, gpus=n)
    r = compare_fsdp(sc, n)
    for row in r["rows"].values():
        assert row["estimate"] == row["measured"]
    lora = L * 8 * (2 * (H + H) + 2 * (H + KV) + 2 * (H + F) + (F + H)) if method == "lora" else 0
    assert r["measured"]["sharded_params"] == 4 * (P + lora) // n            # fp32 shards
    assert r["measured"]["unsharded_params"] == 2 * (ROOT + LAYER + lora // L)  # gathered in the policy's bf16
    assert r["comm"]["allgather"]["measured"] == r["comm"]["allgather"]["estimate"]
    assert r["comm"]["reduce_scatter"]["measured"] == r["comm"]["reduce_scatter"]["estimate"]
    assert r["peak"]["estimate"] == pytest.approx(r["peak"]["measured"], rel=0.005)


def test_cli_world_size(tmp_path, capsys):
    import json

    from symvram.cli import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(ARCH))
    assert main(["validate", str(cfg), "--method", "full", "--state-dtype", "bf16", "--seq", "32",
                 "--world-size", "2", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows["sharded_params"]["measured"] == 2 * P // 2 == rows["sharded_params"]["estimate"]
    assert main(["validate", "tinyllama-1.1b", "--method", "full", "--state-dtype", "bf16", "--set", "layers=2",
                 "--world-size", "2"]) == 2
    assert "config.json" in capsys.readouterr().err


def test_cli_stack_fsdp_measures_over_gpus(tmp_path, capsys):
    import json

    from symvram.cli import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(ARCH))
    assert main(["validate", str(cfg), "--stack", "fsdp", "--method", "full", "--seq", "32", "--gpus", "2",
                 "--format", "json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["world_size"] == 2 and r["spec"]["mp_policy"] == "bf16"
    assert r["rows"]["sharded_params"]["measured"] == 4 * P // 2 == r["rows"]["sharded_params"]["estimate"]


def test_fp32_routers_are_gathered_in_fp32():
    """GLM-4.5 keeps gate.weight fp32 under a bf16 from_pretrained (_keep_in_fp32_modules_strict): FSDP2 all-gathers
    the layer's mixed dtypes as bytes (_fsdp_collectives.py:791-808), the router at 4 B. By hand for a tiny GLM-4.5 (a
    dense layer 0, an MoE layer 1 of 6 experts, LoRA r=8 on attention, bf16): the root, the MoE layer with its
    adapters, and 2 more bytes per router weight. Its full fine-tuning is refused, as FSDP2 refuses it."""
    from symvram.errors import UserError
    from symvram.validate.fsdp import measure_fsdp
    from symvram.validate.spec import from_scenario
    from test_families import tiny_config

    glm = spec_from_config({**tiny_config("glm4_moe"), "num_hidden_layers": 2}, "tiny-glm", "config", "test")
    sc = Scenario.create(glm, stack="torch", method="lora", rank=8, targets="attention", seq=32, adapter_dtype="bf16",
                         state_dtype="bf16")
    r = compare_fsdp(sc, 2)
    for row in [*r["rows"].values(), *r["comm"].values()]:
        assert row["estimate"] == row["measured"]
    q, kv, E = 4 * 24, 2 * 24, 6
    moe_layer = (H * q + q + 2 * (H * kv + kv) + q * H + 2 * 24 + E * H   # attention with biases, q/k norms, router
                 + E * 3 * H * 40 + 3 * H * 2 * 40 + 2 * H)                # experts, two shared experts, two norms
    lora = 8 * ((H + q) + 2 * (H + kv) + (q + H))
    assert r["measured"]["unsharded_params"] == 2 * (ROOT + moe_layer + lora) + 2 * E * H
    with pytest.raises(UserError, match="uniform original parameter dtype"):
        sc.with_changes(method="full", zero=3, gpus=2)
    with pytest.raises(AssertionError, match="uniform original parameter dtype"):
        measure_fsdp({**from_scenario(sc), "method": "full", "steps": 1}, 2)
