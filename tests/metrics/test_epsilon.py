"""Tests of mlflow_mia.metrics.epsilon against hand computations and scipy."""

import doctest
import math

import numpy as np
import pytest
from scipy.stats import binomtest

from mlflow_mia.metrics import epsilon as epsilon_module
from mlflow_mia.metrics import population_threshold_metrics
from mlflow_mia.metrics.epsilon import (
    clopper_pearson_upper,
    epsilon_from_rates,
    epsilon_lower_bound,
    epsilon_lower_bound_from_counts,
)


def test_doctests():
    assert doctest.testmod(epsilon_module).failed == 0


@pytest.mark.parametrize("confidence", [0.8, 0.95, 0.99, 0.9999])
@pytest.mark.parametrize("n", [1, 7, 100, 1000])
def test_clopper_pearson_matches_scipy_binomtest(confidence, n):
    for k in sorted({0, 1, n // 3, n - 1, n}):
        ours = clopper_pearson_upper(k, n, confidence=confidence)
        one_sided = binomtest(k, n, alternative="less").proportion_ci(confidence_level=confidence, method="exact")
        assert ours == pytest.approx(one_sided.high, rel=1e-9, abs=1e-12)  # scipy root-finds to ~1e-11
        two_sided = binomtest(k, n).proportion_ci(confidence_level=2 * confidence - 1, method="exact")
        assert ours == pytest.approx(two_sided.high, rel=1e-9, abs=1e-12)  # scipy root-finds to ~1e-11


def test_clopper_pearson_zero_events_closed_form_and_vectorised():
    n = np.array([10, 100, 1000])
    got = clopper_pearson_upper(np.zeros(3, dtype=int), n, confidence=0.95)
    np.testing.assert_allclose(got, 1 - 0.05 ** (1 / n), rtol=1e-12)
    assert np.all(got > 0)
    assert clopper_pearson_upper(5, 5) == 1.0


@pytest.mark.parametrize("k, n, msg", [(-1, 5, r"\[0, trials\]"), (6, 5, r"\[0, trials\]"), (0, 0, ">= 1"),
                                       (1.5, 5, "whole numbers")])
def test_clopper_pearson_rejects_bad_counts(k, n, msg):
    with pytest.raises(ValueError, match=msg):
        clopper_pearson_upper(k, n)


def test_clopper_pearson_rejects_bad_confidence():
    with pytest.raises(ValueError, match="confidence must be in"):
        clopper_pearson_upper(1, 5, confidence=1.0)


def test_epsilon_from_rates_hand_computation():
    # FPR 1 %, FNR 40 %: log((1 - d - 0.4) / 0.01) wins over log((1 - d - 0.01) / 0.4).
    d = 1e-5
    assert epsilon_from_rates(0.01, 0.4, delta=d) == pytest.approx(math.log((0.6 - d) / 0.01), rel=1e-12)
    # Symmetric in the two rates.
    assert epsilon_from_rates(0.4, 0.01, delta=d) == epsilon_from_rates(0.01, 0.4, delta=d)
    # The term with the smaller rate in the denominator wins: here FNR.
    assert epsilon_from_rates(0.3, 0.2, delta=0.0) == pytest.approx(math.log(0.7 / 0.2), rel=1e-12)


def test_epsilon_from_rates_zero_rates():
    assert epsilon_from_rates(0.0, 0.5) == math.inf  # a perfect test on one side
    assert epsilon_from_rates(0.0, 0.0) == math.inf
    # Flagging everything proves nothing even with FNR = 0: the numerator 1 - delta - 1 is negative.
    assert epsilon_from_rates(1.0, 0.0) == 0.0
    assert epsilon_from_rates(1.0, 0.0, delta=0.0) == 0.0


def test_epsilon_is_zero_when_tpr_at_most_fpr():
    rng = np.random.default_rng(0)
    n_m, n_n = 200, 300
    for _ in range(300):
        fp = int(rng.integers(0, n_n + 1))
        tp = int(rng.integers(0, math.floor(fp / n_n * n_m) + 1))  # TPR <= FPR
        assert tp / n_m <= fp / n_n
        assert epsilon_from_rates(fp / n_n, 1 - tp / n_m) == 0.0
        b = epsilon_lower_bound_from_counts([tp], [fp], n_members=n_m, n_non_members=n_n)
        assert b.epsilon == 0.0 and b.epsilon_point == 0.0 and math.isnan(b.alpha)


def test_conservative_bound_hand_computation():
    # One threshold, no false positive among 100 non-members, 60 of 100 members flagged.
    # Each rate is bounded at 1 - 0.05 / 2 = 0.975 (one threshold, two rates).
    d = 1e-5
    b = epsilon_lower_bound_from_counts([60], [0], n_members=100, n_non_members=100, delta=d, confidence=0.95)
    assert b.bound_confidence == pytest.approx(0.975)
    fpr_ub = 1 - 0.025 ** (1 / 100)  # Clopper-Pearson with zero events
    fnr_ub = binomtest(40, 100, alternative="less").proportion_ci(confidence_level=0.975).high
    expected = max(math.log((1 - d - fpr_ub) / fnr_ub), math.log((1 - d - fnr_ub) / fpr_ub))
    assert b.epsilon == pytest.approx(expected, rel=1e-12)
    assert b.fpr_upper[0] == pytest.approx(fpr_ub, rel=1e-12)
    assert b.epsilon_point == math.inf  # zero observed false positives
    assert 0 < b.epsilon < 4  # log((1 - 0.4) / 0.0362...) ~ 2.8


def test_perfectly_separating_attack_closed_form():
    rng = np.random.default_rng(1)
    m, n = 50, 80
    alphas = [0.1, 0.01]
    y = np.r_[np.ones(m, dtype=int), np.zeros(n, dtype=int)]
    scores = np.r_[rng.uniform(10, 11, m), rng.uniform(0, 1, n)]
    pop = rng.uniform(0, 1.5, 200)  # population thresholds fall between the two classes
    ms = population_threshold_metrics(y, scores, pop, alphas=alphas)
    assert all(t.tp == m and t.fp == 0 for t in ms)
    d, c = 1e-5, 0.95
    b = epsilon_lower_bound(ms, delta=d, confidence=c)
    q = (1 - c) / (2 * len(alphas))  # Bonferroni over 2 rates x 2 thresholds
    u_m, u_n = 1 - q ** (1 / m), 1 - q ** (1 / n)
    expected = max(math.log((1 - d - u_n) / u_m), math.log((1 - d - u_m) / u_n))
    assert b.epsilon == pytest.approx(expected, rel=1e-12)
    assert b.epsilon_point == math.inf
    assert b.alpha == 0.1  # equal bounds at both thresholds: the first wins


def test_monotone_in_confidence_and_sample_size():
    eps = [epsilon_lower_bound_from_counts([70, 30], [10, 1], n_members=100, n_non_members=100,
                                           confidence=c).epsilon for c in (0.5, 0.8, 0.9, 0.95, 0.99, 0.999)]
    assert all(a > b for a, b in zip(eps, eps[1:]))
    # Same rates, ten times the samples: tighter bounds, a larger lower bound, the same point bound.
    small = epsilon_lower_bound_from_counts([70], [10], n_members=100, n_non_members=100)
    large = epsilon_lower_bound_from_counts([700], [100], n_members=1000, n_non_members=1000)
    assert large.epsilon > small.epsilon
    assert large.epsilon_point == pytest.approx(small.epsilon_point)


def test_maximum_over_thresholds_and_per_threshold_values():
    tp, fp = np.array([80, 40, 10]), np.array([20, 2, 0])
    b = epsilon_lower_bound_from_counts(tp, fp, n_members=100, n_non_members=200, alphas=[0.1, 0.01, 0.001])
    level = 1 - 0.05 / 6
    fpr_ub = clopper_pearson_upper(fp, 200, confidence=level)
    fnr_ub = clopper_pearson_upper(100 - tp, 100, confidence=level)
    per = epsilon_from_rates(fpr_ub, fnr_ub)
    np.testing.assert_allclose(b.epsilons, per, rtol=1e-12)
    assert b.epsilon == per.max() and b.alpha == [0.1, 0.01, 0.001][int(np.argmax(per))]
    point = epsilon_from_rates(fp / 200, 1 - tp / 100)
    assert b.epsilon_point == point.max() == math.inf  # fp = 0 at the last threshold
    assert b.epsilons_point[:2] == pytest.approx(tuple(point[:2]))
    assert all(e < p for e, p in zip(b.epsilons, b.epsilons_point))


def test_from_threshold_metrics_uses_pool_counts():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 400)
    scores = rng.normal(size=400) + 0.8 * y
    pop = rng.normal(size=1000)
    ms = population_threshold_metrics(y, scores, pop, alphas=[0.1, 0.01])
    b = epsilon_lower_bound(ms, delta=1e-5)
    for t, fpr, fnr in zip(ms, b.fpr, b.fnr):
        flagged = scores > t.threshold
        assert t.tp == np.sum(flagged & (y == 1)) and t.fp == np.sum(flagged & (y == 0))
        assert (t.n_members, t.n_non_members) == (np.sum(y == 1), np.sum(y == 0))
        assert fpr == t.fpr and fnr == pytest.approx(1 - t.tpr)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="n_members must be an int >= 1"):
        epsilon_lower_bound_from_counts([0], [0], n_members=0, n_non_members=10)
    with pytest.raises(ValueError, match="one length"):
        epsilon_lower_bound_from_counts([1, 2], [0], n_members=10, n_non_members=10)
    with pytest.raises(ValueError, match="delta must be in"):
        epsilon_lower_bound_from_counts([1], [0], n_members=10, n_non_members=10, delta=1.0)
    with pytest.raises(ValueError, match=r"\[0, trials\]"):
        epsilon_lower_bound_from_counts([11], [0], n_members=10, n_non_members=10)
    with pytest.raises(ValueError, match="fpr must hold rates"):
        epsilon_from_rates(float("nan"), 0.5)
    with pytest.raises(ValueError, match="no threshold"):
        epsilon_lower_bound([])
    y, s = [1, 1, 0, 0], [3.0, 2.0, 1.0, 0.0]
    a = population_threshold_metrics(y, s, np.arange(10.0), alphas=[0.1])
    b = population_threshold_metrics(y + [0], s + [0.5], np.arange(10.0), alphas=[0.1])
    with pytest.raises(ValueError, match="different pools"):
        epsilon_lower_bound(a + b)


