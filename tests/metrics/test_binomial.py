"""Clopper-Pearson bounds and the TPR bounds that include the threshold's noise (mlflow_mia.metrics.binomial)."""

import math

import numpy as np
import pytest
from scipy.stats import binomtest, norm

from mlflow_mia.metrics.binomial import (clopper_pearson_lower, clopper_pearson_upper, members_needed,
                                         per_side_confidence, tpr_bounds_at_fpr)


@pytest.mark.parametrize("k,n", [(0, 5), (3, 10), (10, 10), (7, 985)])
def test_clopper_pearson_lower_equals_scipy_and_mirrors_the_upper_bound(k, n):
    expected = binomtest(k, n, alternative="greater").proportion_ci(confidence_level=0.95, method="exact").low
    assert clopper_pearson_lower(k, n, confidence=0.95) == pytest.approx(expected, abs=1e-12)
    assert clopper_pearson_lower(k, n) == pytest.approx(1.0 - clopper_pearson_upper(n - k, n), abs=1e-12)


def _brute_force_bounds(y, s, alpha, confidence):
    """Order statistics: the k-th largest non-member score whose FPR is >= alpha (<= alpha) with confidence."""
    side = per_side_confidence(confidence)
    members, non_members = s[y == 1], np.sort(s[y == 0])[::-1]
    n1, n0 = members.size, non_members.size
    # Upper: the smallest k with Clopper-Pearson lower(k, n0) >= alpha; flag score >= the k-th largest.
    k_up = next((k for k in range(1, n0 + 1) if clopper_pearson_lower(k, n0, confidence=side) >= alpha), None)
    upper = 1.0 if k_up is None else clopper_pearson_upper(int(np.sum(members >= non_members[k_up - 1])), n1,
                                                           confidence=side)
    # Lower: the largest k with Clopper-Pearson upper(k, n0) <= alpha; flag score > the (k+1)-th largest.
    ks = [k for k in range(0, n0) if clopper_pearson_upper(k, n0, confidence=side) <= alpha]
    lower = 0.0 if not ks else clopper_pearson_lower(int(np.sum(members > non_members[ks[-1]])), n1,
                                                      confidence=side)
    return lower, upper


@pytest.mark.parametrize("seed", range(4))
def test_tpr_bounds_equal_the_order_statistic_construction(seed):
    rng = np.random.default_rng(seed)
    y = np.r_[np.ones(60, dtype=int), np.zeros(900, dtype=int)]
    s = rng.normal(size=y.size) + 1.5 * y  # continuous: no ties
    b = tpr_bounds_at_fpr(y, s, alpha=0.01, confidence=0.95)
    lower, upper = _brute_force_bounds(y, s, 0.01, 0.95)
    assert b.upper == pytest.approx(upper, abs=1e-12) and b.lower == pytest.approx(lower, abs=1e-12)
    assert b.upper_fpr >= 0.01 >= b.lower_fpr and b.n_member_units == 60 and b.n_non_member_units == 900


def test_three_members_none_caught_give_the_binomial_bound_not_zero():
    y = np.r_[np.ones(3, dtype=int), np.zeros(200, dtype=int)]
    s = np.r_[np.arange(3.0), np.arange(10.0, 210.0)]
    b = tpr_bounds_at_fpr(y, s, alpha=0.01, confidence=0.95)
    assert b.upper == pytest.approx(1 - 0.025 ** (1 / 3)) and b.lower == 0.0
    # 200 non-members cannot place a threshold whose FPR is <= 0.01 with 97.5 % confidence: no lower bound.
    assert math.isnan(b.lower_fpr)


def test_groups_are_the_trials():
    rng = np.random.default_rng(0)
    y = np.repeat([1, 0], 500)
    groups = np.repeat(np.arange(100), 10)  # 50 member and 50 non-member groups of 10
    s = rng.normal(size=y.size) + y
    by_group = tpr_bounds_at_fpr(y, s, alpha=0.1, groups=groups)
    by_sample = tpr_bounds_at_fpr(y, s, alpha=0.1)
    assert (by_group.n_member_units, by_group.n_non_member_units) == (50, 50)
    assert by_group.upper > by_sample.upper and by_group.lower < by_sample.lower


def test_bounds_cover_the_true_tpr_with_few_members():
    """Seeded simulation: TPR at 1 % FPR is 0.2 (Gaussian scores); the bounds miss it at most ~2.5 % each side."""
    rng = np.random.default_rng(7)
    mu = norm.ppf(0.99) - norm.ppf(0.8)
    over = under = 0
    for _ in range(300):
        y = np.r_[np.ones(5, dtype=int), np.zeros(500, dtype=int)]
        b = tpr_bounds_at_fpr(y, rng.normal(size=y.size) + mu * y, alpha=0.01)
        over += b.upper < 0.2
        under += b.lower > 0.2
    assert over / 300 <= 0.05 and under / 300 <= 0.05


def test_members_needed_is_the_smallest_pool_that_brings_the_bound_under_the_budget():
    n = members_needed(0.0, 0.5, 0.975)
    assert clopper_pearson_upper(0, n, confidence=0.975) <= 0.5 < clopper_pearson_upper(0, n - 1, confidence=0.975)
    assert members_needed(0.2, 0.2, 0.975) is None


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="members and non-members"):
        tpr_bounds_at_fpr([1, 1], [0.1, 0.2], alpha=0.1)
    with pytest.raises(ValueError, match="alpha"):
        tpr_bounds_at_fpr([1, 0], [0.1, 0.2], alpha=1.5)
