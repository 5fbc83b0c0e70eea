"""Tests of mlflow_mia.metrics.thresholds against brute-force counts."""

import math
import warnings

import numpy as np
import pytest
from sklearn.exceptions import UndefinedMetricWarning

from mlflow_mia.metrics import (
    ThresholdMetrics,
    metrics_at_threshold,
    mean_member_loss_threshold,
    min_population_size,
    population_threshold,
    population_threshold_metrics,
)

ALPHAS = [0.5, 0.3, 0.25, 0.2, 0.1, 0.07, 0.05, 0.01]


def brute_force_threshold(pop, alpha):
    """Smallest population value t with #(pop > t) <= alpha * n, by scanning."""
    pop = np.asarray(pop, dtype=float)
    n = pop.size
    ok = [t for t in np.unique(pop) if np.sum(pop > t) <= alpha * n + 1e-9]
    return min(ok)


def test_population_threshold_matches_brute_force_with_ties():
    for seed in range(200):
        rng = np.random.default_rng(seed)
        alpha = ALPHAS[seed % len(ALPHAS)]
        n = int(rng.integers(min_population_size(alpha), 300))
        pop = rng.integers(0, max(2, n // 5), size=n).astype(float)  # heavy ties
        t = population_threshold(pop, alpha=alpha)
        assert t == brute_force_threshold(pop, alpha)
        assert t in pop
        assert np.sum(pop > t) <= alpha * n + 1e-9
        smaller = pop[pop < t]
        if smaller.size:  # minimality: the next smaller value flags too many
            assert np.sum(pop > smaller.max()) > alpha * n


@pytest.mark.parametrize("alpha", [0.1, 0.01, 0.001, 0.05])
def test_population_threshold_is_the_inverted_cdf_quantile(alpha):
    rng = np.random.default_rng(7)
    for n in [min_population_size(alpha), 1234, 2000, 2999]:
        pop = rng.normal(size=n)
        expected = np.quantile(pop, 1 - alpha, method="inverted_cdf")
        assert population_threshold(pop, alpha=alpha) == expected


def test_population_threshold_decimal_alpha_boundary():
    # 0.7 * 90 evaluates to 62.99999999999999 in floating point: 63 samples may lie above.
    pop = np.arange(90, dtype=float)
    t = population_threshold(pop, alpha=0.7)
    assert np.sum(pop > t) == 63


def test_population_threshold_fpr_on_population_at_most_alpha():
    rng = np.random.default_rng(3)
    pop = rng.normal(size=1000)
    for alpha in (0.1, 0.01, 0.001):
        t = population_threshold(pop, alpha=alpha)
        assert np.mean(pop > t) == alpha  # distinct scores: exactly alpha * n flagged


def test_ties_at_the_threshold_are_non_members():
    pop = [0.0, 1.0, 2.0, 2.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    t = population_threshold(pop, alpha=0.5)
    assert t == 2.0
    m = metrics_at_threshold([1, 1, 0, 0], [2.0, 2.5, 2.0, 1.0], threshold=t)
    assert m.n_flagged == 1  # only 2.5 > 2.0; both ties at 2.0 are not flagged
    assert m.tpr == 0.5 and m.fpr == 0.0 and m.precision == 1.0


def test_too_small_population_raises_with_counts():
    pop = np.zeros(500)
    with pytest.raises(ValueError) as exc:
        population_threshold(pop, alpha=0.001)
    msg = str(exc.value)
    assert "population set has 500 samples" in msg
    assert "alpha=0.001 needs at least 1000" in msg
    assert "add population data or drop this alpha" in msg
    with pytest.raises(ValueError, match="needs at least 1000"):
        population_threshold_metrics([1, 0], [1.0, 0.0], pop, alphas=[0.1, 0.001])


def test_min_population_size():
    assert min_population_size(0.1) == 10
    assert min_population_size(0.01) == 100
    assert min_population_size(0.001) == 1000
    assert min_population_size(0.3) == 4
    assert min_population_size(0.5) == 2
    assert min_population_size(0.07) == 15
    population_threshold(np.arange(1000.0), alpha=0.001)  # exactly enough: no error
    with pytest.raises(ValueError, match="alpha"):
        min_population_size(0.0)
    with pytest.raises(ValueError, match="alpha"):
        min_population_size(1.0)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_population_raises_naming_it(bad):
    pop = np.arange(20.0)
    pop[3] = bad
    with pytest.raises(ValueError, match="population_scores"):
        population_threshold(pop, alpha=0.1)


def test_metrics_at_threshold_matches_manual_counts():
    for seed in range(50):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(2, 150))
        y = rng.integers(0, 2, size=n)
        y[0], y[-1] = 1, 0
        s = rng.integers(0, 10, size=n).astype(float)
        t = float(rng.integers(-1, 11))
        m = metrics_at_threshold(y, s, threshold=t, alpha=0.1)
        tp = sum(1 for a, b in zip(y, s) if a == 1 and b > t)
        fp = sum(1 for a, b in zip(y, s) if a == 0 and b > t)
        assert isinstance(m, ThresholdMetrics)
        assert m.alpha == 0.1 and m.threshold == t
        assert m.n_flagged == tp + fp
        assert m.tpr == tp / np.sum(y == 1)
        assert m.fpr == fp / np.sum(y == 0)
        if tp + fp:
            assert m.precision == tp / (tp + fp)
        else:
            assert math.isnan(m.precision)


def test_precision_is_nan_when_nothing_is_flagged():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: this is expected at small alphas
        m = metrics_at_threshold([1, 0, 1], [0.1, 0.2, 0.3], threshold=0.3)
    assert m.n_flagged == 0
    assert math.isnan(m.precision)
    assert m.tpr == 0.0 and m.fpr == 0.0
    assert math.isnan(metrics_at_threshold([1, 0], [0.1, 0.2], threshold=1.0).alpha)


def test_population_threshold_metrics_in_alpha_order():
    rng = np.random.default_rng(11)
    pop = rng.normal(size=2000)
    y = np.repeat([1, 0], 500)
    s = np.concatenate([rng.normal(loc=1.0, size=500), rng.normal(size=500)])
    out = population_threshold_metrics(y, s, pop, alphas=(0.1, 0.01, 0.001))
    assert [m.alpha for m in out] == [0.1, 0.01, 0.001]
    for m in out:
        assert m.threshold == population_threshold(pop, alpha=m.alpha)
        assert m == metrics_at_threshold(y, s, threshold=m.threshold, alpha=m.alpha)
    thresholds = [m.threshold for m in out]
    assert thresholds == sorted(thresholds)  # smaller alpha, higher threshold


def test_population_equal_to_pool_non_members_gives_fpr_at_most_alpha():
    rng = np.random.default_rng(5)
    y = np.repeat([1, 0], 300)
    s = rng.integers(0, 40, size=600).astype(float)  # ties
    for m in population_threshold_metrics(y, s, s[y == 0], alphas=[0.2, 0.1, 0.05]):
        assert m.fpr <= m.alpha


def test_population_threshold_metrics_rejects_bad_alphas():
    with pytest.raises(ValueError, match="alphas"):
        population_threshold_metrics([1, 0], [1.0, 0.0], np.arange(100.0), alphas=[])
    with pytest.raises(ValueError, match="alphas"):
        population_threshold_metrics([1, 0], [1.0, 0.0], np.arange(100.0), alphas=[1.5])


def test_threshold_nan_raises():
    with pytest.raises(ValueError, match="threshold"):
        metrics_at_threshold([1, 0], [1.0, 0.0], threshold=float("nan"))


def test_one_class_pool_warns_and_gives_nan_rate():
    with pytest.warns(UndefinedMetricWarning):
        m = metrics_at_threshold([1, 1], [1.0, 0.0], threshold=0.5)
    assert m.tpr == 0.5 and math.isnan(m.fpr)
    with pytest.warns(UndefinedMetricWarning):
        m = metrics_at_threshold([0, 0], [1.0, 0.0], threshold=0.5)
    assert math.isnan(m.tpr) and m.fpr == 0.5


def test_mean_member_loss_threshold_is_mean_member_score_and_loss_rule():
    rng = np.random.default_rng(2)
    loss = rng.gamma(2.0, size=200)
    y = rng.integers(0, 2, size=200)
    score = -loss  # the loss attack negates the loss
    mu = mean_member_loss_threshold(y, score)
    assert mu == pytest.approx(score[y == 1].mean())
    flagged = score > mu
    np.testing.assert_array_equal(flagged, loss < loss[y == 1].mean())


def test_mean_member_loss_threshold_without_members_warns_nan():
    with pytest.warns(UndefinedMetricWarning):
        assert math.isnan(mean_member_loss_threshold([0, 0], [1.0, 2.0]))


def test_threshold_metrics_is_frozen():
    m = metrics_at_threshold([1, 0], [1.0, 0.0], threshold=0.5)
    with pytest.raises(AttributeError):
        m.tpr = 0.0


def test_unresolved_reason_names_the_count_and_what_it_needs():
    from mlflow_mia.metrics import unresolved_reason

    assert unresolved_reason(985, 0.001, unit="non-members") == "985 non-members < 1000 needed for FPR 0.001"
    assert unresolved_reason(59, 0.01, unit="population groups") == "59 population groups < 100 needed for FPR 0.01"
    for alpha in (0.3, 0.1, 0.05, 0.01, 0.001):
        needed = min_population_size(alpha)
        assert unresolved_reason(needed, alpha, unit="x") is None
        assert unresolved_reason(needed - 1, alpha, unit="x") is not None
        # Exactly where a population threshold stops being computable.
        population_threshold(np.arange(needed, dtype=float), alpha=alpha)
        with pytest.raises(ValueError, match="needs at least"):
            population_threshold(np.arange(needed - 1, dtype=float), alpha=alpha)
    with pytest.raises(ValueError, match="alpha"):
        unresolved_reason(10, 0.0, unit="x")


def test_the_score_check_never_calls_a_finite_value_infinite():
    from mlflow_mia.metrics.thresholds import mean_member_loss_threshold
    from mlflow_mia.metrics.validation import check_scores

    assert check_scores([1e308, -1.7e308]).tolist() == [1e308, -1.7e308]
    with pytest.raises(ValueError, match=r"^y_score contains 1 infinite value\(s\) \(first at position 1: inf\); "
                                         r"scores must be finite \(any float64 up to \+-1.8e308 is\)$"):
        check_scores([1e308, np.inf])
    with pytest.raises(ValueError, match=r"^y_score contains 1 NaN and 1 infinite value\(s\) \(first at position 0: "
                                         r"nan\)"):
        check_scores([np.nan, -np.inf, 1.0])
    assert mean_member_loss_threshold([1] * 20 + [0], [1.7e308] * 20 + [0.0]) == pytest.approx(1.7e308)  # no overflow
