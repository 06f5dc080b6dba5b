"""LoRA on lm_head and embed_tokens (``--targets all-linear,lm_head,embed_tokens``): PEFT's lora.Linear on lm_head
keeps lora_A's input and r-wide output until lm_head's backward; lora.Embedding keeps the r-wide lookup, and makes
the embedding's output need a gradient, so the first layer saves like the others — by hand and measured on tiny
models under FakeTensorMode (peft 0.21.2 tuners/lora/layer.py Linear.forward, Embedding.forward)."""
from __future__ import annotations

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.scenario import Scenario
from symvram.timing import flops
from symvram.validate.spec import from_scenario
from test_modules_to_save import measured_tiny, tiny  # the tiny Llama of the LoRA tests


def test_by_hand():
    """Torch stack (fp32 adapters on a bf16 base, no autocast), V = 1000, h = 64, r = 8, T = 128 tokens: each head
    target adds r·(V + h) = 8,512 fp32 adapter elements, their fp32 m and v and one step counter per matrix; lm_head
    keeps lora_A's fp32 cast input (4·h B per token) and lora_A's fp32 output (4·r); the embedding keeps its fp32
    r-wide lookup (4·r) and the first layer's input norm its fp32 input and 1/rms (4·h + 4)."""
    V, h, r, T = 1000, 64, 8, 128
    kw = dict(stack="torch", method="lora", rank=r, batch=2, seq=64)
    base = evaluate(Scenario.create(tiny(), targets="q,v", **kw))
    head = evaluate(Scenario.create(tiny(), targets="q,v,lm_head", **kw))
    embed = evaluate(Scenario.create(tiny(), targets="embed_tokens,q,v", **kw))
    assert head.scenario.head_targets == ("lm_head",) and head.scenario.targets == ("q_proj", "v_proj")
    params = 4 * r * (V + h)
    assert head.derived["P_lora"] - base.derived["P_lora"] == r * (V + h)
    parameter_side = 3 * params + 2 * 4   # weights, m, v; two step counters
    assert head.terms["act_lora_head"] == T * (4 * h + 4 * r)
    assert head.peak - base.peak == parameter_side + T * (4 * h + 4 * r) == 139_016        # measured
    assert embed.terms["act_lora_embed"] == T * 4 * r
    assert embed.peak - base.peak == parameter_side + T * (4 * r + 4 * h + 4) == 139_528   # measured


def test_refusals_and_spec():
    with pytest.raises(UserError, match="alone is not modelled"):
        Scenario.create(tiny(), method="lora", targets="lm_head")
    with pytest.raises(UserError, match="sft_trainer.py:1066"):
        Scenario.create(tiny(), method="lora", targets="all-linear,lm_head", stack="trl")
    with pytest.raises(UserError, match="not both"):
        Scenario.create(tiny(), method="lora", targets="all-linear,lm_head", modules_to_save="lm_head")
    with pytest.raises(UserError, match="FSDP2"):
        Scenario.create(tiny(), method="lora", targets="all-linear,embed_tokens", stack="fsdp", gpus=2)
    sc = Scenario.create(tiny(), method="lora", rank=8, targets="all-linear,lm_head,embed_tokens")
    assert from_scenario(sc)["targets"][-2:] == ["embed_tokens", "lm_head"]
    again = Scenario.create(tiny(), method="lora", rank=8, targets=from_scenario(sc)["targets"])
    assert again.head_targets == sc.head_targets and again.targets == sc.targets
    assert sc.with_changes(rank=4).head_targets == sc.head_targets


BIG_VOCAB = dict(vocab_size=32000)  # T = 16 tokens: the optimizer step or the end of backward is the peak
MEASURED = [
    dict(stack="torch", heads="lm_head"),
    dict(stack="torch", heads="embed_tokens"),
    dict(stack="hf", heads="embed_tokens,lm_head"),
    dict(stack="hf", heads="embed_tokens,lm_head", grad_checkpointing=True),
    dict(stack="torch", heads="embed_tokens,lm_head", lora_dropout=0.1),
    dict(stack="torch", heads="embed_tokens,lm_head", arch=dict(model_type="qwen2", tie_word_embeddings=True)),
    dict(stack="torch", heads="embed_tokens,lm_head", arch=BIG_VOCAB, batch=1, seq=16),
    dict(stack="hf", heads="embed_tokens,lm_head", arch=BIG_VOCAB, batch=1, seq=16),
    dict(stack="hf", heads="embed_tokens,lm_head", method="qlora"),
    dict(stack="torch", heads="lm_head", method="qlora", kbit_prep="peft", arch=dict(vocab_size=8000)),
    dict(stack="hf", heads="embed_tokens", optimizer="adamw8bit", arch=BIG_VOCAB, batch=1, seq=16),
    dict(stack="torch", heads="embed_tokens,lm_head", method="qlora", kbit_prep="peft", grad_checkpointing=True,
         checkpoint_impl="reentrant"),
    dict(stack="torch", heads="embed_tokens,lm_head", adapter_dtype="bf16", arch=dict(model_type="qwen3")),
]


