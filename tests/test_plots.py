"""Plots: the data on the returned Axes against independent evaluate() numbers, and the labels.

Image comparison is opt-in: SYMVRAM_IMAGE_TESTS=1 compares with tests/baseline/ (matplotlib's
compare_images); rerun with SYMVRAM_IMAGE_TESTS=update to regenerate the baseline."""
import os
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgba

from symvram.presets import load_card
from symvram.analysis.curves import fit_cells, seq_curves
from symvram.analysis.fit import fit
from symvram.analysis.sensitivity import sensitivity
from symvram.api import compare
from symvram.card_memory import device_block, fits_on_card
from symvram.cli import main
from symvram.errors import UserError
from symvram.evaluate import evaluate
from symvram.present import plots, style
from symvram.present.tables import setup_line
from symvram.scenario import Scenario

GIB = 2**30
BASELINE = Path(__file__).parent / "baseline"


@pytest.fixture(scope="module")
def lora_sc():
    return Scenario.create("7b", method="lora", rank=64, seq=2048, batch=4)


def test_breakdown_bars_and_peaks():
    rows = compare("7b").rows
    ax = plots.breakdown(rows).axes[0]
    assert ax.get_ylabel() == "memory (GiB)"
    assert [t.get_text() for t in ax.get_xticklabels()] == [name for name, _ in rows]
    names = ["full", "full + fp32 master", "LoRA", "QLoRA"]
    methods = [dict(method="full", master="none"), dict(method="full", master="fp32"), dict(method="lora"),
               dict(method="qlora")]
    expected = [evaluate(Scenario.create("7b", **kw)) for kw in methods]
    assert [name for name, _ in rows] == names
    for container, block in zip(ax.containers, ("base", "trainable", "activations")):
        assert [bar.get_height() for bar in container] == pytest.approx([bd.blocks[block] / GIB for bd in expected])
    # full at 12 B/param: 14e9 weights (+ the rotary buffer) as the base bar, by hand
    assert ax.containers[0][0].get_height() == pytest.approx(14e9 / GIB, abs=1e-6)
    peaks = ax.lines[0].get_ydata()
    assert list(peaks) == pytest.approx([bd.peak / GIB for bd in expected])
    # the hatched segment: what each peak holds beyond the three blocks, up to the peak
    above = ax.containers[3]
    assert above.get_label() == "temporaries: the peak above the blocks" and above[0].get_hatch() == "///"
    for bar, bd in zip(above, expected):
        assert bar.get_height() == pytest.approx(max(0, bd.peak - bd.ledger_total) / GIB)
        assert bar.get_y() + bar.get_height() == pytest.approx(max(bd.peak, bd.ledger_total) / GIB)


def test_breakdown_decimal_units():
    ax = plots.breakdown(compare("7b").rows, units="GB").axes[0]
    assert ax.get_ylabel() == "memory (GB)"
    assert ax.containers[0][0].get_height() == pytest.approx(14.0, abs=1e-6)


def test_seq_curve_lines_match_estimates(lora_sc):
    cards = [load_card("rtx-4090"), load_card("a100-80g")]
    ax = plots.seq_curve(seq_curves(lora_sc, ranks=(8, 64), cards=cards)).axes[0]
    assert ax.get_xlabel() == "sequence length s (tokens)" and ax.get_ylabel() == "peak (GiB)"
    r8, r64 = ax.lines[0], ax.lines[1]
    assert r8.get_label().startswith("r = 8") and r64.get_label().startswith("r = 64")
    s = r64.get_xdata()
    assert s[-1] == 4096                                    # up to 7b's max_position_embeddings
    for i in (0, 100, len(s) - 1):
        for line, rank in ((r8, 8), (r64, 64)):
            bd = evaluate(lora_sc.with_changes(seq=int(s[i]), rank=rank))
            assert line.get_ydata()[i] == pytest.approx(bd.peak / GIB, abs=1e-6)
    card_levels = [line.get_ydata()[0] for line in ax.lines[2:]]
    assert card_levels == pytest.approx([c.usable_bytes / GIB for c in cards])


def test_seq_curve_full_has_one_line():
    ax = plots.seq_curve(seq_curves(Scenario.create("7b", method="full"), seqs=[512, 1024])).axes[0]
    assert len(ax.lines) == 1
    assert ax.lines[0].get_ydata()[1] == pytest.approx(
        evaluate(Scenario.create("7b", method="full", seq=1024)).peak / GIB, abs=1e-6)


