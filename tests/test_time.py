"""The time ledger: FLOPs against torch's FlopCounterMode in the fake-tensor step (the independent
source), the step-time roofline's arithmetic, its bad inputs, and the time block of estimate."""
from __future__ import annotations

import json

import pytest

from symvram.cli import main
from symvram.evaluate import substitution
from symvram.ledger import build_ledger
from symvram.ledger.flops import build_flops
from symvram.presets import spec_from_config
from symvram.scenario import Scenario
from symvram.timing import flops, step_time, time_expr
from symvram.presets import load_card

from test_families import tiny_config

COUNTED = [
    ("llama", dict(method="full")),
    ("llama", dict(method="full", grad_checkpointing=True)),
    ("llama", dict(method="lora", rank=8, grad_checkpointing=True)),
    ("llama", dict(method="lora", rank=8, targets="qv", attention="eager")),
    ("qwen3", dict(method="lora", rank=8, targets="attention")),
    ("qwen3", dict(method="full", attention="eager")),
    ("phi3", dict(method="full", grad_checkpointing=True)),
    ("phi3", dict(method="lora", rank=8)),
    ("mixtral", dict(method="full")),
    ("mixtral", dict(method="lora", rank=8, targets="all-linear")),
    ("gemma2", dict(method="lora", rank=8, grad_checkpointing=True)),
    ("mixtral", dict(method="lora", rank=8, targets="all-linear", grad_checkpointing=True)),
    ("qwen3_moe", dict(method="full", grad_checkpointing=True)),
    ("olmo2", dict(method="lora", rank=8, targets="mlp", grad_checkpointing=True)),
    # a trainable lm_head copy adds its weight gradient (2·T·h·V); an embedding copy the first layer's input grads
    ("llama", dict(method="lora", rank=8, modules_to_save="lm_head")),
    ("llama", dict(method="lora", rank=8, modules_to_save="embed_tokens")),
    # DoRA's weight norm: lora_B(lora_A(eye)) each forward and recompute; the recompute runs through down's B
    ("llama", dict(method="lora", rank=8, dora=True)),
    ("llama", dict(method="lora", rank=8, dora=True, grad_checkpointing=True)),
    # with dropout DoRA computes the base result again from the dropped-out input (and its input gradient)
    ("llama", dict(method="lora", rank=8, dora=True, lora_dropout=0.1)),
    ("llama", dict(method="lora", rank=8, dora=True, lora_dropout=0.1, grad_checkpointing=True, targets="qv")),
]


def tiny(model_type: str, **settings) -> Scenario:
    cfg = {**tiny_config(model_type), "num_hidden_layers": 2}
    return Scenario.create(spec_from_config(cfg, "tiny", "config", "test"), batch=2, seq=64, device="cpu", **settings)


@pytest.mark.parametrize("model_type, settings", COUNTED, ids=[f"{m}-{i}" for i, (m, _) in enumerate(COUNTED)])
def test_flops_equal_the_counted_step(model_type, settings):
    """Forward, and backward with the checkpointed recompute, equal FlopCounterMode's count of the real step."""
    pytest.importorskip("peft")
    from symvram.validate.measure import count_flops
    from symvram.validate.spec import from_scenario

    sc = tiny(model_type, **settings)
    counted = count_flops(from_scenario(sc))
    f = flops(sc)
    assert f.by_phase["forward"] == counted["forward"]
    assert f.by_phase["backward"] + f.by_phase["recompute"] == counted["backward"]
    assert counted["optimizer"] == 0   # the update is elementwise: priced as HBM traffic, not FLOPs


def test_the_counter_sees_cpu_attention_and_grouped_experts():
    """Without the registered formulas FlopCounterMode drops the CPU SDPA kernels and grouped_mm."""
    torch = pytest.importorskip("torch")
    from symvram.validate.flops import flop_counter

    q, k = torch.randn(1, 4, 16, 8), torch.randn(1, 2, 16, 8)
    with flop_counter() as c:
        torch.nn.functional.scaled_dot_product_attention(q, k, k, enable_gqa=True)
    assert c.get_total_flops() == 2 * (2 * 4 * 16 * 16 * 8)


def test_checkpointing_overhead_is_derived_per_method():
    """One more forward: about a quarter of full fine-tuning's matmuls, much more of LoRA's (no weight gradients)."""
    full = flops(Scenario.create("llama-3-8b", method="full")).recompute_share_if_checkpointed
    lora = flops(Scenario.create("llama-3-8b", method="lora")).recompute_share_if_checkpointed
    assert 0.2 < full < 0.34 < lora < 0.55


def test_lora_backward_has_no_base_weight_gradients():
    sc = Scenario.create("7b", method="lora")
    assert "bwd_weight_grads" not in build_flops(sc.structure).by_key
    assert flops(sc).by_phase["backward"] < 0.6 * flops(Scenario.create("7b", method="full")).by_phase["backward"]


def test_step_time_is_the_stated_roofline():
    sc = Scenario.create("7b", method="full", zero=3, gpus=8)
    st = step_time(sc, load_card("h100"), mfu=0.5)
    led = build_ledger(sc.structure)
    subs = substitution(led, {**sc.values(), "peak_flops": 989e12, "mfu": 0.5, "hbm_bandwidth": 3350e9,
                              "link_bandwidth": 450e9, "host_bandwidth": 64e9})
    assert float(led.expand(time_expr(sc)).xreplace(subs)) == pytest.approx(st.seconds_per_step, rel=1e-9)
    assert st.tokens_per_second == pytest.approx(8 * 2048 / st.seconds_per_step)
    assert any("no overlap" in a for a in st.assumptions())


