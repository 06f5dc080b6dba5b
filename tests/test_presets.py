"""Exact presets: P derived from the architecture (and a multimodal preset's vision tower) equals the published
parameter count."""
import pytest

from symvram import estimate
from symvram.presets import load_model, model_presets

EXACT = [k for k, v in model_presets().items() if v["kind"] == "exact" and "published_params" in v]


@pytest.mark.parametrize("name", EXACT)
def test_published_counts(name):
    tower = load_model(name).tower
    assert (estimate(name, method="full").derived["P"] + (tower.params if tower else 0)
            == model_presets()[name]["published_params"])


def test_named_counts_from_the_issue():
    assert estimate("llama-2-7b").derived["P"] == 6_738_415_616
    assert estimate("llama-3-8b").derived["P"] == 8_030_261_248
