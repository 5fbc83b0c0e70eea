"""Tests of mlflow_mia.metrics.roc against brute-force oracles."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import roc_auc_score, roc_curve

from mlflow_mia.metrics import RocResult, auc_statistic, roc, tpr_at_fpr, tpr_at_fpr_from_roc


def brute_force_auc(y, s):
    """Pairwise Mann-Whitney count: member > non-member counts 1, a tie 1/2."""
    members = [b for a, b in zip(y, s) if a == 1]
    non_members = [b for a, b in zip(y, s) if a == 0]
    total = 0.0
    for m in members:
        for n in non_members:
            total += 1.0 if m > n else 0.5 if m == n else 0.0
    return total / (len(members) * len(non_members))


def brute_force_tpr_at_fpr(y, s, alpha):
    """Scan every threshold rule 'flag score >= t' and keep the best TPR with FPR <= alpha."""
    y = np.asarray(y)
    s = np.asarray(s, dtype=float)
    best = 0.0
    for t in np.concatenate([[np.inf], np.unique(s)]):
        flagged = s >= t
        fpr = np.sum(flagged & (y == 0)) / np.sum(y == 0)
        tpr = np.sum(flagged & (y == 1)) / np.sum(y == 1)
        if fpr <= alpha:
            best = max(best, tpr)
    return best


def random_pool(rng, n, *, ties):
    y = rng.integers(0, 2, size=n)
    if y.min() == y.max():  # make sure both classes are present
        y[0] = 1 - y[0]
    if ties:
        s = rng.integers(0, max(2, n // 10), size=n).astype(float)
    else:
        s = rng.normal(size=n) + 0.5 * y
    return y, s


@pytest.mark.parametrize("ties", [True, False])
def test_auc_matches_brute_force_over_many_seeds(ties):
    for seed in range(100):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(2, 201))
        y, s = random_pool(rng, n, ties=ties)
        assert roc(y, s).auc == pytest.approx(brute_force_auc(y, s), abs=1e-12)


def test_auc_with_all_scores_tied_is_one_half():
    assert roc([1, 0, 1, 0, 0], [3.0] * 5).auc == 0.5


def test_auc_single_member_and_single_non_member():
    assert roc([1, 0], [1.0, 0.0]).auc == 1.0
    assert roc([1, 0], [0.0, 1.0]).auc == 0.0
    assert roc([1, 0], [1.0, 1.0]).auc == 0.5


def test_label_convention_is_pinned():
    y = np.array([1, 1, 1, 0, 0, 0])
    s = np.array([6.0, 5.0, 4.0, 3.0, 2.0, 1.0])  # members score higher
    assert roc(y, s).auc == 1.0
    assert roc(1 - y, s).auc == 0.0  # flipped labels
    assert roc(y, -s).auc == 0.0  # a "lower = member" score used unnegated
    assert tpr_at_fpr(y, s, alpha=0.0) == 1.0
    assert tpr_at_fpr(1 - y, s, alpha=0.0) == 0.0


def test_bool_labels_equal_int_labels():
    rng = np.random.default_rng(0)
    y, s = random_pool(rng, 50, ties=True)
    a, b = roc(y.astype(bool), s), roc(y, s)
    np.testing.assert_array_equal(a.fpr, b.fpr)
    assert a.auc == b.auc


def test_curve_equals_sklearn_full_curve():
    for seed in range(30):
        rng = np.random.default_rng(seed)
        y, s = random_pool(rng, int(rng.integers(2, 201)), ties=bool(seed % 2))
        r = roc(y, s)
        fpr, tpr, thr = roc_curve(y, s, drop_intermediate=False)
        np.testing.assert_array_equal(r.fpr, fpr)
        np.testing.assert_array_equal(r.tpr, tpr)
        np.testing.assert_array_equal(r.thresholds, thr)


def test_curve_is_exact_one_point_per_distinct_score():
    rng = np.random.default_rng(1)
    y, s = random_pool(rng, 120, ties=True)
    r = roc(y, s)
    assert isinstance(r, RocResult)
    assert r.fpr.shape == r.tpr.shape == r.thresholds.shape == (np.unique(s).size + 1,)
    assert (r.fpr[0], r.tpr[0]) == (0.0, 0.0)
    assert (r.fpr[-1], r.tpr[-1]) == (1.0, 1.0)
    assert r.thresholds[0] == np.inf
    assert np.all(np.diff(r.fpr) >= 0) and np.all(np.diff(r.tpr) >= 0)
    assert np.all(np.diff(r.thresholds) < 0)
    # each point is the rate of 'score >= threshold', counted by hand (no grid)
    for f, t, thr in zip(r.fpr, r.tpr, r.thresholds):
        assert f == np.mean(s[y == 0] >= thr)
        assert t == np.mean(s[y == 1] >= thr)


def test_a_tie_between_classes_is_one_diagonal_step():
    r = roc([1, 1, 0, 0], [0.9, 0.5, 0.5, 0.1])
    assert r.fpr.tolist() == [0.0, 0.0, 0.5, 1.0]
    assert r.tpr.tolist() == [0.0, 0.5, 1.0, 1.0]
    assert r.auc == 0.875


def test_roc_result_is_frozen():
    r = roc([1, 0], [1.0, 0.0])
    with pytest.raises(AttributeError):
        r.auc = 0.5


@pytest.mark.parametrize("alpha", [0.0, 0.01, 0.1, 0.25, 0.5, 1.0])
def test_tpr_at_fpr_matches_brute_force_scan(alpha):
    for seed in range(60):
        rng = np.random.default_rng(1000 + seed)
        y, s = random_pool(rng, int(rng.integers(2, 201)), ties=bool(seed % 2))
        expected = brute_force_tpr_at_fpr(y, s, alpha)
        assert tpr_at_fpr(y, s, alpha=alpha) == pytest.approx(expected, abs=1e-15)
        assert tpr_at_fpr_from_roc(roc(y, s), alpha) == pytest.approx(expected, abs=1e-15)


def test_tpr_at_fpr_uses_the_full_curve_not_a_thinned_one():
    # Four tied member/non-member pairs: every ROC point lies on the diagonal, so a
    # thinned curve (drop_intermediate=True) skips the point (0.5, 0.5).
    y = [1, 0, 1, 0, 1, 0, 1, 0]
    s = [4.0, 4.0, 3.0, 3.0, 2.0, 2.0, 1.0, 1.0]
    thinned_fpr, thinned_tpr, _ = roc_curve(y, s, drop_intermediate=True)
    assert np.max(thinned_tpr[thinned_fpr <= 0.5]) == 0.25
    assert tpr_at_fpr(y, s, alpha=0.5) == brute_force_tpr_at_fpr(y, s, 0.5) == 0.5


def test_tpr_at_fpr_boundary_alpha_equal_to_a_rate_counts():
    y = np.array([1] * 10 + [0] * 10)
    s = np.concatenate([np.arange(10, 20), np.arange(0, 9), [15.5]]).astype(float)
    # one non-member above 5 of the members: fpr = 0.1 exactly
    assert tpr_at_fpr(y, s, alpha=0.1) == 1.0
    assert tpr_at_fpr(y, s, alpha=0.09) == 0.4


def test_inputs_are_not_mutated():
    y = np.array([1, 0, 1, 0])
    s = np.array([0.3, 0.1, 0.2, 0.2])
    y.setflags(write=False)
    s.setflags(write=False)
    roc(y, s)
    tpr_at_fpr(y, s, alpha=0.5)
    assert s.tolist() == [0.3, 0.1, 0.2, 0.2]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_scores_raise_naming_y_score(bad):
    with pytest.raises(ValueError, match="y_score"):
        roc([1, 0, 1], [0.1, bad, 0.3])
    with pytest.raises(ValueError, match="y_score"):
        tpr_at_fpr([1, 0, 1], [0.1, bad, 0.3], alpha=0.1)


def test_bad_labels_raise_naming_y_true():
    with pytest.raises(ValueError, match="y_true"):
        roc([1, 0, np.nan], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="y_true"):
        roc([1, 0, 2], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="y_true"):
        roc([-1, 1], [0.1, 0.2])


def test_shape_and_length_errors():
    with pytest.raises(ValueError, match="inconsistent lengths"):
        roc([1, 0], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="empty"):
        roc([], [])
    with pytest.raises(ValueError, match="1-D"):
        roc(np.ones((2, 2)), np.ones((2, 2)))


@pytest.mark.parametrize("alpha", [-0.1, 1.1, np.nan])
def test_alpha_out_of_range_raises(alpha):
    with pytest.raises(ValueError, match="alpha"):
        tpr_at_fpr([1, 0], [1.0, 0.0], alpha=alpha)
    with pytest.raises(ValueError, match="alpha"):
        tpr_at_fpr_from_roc(roc([1, 0], [1.0, 0.0]), alpha)


@pytest.mark.parametrize("labels", [[1, 1, 1], [0, 0, 0]])
def test_one_class_warns_and_returns_nan(labels):
    with pytest.warns(UndefinedMetricWarning):
        r = roc(labels, [0.1, 0.2, 0.3])
    assert np.isnan(r.auc)
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(tpr_at_fpr(labels, [0.1, 0.2, 0.3], alpha=0.1))
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(tpr_at_fpr_from_roc(r, 0.1))


def test_two_classes_emit_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        roc([1, 0, 1], [0.5, 0.5, 0.1])
        tpr_at_fpr([1, 0, 1], [0.5, 0.5, 0.1], alpha=0.1)


@pytest.mark.parametrize("ties", [True, False])
def test_auc_statistic_equals_sklearn_roc_auc_score_and_roc(ties):
    for seed in range(100):
        rng = np.random.default_rng(seed)
        y, s = random_pool(rng, int(rng.integers(2, 201)), ties=ties)
        want = roc_auc_score(y, s)
        assert auc_statistic(y, s) == pytest.approx(want, abs=1e-12)
        assert auc_statistic(y, s) == pytest.approx(roc(y, s).auc, abs=1e-12)
        assert auc_statistic(y, s) == pytest.approx(brute_force_auc(y, s), abs=1e-12)


def test_auc_statistic_of_a_matrix_is_the_auc_of_each_row():
    rng = np.random.default_rng(3)
    y, _ = random_pool(rng, 60, ties=True)
    conf = rng.integers(0, 4, size=(5, 60)).astype(float)  # few values: many ties
    got = auc_statistic(y, conf)
    assert got.shape == (5,)
    np.testing.assert_allclose(got, [roc_auc_score(y, row) for row in conf], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(got, [auc_statistic(y, row) for row in conf])
    assert auc_statistic(y, conf[:1]).tolist() == [auc_statistic(y, conf[0])]  # one row stays a row


def test_auc_statistic_is_the_rank_form_not_the_score_values():
    y = [1, 0, 1, 0, 1]
    assert auc_statistic(y, [10.0, 1.0, 3.0, 2.0, 3.0]) == auc_statistic(y, [1e9, -5.0, 0.5, 0.0, 0.5]) == 1.0
    assert auc_statistic(y, [[3.0, 3.0, 3.0, 3.0, 3.0]]).tolist() == [0.5]


def test_auc_statistic_errors_and_one_class():
    with pytest.raises(ValueError, match=r"y_score must have shape \(n_rows, 3\) to match y_true, got \(2, 4\)"):
        auc_statistic([1, 0, 1], np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"y_score contains 1 NaN value\(s\) \(first at position 1: nan\)"):
        auc_statistic([1, 0], [[0.1, np.nan], [0.2, 0.3]])
    with pytest.raises(ValueError, match="y_true"):
        auc_statistic([1, 2], [0.1, 0.2])
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(auc_statistic([1, 1], [0.1, 0.2]))
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(auc_statistic([0, 0], [[0.1, 0.2], [0.3, 0.4]])).all()
