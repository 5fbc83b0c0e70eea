"""Tests of mlflow_mia/metrics/permutation.py: the label-permutation null of prompt M-MEM spread."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from mlflow_mia.metrics.permutation import permuted_prompt_mmem, prompt_spread_null
from mlflow_mia.metrics.prompts import prompt_mmem, prompt_spread

Y = np.r_[np.ones(12, dtype=int), np.zeros(10, dtype=int)]


def _conf(seed=0, n_prompts=6):
    rng = np.random.default_rng(seed)
    return np.round(rng.random((n_prompts, Y.size)), 1)  # rounded: many ties


def test_permuted_mmem_equals_sklearn_for_every_row_and_prompt_ties_included():
    conf = _conf()
    rng = np.random.default_rng(1)
    labels = rng.permuted(np.tile(Y, (7, 1)), axis=1)
    got = permuted_prompt_mmem(Y, conf, labels)
    expected = np.array([[roc_auc_score(lab, c) for c in conf] for lab in labels])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(permuted_prompt_mmem(Y, conf, Y[None]), prompt_mmem(Y, conf)[None], atol=1e-12)


def test_null_equals_a_brute_force_loop_over_the_same_permutations():
    conf = _conf(2)
    null = prompt_spread_null(Y, conf, rounds=45, seed=3, chunk=20)
    rng = np.random.default_rng(3)
    gaps, stds = [], []
    for size in (20, 20, 5):
        for lab in rng.permuted(np.tile(Y, (size, 1)), axis=1):
            s = prompt_spread([roc_auc_score(lab, c) for c in conf])
            gaps.append(s["gap"])
            stds.append(s["std"])
    observed = prompt_spread(prompt_mmem(Y, conf))
    assert null.gap == pytest.approx(observed["gap"]) and null.std == pytest.approx(observed["std"])
    assert null.gap_null_quantile == pytest.approx(np.quantile(gaps, 0.95))
    assert null.std_null_quantile == pytest.approx(np.quantile(stds, 0.95))
    assert null.gap_pvalue == pytest.approx((1 + sum(g >= observed["gap"] - 1e-12 for g in gaps)) / 46)
    assert null.rounds == 45 and null.quantile == 0.95


def test_prompts_that_truly_differ_beat_the_null_and_equal_prompts_do_not():
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(40, dtype=int), np.zeros(40, dtype=int)]
    signal = np.linspace(0, 3, 10)[:, None] * y[None, :]  # prompt k shifts in-sample names by 3k/9
    real = prompt_spread_null(y, signal + rng.normal(size=(10, 80)), rounds=300)
    assert real.gap > real.gap_null_quantile and real.gap_pvalue < 0.01 and real.std_pvalue < 0.01
    same = prompt_spread_null(y, 0.5 * y[None, :] + rng.normal(size=(10, 80)), rounds=300)
    assert same.gap_pvalue > 0.05  # every prompt equally good: the spread is chance


@pytest.mark.parametrize("kwargs, match", [
    ({"rounds": 0}, "rounds must be an int >= 1, got 0"), ({"quantile": 1.0}, r"quantile must be in \(0, 1\)"),
])
def test_bad_settings_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        prompt_spread_null(Y, _conf(), **kwargs)


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match=r"n_prompts >= 2"):
        prompt_spread_null(Y, _conf()[:1])
    with pytest.raises(ValueError, match="one class only"):
        prompt_spread_null(np.ones(Y.size, dtype=int), _conf())
    with pytest.raises(ValueError, match=r"labels must have shape \(rounds, 22\)"):
        permuted_prompt_mmem(Y, _conf(), np.ones((2, 3)))
    bad = _conf()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        prompt_spread_null(Y, bad)