@pytest.mark.parametrize("n_members, n_non_members", [(6, 6), (4, 9), (12, 5)])
def test_max_certifiable_is_the_largest_bound_any_outcome_gives(n_members, n_non_members):
    from mlflow_mia.metrics import max_certifiable_epsilon

    one = max(epsilon_lower_bound_from_counts([tp], [fp], n_members=n_members, n_non_members=n_non_members).epsilon
              for tp in range(n_members + 1) for fp in range(n_non_members + 1))
    assert max_certifiable_epsilon(n_members, n_non_members) == pytest.approx(one, rel=1e-12)
    ceiling = max_certifiable_epsilon(n_members, n_non_members, n_thresholds=2)
    assert ceiling < one  # Bonferroni over two thresholds costs
    rng = np.random.default_rng(n_members)
    tp, fp = rng.integers(0, n_members + 1, size=(40, 2)), rng.integers(0, n_non_members + 1, size=(40, 2))
    tp[0], fp[0] = (n_members, 3), (0, 1)  # one perfect threshold reaches the ceiling
    bounds = [epsilon_lower_bound_from_counts(t, f, n_members=n_members, n_non_members=n_non_members).epsilon
              for t, f in zip(tp, fp)]
    assert bounds[0] == pytest.approx(ceiling, rel=1e-12) and max(bounds) <= ceiling


