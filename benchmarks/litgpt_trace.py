"""LitGPT's own model, chunked loss and AdamW step traced under FakeTensorMode (``--stack litgpt``).

LitGPT is not a dependency of symvram: run this in a venv that has it (litgpt 0.5.13, lightning 2.6.6,
lightning-utilities and torchmetrics, each installed with ``--no-deps``), with this checkout and then this project's
environment (its torch) on PYTHONPATH:

    python3 -m venv /tmp/venv-lg && /tmp/venv-lg/bin/pip install --no-deps litgpt==0.5.13 lightning==2.6.6 \
        lightning-utilities torchmetrics
    PYTHONPATH=$PWD:$PWD/.venv/lib/python3.11/site-packages /tmp/venv-lg/bin/python benchmarks/litgpt_trace.py
    # → benchmarks/results/litgpt_trace.json

(or name cases to print their rows only). tests/test_litgpt.py checks today's estimate against the stored rows
(full fine-tuning, and LoRA with each of its lora_* switches; the rows' scenarios say ``device="cpu"``: the trace runs
CPU code paths, where dropout keeps a noise tensor of the input's dtype).

Each case builds what ``litgpt finetune lora`` / ``finetune full`` build (litgpt 0.5.13): ``litgpt.lora.GPT`` (or
``litgpt.model.GPT``) from a ``Config``, the LoRA defaults of finetune/lora.py:56-64 (r 8, alpha 16, dropout 0.05,
q and v only) or the case's lora_* switches, ``mark_only_lora_as_trainable`` (finetune/lora.py:212), the whole
module in bf16 as ``precision="bf16-true"`` converts it (buffers too), then ``model.max_seq_length = longest_seq_length``
(finetune/lora.py:304, which rebuilds the RoPE cache ``cos``/``sin`` at that length, model.py:43-62). Each step is
finetune/lora.py:355-359 (``model(input_ids, lm_head_chunk_size=128)``, the last chunk sliced by one position,
``chunked_cross_entropy``, ``backward``) or finetune/full.py:283-285 (whole logits, ``logits[..., :-1, :]``,
``chunked_cross_entropy`` in 128-row chunks), then ``optimizer.step()`` and ``zero_grad()`` with torch's AdamW
(finetune/*.py ``optimizer="AdamW"``, foreach as on a CUDA device). ``logits`` stays referenced by fit()'s loop
through the backward, the optimizer step and the next step's forward (finetune/full.py:282-291, lora.py:355-366). The peak is symvram's own tracker (``symvram.validate.measure.PeakTracker``).
"""
from __future__ import annotations

import sys

import torch

from program_trace import run_cases

TINY = dict(name="tiny-llama", block_size=256, vocab_size=1000, padded_vocab_size=1000, n_layer=2, n_head=4,
            n_query_groups=2, n_embd=64, intermediate_size=176, bias=False, rotary_percentage=1.0,
            parallel_residual=False, norm_class_name="RMSNorm", mlp_class_name="LLaMAMLP", norm_eps=1e-5)
# litgpt/config.py:854-870 "Llama-3.2-1B" as a 4-layer slice at real width; no tie: GPT has its own lm_head, which
# scripts/convert_hf_checkpoint.py:273-274 fills with a copy of the tied checkpoint's embedding
LLAMA32_1B_4L = dict(name="Llama-3.2-1B", block_size=131072, vocab_size=128000, padded_vocab_size=128256, n_layer=4,
                     n_embd=2048, n_head=32, n_query_groups=8, rotary_percentage=1.0, parallel_residual=False,
                     bias=False, norm_class_name="RMSNorm", mlp_class_name="LLaMAMLP", intermediate_size=8192,
                     rope_base=500000, rope_adjustments=dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                                             original_max_seq_len=8192))
SWITCHES = ("query", "key", "value", "projection", "mlp", "head")   # lora.py:467-475 Config.lora_*
QV = dict(method="lora", rank=8, alpha=16, dropout=0.05, lora=("query", "value"))   # finetune/lora.py:56-64
CASES = (  # name, litgpt Config arguments, run settings (``lora``: the lora_* switches that are on)
    ("tiny-lora", TINY, dict(**QV, batch=2, seq=64)),
    ("tiny-lora-mha", {**TINY, "n_query_groups": 4}, dict(**QV, batch=2, seq=64)),
    ("tiny-full", TINY, dict(method="full", batch=2, seq=64)),
    ("tiny-full-long", TINY, dict(method="full", batch=1, seq=200)),
    ("tiny-full-mha", {**TINY, "n_query_groups": 4}, dict(method="full", batch=2, seq=64)),
    ("llama3.2-1b-4layers-lora", LLAMA32_1B_4L, dict(**QV, batch=4, seq=512)),
    ("llama3.2-1b-4layers-full", LLAMA32_1B_4L, dict(method="full", batch=2, seq=512)),
    # two lm_head chunks, the last of 72 positions; one sample (the last chunk's reshape a view); every switch but
    # the head (no zero_pad: q, k, v all adapted), under GQA and MHA (conv1d's groups); k alone; no dropout
    ("tiny-lora-long", TINY, dict(**QV, batch=2, seq=200)),
    ("tiny-lora-b1", TINY, dict(**QV, batch=1, seq=250)),
    ("tiny-lora-all", TINY, dict(**QV | dict(lora=("query", "key", "value", "projection", "mlp")), batch=2, seq=64)),
    ("tiny-lora-all-mha", {**TINY, "n_query_groups": 4},
     dict(**QV | dict(lora=("query", "key", "value", "projection", "mlp")), batch=2, seq=64)),
    ("tiny-lora-key-proj", TINY, dict(**QV | dict(lora=("key", "projection")), batch=2, seq=64)),
    ("tiny-lora-nodropout", TINY, dict(**QV | dict(dropout=0.0), batch=2, seq=160)),
    # config_hub/finetune/llama-3.2-1B/lora.yaml: lora_r 32, alpha 16, q and v, micro_batch_size 1, max_seq_length 512
    ("llama3.2-1b-4layers-lora-hub", LLAMA32_1B_4L, dict(**QV | dict(rank=32), batch=1, seq=512)),
    ("llama3.2-1b-4layers-lora-all", LLAMA32_1B_4L,
     dict(**QV | dict(lora=("query", "key", "value", "projection", "mlp")), batch=2, seq=384)),
    # lora_head: each 128-position lm_head chunk with its own LoRA branch; every switch, as
    # config_hub/finetune/tiny-llama/lora.yaml (r 32), at the tiny size and the 1B slice
    ("tiny-lora-head", TINY, dict(**QV | dict(lora=("query", "value", "head")), batch=2, seq=200)),
    ("tiny-lora-every", TINY, dict(**QV | dict(rank=32, lora=SWITCHES), batch=2, seq=160)),
    ("tiny-lora-head-b1", TINY, dict(**QV | dict(lora=("query", "value", "head")), batch=1, seq=250)),
    # the full context: max_seq_length = block_size rebuilds nothing, the cos/sin of init stay bf16 (model.py:59-60)
    ("tiny-lora-full-context", TINY, dict(**QV, batch=1, seq=256)),
    ("llama3.2-1b-4layers-lora-every", LLAMA32_1B_4L, dict(**QV | dict(rank=32, lora=SWITCHES), batch=1, seq=512)),
)


