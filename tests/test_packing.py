"""--packing TOKENS: TRL's padding-free packing — the micro-batch flattened into one row of TOKENS tokens whose
position ids restart at each sample. Under SDPA transformers turns those position ids into a block-diagonal mask,
which every layer's SDPA call saves as a 16-bit (1, 1, s, s) mask, with k and v repeated to every head. By hand,
refusals, the TRL reader, and measured under FakeTensorMode with restarting position ids."""
from __future__ import annotations

import pytest

from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.scenario import Scenario
from test_modules_to_save import tiny

KW = dict(stack="torch", method="lora", rank=8)
GEMMA3 = dict(model_type="gemma3_text", layer_types=["sliding_attention", "full_attention"], sliding_window=16)


def test_by_hand():
    """Tiny Llama (L = 2, n_h = 4, n_kv = 2, d_head = 16) packed into 256 tokens: per layer a bf16 256² mask and
    the k, v copies of the 2 extra heads, beside what an unpacked row of 256 tokens keeps."""
    packed = evaluate(Scenario.create(tiny(), packing=256, **KW))
    row = evaluate(Scenario.create(tiny(), batch=1, seq=256, **KW))
    assert (packed.scenario.batch, packed.scenario.seq) == (1, 256)
    assert packed.terms["act_sliding_mask"] == 2 * (2 * 256**2 + 2 * 2 * 256 * 16 * 2)
    assert packed.peak - row.peak == 327_680   # measured: 6,360,856 − 6,033,176 (tests/test_packing below)
    ckpt = evaluate(Scenario.create(tiny(), packing=256, grad_checkpointing=True, **KW))
    assert ckpt.terms["act_sliding_mask"] == 256**2   # the shared boolean mask, a checkpoint input
    both = evaluate(Scenario.create(tiny(**GEMMA3), packing=256, grad_checkpointing=True, **KW))
    assert both.terms["act_sliding_mask"] == 2 * 256**2   # a sliding and a full layer: one boolean mask for each kind


def test_refusals_and_reading(tmp_path):
    with pytest.raises(UserError, match="contradicts"):
        Scenario.create(tiny(), packing=256, batch=2, **KW)
    with pytest.raises(UserError, match="not modelled"):
        Scenario.create(tiny(), packing=256, attention="eager", **KW)
    with pytest.raises(UserError, match="--packing"):
        Scenario.create(tiny(), packing=0.5, **KW)
    from symvram.readers.read import read_files

    f = tmp_path / "sft.yaml"
    f.write_text("model_name_or_path: llama-3.1-8b\noutput_dir: out\nmax_length: 4096\n"
                 "per_device_train_batch_size: 2\npacking: true\n")
    got = read_files([str(f)]).settings
    assert (got["packing"].value, got["batch"].value, got["seq"].value) == (8192, 1, 8192)
    f.write_text("model_name_or_path: llama-3.1-8b\noutput_dir: out\nmax_length: 4096\npacking: true\n"
                 "packing_strategy: wrapped\n")
    assert "packing" not in read_files([str(f)]).settings   # wrapped rows are not padding-free


MEASURED = [dict(), dict(arch=dict(num_hidden_layers=4)), dict(stack="hf", grad_checkpointing=True),
            dict(method="full"), dict(arch=GEMMA3), dict(arch=GEMMA3, grad_checkpointing=True)]   # a mask per kind


@pytest.mark.parametrize("settings", MEASURED, ids=[str(i) for i in range(len(MEASURED))])
def test_estimate_equals_the_measured_packed_step(settings):
    pytest.importorskip("peft")
    from symvram.validate.measure import measure
    from symvram.validate.spec import from_scenario

    kw = {**KW, **settings}
    sc = Scenario.create(tiny(**kw.pop("arch", {})), packing=256, device="cpu", **kw)
    measured = measure({**from_scenario(sc), "steps": 2})
    assert abs(measured["peak_bytes"] - evaluate(sc).peak) <= 8


def test_a_new_length_moves_the_packed_row():
    """whatif --set seq=…, diagnose's probe and the curves change the row's tokens; a batch of several rows is no
    longer one padding-free row."""
    sc = Scenario.create(tiny(), packing=256, **KW)
    assert (sc.with_changes(seq=128).packing, sc.with_changes(seq=128).seq) == (128, 128)
    assert sc.with_changes(overrides=(("seq", 64),)).packing == 64
    assert sc.with_changes(batch=2).packing == 0
