"""Tests of mlflow_mia.metrics.bootstrap."""

import math
import time

import numpy as np
import pytest
from sklearn.exceptions import UndefinedMetricWarning

from mlflow_mia.metrics import (
    auc_statistic,
    bootstrap_ci,
    bootstrap_distribution,
    precision_at_threshold_statistic,
    recall_at_threshold_statistic,
    roc,
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


# --- the cluster bootstrap (resampling groups) and the vectorised statistics ---------------------------


def earlier_release_bootstrap_ci(y, s, statistics, rounds, confidence, seed):
    """The row bootstrap as it was before groups: one statistic call per round on the drawn rows."""
    rng = np.random.default_rng(seed)
    members, non_members = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    labels = np.r_[np.ones(members.size, np.int8), np.zeros(non_members.size, np.int8)]
    values = {name: [] for name in statistics}
    for _ in range(rounds):
        idx = np.r_[members[rng.integers(0, members.size, size=members.size)],
                    non_members[rng.integers(0, non_members.size, size=non_members.size)]]
        for name, fn in statistics.items():
            values[name].append(fn(labels, s[idx]))
    q = [(1 - confidence) / 2, (1 + confidence) / 2]
    return {name: tuple(float(x) for x in np.quantile(v, q)) for name, v in values.items()}


def test_without_groups_the_intervals_are_those_of_earlier_releases_bit_for_bit():
    for seed in range(3):
        y, s = pool(seed, n_members=60 + 7 * seed, n_non_members=90 - 5 * seed)  # rounded scores: ties
        stats = {"auc": auc_statistic, **{f"tpr_{a}": tpr_at_fpr_statistic(a) for a in (0.0, 0.01, 0.1, 0.5)}}
        plain = {name: (lambda f: lambda yy, ss: f(yy, ss))(f) for name, f in stats.items()}  # no batch form
        expected = earlier_release_bootstrap_ci(y, s, plain, rounds=100, confidence=0.9, seed=seed)
        assert bootstrap_ci(y, s, statistics=stats, rounds=100, confidence=0.9, seed=seed) == expected


def clustered(seed, n_groups=20, sizes=(1, 6), label_of=lambda g: g % 2):
    rng = np.random.default_rng(seed)
    size = rng.integers(sizes[0], sizes[1] + 1, size=n_groups)
    groups = np.repeat(np.arange(n_groups), size)
    y = np.array([label_of(g) for g in groups])
    s = np.round(0.8 * y + rng.normal(size=n_groups)[groups] + rng.normal(size=groups.size), 1)
    return y, s, groups


def test_cluster_resamples_are_whole_groups_drawn_by_label():
    y, s, groups = clustered(0)
    s = s + 1e-6 * np.arange(s.size)  # distinct scores: each drawn row is known by its score
    row_of = {score: i for i, score in enumerate(s)}
    seen = []

    def record(yy, ss):
        seen.append((np.array(yy), np.array(ss)))
        return 0.0

    dist = bootstrap_distribution(y, s, statistics={"r": record}, rounds=40, seed=3, groups=groups)
    assert (dist.unit, dist.n_member_units, dist.n_non_member_units) == ("group", 10, 10)
    for yy, ss in seen:
        rows = np.array([row_of[x] for x in ss])
        np.testing.assert_array_equal(yy, y[rows])  # rows keep their labels
        times = np.bincount(rows, minlength=s.size)
        drawn = {}
        for g in np.unique(groups):
            k = set(times[groups == g].tolist())
            assert len(k) == 1, f"group {g} was split"  # a group comes whole, k times
            drawn[g] = k.pop()
        assert sum(k for g, k in drawn.items() if g % 2) == 10  # as many member groups as the pool has
        assert sum(k for g, k in drawn.items() if g % 2 == 0) == 10
    assert len({len(yy) for yy, _ in seen}) > 1  # group sizes differ, so resample sizes do


@pytest.mark.parametrize("grouped", [True, False])
def test_vectorised_statistics_equal_the_statistics_on_each_resample(grouped):
    from mlflow_mia.metrics import metrics_at_threshold

    y, s, groups = clustered(1, n_groups=30)
    t = float(np.quantile(s, 0.8))
    stats = {"auc": auc_statistic, "tpr_0": tpr_at_fpr_statistic(0.0), "tpr_0.1": tpr_at_fpr_statistic(0.1),
             "recall": recall_at_threshold_statistic(t), "precision": precision_at_threshold_statistic(t)}
    oracle = {"auc": lambda yy, ss: auc_statistic(yy, ss), "tpr_0": lambda yy, ss: tpr_at_fpr(yy, ss, alpha=0.0),
              "tpr_0.1": lambda yy, ss: tpr_at_fpr(yy, ss, alpha=0.1),
              "recall": lambda yy, ss: metrics_at_threshold(yy, ss, threshold=t).tpr,
              "precision": lambda yy, ss: metrics_at_threshold(yy, ss, threshold=t).precision}
    g = groups if grouped else None
    fast = bootstrap_distribution(y, s, statistics=stats, rounds=60, seed=5, groups=g).values
    slow = bootstrap_distribution(y, s, statistics=oracle, rounds=60, seed=5, groups=g).values
    for name in stats:
        np.testing.assert_array_equal(fast[name], slow[name], err_msg=name)  # exact, nan where nothing flagged


def test_threshold_statistics_equal_metrics_at_threshold():
    from mlflow_mia.metrics import metrics_at_threshold

    y, s = pool(7)
    m = metrics_at_threshold(y, s, threshold=0.5)
    assert recall_at_threshold_statistic(0.5)(y, s) == m.tpr
    assert precision_at_threshold_statistic(0.5)(y, s) == m.precision
    with pytest.raises(ValueError, match="threshold is NaN"):
        recall_at_threshold_statistic(float("nan"))


def test_upper_bound_and_interval_are_quantiles_of_the_same_resamples():
    y, s, groups = clustered(2)
    dist = bootstrap_distribution(y, s, statistics={"tpr": tpr_at_fpr_statistic(0.1)}, rounds=200, seed=0,
                                  groups=groups)
    vals = dist.values["tpr"]
    assert dist.upper("tpr", confidence=0.95) == float(np.quantile(vals, 0.95))
    assert dist.interval("tpr", confidence=0.9) == tuple(float(x) for x in np.quantile(vals, [0.05, 0.95]))
    ci = bootstrap_ci(y, s, statistics={"tpr": tpr_at_fpr_statistic(0.1)}, rounds=200, seed=0, groups=groups,
                      confidence=0.9)
    assert ci["tpr"] == dist.interval("tpr", confidence=0.9)
    nan_dist = bootstrap_distribution(y, s, statistics={"p": precision_at_threshold_statistic(s.max())}, rounds=5,
                                      groups=groups)
    assert math.isnan(nan_dist.upper("p", confidence=0.95))  # nothing flagged: undefined in every resample


def test_bad_groups_raise_before_resampling():
    y, s, groups = clustered(3)
    with pytest.raises(ValueError, match=r"groups has 3 entries for \d+ samples; give one group id per sample"):
        bootstrap_ci(y, s, statistics={"auc": auc_statistic}, groups=[1, 2, 3])
    mixed = groups.copy()
    mixed[np.flatnonzero(y == 1)[0]] = groups[np.flatnonzero(y == 0)[0]]
    with pytest.raises(ValueError, match=r"1 group\(s\) mix members and non-members \(first: .*\); the cluster "
                                         r"bootstrap resamples groups by label"):
        bootstrap_ci(y, s, statistics={"auc": auc_statistic}, groups=mixed)


def coverage(n_groups, size, sd_group, *, reps=300, rounds=500, seed=0):
    """Share of 95 % intervals holding the true AUC, resampling groups and resampling samples, same data.

    Scores: 1.0 * member + u_group + e, u ~ N(0, sd_group^2) shared by a group's samples, e ~ N(0, 1);
    membership per group. Any member/non-member pair is independent, so the true AUC is
    Phi(1 / sqrt(2 (sd_group^2 + 1))) and the pool AUC is unbiased for it. 500 rounds: with fewer, the
    percentile interval's ends (order statistics of the rounds) sit inward and cover less than 95 %
    even when the bootstrap distribution is right (about 94 % at 200 rounds).
    """
    from scipy.stats import norm

    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(2 * n_groups), size)
    y = (groups < n_groups).astype(int)
    rows = np.arange(y.size)  # each sample its own group: the row bootstrap, on the vectorised path
    truth = norm.cdf(1.0 / np.sqrt(2 * (sd_group ** 2 + 1)))
    hits = {"groups": 0, "samples": 0}
    for r in range(reps):
        s = y + sd_group * rng.normal(size=2 * n_groups)[groups] + rng.normal(size=y.size)
        for unit, g in (("groups", groups), ("samples", rows)):
            low, high = bootstrap_ci(y, s, statistics={"auc": auc_statistic}, rounds=rounds, seed=r, groups=g)["auc"]
            hits[unit] += low <= truth <= high
    return {unit: n / reps for unit, n in hits.items()}