def test_tornado_bars_are_elasticities(lora_sc):
    res = sensitivity(lora_sc)
    ax = plots.tornado(res).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    widths = [bar.get_width() for bar in ax.patches]
    assert sorted(labels) == sorted(plots.knob_label(r.knob) for r in res.rows)
    # independent: the elasticity of seq from a finite difference of two estimates (the peak is linear in s)
    peak = evaluate(lora_sc).peak
    step = evaluate(lora_sc.with_changes(seq=2049)).peak - peak
    assert widths[labels.index("sequence length (seq)")] == pytest.approx(step * 2048 / peak, rel=1e-6)
    assert "elasticity" in ax.get_xlabel()


def test_tornado_in_words_grouped_zero_rows_dropped():
    """Labels are the symbols' meanings; your settings above the model's shape, each by |elasticity|;
    7b full (a nominal model: its parameter count is fixed) has six shape knobs with no effect, left out
    and named."""
    res = sensitivity(Scenario.create("7b", method="full"))
    zero = [r.knob for r in res.rows if r.elasticity == 0]
    assert zero == ["layers", "hidden", "intermediate", "vocab", "heads", "kv_heads"]
    ax = plots.tornado(res).axes[0]
    ticks = sorted(zip(ax.get_yticks(), (t.get_text() for t in ax.get_yticklabels())), reverse=True)
    labels = [label for _, label in ticks]   # top first
    assert labels[:2] == ["bytes per optimizer-state element (bytes_state)",
                          "optimizer states kept per trainable parameter (states_per_param)"]
    assert labels[-1] == "dimension of one attention head (head_dim)"   # the one shape knob that moves it
    assert not any(f"({k})" in label for k in zero for label in labels)
    assert ax.get_xlabel().replace("\n", " ").endswith("no effect on the peak, not shown: " + ", ".join(zero))
    assert len(ax.patches) == len(res.rows) - len(zero)

    res = sensitivity(Scenario.create("7b", method="lora", rank=64, seq=2048, batch=4))
    ax = plots.tornado(res).axes[0]
    heads = {t.get_text(): t.xy[1] for t in ax.texts if t.get_fontweight() == "bold"}
    assert list(heads) == ["your settings", "the model's shape"]
    ticks = dict(zip((t.get_text() for t in ax.get_yticklabels()), ax.get_yticks()))
    assert heads["your settings"] > ticks["LoRA rank (rank)"] > heads["the model's shape"] > \
        ticks["number of decoder layers (layers)"]
    assert {bar.get_facecolor() for bar in ax.patches} == {to_rgba(style.NEUTRAL)}   # no block colour


def test_fit_map_cells_match_estimates(lora_sc):
    card = load_card("a100-80g")
    batches, seqs = [1, 2, 3, 4, 6, 8], [512, 1024, 2048, 2560, 3072, 4096]
    fig = plots.fit_map(fit_cells(lora_sc, card, batches=batches, seqs=seqs))
    ax = fig.axes[0]
    cells = np.asarray(ax.images[0].get_array())
    # the allocator's share: the card less its context; the tensors' share: that less the cuBLAS workspaces
    budget = card.memory_bytes - (card.memory_bytes - card.usable_bytes) - device_block(card)["cublas_workspaces"]
    for i, b in enumerate(batches):
        for j, s in enumerate(seqs):
            at = lora_sc.with_changes(batch=b, seq=s)   # every cell replayed, not only the row's last
            assert cells[i, j] == (2 if fits_on_card(at, card) else int(evaluate(at).peak <= budget)), (b, s)
    assert (cells == 2).any() and (cells == 0).any()         # this grid crosses the boundary
    assert ax.get_xlabel() == "sequence length s (tokens)" and ax.get_ylabel() == "micro-batch size b (sequences)"
    assert "A100 80GB" in fig.texts[0].get_text() and "NVIDIA" not in fig.texts[0].get_text()


def test_dark_theme_is_readable():
    fig = plots.breakdown(compare("7b").rows, theme="dark")
    ax = fig.axes[0]
    assert fig.get_facecolor()[:3] == (0.0, 0.0, 0.0)
    assert ax.yaxis.label.get_color() == "white" and ax.title.get_color() == "white"
    assert fig.texts[0].get_color() == "white"
    with pytest.raises(UserError):
        plots.breakdown(compare("7b").rows, theme="sepia")