def build(arch: dict, run: dict):
    from litgpt import lora, model as lmodel

    with torch.device("meta"):
        if run["method"] == "lora":
            model = lora.GPT(lora.Config(**arch, lora_r=run["rank"], lora_alpha=run["alpha"],
                                         lora_dropout=run["dropout"],
                                         **{f"lora_{k}": k in run["lora"] for k in SWITCHES}))
            lora.mark_only_lora_as_trainable(model)
        else:
            model = lmodel.GPT(lmodel.Config(**arch))
    return model.to(torch.bfloat16)


def trace(arch: dict, run: dict, steps: int = 2) -> dict:
    from litgpt.utils import chunked_cross_entropy
    from torch._subclasses.fake_tensor import FakeTensorMode

    from symvram.validate.measure import PeakTracker, _counts, _fakeify_plain

    fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
    model = build(arch, run)
    _fakeify_plain(model, fake_mode)
    b, s = run["batch"], run["seq"]
    with fake_mode:
        model.max_seq_length = s   # finetune/lora.py:304: the longest training sample; rebuilds cos, sin (fp32)
    trainable, total, params = _counts(model)
    optimizer = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.02, foreach=True)
    with fake_mode:
        input_ids = torch.randint(0, arch["vocab_size"], (b, s))
        targets = input_ids.clone()
    tracker = PeakTracker()
    tracker.track_external(model, optimizer, input_ids, targets)
    with fake_mode, tracker:
        for step in range(1, steps + 1):
            tracker.set_phase(f"step{step}:forward")
            if run["method"] == "lora":
                logits = model(input_ids, lm_head_chunk_size=128)
                logits[-1] = logits[-1][..., :-1, :]
                loss = chunked_cross_entropy(logits, targets[..., 1:])
            else:
                logits = model(input_ids)
                loss = chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:])
            tracker.set_phase(f"step{step}:backward")
            loss.backward()   # no del: fit() keeps ``logits`` until the next step's forward returns
            tracker.set_phase(f"step{step}:optimizer")
            optimizer.step()
            tracker.set_phase(f"step{step}:zero_grad")
            optimizer.zero_grad()
    return {"trainable_params": trainable, "total_params": total, "peak_bytes": tracker.peak_bytes,
            "peak_phase": tracker.peak_phase,
            "buffers": {n: [list(t.shape), str(t.dtype)] for n, t in model.named_buffers()}}


def config(arch: dict) -> dict:
    """The Config as the config.json symvram reads (the same model: LitGPT's GPT has its own lm_head, untied)."""
    return {"model_type": "llama", "hidden_size": arch["n_embd"], "intermediate_size": arch["intermediate_size"],
            "num_hidden_layers": arch["n_layer"], "num_attention_heads": arch["n_head"],
            "num_key_value_heads": arch["n_query_groups"], "head_dim": arch["n_embd"] // arch["n_head"],
            "vocab_size": arch["padded_vocab_size"], "tie_word_embeddings": False,
            "max_position_embeddings": arch["block_size"]}


def scenario(run: dict) -> dict:
    """The run as ``Scenario.create`` keywords under ``--stack litgpt``: the switches' targets
    (symvram.scenario.LITGPT_LORA), on the CPU code paths this trace runs (dropout's saved noise)."""
    from symvram.scenario import LITGPT_LORA

    kw = {"stack": "litgpt", "method": run["method"], "batch": run["batch"], "seq": run["seq"], "device": "cpu"}
    if run["method"] == "lora":
        kw.update(rank=run["rank"], lora_dropout=run["dropout"],
                  targets=",".join(t for k in run["lora"] for t in LITGPT_LORA[f"lora_{k}"]))
    return kw


def versions() -> dict:
    from importlib.metadata import version

    return {"torch": torch.__version__, "litgpt": version("litgpt"), "lightning": version("lightning")}


def main(argv: list[str]) -> None:
    run_cases("litgpt_trace", CASES, argv, config=config, scenario=scenario, trace=trace, versions=versions)


if __name__ == "__main__":
    main(sys.argv[1:])