@pytest.mark.parametrize("settings", MEASURED, ids=[str(i) for i in range(len(MEASURED))])
def test_estimate_equals_the_measured_peak(settings):
    settings = dict(settings)
    heads = settings.pop("heads")
    sc, measured = measured_tiny(settings, targets=f"q_proj,v_proj,down_proj,{heads}")
    if sc.method == "qlora":
        return   # FlopCounterMode does not see bitsandbytes' 4-bit matmuls on the CPU
    from symvram.validate.measure import count_flops

    counted = count_flops(from_scenario(sc))   # FlopCounterMode in a fake run of its own
    f = flops(sc)
    assert (f.by_phase["forward"], f.by_phase["backward"] + f.by_phase["recompute"]) == (
        counted["forward"], counted["backward"])


@pytest.mark.parametrize("name, text", [
    ("ax.yml", "base_model: qwen3-8b\nadapter: lora\nlora_target_modules: [q_proj, v_proj, lm_head, embed_tokens]\n"),
    ("lf.yml", "model_name_or_path: qwen3-8b\nstage: sft\nfinetuning_type: lora\nlora_target: q_proj,v_proj,lm_head\n"),
])
def test_the_readers_keep_the_head_targets(tmp_path, name, text):
    """axolotl's lora_target_modules and LLaMA-Factory's lora_target name lm_head / embed_tokens as PEFT reads them."""
    from symvram.readers.read import read_files

    (tmp_path / name).write_text(text)
    targets = read_files([str(tmp_path / name)]).settings["targets"].value
    sc = Scenario.create("qwen3-8b", method="lora", targets=targets)
    assert sc.targets == ("q_proj", "v_proj") and "lm_head" in sc.head_targets
    assert ("embed_tokens" in sc.head_targets) == ("embed_tokens" in text)


def test_diagnose_offers_the_head_switches_as_edits(tmp_path):
    """issue 28's advice: trainable head modules, LoRA on them and DoRA are priced remedies, written in the file's
    own keys (axolotl and LLaMA-Factory spellings)."""
    from symvram.readers.edits import edits
    from symvram.readers.read import read_files

    ax = tmp_path / "a.yml"
    ax.write_text("base_model: llama-3.1-8b\nadapter: lora\nlora_r: 64\nlora_target_modules: [q_proj, v_proj, lm_head]\n"
                  "lora_modules_to_save: [embed_tokens]\npeft_use_dora: true\nsequence_len: 4096\n"
                  "gradient_checkpointing: true\n")
    from symvram.analysis.diagnose import _candidates

    for sc in (Scenario.create("llama-3.1-8b", method="lora", targets="q,v,lm_head", modules_to_save="embed_tokens"),
               Scenario.create("llama-3.1-8b", method="lora", targets="q,v", dora=True)):
        offered = {c.key: c for c in _candidates(sc, None) if c.key.startswith("no_")}
        assert set(offered) == ({"no_modules_to_save", "no_head_lora"} if sc.head_targets else {"no_dora"})
        for c in offered.values():   # each is priced by the ledger: the switched-off scenario is smaller
            assert evaluate(sc.with_changes(**c.changes)).peak < evaluate(sc).peak
    reading = read_files([str(ax)])
    assert edits(reading, {"modules_to_save": ()}) == [f"{ax}: lora_modules_to_save: []"]
    assert edits(reading, {"targets": ("q_proj", "v_proj"), "head_targets": ()}) == [
        f"{ax}: lora_target_modules: [q_proj, v_proj]"]
    assert edits(reading, {"dora": False}) == [f"{ax}: peft_use_dora: false"]
    lf = tmp_path / "l.yml"
    lf.write_text("model_name_or_path: llama-3.1-8b\nstage: sft\nfinetuning_type: lora\nadditional_target: embed_tokens\n")
    assert edits(read_files([str(lf)]), {"modules_to_save": ()}) == [f"{lf}: additional_target: null"]
