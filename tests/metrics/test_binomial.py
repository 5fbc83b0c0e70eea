"""Clopper-Pearson bounds and the TPR bounds that include the threshold's noise (mlflow_mia.metrics.binomial)."""

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest, norm

from mlflow_mia.metrics.binomial import (clopper_pearson_lower, clopper_pearson_upper, kish_effective_units,
                                         members_needed, per_side_confidence, tpr_bounds_at_fpr)


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


@pytest.mark.parametrize("n_groups,size", [(1, 1), (7, 1), (50, 10), (300, 13), (1000, 3)])
def test_kish_effective_units_equal_the_group_count_for_equal_sizes(n_groups, size):
    assert kish_effective_units(np.full(n_groups, size)) == n_groups


@pytest.mark.parametrize("seed", range(3))
def test_kish_effective_units_equal_the_brute_force_formula_on_skewed_sizes(seed):
    sizes = np.maximum(1, np.round(5 * np.exp(np.random.default_rng(seed).normal(scale=1.5, size=300)))).astype(int)
    total = squares = 0
    for n in sizes.tolist():  # (sum n) ** 2 / sum n ** 2, one unit at a time, in exact integers
        total, squares = total + n, squares + n * n
    assert kish_effective_units(sizes) == pytest.approx(total ** 2 / squares, rel=1e-12)
    assert 1 <= kish_effective_units(sizes) < 0.5 * sizes.size  # sigma 1.5: far fewer effective units than articles
    assert kish_effective_units([1, 1, 1, 9]) == pytest.approx(144 / 84)


def test_the_member_bound_counts_kish_effective_groups_and_equal_sizes_keep_the_group_count():
    """Trials of the member bound: floor(Kish) of the member groups; the non-member side keeps one trial per group."""
    rng = np.random.default_rng(1)
    sizes = np.r_[np.full(40, 2), [60, 80]]  # 42 member articles, two of them large: Kish 220 ** 2 / 10_160 = 4.76
    y = np.r_[np.ones(sizes.sum(), dtype=int), np.zeros(400, dtype=int)]
    groups = np.r_[np.repeat(np.arange(42), sizes), 42 + np.arange(400)]
    s = rng.normal(size=y.size) + y
    b = tpr_bounds_at_fpr(y, s, alpha=0.1, groups=groups)
    assert (b.n_member_units, b.n_member_trials, b.n_non_member_units) == (42, 4, 400)
    side = per_side_confidence(0.95)
    assert b.upper == pytest.approx(clopper_pearson_upper(b.upper_tpr * 4, 4, confidence=side, whole=False))
    assert b.lower == pytest.approx(clopper_pearson_lower(b.lower_tpr * 4, 4, confidence=side, whole=False))
    # Equal sizes: the trials are the groups, as before; without groups: the samples.
    equal = np.repeat(np.arange(100), 10)
    y_eq = np.repeat([1, 0], 500)
    b_eq = tpr_bounds_at_fpr(y_eq, rng.normal(size=1000) + y_eq, alpha=0.1, groups=equal)
    assert b_eq.n_member_trials == b_eq.n_member_units == 50
    assert b_eq.upper == pytest.approx(clopper_pearson_upper(b_eq.upper_tpr * 50, 50, confidence=side, whole=False))
    assert tpr_bounds_at_fpr(y_eq, rng.normal(size=1000) + y_eq, alpha=0.1).n_member_trials == 500


def test_kish_effective_units_refuse_sizes_that_are_not_counts():
    for bad in ([], [0, 3], [1.5, 2], [[1, 2]]):
        with pytest.raises(ValueError, match="size"):
            kish_effective_units(bad)


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


def test_a_lower_bound_at_1_percent_fpr_and_95_percent_needs_368_non_member_units():
    """The smallest n with 1 - 0.025 ** (1 / n) <= 0.01 is 368 (log(0.025) / log(0.99) = 367.04); the guide says so."""
    assert math.ceil(math.log(0.025) / math.log(0.99)) == 368
    for n_non_members, resolvable in ((367, False), (368, True)):
        y = np.r_[np.ones(20, dtype=int), np.zeros(n_non_members, dtype=int)]
        s = np.r_[np.arange(1000.0, 1020.0), np.arange(float(n_non_members))]  # every member above every non-member
        b = tpr_bounds_at_fpr(y, s, alpha=0.01, confidence=0.95)
        assert (b.lower > 0) == resolvable and math.isnan(b.lower_fpr) != resolvable
    guide = Path(__file__).resolve().parents[2] / "docs" / "guides" / "release-gate.md"
    assert "368 at 1 % FPR and 95 %" in " ".join(guide.read_text().split())


def test_members_needed_is_the_smallest_pool_that_brings_the_bound_under_the_budget():
    n = members_needed(0.0, 0.5, 0.975)
    assert clopper_pearson_upper(0, n, confidence=0.975) <= 0.5 < clopper_pearson_upper(0, n - 1, confidence=0.975)
    assert members_needed(0.2, 0.2, 0.975) is None


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="members and non-members"):
        tpr_bounds_at_fpr([1, 1], [0.1, 0.2], alpha=0.1)
    with pytest.raises(ValueError, match="alpha"):
        tpr_bounds_at_fpr([1, 0], [0.1, 0.2], alpha=1.5)