@pytest.mark.parametrize("args, message", [
    (["--gpu", "h100", "--mfu", "0"], "--mfu must be in (0, 1]"),
    (["--gpu", "h100", "--mfu", "1.2"], "--mfu must be in (0, 1]"),
    (["--gpu", "h100", "--mfu", "fast"], "--mfu must be a number"),
    (["--gpu", "h100", "--interconnect", "carrier-pigeon"], "known: nvlink2"),
    (["--gpu", "t4", "--mfu", "0.4"], "no dense bf16 peak figure"),
])
def test_bad_time_inputs_are_one_line_errors(args, message, capsys):
    assert main(["estimate", "7b", "--method", "lora", *args]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_estimate_json_has_the_time_block(capsys):
    assert main(["estimate", "7b", "--method", "lora", "--gpu", "a100-80g", "--format", "json"]) == 0
    t = json.loads(capsys.readouterr().out)["time"]
    assert t["flops_per_step"] == sum(t["flops"].values()) == sum(t["flops_by_term"].values())
    assert t["seconds_per_step"] > 0 and t["tokens_per_second"] == pytest.approx(2048 / t["seconds_per_step"])
    assert t["comm_bytes_per_step"] == 0 and t["assumptions"]


def test_a_card_without_figures_keeps_the_memory_answer(capsys):
    assert main(["estimate", "7b", "--method", "lora", "--gpu", "24GiB"]) == 0
    assert "no step time" in capsys.readouterr().out


def test_explain_derives_the_checkpointing_overhead_for_full_and_lora(capsys):
    from symvram.analysis.explain import recompute_price
    from symvram.evaluate import evaluate

    price = recompute_price(evaluate(Scenario.create("7b", method="lora", grad_checkpointing=True)))
    assert price["full"] < price["percent"] == price["lora"]
    assert price["derivation"].value == flops(Scenario.create("7b", method="lora", grad_checkpointing=True)).by_phase["recompute"]
    assert main(["explain", "7b", "--method", "full"]) == 0
    out = capsys.readouterr().out
    assert f"full fine-tuning +{price['full']:.0f} %" in out and f"LoRA +{price['lora']:.0f} %" in out
    assert "20–30" not in out


def test_the_gpu_step_time_benchmark_skips_cleanly_without_cuda(capsys):
    import importlib.util
    from pathlib import Path

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: run benchmarks/step_time_gpu.py itself")
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "step_time_gpu.py"
    spec = importlib.util.spec_from_file_location("step_time_gpu", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main([]) == 0
    assert capsys.readouterr().out.startswith("skipped: no CUDA GPU")


def test_the_page_carries_the_step_time_function_and_card_figures():
    from symvram.present.page import page_data

    data, fns = page_data(Scenario.create("7b", method="lora"), gpu="h100")
    assert all(len(st) == 4 for st in data["structures"])
    assert data["gpus"]["h100-80g"]["peak_flops"] == 989e12 and "peak_flops" not in data["gpus"]["t4"]
    assert any("peak_flops" in f and "mfu" in f for f in fns)


def test_communication_ledger_by_hand():
    """Ring collectives: DDP all-reduces 2(N−1)/N of the gradients; ZeRO-1/2 reduce-scatter them and all-gather
    the updated weights; ZeRO-3 gathers every layer twice, the root once; TP all-reduces b·s·h per layer and pass."""
    from symvram.ledger.comm import build_comm

    def comm(**kw):
        sc = Scenario.create("7b", method="full", **kw)
        led = build_ledger(sc.structure)
        subs = substitution(led, sc.values())
        return {t.key: int(t.expr.xreplace(subs)) for t in build_comm(sc.structure).terms}, sc

    P = 7 * 10**9
    c, _ = comm(gpus=8)
    assert c["allreduce_grads"] == 2 * 7 * P * 2 // 8
    c, _ = comm(gpus=4, zero=2)
    assert c["reduce_scatter_grads"] == c["allgather_params"] == 3 * P * 2 // 4
    c, sc = comm(gpus=1, tp=8, sequence_parallel=True, zero=1)
    assert c["tp_activations"] == 2 * 2 * 2 * 7 * 32 * 2048 * 4096 * 2 // 8
    c, _ = comm(gpus=2, zero=3, offload="optimizer")
    assert c["offload_grads"] == c["offload_params_back"] == P * 2 // 2 and "optimizer_update" not in c


def test_the_page_prices_an_offloaded_step_as_the_command_line_does():
    """The page evaluates STEP_TIME over the structure's parts with its card figures: under ZeRO-Offload the CPU
    optimizer's update (cpu_bytes / cpu_bandwidth) must be among them, or the page shows a faster step than
    `estimate` prints."""
    from symvram.evaluate import exact_function
    from symvram.present.page import page_data
    from symvram.timing import STEP_TIME, time_expr

    sc = Scenario.create("qwen3-8b", method="full", stack="deepspeed", zero=2, offload="optimizer")
    data, _ = page_data(sc, gpu="rtx-4090")
    card = data["gpus"]["rtx-4090"]
    assert card["cpu_bandwidth"] == 89.6e9          # a desktop's 2 × DDR5-5600
    values = {**sc.values(), **card, "mfu": 0.4}
    seconds = exact_function(build_ledger(sc.structure).definitions, (time_expr(sc),))(values)[0]
    st = step_time(sc, load_card("rtx-4090"))
    assert float(seconds) == pytest.approx(st.seconds_per_step) and st.seconds["cpu"] > 0
    assert "cpu_bandwidth" in {s.name for s in STEP_TIME.free_symbols}