def test_every_bound_carries_its_ceiling_and_trial_counts():
    from mlflow_mia.metrics import max_certifiable_epsilon

    b = epsilon_lower_bound_from_counts([700, 300, 90], [100, 10, 1], n_members=985, n_non_members=985, delta=1e-5,
                                        confidence=0.95)
    assert (b.n_members, b.n_non_members) == (985, 985)
    assert b.max_certifiable == max_certifiable_epsilon(985, 985, delta=1e-5, confidence=0.95, n_thresholds=3)
    assert b.epsilon <= b.max_certifiable
    # The demo's 985 sentences per class certify about 5.3 whatever the attack (explanations/epsilon_lower_bound.md).
    beta = 0.05 / 6
    assert b.max_certifiable == pytest.approx(math.log(985 / math.log(1 / beta)), abs=0.02)
    perfect = epsilon_lower_bound_from_counts([985] * 3, [0] * 3, n_members=985, n_non_members=985)
    assert perfect.epsilon == pytest.approx(perfect.max_certifiable, rel=1e-12)


def test_max_certifiable_rejects_bad_counts():
    from mlflow_mia.metrics import max_certifiable_epsilon

    with pytest.raises(ValueError, match=r"n_members must be an int >= 1, got 0"):
        max_certifiable_epsilon(0, 10)
    with pytest.raises(ValueError, match=r"n_thresholds must be an int >= 1, got 0"):
        max_certifiable_epsilon(10, 10, n_thresholds=0)


