"""Tests of mlflow_mia.metrics.paired."""

import math

import numpy as np
import pytest
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import roc_auc_score

from mlflow_mia.metrics import (
    auc_statistic,
    bootstrap_distribution,
    claim_verdict,
    paired_bootstrap,
    tpr_at_fpr,
    tpr_at_fpr_statistic,
)
from mlflow_mia.metrics.paired import _interval_with_inf


def two_attacks(seed=0, n_groups=40, sizes=(1, 6)):
    """Two correlated attacks on one grouped pool (odd groups are members); rounded scores: ties."""
    rng = np.random.default_rng(seed)
    size = rng.integers(sizes[0], sizes[1] + 1, size=n_groups)
    groups = np.repeat(np.arange(n_groups), size)
    y = groups % 2
    shared = rng.normal(size=n_groups)[groups] + rng.normal(size=groups.size)
    a = np.round(shared + 0.5 * y, 1)
    b = np.round(shared + 1.0 * y + 0.5 * rng.normal(size=groups.size), 1)
    return y, a, b, groups


def brute_force_draws(y, groups, rounds, seed):
    """Rows of each resample, drawn as the documented draw order says (one chunk): a list of index arrays."""
    rng = np.random.default_rng(seed)
    if groups is None:
        members, non_members = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
        out = []
        for _ in range(rounds):
            out.append(np.r_[members[rng.integers(0, members.size, size=members.size)],
                             non_members[rng.integers(0, non_members.size, size=non_members.size)]])
        return out
    ids, unit_of_row = np.unique(groups, return_inverse=True)
    unit_label = np.array([y[unit_of_row == u][0] for u in range(ids.size)])
    m_units, n_units = np.flatnonzero(unit_label == 1), np.flatnonzero(unit_label == 0)
    m_draws = m_units[rng.integers(0, m_units.size, size=(rounds, m_units.size))]
    n_draws = n_units[rng.integers(0, n_units.size, size=(rounds, n_units.size))]
    rows_of = [np.flatnonzero(unit_of_row == u) for u in range(ids.size)]
    return [np.concatenate([rows_of[u] for u in np.r_[m_draws[r], n_draws[r]]]) for r in range(rounds)]


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("which", ["tpr", "auc"])
def test_paired_values_equal_a_brute_force_loop_over_the_same_resamples(grouped, which):
    y, a, b, groups = two_attacks(1)
    g = groups if grouped else None
    if which == "tpr":
        statistic, oracle = tpr_at_fpr_statistic(0.1), (lambda yy, ss: tpr_at_fpr(yy, ss, alpha=0.1))
    else:
        statistic, oracle = auc_statistic, roc_auc_score
    rounds, seed = 80, 7
    got = paired_bootstrap(y, a, b, statistic=statistic, margin=0.0, groups=g, rounds=rounds, seed=seed)
    va, vb = [], []
    for idx in brute_force_draws(y, g, rounds, seed):
        va.append(oracle(y[idx], a[idx]))
        vb.append(oracle(y[idx], b[idx]))
    va, vb = np.array(va), np.array(vb)
    values = got.distribution.values
    np.testing.assert_allclose(values["a"], va, rtol=0, atol=1e-12)
    np.testing.assert_allclose(values["b"], vb, rtol=0, atol=1e-12)
    np.testing.assert_allclose(values["difference"], vb - va, rtol=0, atol=1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_allclose(values["ratio"], vb / va, rtol=1e-12)  # inf where a = 0 < b
    q = [(1 - 0.95) / 2, (1 + 0.95) / 2]
    np.testing.assert_allclose(got.difference_interval, np.quantile(values["b"] - values["a"], q), rtol=0, atol=0)
    assert (got.a, got.b) == (statistic(y, a), statistic(y, b))
    assert got.difference == got.b - got.a and got.ratio == got.b / got.a
    assert got.distribution.unit == ("group" if grouped else "sample")
    expected_units = (20, 20) if grouped else (int(y.sum()), int((y == 0).sum()))
    assert (got.distribution.n_member_units, got.distribution.n_non_member_units) == expected_units


@pytest.mark.parametrize("grouped", [False, True])
def test_each_column_sees_the_draws_of_bootstrap_distribution_with_that_seed(grouped):
    y, a, b, groups = two_attacks(2)
    g = groups if grouped else None
    stat = tpr_at_fpr_statistic(0.05)
    got = paired_bootstrap(y, a, b, statistic=stat, factor=1.0, groups=g, rounds=120, seed=3).distribution.values
    for key, score in (("a", a), ("b", b)):
        alone = bootstrap_distribution(y, score, statistics={"s": stat}, rounds=120, seed=3, groups=g).values["s"]
        np.testing.assert_array_equal(got[key], alone)


@pytest.mark.parametrize("grouped", [False, True])
def test_identical_scores_give_a_difference_of_exactly_zero_in_every_round(grouped):
    y, a, _, groups = two_attacks(3)
    g = groups if grouped else None
    for stat in (auc_statistic, tpr_at_fpr_statistic(0.1)):
        c = paired_bootstrap(y, a, a.copy(), statistic=stat, margin=0.0, groups=g, rounds=200, seed=1)
        assert np.all(c.distribution.values["difference"] == 0.0)
        assert c.difference == 0.0 and c.difference_interval == (0.0, 0.0)
        assert c.verdict == "reproduced"  # b - a >= 0 holds with equality in every round
        positive = c.distribution.values["a"] > 0
        assert np.all(c.distribution.values["ratio"][positive] == 1.0)


def test_groups_keep_their_rows_together_and_both_columns_share_the_draw():
    y, a, _, groups = two_attacks(4, n_groups=20)
    a = a + 1e-6 * np.arange(a.size)  # distinct scores: each drawn row is known by its score
    b = -a - 1000.0  # another order, the same rows, no score shared with a
    row_of_a = {s: i for i, s in enumerate(a)}
    row_of_b = {s: i for i, s in enumerate(b)}
    seen = {"a": [], "b": []}

    def record(yy, ss):  # no batch form: called once per round with the resampled rows
        which = "a" if float(ss[0]) in row_of_a else "b"
        rows = np.array([(row_of_a if which == "a" else row_of_b)[float(x)] for x in ss])
        np.testing.assert_array_equal(yy, y[rows])  # rows keep their labels
        seen[which].append(np.bincount(rows, minlength=y.size))
        return 0.5

    c = paired_bootstrap(y, a, b, statistic=record, margin=0.0, groups=groups, rounds=30, seed=2)
    # 30 resamples, then the point value on the whole pool
    assert c.distribution.unit == "group" and len(seen["a"]) == len(seen["b"]) == 31
    assert np.all(seen["a"][-1] == 1) and np.all(seen["b"][-1] == 1)
    for times_a, times_b in zip(seen["a"][:30], seen["b"][:30]):
        np.testing.assert_array_equal(times_a, times_b)  # one draw per round, evaluated for both
        for g in np.unique(groups):
            assert len(set(times_a[groups == g].tolist())) == 1, f"group {g} was split"
        drawn = {g: times_a[groups == g][0] for g in np.unique(groups)}
        assert sum(k for g, k in drawn.items() if g % 2) == 10  # member groups: as many as the pool has
        assert sum(k for g, k in drawn.items() if g % 2 == 0) == 10


def test_a_zero_baseline_gives_an_infinite_ratio_and_both_zero_leave_it_undefined():
    y = np.repeat([1, 0], 50)
    flat = np.zeros(100)  # every score tied: TPR at FPR 0 is 0 in every round
    perfect = y + 0.0
    stat = tpr_at_fpr_statistic(0.0)
    c = paired_bootstrap(y, flat, perfect, statistic=stat, factor=1.5, rounds=50)
    assert c.ratio == math.inf and c.ratio_interval == (math.inf, math.inf)
    assert c.n_ratio_infinite == 50 and c.n_ratio_undefined == 0
    assert c.verdict == "reproduced" and c.difference_interval == (1.0, 1.0)
    both = paired_bootstrap(y, flat, flat, statistic=stat, factor=1.5, rounds=50)
    assert math.isnan(both.ratio) and all(math.isnan(x) for x in both.ratio_interval)
    assert both.n_ratio_undefined == 50 and both.verdict == "not resolved"
    assert both.difference_interval == (0.0, 0.0)  # the difference stays defined
    assert paired_bootstrap(y, flat, flat, statistic=stat, margin=0.0, rounds=50).verdict == "reproduced"


def test_interval_with_infinite_rounds_sorts_them_above_every_finite_value():
    q = [(1 - 0.9) / 2, (1 + 0.9) / 2]
    finite = np.arange(1.0, 101.0)
    assert _interval_with_inf(finite, 0.9) == tuple(float(x) for x in np.quantile(finite, q))
    some = np.r_[finite[:97], [math.inf] * 3]  # the 95 % quantile stays below the inf rounds
    assert _interval_with_inf(some, 0.9) == tuple(float(x) for x in np.quantile(np.r_[finite[:97], [97.0] * 3], q))
    many = np.r_[finite[:90], [math.inf] * 10]  # the 95 % quantile reaches them
    low, high = _interval_with_inf(many, 0.9)
    assert low == float(np.quantile(np.r_[finite[:90], [90.0] * 10], q[0])) and high == math.inf
    assert all(math.isnan(x) for x in _interval_with_inf(np.r_[finite, math.nan], 0.9))


def test_claim_verdict_follows_the_rule():
    assert claim_verdict(1.5, 3.0, 1.5) == "reproduced"  # the closed region: the bound itself counts
    assert claim_verdict(0.8, 1.49, 1.5) == "not reproduced"
    assert claim_verdict(1.2, 1.5, 1.5) == "not resolved"
    assert claim_verdict(2.0, math.inf, 1.5) == "reproduced"
    assert claim_verdict(math.nan, math.nan, 1.5) == "not resolved"
    assert claim_verdict(-0.05, -0.01, 0.0) == "not reproduced"


def test_ratio_and_difference_claims_decide_on_their_own_interval():
    y, a, b, groups = two_attacks(5, n_groups=200)
    stat = auc_statistic
    ratio = paired_bootstrap(y, a, b, statistic=stat, factor=1.05, groups=groups, rounds=300)
    diff = paired_bootstrap(y, a, b, statistic=stat, margin=0.05, groups=groups, rounds=300)
    assert ratio.claim == "b >= 1.05 a" and diff.claim == "b - a >= 0.05"
    assert ratio.verdict == claim_verdict(*ratio.ratio_interval, 1.05)
    assert diff.verdict == claim_verdict(*diff.difference_interval, 0.05)
    assert ratio.difference_interval == diff.difference_interval  # same seed, same draws
    low, high = ratio.ratio_interval
    assert low <= ratio.ratio <= high and ratio.difference_interval[0] <= ratio.difference
    # b is the stronger attack by construction: swapping the columns mirrors the difference
    swapped = paired_bootstrap(y, b, a, statistic=stat, margin=0.0, groups=groups, rounds=300)
    np.testing.assert_array_equal(swapped.distribution.values["difference"], -diff.distribution.values["difference"])
    assert swapped.verdict == "not reproduced" and diff.difference > 0


@pytest.mark.parametrize("kwargs, match", [
    ({}, "exactly one claim"),
    ({"factor": 1.5, "margin": 0.0}, "exactly one claim"),
    ({"factor": -1.0}, "factor"),
    ({"factor": math.inf}, "factor"),
    ({"margin": math.nan}, "margin"),
    ({"margin": 0.0, "rounds": 0}, "rounds"),
    ({"margin": 0.0, "confidence": 1.0}, "confidence"),
    ({"margin": 0.0, "groups": np.arange(3)}, "groups"),
])
def test_invalid_options_raise(kwargs, match):
    y, a, b, _ = two_attacks(6)
    with pytest.raises(ValueError, match=match):
        paired_bootstrap(y, a, b, statistic=auc_statistic, **kwargs)


def test_invalid_scores_raise():
    y, a, b, _ = two_attacks(7)
    with pytest.raises(ValueError, match="inconsistent lengths"):
        paired_bootstrap(y, a, b[:-1], statistic=auc_statistic, margin=0.0)
    bad = b.copy()
    bad[0] = np.nan
    with pytest.raises(ValueError, match=r"score_b contains 1 NaN value\(s\)"):
        paired_bootstrap(y, a, bad, statistic=auc_statistic, margin=0.0)
    with pytest.raises(ValueError, match="callable"):
        paired_bootstrap(y, a, b, statistic="auc", margin=0.0)


def test_one_class_pool_warns_and_is_not_resolved():
    y = np.ones(10, int)
    with pytest.warns(UndefinedMetricWarning, match="paired bootstrap"):
        c = paired_bootstrap(y, np.arange(10.0), np.arange(10.0), statistic=auc_statistic, margin=0.0)
    assert c.verdict == "not resolved" and math.isnan(c.difference) and c.distribution.values["a"].size == 0