def test_cluster_bootstrap_covers_the_true_auc_where_the_row_bootstrap_does_not():
    start = time.process_time()
    # 60 member and 60 non-member articles of 2 sentences, intra-article correlation 0.69.
    clustered_cov = coverage(n_groups=60, size=2, sd_group=1.5)
    assert 0.92 <= clustered_cov["groups"] <= 0.98
    assert clustered_cov["samples"] <= clustered_cov["groups"] - 0.04  # too narrow: ignores the shared effect
    independent = coverage(n_groups=60, size=2, sd_group=0.0)  # the same groups, no shared effect
    assert abs(independent["groups"] - independent["samples"]) <= 0.03
    assert min(independent.values()) >= 0.90
    assert time.process_time() - start < 30  # CPU seconds: about 5 on an idle machine


def test_row_and_singleton_group_bootstraps_agree():
    y, s = pool(8, n_members=300, n_non_members=300)
    rows = bootstrap_ci(y, s, statistics={"auc": auc_statistic}, rounds=1000, seed=1)["auc"]
    singletons = bootstrap_ci(y, s, statistics={"auc": auc_statistic}, rounds=1000, seed=1,
                              groups=np.arange(y.size))["auc"]
    assert rows != singletons  # other draws ...
    assert rows == pytest.approx(singletons, abs=0.01)  # ... of the same resampling scheme
