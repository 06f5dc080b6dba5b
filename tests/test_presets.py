"""Exact presets: P derived from the architecture equals the published parameter count."""
import pytest

from symvram import estimate
from symvram.presets import model_presets

EXACT = [k for k, v in model_presets().items() if v["kind"] == "exact" and "published_params" in v]


@pytest.mark.parametrize("name", EXACT)
def test_published_counts(name):
    assert estimate(name, method="full").derived["P"] == model_presets()[name]["published_params"]


def test_named_counts_from_the_issue():
    assert estimate("llama-2-7b").derived["P"] == 6_738_415_616
    assert estimate("llama-3-8b").derived["P"] == 8_030_261_248