@pytest.mark.parametrize("suffix,magic", [("png", b"\x89PNG"), ("svg", b"<?xml"), ("pdf", b"%PDF")])
def test_cli_writes_each_format(tmp_path, suffix, magic):
    out = tmp_path / f"fig.{suffix}"
    assert main(["plot", "7b", "--kind", "tornado", "--top", "5", "-o", str(out)]) == 0
    assert out.read_bytes().startswith(magic)


@pytest.mark.parametrize("argv,needle", [
    (["--kind", "fit-map", "-o", "x.png"], "needs exactly one --gpu"),
    (["--kind", "fit-map", "--gpu", "24", "-o", "x.png"], "24 bytes is not a GPU's memory"),
    (["--kind", "tornado", "-o", "x.jpg"], "use .png, .svg or .pdf"),
    (["--kind", "seq-curve", "--method", "full", "--ranks", "8", "-o", "x.png"], "--ranks does not apply"),
    (["--kind", "seq-curve", "--ranks", "0", "-o", "x.png"], "a LoRA rank must be between 1 and 4096"),
])
def test_cli_errors_are_one_line_exit_2(tmp_path, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(tmp_path)
    assert main(["plot", "7b", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    assert not any(tmp_path.iterdir())


@pytest.mark.skipif(not os.environ.get("SYMVRAM_IMAGE_TESTS"), reason="image comparison is opt-in")
def test_breakdown_image(tmp_path):
    from matplotlib.testing.compare import compare_images

    fig = plots.breakdown(compare("7b").rows)
    baseline = BASELINE / "breakdown-7b.png"
    if os.environ["SYMVRAM_IMAGE_TESTS"] == "update":  # writing the baseline is not a test of it
        fig.savefig(baseline, dpi=80)
        pytest.skip(f"wrote {baseline.name}; rerun with SYMVRAM_IMAGE_TESTS=1 to compare")
    actual = tmp_path / "breakdown-7b.png"
    fig.savefig(actual, dpi=80)
    assert compare_images(str(baseline), str(actual), tol=2) is None


def test_importing_plots_keeps_the_users_backend():
    """A notebook's backend survives ``import symvram.present.plots`` (and the API's plot)."""
    import subprocess
    import sys

    code = ("import matplotlib; matplotlib.use('svg'); import symvram.present.plots; "
            "from symvram.api import plot; plot('7b', 'breakdown'); print(matplotlib.get_backend())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "svg"


def test_seq_axes_follow_the_question_not_the_context():
    """A 131k-context model at seq 2048: the seq-curve spans 8192 tokens on a log2 axis, the --seq is
    marked, the y axis stops a little above the largest card, and each line's crossing is labelled."""
    sc = Scenario.create("llama-3.1-8b", method="lora", seq=2048)
    assert sc.model.max_position >= 131072
    cards = [load_card("rtx-4090"), load_card("a100-80g")]
    ax = plots.seq_curve(seq_curves(sc, ranks=(8, 64), cards=cards)).axes[0]
    s = ax.lines[0].get_xdata()
    assert s[-1] == 8192 and ax.get_xscale() == "log"
    assert [c.get_label() for c in ax.collections] == ["--seq 2,048"]
    assert ax.get_ylim()[1] <= 1.25 * cards[1].usable_bytes / GIB + 1e-9
    entries = [t.get_text() for t in ax.get_legend().get_texts() if ": longest seq " in t.get_text()]
    assert entries, "no line names its longest sequence"
    for text in entries:   # each names its rank and `fit`'s longest seq per card (no headroom by default)
        rank, rest = text[len("r = "):].split(": longest seq ")
        for part in rest.split(", "):
            value, card = part.split(" on ")
            (match,) = [c for c in cards if c.name.endswith(card) or card in c.name]
            assert int(value.replace(",", "")) == fit(sc.with_changes(rank=int(rank)), match, solve="seq").value
    assert not [t for t in ax.texts if t.get_text().startswith("r = ")]   # nothing sits on the lines
    ax = plots.seq_curve(seq_curves(sc, ranks=(8,), seq_max=32768)).axes[0]
    assert ax.lines[0].get_xdata()[-1] == 32768


def test_fit_map_log2_axis_marks_the_run():
    sc = Scenario.create("llama-3.1-8b", method="lora", seq=2048, batch=2)
    fig = plots.fit_map(fit_cells(sc, load_card("a100-80g")))
    ax = fig.axes[0]
    left, right, _, _ = ax.images[0].get_extent()
    assert right - left == pytest.approx(np.log2(8192) - np.log2(256), abs=0.2)   # log2 units, up to 8192
    (marker,) = ax.collections
    assert tuple(marker.get_offsets()[0]) == pytest.approx((11.0, 2.0))
    assert "--seq 2,048, --batch 2" in [t.get_text() for t in ax.get_legend().get_texts()]
    fig.canvas.draw()   # the title fits the figure (two lines, not clipped)
    bbox = ax.title.get_window_extent()
    assert bbox.x0 >= 0 and bbox.x1 <= fig.bbox.width


def _inside(fig, *texts) -> None:
    """Each text is drawn whole, inside the figure (nothing clipped on either side)."""
    fig.canvas.draw()
    for text in texts:
        box = text.get_window_extent()
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height, text.get_text()


LONG_CARDS = ("rtx-4090", "mi300x")   # the longest names in gpus.toml


@pytest.mark.parametrize("kind", ("breakdown", "seq-curve", "tornado", "fit-map"))
def test_every_figure_states_the_setup(kind):
    """One subtitle: estimate's configuration line, the stack, and "per GPU" for a sharded run; short card
    names; no title clipped, even for the longest card names."""
    from symvram.api import plot

    settings = dict(method="lora", rank=16, seq=1024, batch=2, gpus=8, zero=3, grad_checkpointing=True)
    gpu = list(LONG_CARDS) if kind in ("breakdown", "seq-curve") else LONG_CARDS[0]
    fig = plot("llama-3.1-8b", kind, gpu=gpu, **settings)
    ax = fig.axes[0]
    sc = Scenario.create("llama-3.1-8b", **settings)
    sub = " ".join(ax.get_title().split())   # wrapped: compare the words
    assert sub.startswith(setup_line(sc)) and "checkpointing" in sub and "r=16" in sub
    assert sub.endswith(f"stack {sc.stack} · per GPU of 8 (ZeRO-3)")
    assert "per GPU" in ax.get_ylabel() or kind in ("tornado", "fit-map")
    title = fig.texts[0].get_text()
    everything = " ".join([title, *(t.get_text() for t in ax.texts)])
    assert "NVIDIA" not in everything and "AMD" not in everything
    _inside(fig, fig.texts[0], ax.title, ax.xaxis.label)


def test_breakdown_cards_requested_method_labels_and_colours():
    from symvram.api import plot

    cards = [load_card("rtx-4090"), load_card("a100-80g")]
    fig = plot("7b", "breakdown", gpu=["rtx-4090", "a100-80g"], method="full")
    ax = fig.axes[0]
    rows = compare("7b").rows
    # the cards' usable memory as lines, labelled with short names
    levels = [line.get_ydata()[0] for line in ax.lines[1:]]
    assert levels == pytest.approx([c.usable_bytes / GIB for c in cards])
    assert {"RTX 4090 24GB: 23.50 GiB usable", "A100 80GB: 78.60 GiB usable"} <= {t.get_text() for t in ax.texts}
    assert ax.get_ylim()[1] > max(bd.peak for _, bd in rows) / GIB
    # the requested method (full, no master) drawn solid and its name bold; the others faded
    assert [bar.get_alpha() for bar in ax.containers[0]] == [1.0, 0.45, 0.45, 0.45]
    assert [t.get_fontweight() for t in ax.get_xticklabels()] == ["bold", "normal", "normal", "normal"]
    # block colours are the style's, the temporaries hatched in its neutral grey
    for container, block in zip(ax.containers, ("base", "trainable", "activations")):
        assert container[0].get_facecolor()[:3] == to_rgba(style.BLOCK_COLORS[block])[:3]
    assert ax.containers[3][0].get_edgecolor()[:3] == to_rgba(style.BLOCK_COLORS["transient"])[:3]
    # the peak marker is explained in the legend
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    swatches = {text: handle.get_alpha() for text, handle in zip(legend, fig.legends[0].legend_handles)}
    assert swatches["base weights"] in (None, 1.0)   # the legend's block colours are solid, not a faded bar's
    assert "peak: the fullest moment of the step (max_memory_allocated)" in legend
    assert "temporaries: the peak above the blocks" in legend
    # each value label sits above its bar and its marker, never across them
    fig.canvas.draw()
    values = [t for t in ax.texts if t.get_text().replace(",", "").replace(".", "").isdigit()]
    assert [t.get_text() for t in values] == [f"{bd.peak / GIB:,.1f}" for _, bd in rows]
    marker = ax.lines[0].get_markersize() / 72 * fig.dpi
    for text, (_, bd), bar in zip(values, rows, ax.containers[3]):
        top = ax.transData.transform((0, max(bd.peak, bd.ledger_total) / GIB))[1]
        assert text.get_window_extent().y0 >= top + marker / 2 - 1e-6


def test_seq_curve_rank_colours_follow_the_value():
    sc = Scenario.create("7b", method="lora", seq=2048)
    a = plots.seq_curve(seq_curves(sc, ranks=(8, 64), cards=[])).axes[0]
    b = plots.seq_curve(seq_curves(sc, ranks=(64, 256), cards=[])).axes[0]
    colour = {line.get_label(): line.get_color() for ax in (a, b) for line in ax.lines}
    assert colour["r = 64"] == style.rank_color(64) == a.lines[1].get_color() == b.lines[0].get_color()
    assert len({colour["r = 8"], colour["r = 64"], colour["r = 256"]}) == 3
    assert not set(colour.values()) & set(style.BLOCK_COLORS.values())


def test_flat_seq_curve_says_why():
    """qwen2.5-0.5b full at short sequences: the peak is the end of backward, where almost nothing grows
    with s, so the line is flat; the figure says so."""
    sc = Scenario.create("qwen2.5-0.5b", method="full", seq=2048)
    ax = plots.seq_curve(seq_curves(sc, seq_max=512)).axes[0]
    y = ax.lines[0].get_ydata()
    assert y[len(y) // 2] <= y[0] * 1.01                   # flat over the first half at least
    (note,) = [t.get_text() for t in ax.texts if t.get_text().startswith("flat to s = ")]
    moment = evaluate(sc.with_changes(seq=16))
    label = next(m.label for m in moment.ledger.moments if m.key == moment.peak_moment)
    assert f"the peak is the {label} moment" in note
    # a curve that rises from the start has no such note
    ax = plots.seq_curve(seq_curves(Scenario.create("llama-3.1-8b", method="lora", seq=2048), ranks=(8,))).axes[0]
    assert not [t for t in ax.texts if t.get_text().startswith("flat")]


def test_fit_map_where_nothing_fits_says_by_how_much():
    sc = Scenario.create("7b", method="full", seq=2048)
    card = load_card("a100-80g")
    ax = plots.fit_map(fit_cells(sc, card)).axes[0]
    assert not np.asarray(ax.images[0].get_array()).any()
    low = evaluate(sc.with_changes(batch=1, seq=128)).peak   # the grid's smallest point: batch 1, 4096 / 32
    (text,) = [t.get_text() for t in ax.texts]
    budget = card.usable_bytes - device_block(card)["cublas_workspaces"]
    assert text == f"nothing fits: minimum {low / GIB:,.2f} GiB > {budget / GIB:,.2f} GiB budget"
    # the neutral greys, no block colour
    cmap = ax.images[0].get_cmap()
    assert [cmap(0.0)[:3], cmap(0.5)[:3], cmap(1.0)[:3]] == [
        to_rgba(style.FIT_COLORS[k])[:3] for k in ("does not fit", "allocator runs out", "fits")]
    ax = plots.fit_map(fit_cells(Scenario.create("7b", method="qlora"), card, batches=[1], seqs=[128])).axes[0]
    assert [t.get_text() for t in ax.texts][0].startswith("everything fits: maximum ")


def test_breakdown_says_when_the_peak_is_below_the_stack():
    """llama-3-8b full: the peak (start of the loss backward, before any gradient) is below the blocks' sum;
    the diamond sits inside the bar, and the figure says why."""
    rows = compare("llama-3-8b").rows
    below = [name for name, bd in rows if bd.peak < bd.ledger_total]
    assert "full" in below
    ax = plots.breakdown(rows).axes[0]
    (note,) = [t.get_text() for t in ax.texts if t.get_text().startswith("peak below the stack")]
    assert note.startswith(f"peak below the stack ({', '.join(below)}): part of a block is not live at the fullest")
