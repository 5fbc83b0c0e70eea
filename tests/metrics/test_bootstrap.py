"""Tests of mlflow_mia.metrics.bootstrap."""

import math
import time

import numpy as np
import pytest
from sklearn.exceptions import UndefinedMetricWarning

from mlflow_mia.metrics import (
    auc_statistic,
    bootstrap_ci,
    tpr_at_fpr,
    tpr_at_fpr_statistic,
)


def pool(seed=0, n_members=150, n_non_members=100):
    rng = np.random.default_rng(seed)
    y = np.concatenate([np.ones(n_members, int), np.zeros(n_non_members, int)])
    s = np.round(rng.normal(size=y.size) + 0.8 * y, 1)  # rounded: ties
    perm = rng.permutation(y.size)
    return y[perm], s[perm]


def test_tpr_at_fpr_statistic_equals_tpr_at_fpr():
    y, s = pool(1)
    f = tpr_at_fpr_statistic(0.05)
    assert f(y, s) == tpr_at_fpr(y, s, alpha=0.05)
    with pytest.raises(ValueError, match="alpha"):
        tpr_at_fpr_statistic(2.0)


def test_interval_contains_point_estimate():
    y, s = pool(2)
    stats = {"auc": auc_statistic, "tpr_at_alpha_0.1": tpr_at_fpr_statistic(0.1)}
    ci = bootstrap_ci(y, s, statistics=stats, rounds=300, seed=0)
    assert set(ci) == set(stats)
    for name, fn in stats.items():
        low, high = ci[name]
        assert low <= fn(y, s) <= high
        assert low < high


def test_reproducible_by_seed_and_changes_with_seed():
    y, s = pool(3)
    stats = {"auc": auc_statistic}
    a = bootstrap_ci(y, s, statistics=stats, rounds=100, seed=42)
    b = bootstrap_ci(y, s, statistics=stats, rounds=100, seed=42)
    c = bootstrap_ci(y, s, statistics=stats, rounds=100, seed=43)
    assert a == b
    assert a != c


def test_wider_confidence_gives_wider_interval():
    y, s = pool(4)
    narrow = bootstrap_ci(y, s, statistics={"auc": auc_statistic}, rounds=200, confidence=0.5)["auc"]
    wide = bootstrap_ci(y, s, statistics={"auc": auc_statistic}, rounds=200, confidence=0.99)["auc"]
    assert wide[0] <= narrow[0] and narrow[1] <= wide[1]


def test_resamples_are_stratified_and_shared_across_statistics():
    y, s = pool(5, n_members=30, n_non_members=20)
    member_scores = set(s[y == 1].tolist())
    non_member_scores = set(s[y == 0].tolist())
    seen_a, seen_b = [], []

    def record_a(yy, ss):
        assert np.sum(yy == 1) == 30 and np.sum(yy == 0) == 20  # class counts fixed
        assert set(ss[yy == 1].tolist()) <= member_scores  # members drawn from members only
        assert set(ss[yy == 0].tolist()) <= non_member_scores
        seen_a.append(np.array(ss))
        return 0.0

    def record_b(yy, ss):
        seen_b.append(np.array(ss))
        return 1.0

    ci = bootstrap_ci(y, s, statistics={"a": record_a, "b": record_b}, rounds=25, seed=0)
    assert ci == {"a": (0.0, 0.0), "b": (1.0, 1.0)}
    assert len(seen_a) == len(seen_b) == 25
    for x, z in zip(seen_a, seen_b):
        np.testing.assert_array_equal(x, z)  # the same draw for every statistic
    assert not all(np.array_equal(seen_a[0], x) for x in seen_a[1:])


def test_statistics_cannot_mutate_the_pool():
    y, s = pool(6)
    before = s.copy()

    def mutate(yy, ss):
        ss[0] = 1e9
        return 0.0

    with pytest.raises(ValueError):
        bootstrap_ci(y, s, statistics={"m": mutate}, rounds=2)
    np.testing.assert_array_equal(s, before)


def test_one_class_pool_warns_and_returns_nan():
    with pytest.warns(UndefinedMetricWarning):
        ci = bootstrap_ci([1, 1, 1], [0.1, 0.2, 0.3], statistics={"auc": auc_statistic}, rounds=10)
    assert all(math.isnan(v) for v in ci["auc"])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"statistics": {}}, "statistics"),
        ({"statistics": {"x": 3}}, "callable"),
        ({"statistics": {"auc": auc_statistic}, "rounds": 0}, "rounds"),
        ({"statistics": {"auc": auc_statistic}, "rounds": 2.5}, "rounds"),
        ({"statistics": {"auc": auc_statistic}, "confidence": 1.0}, "confidence"),
    ],
)
def test_invalid_options_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bootstrap_ci([1, 0], [1.0, 0.0], **kwargs)


def test_nan_scores_raise():
    with pytest.raises(ValueError, match="y_score"):
        bootstrap_ci([1, 0], [np.nan, 0.0], statistics={"auc": auc_statistic})


def test_auc_bootstrap_on_a_large_pool_is_fast():
    rng = np.random.default_rng(0)
    y = np.repeat([1, 0], 5000)
    s = rng.normal(size=10_000) + 0.3 * y
    start = time.perf_counter()
    bootstrap_ci(y, s, statistics={"auc": auc_statistic}, rounds=200)
    # 200 rounds here; 1000 rounds take five times as long.
    assert time.perf_counter() - start < 2.0