# ---- group privacy ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("eps, delta, k, group_eps, group_delta", [
    (1.0, 1e-5, 10, 10.0, 10 * math.e ** 9 * 1e-5),      # 0.8103: the (10, 0.81) per article
    (0.5, 1e-6, 3, 1.5, 3 * math.e ** 1.0 * 1e-6),        # 8.155e-6
    (8.0, 1e-5, 2, 16.0, 2 * math.e ** 8 * 1e-5),         # 0.0596
    (2.0, 0.0, 7, 14.0, 0.0),                             # pure DP: k eps (Dwork and Roth, Thm 2.2)
    (3.0, 1e-5, 1, 3.0, 1e-5),                            # one record per group: unchanged
])
def test_group_privacy_hand_values(eps, delta, k, group_eps, group_delta):
    from mlflow_mia.metrics import group_privacy

    g = group_privacy(eps, delta, group_size=k)
    assert g.epsilon == pytest.approx(group_eps, rel=1e-12) and g.delta == pytest.approx(group_delta, rel=1e-12)
    assert g.group_size == k
    assert round(group_privacy(1.0, 1e-5, group_size=10).delta, 4) == 0.8103


def test_group_privacy_is_vacuous_for_large_groups_and_overflows_to_inf():
    from mlflow_mia.metrics import group_privacy

    assert group_privacy(1.0, 1e-5, group_size=10).delta < 1 <= group_privacy(1.0, 1e-5, group_size=11).delta
    big = group_privacy(8.0, 1e-5, group_size=251)  # e^(250 * 8) is beyond a float
    assert big.epsilon == 2008.0 and big.delta == math.inf


@pytest.mark.parametrize("eps, delta, k, msg", [
    (-1.0, 1e-5, 2, "epsilon must be a finite number >= 0"), (math.inf, 1e-5, 2, "epsilon must be a finite"),
    (1.0, 1.0, 2, "delta"), (1.0, 1e-5, 0, "group_size must be an int >= 1"),
    (1.0, 1e-5, 2.5, "group_size must be an int >= 1"), (1.0, 1e-5, True, "group_size must be an int >= 1"),
])
def test_group_privacy_rejects_bad_input(eps, delta, k, msg):
    from mlflow_mia.metrics import group_privacy

    with pytest.raises(ValueError, match=msg):
        group_privacy(eps, delta, group_size=k)
