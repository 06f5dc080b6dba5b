"""What the card holds: the ledger's allocation schedule, the device block, the versions followed, and the
commands' new figures (issue 24)."""
import json

import pytest

from symvram.card_memory import card_memory, device_block, schedule_peaks
from symvram.cli import main
from symvram.evaluate import evaluate
from symvram.presets import load_card
from symvram.scenario import Scenario
from symvram.versions import parse_versions

MiB, GIB = 2**20, 2**30


@pytest.mark.parametrize("model,kw", [
    ("7b", dict(method="full")),
    ("llama-3-8b", dict(method="lora", batch=4, seq=1024)),
    ("llama-3-8b", dict(method="qlora", batch=2)),
    ("llama-3-8b", dict(method="lora", grad_checkpointing=True, batch=8)),
    ("7b", dict(method="full", optimizer="adamw8bit")),
    ("70b", dict(method="lora", gpus=8, zero=3, grad_checkpointing=True)),
    ("7b", dict(method="full", gpus=4, zero=3, offload="optimizer")),
    ("glm-4.5-air", dict(method="lora", targets="attention", seq=1024)),   # layer kinds: a dense layer 0, then MoE
    ("deepseek-v3", dict(method="lora", targets="attention", grad_checkpointing=True)),
])
def test_the_schedule_reaches_the_ledgers_peak(model, kw):
    """Each monomial a tensor, the moments walked in order, the backward's layer loop: the replay's allocated
    peak is the ledger's moment peak, less than 2 % above it (each tensor rounded up to 512 B, a block that is not
    split counted whole, FSDP2's prefetch order)."""
    sc = Scenario.create(model, **kw)
    peak = evaluate(sc).peak
    replayed = schedule_peaks(sc)["default"]
    assert peak * 0.99 <= replayed["allocated_peak"] <= peak * 1.02
    assert replayed["reserved_peak"] >= replayed["allocated_peak"]


def test_fragmentation_grows_with_the_batch_and_expandable_segments_take_part_of_it():
    # the observation on published figures: a constant headroom does not follow the activations
    slack = {}
    for batch in (1, 8):
        cm = card_memory(Scenario.create("llama-3-8b", method="qlora", batch=batch, seq=1024))
        slack[batch] = cm.reserved["default"] - cm.schedule_allocated
        assert cm.schedule_allocated < cm.reserved["expandable"] < cm.reserved["default"]
    assert slack[8] > 2 * slack[1]


def test_device_block_by_hand():
    a100, h100 = load_card("a100-80g"), load_card("h100-80g")
    # compute capability 8.0: cuBLAS 4096 KiB × 2 + 16 KiB × 8, cuBLASLt 1 MiB, two threads; no NCCL on one GPU
    assert device_block(a100) == {"cuda_context": a100.memory_bytes - a100.usable_bytes,
                                  "cublas_workspaces": 2 * (4096 * 2 + 16 * 8 + 1024) * 1024, "nccl_buffers": 0}
    # 9.0: 4096 KiB × 8; eight GPUs: one communicator of 16 channels × NCCL_BUFFSIZE 4 MiB
    block = device_block(h100, gpus=8)
    assert (block["cublas_workspaces"], block["nccl_buffers"]) == (2 * (32 + 1) * MiB, 16 * 4 * MiB)


