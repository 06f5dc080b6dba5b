"""The measuring instrument itself: symvram.validate's tracer against the CPU allocator's own events.

Every activation term of the ledger was written against the tracer (``PeakTracker``, a MemTracker), so the
tracer must count what the program holds and nothing the tracer itself keeps alive. Here both run the same
two-plus steps of a tiny model with real CPU tensors: the tracer's per-phase peaks beside the running total of
``torch.profiler``'s allocator events (``profile_memory=True``: every allocation and free of the CPU allocator,
whatever made it). They agree within a few hundred bytes (scalar temporaries the dispatcher never shows) in
every variant, once the CPU RNG state that ``torch.utils.checkpoint`` copies per checkpointed layer is added
(torch/utils/checkpoint.py:247 reentrant, :1632 non-reentrant: ``torch.get_rng_state()``, a 5,056-byte host
tensor made outside the dispatcher; on a GPU it is host memory, so the ledger has no term for it).

MemTracker's module hooks (ModTracker's ``register_multi_grad_hook``) kept one fp32 hidden-state block per step
alive in a checkpointed PEFT model (one more per step: 30,720 B here) and put DoRA's weight-norm graph in
reference cycles; the tracer registers none of them (``measure._ForwardModules``).
"""
import gc

import pytest

torch = pytest.importorskip("torch", reason="symvram[validate] extra not installed (torch)")
pytest.importorskip("transformers", reason="symvram[validate] extra not installed (transformers)")
pytest.importorskip("peft", reason="symvram[validate] extra not installed (peft)")

import importlib  # noqa: E402

M = importlib.import_module("symvram.validate.measure")

L = 2
ARCH = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": L,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000,
        "tie_word_embeddings": False}
BASE = {"arch": ARCH, "method": "lora", "rank": 8, "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
        "up_proj", "down_proj"], "lora_dropout": 0.0, "adapter_dtype": "fp32", "batch": 3, "seq": 40, "dtype": "bf16",
        "autocast": None, "optimizer": "adamw", "optimizer_impl": "foreach", "grad_checkpointing": False,
        "attention": "sdpa", "steps": 3}
METHODS = {"full": {"method": "full"}, "lora": {}, "qlora": {"method": "qlora"}, "dora": {"dora": True}}
CHECKPOINTING = {"no-ckpt": {}, "ckpt": {"grad_checkpointing": True},
                 "ckpt-reentrant": {"grad_checkpointing": True, "checkpoint_impl": "reentrant"}}
VARIANTS = [(m, c) for m in METHODS for c in CHECKPOINTING]
TOLERANCE = 256  # bytes: the dispatcher's unseen scalar temporaries (112 B in forward here)


def _spec(method: str, ckpt: str) -> dict:
    if method == "qlora":
        pytest.importorskip("bitsandbytes", reason="bitsandbytes not installed")
    return M.normalize_spec({**BASE, **METHODS[method], **CHECKPOINTING[ckpt]})


def tracer_peaks(spec: dict) -> dict[str, int]:
    """Each phase's peak of the tracer's live bytes, above what existed before the first step."""
    torch.manual_seed(0)
    model, optimizer, input_ids, labels, *_ = M.prepare(spec, None, "cpu")
    tracker = M.PeakTracker(optimizer)
    tracker.track_external(model, optimizer, input_ids, labels)
    start = tracker._total()
    with tracker:
        M._train_steps(spec, model, optimizer, input_ids, labels, tracker, tracker.set_phase)
    return {phase: peak - start for phase, peak in tracker.phase_peak.items() if phase.startswith("step")}


def allocator_peaks(spec: dict) -> dict[str, int]:
    """Each phase's peak of the running sum of the CPU allocator's events (torch.profiler), from zero at the first
    step; the phases are marked with ``record_function`` ranges."""
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.manual_seed(0)
    model, optimizer, input_ids, labels, *_ = M.prepare(spec, None, "cpu")
    open_range = []

    def on_phase(name):
        if open_range:
            open_range.pop().__exit__(None, None, None)
        open_range.append(record_function("phase:" + name))
        open_range[-1].__enter__()

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        M._train_steps(spec, model, optimizer, input_ids, labels, None, on_phase)
        open_range.pop().__exit__(None, None, None)
    events = []

    def walk(node):
        if node.name == "[memory]":
            events.append((node.start_time_ns, 1, node.extra_fields.alloc_size))
        elif node.name.startswith("phase:"):
            events.append((node.start_time_ns, 0, node.name[len("phase:"):]))
        for child in node.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    total, peaks, phase = 0, {}, None
    for _, kind, value in sorted(events, key=lambda e: (e[0], e[1])):
        if kind == 0:
            phase = value
            peaks[phase] = max(peaks.get(phase, total), total)
        else:
            total += value
            if phase is not None:
                peaks[phase] = max(peaks[phase], total)
    return peaks


@pytest.fixture(autouse=True)
def _no_cyclic_collector():
    """Python's cyclic collector frees garbage of earlier tests at random moments: keep it out of both runs."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


@pytest.mark.parametrize("method,ckpt", VARIANTS, ids=[f"{m}-{c}" for m, c in VARIANTS])
def test_tracer_equals_the_allocator_phase_by_phase(method, ckpt):
    """Per phase, the tracer's peak is the allocator's; and steps 2 and 3 hold the same bytes (the optimizer
    states exist from step 1's update on): nothing of a step is kept alive into the next."""
    spec = _spec(method, ckpt)
    traced = tracer_peaks(spec)
    gc.collect()
    allocated = allocator_peaks(spec)
    assert set(traced) == set(allocated)
    rng_states = L * torch.get_rng_state().numel() if spec["grad_checkpointing"] else 0
    for phase, peak in allocated.items():
        where = f"{phase}: tracer {traced[phase]:,} B + {rng_states:,} B of RNG states, allocator {peak:,} B"
        seen = traced[phase] + (rng_states if phase.endswith(("forward", "backward")) else 0)
        assert abs(seen - peak) <= TOLERANCE, where
    for phase in ("forward", "backward", "optimizer", "zero_grad"):
        assert traced[f"step2:{phase}"] == traced[f"step3:{phase}"], phase
