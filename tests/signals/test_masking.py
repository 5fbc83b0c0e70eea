import math

import numpy as np
import pytest

from mlflow_mia.signals.masking import num_masked, pll_masks, sample_masks


@pytest.mark.parametrize("T", [1, 2, 5, 7, 13, 20, 40, 100])
def test_num_masked_is_ceil_of_rate(T):
    assert num_masked(T, 0.15) == math.ceil(round(0.15 * T, 9))
    assert num_masked(T, 1.0) == T


def test_num_masked_rejects_empty():
    with pytest.raises(ValueError, match="at least one maskable token"):
        num_masked(0, 0.15)


def test_sample_masks_are_distinct_sorted_and_in_range():
    masks = sample_masks(30, rate=0.15, num_masks=10, seed=3, key="abc123")
    assert masks.shape == (10, 5)
    assert len({tuple(r) for r in masks}) == 10
    assert (np.diff(masks, axis=1) > 0).all() and masks.min() >= 0 and masks.max() < 30


def test_sample_masks_reproducible_from_seed_and_key():
    a = sample_masks(30, rate=0.15, num_masks=10, seed=3, key="abc123")
    assert (a == sample_masks(30, rate=0.15, num_masks=10, seed=3, key="abc123")).all()
    assert not (a == sample_masks(30, rate=0.15, num_masks=10, seed=4, key="abc123")).all()
    assert not (a == sample_masks(30, rate=0.15, num_masks=10, seed=3, key="abc124")).all()


def test_all_subsets_when_k_exceeds_combinations():
    masks = sample_masks(6, rate=0.15, num_masks=10, seed=0, key="ff")  # l = 1, C = 6
    assert masks.tolist() == [[i] for i in range(6)]
    assert sample_masks(6, rate=0.15, num_masks=6, seed=0, key="ff").shape == (6, 1)


def test_pll_masks_each_token_once():
    assert pll_masks(4).ravel().tolist() == [0, 1, 2, 3]