def test_estimate_json_carries_the_three_levels(capsys):
    assert main(["estimate", "llama-3-8b", "--method", "lora", "--gpu", "h100-80g", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)["bytes"]
    bd = evaluate(Scenario.create("llama-3-8b", method="lora"))
    assert data["peak"] == bd.peak                         # bytes.peak stays the allocated peak
    context = load_card("h100-80g").memory_bytes - load_card("h100-80g").usable_bytes
    assert data["device_peak"] == data["reserved_peak"] + context   # one GPU: no NCCL buffers
    assert data["reserved_peak"] == data["reserved_peaks"]["default"] >= data["schedule_allocated_peak"] > bd.peak
    assert data["allocator"] == "default"


def test_the_allocator_follows_pytorch_cuda_alloc_conf(capsys, monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert main(["estimate", "7b", "--method", "lora", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)["bytes"]
    assert data["allocator"] == "expandable" and data["reserved_peak"] == data["reserved_peaks"]["expandable"]
    assert main(["estimate", "7b", "--method", "lora", "--format", "json", "--allocator", "default"]) == 0
    assert json.loads(capsys.readouterr().out)["bytes"]["allocator"] == "default"


@pytest.mark.parametrize("argv,needle", [
    (["estimate", "7b", "--method", "lora", "--allocator", "cuda"], "--allocator 'cuda'"),
    (["fit", "7b", "--gpu", "a100-80g", "--allocator", "native"], "--allocator 'native'"),
    (["estimate", "7b", "--method", "lora", "--versions", "bitsandbytes"], "--versions bitsandbytes="),
    (["estimate", "7b", "--method", "lora", "--versions", "numpy=1.0"], "unknown package 'numpy'"),
    (["diagnose", "7b", "--gpu", "24GiB", "--versions", "torch=two"], "--versions torch=two"),
])
def test_bad_allocator_and_versions_exit_2_in_one_line(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_a_malformed_alloc_conf_is_named(capsys, monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:lots")
    assert main(["estimate", "7b", "--method", "lora"]) == 2
    assert "max_split_size_mb:lots" in capsys.readouterr().err


def test_bitsandbytes_before_0_43_3_keeps_each_4bit_input():
    """MatMul4Bit saved (A, B) before 0.43.3: per layer the inputs of the 4-bit linears that need a gradient
    and that nothing else keeps — with fp32 adapters LoRA keeps its own cast copies, SDPA keeps o_proj's input —
    so q/k/v's (h), gate/up's (h) and down_proj's (d_ff) wide inputs, except the first layer's q/k/v (the frozen
    embedding's output needs no gradient)."""
    kw = dict(method="qlora", batch=2, seq=512, grad_checkpointing=False)
    now = evaluate(Scenario.create("llama-3-8b", **kw))
    old = evaluate(Scenario.create("llama-3-8b", versions="bitsandbytes=0.42.0", **kw))
    v = old.values
    b_c, T, h, f, L = v["bytes_act"], v["batch"] * v["seq"], v["hidden"], v["intermediate"], v["layers"]
    assert "act_bnb_inputs" not in now.terms
    assert old.terms["act_bnb_inputs"] + old.terms.get("act_first_layer", 0) - now.terms.get("act_first_layer", 0) \
        == L * b_c * T * (2 * h + f) - b_c * T * h
    assert old.peak > now.peak
    assert parse_versions("bitsandbytes=0.43.3") == (("bitsandbytes", "0.43.3"),)
    assert "act_bnb_inputs" not in evaluate(Scenario.create("llama-3-8b", versions="bitsandbytes=0.43.3", **kw)).terms


def test_headers_say_which_versions_they_follow(capsys):
    assert main(["estimate", "llama-3-8b", "--method", "qlora", "--versions", "bitsandbytes=0.42.0"]) == 0
    out = capsys.readouterr().out
    assert "follows torch" in out and "bitsandbytes 0.42.0 (asked)" in out


def _modelled_step(sc) -> bool:
    """The step whose working sets the schedule models (issue 24): one SFT step of a decoder with standard
    attention and no other mixer (a Mamba-2 mixer's working set is not in the schedule: Falcon-H1's parallel
    layers, −10…+11 %) in layers all alike, every layer checkpointed or none, the optimizer after backward, no LoRA on
    lm_head, no vision tower beside the decoder, no activation offloading, no packed rows, no fused experts made
    fp32 by k-bit preparation (their grouped_mm runs per group: a schedule of its own), no op-level selective
    checkpointing (its one stored trace, TinyLlama LoRA b2 s1024: allocated exact, reserved −6.0 % default and
    −0.6 % expandable — the order of its saved matmul outputs in the schedule is not matched to the trace yet)."""
    st, fam = sc.structure, sc.structure.arch
    return (st.objective == "sft" and fam.mixer == "attention" and not st.optimizer_in_backward and st.checkpoint_every == 1
            and not st.checkpoint_ops
            and "lm_head" not in st.head_targets and not fam.latent_attention and not fam.kinds and st.tower is None
            and not st.offload_activations and not st.packed and not (fam.mlp_kind == "moe" and st.kbit_prepared))


def test_ledger_schedule_against_traced_schedules_on_stored_cases():
    """Every stored measurement that kept its traced schedule's replay (benchmarks/results/measurements.jsonl,
    ``allocator``: symvram validate's trace of every alloc and free, through the same replay): the ledger's own
    schedule, with each layer's working sets, replayed with both allocators. On the step the working sets model
    (``_modelled_step``) the allocated peaks agree within 0.5 % and the reserved peaks, with expandable
    segments, to a median within 1 % and every case within 3.5 %, with the default allocator to a median within
    1 % and every case within 2.5 % (issue 24 asks for 1 % on every case: 12 of 17 are, max 1.9 %; was 3.5 %,
    6 of 17, before the MLP's working set, a layer's saved tensors made before its temporaries, and a
    checkpointed forward's would-be-saved tensors standing in per sub-block). The other stored cases are named in docs/accuracy.md (LoRA on
    lm_head: within 1.3 % default, +5.7 % expandable; DPO/KTO, optimizer-in-backward, partial checkpointing, MLA and
    Gated DeltaNet families, a multimodal checkpoint's vision tower (gemma-3-4b-it: 2.3 %): their schedules are
    their own; test_reserved_against_the_traced_schedule_per_case bounds those whose mechanism is modelled)."""
    import statistics
    from pathlib import Path

    from symvram.card_memory import schedule_peaks
    from symvram.validate.spec import to_scenario

    rows = [json.loads(line) for line in (Path(__file__).parent.parent / "benchmarks/results/measurements.jsonl")
            .read_text().splitlines() if '"allocator"' in line]
    errors = {}
    for row in rows:
        sc = to_scenario(row["spec"])
        if not _modelled_step(sc):
            continue
        ledger = schedule_peaks(sc)
        for name in ("default", "expandable"):
            traced = row["allocator"][name]
            assert abs(ledger[name]["allocated_peak"] / traced["allocated_peak"] - 1) < 0.005, (row["name"], name)
            errors[row["name"], name] = ledger[name]["reserved_peak"] / traced["reserved_peak"] - 1
    assert len(errors) >= 2 * 17, sorted(errors)
    expandable = [abs(e) for (_, name), e in errors.items() if name == "expandable"]
    assert statistics.median(expandable) < 0.01 and max(expandable) < 0.035, errors
    default = [abs(e) for (_, name), e in errors.items() if name == "default"]
    assert statistics.median(default) < 0.01 and max(default) < 0.025, errors


def _stored_rows() -> dict[str, dict]:
    from pathlib import Path

    return {row["name"]: row for row in (json.loads(line) for line in (
        Path(__file__).parent.parent / "benchmarks/results/measurements.jsonl").read_text().splitlines()
        if '"allocator"' in line)}


@pytest.mark.parametrize("name,bound", [
    # TRL's fused head: its [min(T, 4096), 32768] tile is one tensor that every tile reuses (Term.tensors), not one
    # block of the whole term with the fp32 statistics (+24 … +30 % before); under autocast a LoRA projection's
    # lora_B output and its scaled copy are 16-bit, the autocast matmul's (+2.6 / +2.6 / +2.4 % before)
    ("dpo_qwen3-0.6b_lora_r16_b2_s1024_p256_ckpt", 0.015),
    ("kto_qwen2.5-0.5b_lora_r16_b4_s2048_p512_ckpt", 0.015),
    ("kto_llama3.2-1b_lora_r16_b4_s1024_p256_ckpt", 0.025),
    # each activation one tensor of the forward's 2b rows (Term.rows: DPO concatenates chosen and rejected), not
    # two of b, and lora_B's 16-bit outputs under autocast (+5.9 % before)
    ("dpo_qwen2.5-0.5b_lora_r16_b2_s2048_p512_ckpt", 0.01),
    # a LoRA recompute: the MLP's saved tensors made after its input projections' working set, and the recompute's
    # down-projection temporary in each layer's recompute (reward LoRA +9.6 / +7.5 % before); the 2b rows' tensors,
    # and the MLP backward's gradients as tensors once the r-wide down input it frees is freed, not one block of
    # their net bytes (+5.4 / +3.9 % before)
    ("reward_llama3.2-1b_lora_r16_b4_s1024_ckpt", 0.01),
    ("reward_qwen3-0.6b_lora_r16_b4_s1024_ckpt", 0.01),
    ("dpo_llama3.2-1b_lora_r16_b2_s1024_p256", 0.01),
    # LoRA on lm_head: the base logits, lora_B's output and its scaled copy before the sum (−12.7 % before)
    ("qwen2.5-0.5b_hf_lora_r16_all-embed-head_b2_s1024", 0.01),
    # every layer kind's count known to the schedule: Gemma 4 E2B's states per parameter (+6.8 / +9.9 % before)
    ("gemma-4-e2b_lora_r16_all_b1_s2048_bf16_foreach", 0.01),
    ("gemma-4-e2b_full_b1_s1024_bf16_foreach", 0.025),
    # a frozen layer before the first LoRA target makes its tensors, term by term (−23.3 / −2.8 / −4.0 % before)
    ("nemotron-h-8b-4layers_lora_r64_qv_b2_s2048_bf16_foreach", 0.025),
    ("qwen3.5-27b-4layers_lora_r64_qv_b2_s4096_bf16_foreach", 0.025),
    ("qwen3-next-80b-a3b-4layers_lora_r64_qv_b2_s4096_bf16_foreach", 0.035),
    # the larger of several sets of tensors (a hybrid's recomputed layer: its largest kind's) is that set's tensors,
    # not one block of the Max (−22.8 / −16.0 % before)
    ("nemotron-nano-9b-v2-4layers_lora_r16_linear_b2_s4096_autocast_ckpt_foreach", 0.035),
    ("llama-4-scout-4layers_hf_lora_r16_attn_b1_s8192_gc", 0.035),
    # a difference beside a condition is one width: a packed batch's repeated heads, (n_h − n_kv)·[n_kv ≥ 2] (−5.4 %)
    ("tinyllama-1.1b_torch_lora_r16_all_packed4096_gc", 0.035),
])
def test_reserved_against_the_traced_schedule_per_case(name, bound):
    """The ledger's schedule against one stored traced schedule (``symvram validate``'s every alloc and free, through
    the same replay), default allocator: the reserved peaks within ``bound``, each case's mechanism named above."""
    from symvram.validate.spec import to_scenario

    row = _stored_rows()[name]
    error = schedule_peaks(to_scenario(row["spec"]))["default"]["reserved_peak"] / \
        row["allocator"]["default"]["reserved_peak"] - 1
    assert abs(error) < bound, error


def test_transformers_loss_of_older_releases():
    """transformers before 4.49 shifted the logits, not the labels: ForCausalLMLoss (and before 4.46
    LlamaForCausalLM.forward) made logits[..., :-1, :].contiguous(), an fp32 copy of b·(s − 1)·V, alive with the
    fp32 upcast while the loss is computed; before 4.45 the forward itself upcast the logits, so the 16-bit logits
    are gone by then and only the fp32 ones and the copy are there (hand derivation from the tagged sources,
    symvram.versions.MECHANISMS)."""
    kw = dict(method="lora", batch=2, seq=1024)
    now = evaluate(Scenario.create("llama-3-8b", **kw))
    shifted = evaluate(Scenario.create("llama-3-8b", versions="transformers=4.48.0", **kw))
    upcast = evaluate(Scenario.create("llama-3-8b", versions="transformers=4.44.2", **kw))
    v = now.values
    b, s, V, b_c = v["batch"], v["seq"], v["vocab"], v["bytes_act"]
    copy = 4 * b * (s - 1) * V
    assert shifted.moments["forward_loss"] - now.moments["forward_loss"] == copy
    assert upcast.moments["forward_loss"] - now.moments["forward_loss"] == copy + (4 - b_c) * b * s * V - 4 * b * s * V
    assert evaluate(Scenario.create("llama-3-8b", versions="transformers=4.49.0", **kw)).terms.keys() == now.terms.keys()


def test_peft_before_0_12_keeps_adapters_in_the_base_dtype():
    """PEFT before 0.12 cast the new adapters to the base weight's floating dtype (0.11.1 layer.py:128-129);
    0.12 added get_peft_model(autocast_adapter_dtype=True), fp32 adapters on a 16-bit base. Under torch AdamW the
    states follow the parameter: per trainable parameter the weight, gradient and two states go from 4 + 4 + 8
    to 2 + 2 + 4 bytes. A 4-bit base is not floating (QLoRA's stay fp32); an adapter dtype asked for wins."""
    kw = dict(method="lora", stack="torch")
    now = evaluate(Scenario.create("llama-3-8b", **kw))
    old = evaluate(Scenario.create("llama-3-8b", versions="peft=0.11.1", **kw))
    assert (now.scenario.adapter_dtype, old.scenario.adapter_dtype) == ("fp32", "bf16")
    assert now.blocks["trainable"] - old.blocks["trainable"] == 8 * now.derived["P_train"]
    assert Scenario.create("llama-3-8b", method="qlora", stack="torch", versions="peft=0.11.1").adapter_dtype == "fp32"
    assert Scenario.create("llama-3-8b", versions="peft=0.11.1", adapter_dtype="fp32", **kw).adapter_dtype == "fp32"


def test_schedule_reaches_the_traced_allocated_peak_on_stored_cases():
    """The ledger's schedule, replayed, against each stored traced schedule (``symvram validate``'s record of every
    alloc and free) whose ledger peak itself is within 0.5 % of the measurement: the allocated peaks agree within
    1 % on every case, objectives, hybrids, MLA and partial checkpointing included — the layers before the first
    LoRA target save nothing (Qwen3.5 LoRA on q/v: was +31.5 %), and what the moments before the layers' backward
    hold is freed before the layer loop (DPO 7B LoRA with checkpointing: was +1.9 %), and a LoRA recompute makes
    the MLP's saved tensors after its input projections' working set and its down projection's temporary in each
    layer's recompute (the objectives' checkpointed LoRA steps, DPO, KTO and reward modelling, whose peak is there:
    DPO / KTO Qwen2.5-0.5B were +5.7 %, reward Llama-3.2-1B +4.3 %, now under 0.8 %). Not yet, within 6 %: a
    multimodal checkpoint's vision tower and GRPO, whose generation and scoring forwards have no working sets in
    the schedule yet (Llama-3.2-1B LoRA with old log-probs: 2.2 %; Qwen2.5-0.5B LoRA with checkpointing: 3.2 %)."""
    from pathlib import Path

    from symvram.validate.spec import to_scenario

    rows = [json.loads(line) for line in (Path(__file__).parent.parent / "benchmarks/results/measurements.jsonl")
            .read_text().splitlines() if '"allocator"' in line]
    checked = 0
    for row in rows:
        sc = to_scenario(row["spec"])
        if abs(evaluate(sc).peak / row["peak_bytes"] - 1) > 0.005:
            continue
        st = sc.structure
        not_yet = st.tower is not None or st.objective == "grpo"   # its generation and scoring: no working sets yet
        error = schedule_peaks(sc)["default"]["allocated_peak"] / row["allocator"]["default"]["allocated_peak"] - 1
        assert abs(error) < (0.06 if not_yet else 0.01), (row["name"], error)
        checked += 1
    assert checked >= 40, checked
