"""Population thresholds re-estimated in each bootstrap round (mlflow_mia.metrics.population_resampling)."""

import numpy as np
import pytest
from scipy.stats import norm

from mlflow_mia.metrics.bootstrap import (bootstrap_distribution, precision_at_population_threshold_statistic,
                                          recall_at_population_threshold_statistic, tpr_at_fpr_statistic)
from mlflow_mia.metrics.population_resampling import PopulationThresholds
from mlflow_mia.metrics.thresholds import metrics_at_threshold, population_threshold


@pytest.mark.parametrize("grouped", [False, True])
def test_each_rounds_threshold_is_the_population_threshold_of_its_resample(grouped):
    rng = np.random.default_rng(0)
    pop = np.round(rng.normal(size=200), 1)  # ties
    groups = np.repeat(np.arange(40), 5) if grouped else None
    thresholds = PopulationThresholds(pop, groups, seed=3).draw(0.1, 0, 30)
    draws = np.random.default_rng([3, 1]).integers(0, 40 if grouped else 200, size=(30, 40 if grouped else 200))
    for r in range(30):
        rows = np.concatenate([np.flatnonzero(groups == g) for g in draws[r]]) if grouped else draws[r]
        assert thresholds[r] == population_threshold(pop[rows], alpha=0.1)


def test_recall_and_precision_per_round_equal_a_brute_force_resample():
    rng = np.random.default_rng(1)
    y = np.r_[np.ones(30, dtype=int), np.zeros(40, dtype=int)]
    s, pop = np.round(rng.normal(size=70) + y, 1), rng.normal(size=100)
    stats = {"r": recall_at_population_threshold_statistic(0.1), "p": precision_at_population_threshold_statistic(0.1)}
    dist = bootstrap_distribution(y, s, statistics=stats, rounds=20, seed=5, population=pop)
    pool_rng, thresholds = np.random.default_rng(5), PopulationThresholds(pop, None, seed=5).draw(0.1, 0, 20)
    members, non_members = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    for r in range(20):  # the pool's draws: per round, members then non-members
        rows = np.r_[members[pool_rng.integers(0, 30, 30)], non_members[pool_rng.integers(0, 40, 40)]]
        m = metrics_at_threshold(y[rows], s[rows], threshold=thresholds[r])
        assert dist.values["r"][r] == m.tpr and dist.values["p"][r] == pytest.approx(m.precision, abs=1e-15)


def test_the_pools_resamples_do_not_depend_on_the_population_statistics():
    rng = np.random.default_rng(2)
    y = np.repeat([1, 0], 50)
    s, pop = rng.normal(size=100) + y, rng.normal(size=300)
    alone = bootstrap_distribution(y, s, statistics={"t": tpr_at_fpr_statistic(0.1)}, rounds=40, seed=9)
    both = bootstrap_distribution(y, s, statistics={"t": tpr_at_fpr_statistic(0.1),
                                                    "r": recall_at_population_threshold_statistic(0.1)},
                                  rounds=40, seed=9, population=pop)
    assert np.array_equal(alone.values["t"], both.values["t"])


def test_a_population_statistic_without_the_population_is_an_error():
    with pytest.raises(ValueError, match="population=..."):
        bootstrap_distribution([1, 0, 1, 0], [1.0, 0.0, 2.0, 0.5],
                               statistics={"r": recall_at_population_threshold_statistic(0.1)}, rounds=5)


def test_recall_intervals_cover_the_tpr_at_fpr_alpha():
    """Seeded simulation: 300 population samples, alpha 0.1; the 95 % interval of the recall at the population
    threshold covers the true TPR at FPR 0.1 (0.5) in about 95 % of pools once the population is resampled."""
    rng = np.random.default_rng(11)
    mu = norm.ppf(0.9) - norm.ppf(0.5)
    covered = 0
    for _ in range(120):
        y = np.repeat([1, 0], 200)
        s, pop = rng.normal(size=400) + mu * y, rng.normal(size=300)
        dist = bootstrap_distribution(y, s, statistics={"r": recall_at_population_threshold_statistic(0.1)},
                                      rounds=300, seed=int(rng.integers(1 << 30)), population=pop)
        low, high = dist.interval("r", confidence=0.95)
        covered += low <= 0.5 <= high
    assert covered / 120 >= 0.88


def test_a_pool_read_at_population_thresholds_without_them_is_an_error_naming_the_statistic():
    from mlflow_mia.metrics.resampling import ScoredPool

    y, s = np.array([1, 1, 0, 0]), np.array([3.0, 2.0, 2.5, 1.0])
    pool = ScoredPool(y, s, np.arange(4))
    with pytest.raises(ValueError, match=r"the statistic 'r' is read at a population threshold \(FPR 0.1\)"):
        pool.evaluate({"r": recall_at_population_threshold_statistic(0.1)}, np.ones((2, 4)))  # as paired.py calls
