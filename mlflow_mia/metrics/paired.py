"""Paired bootstrap of two attacks on one pool: the difference and the ratio of a statistic, and a verdict.

Two attacks (or one attack against two reference sets) scored on the same pool are
compared on the same resamples: each round draws the units once (samples, or groups
when membership was decided per group; members' and non-members' units apart, exactly
as :func:`mlflow_mia.metrics.bootstrap.bootstrap_distribution` draws them) and
evaluates the statistic of both score columns on that draw. The interval of the
difference ``b - a`` then holds the pool's sampling error of the comparison, with the
positive correlation of the two attacks on shared articles taken into account; two
separate intervals that overlap say nothing about the difference (Efron and Tibshirani
1993, Ch. 13; for clustered data, Field and Welsh 2007).

A claim about the two is decided by the rule of :func:`claim_verdict`: **reproduced**
when the whole interval lies in the claimed region, **not reproduced** when it lies
wholly outside it, **not resolved** otherwise (the rule of
``mlflow_mia.analyze.findings``, for a one-sided claim).

References
----------
.. [1] B. Efron and R. J. Tibshirani, "An Introduction to the Bootstrap",
   Chapman & Hall, 1993 (percentile intervals, Ch. 13).
.. [2] C. A. Field and A. H. Welsh, "Bootstrapping clustered data", J. R. Stat.
   Soc. B 69(3), 2007.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .bootstrap import BootstrapDistribution, ScoredPool, Statistic, resample_plan
from .validation import check_pair, check_rate, check_scores, warn_one_class

__all__ = ["paired_bootstrap", "claim_verdict"]

VERDICTS = ("reproduced", "not reproduced", "not resolved")


@dataclass(frozen=True)
class PairedComparison:
    """Attack ``b`` against attack ``a`` on one pool: point values, paired intervals and the verdict of one claim.

    Attributes
    ----------
    statistic : str
        Name of the statistic (``tpr_at_fpr_0.01``, ``auc``, ...).
    a, b : float
        The statistic of each attack on the whole pool.
    difference : float
        ``b - a``, in the statistic's unit.
    ratio : float
        ``b / a``: ``inf`` when ``a = 0 < b``, nan when ``a = b = 0``.
    difference_interval, ratio_interval : (float, float)
        Two-sided percentile intervals at ``confidence`` over the paired resamples
        (see :func:`paired_bootstrap` for a ratio with ``a = 0`` in some rounds).
    claim : str
        The claim decided: ``"b >= <factor> a"`` or ``"b - a >= <margin>"``.
    verdict : {"reproduced", "not reproduced", "not resolved"}
        :func:`claim_verdict` of the claim's interval (ratio or difference).
    confidence : float
        Level of the intervals.
    n_ratio_infinite, n_ratio_undefined : int
        Rounds whose ratio is ``inf`` (``a = 0 < b``) or nan (``a = b = 0``).
    distribution : BootstrapDistribution
        The values per round: ``a``, ``b``, ``difference``, ``ratio``, and what was resampled.
    """

    statistic: str
    a: float
    b: float
    difference: float
    ratio: float
    difference_interval: tuple
    ratio_interval: tuple
    claim: str
    verdict: str
    confidence: float
    n_ratio_infinite: int
    n_ratio_undefined: int
    distribution: BootstrapDistribution


def claim_verdict(low: float, high: float, bound: float) -> str:
    """Verdict of the claim "value >= bound" from the interval ``[low, high]`` of the value.

    Parameters
    ----------
    low, high : float
        Interval bounds (``inf`` allowed; nan: the interval is undefined).
    bound : float
        The claimed least value (a ratio factor, or a difference margin).

    Returns
    -------
    {"reproduced", "not reproduced", "not resolved"}
        ``"reproduced"`` when ``low >= bound`` (the interval lies in the claimed
        region), ``"not reproduced"`` when ``high < bound`` (wholly outside it),
        else, or when a bound is nan, ``"not resolved"``.

    Examples
    --------
    >>> claim_verdict(1.6, 2.4, 1.5), claim_verdict(0.9, 1.4, 1.5), claim_verdict(1.1, 2.0, 1.5)
    ('reproduced', 'not reproduced', 'not resolved')
    """
    if math.isnan(low) or math.isnan(high):
        return "not resolved"
    if low >= bound:
        return "reproduced"
    return "not reproduced" if high < bound else "not resolved"


def _ratio(b, a):
    """``b / a`` elementwise: ``inf`` where ``a = 0 < b``, nan where ``a = b = 0``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.true_divide(b, a)


def _interval_with_inf(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile interval (linear interpolation, as ``np.quantile``) where ``+inf`` sorts above every value.

    A bound whose interpolation reaches a ``+inf`` value is ``inf``; any nan gives ``(nan, nan)``.
    """
    if values.size == 0 or np.isnan(values).any():
        return (math.nan, math.nan)
    qs = [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0]
    infinite = np.isposinf(values)
    if not infinite.any():
        low, high = np.quantile(values, qs)
        return (float(low), float(high))
    finite = values[~infinite]
    # +inf -> the largest finite value keeps the order, so bounds between finite values are np.quantile's.
    stand_in = np.where(infinite, finite.max() if finite.size else 0.0, values)
    out = np.quantile(stand_in, qs)
    ordered = np.sort(values)
    for i, q in enumerate(qs):
        h = (values.size - 1) * q
        lo, hi = int(math.floor(h)), int(math.ceil(h))
        if np.isposinf(ordered[lo]) or (np.isposinf(ordered[hi]) and h > lo):
            out[i] = math.inf
    return (float(out[0]), float(out[1]))


def _claim(factor, margin) -> tuple[str, float]:
    if (factor is None) == (margin is None):
        raise ValueError("give exactly one claim: factor (b >= factor * a) or margin (b - a >= margin)")
    if factor is not None:
        f = float(factor)
        if not math.isfinite(f) or f < 0:
            raise ValueError(f"factor must be a finite number >= 0, got {factor!r}")
        return "ratio", f
    m = float(margin)
    if not math.isfinite(m):
        raise ValueError(f"margin must be a finite number, got {margin!r}")
    return "difference", m


def paired_bootstrap(y_true, score_a, score_b, *, statistic: Statistic, factor: float | None = None,
                     margin: float | None = None, groups=None, rounds: int = 1000, confidence: float = 0.95,
                     seed: int = 0) -> PairedComparison:
    """Paired bootstrap of ``b - a`` and ``b / a`` for one statistic of two attacks on the same pool.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,), 0/1 or bool
        Membership labels of the pool, 1 = member.
    score_a, score_b : array-like of shape (n_samples,), float
        The two attacks' scores of the same rows (higher = member), finite.
        ``a`` is the baseline of the claim.
    statistic : callable
        ``f(y_true, y_score) -> float``, a statistic >= 0 such as
        :func:`mlflow_mia.metrics.bootstrap.tpr_at_fpr_statistic` (TPR at FPR
        alpha read off the exact ROC) or :func:`mlflow_mia.metrics.roc.auc_statistic`;
        evaluated as in :func:`~mlflow_mia.metrics.bootstrap.bootstrap_distribution`.
    factor : float >= 0, optional
        The ratio claim "b >= factor * a", decided on the ratio's interval.
    margin : float, optional
        The difference claim "b - a >= margin" (in the statistic's unit),
        decided on the difference's interval. Give exactly one of ``factor`` and ``margin``.
    groups : array-like of shape (n_samples,), optional
        Group id of each sample when membership was decided per group: whole
        groups are resampled (a cluster bootstrap), members' and non-members' apart.
    rounds : int, default 1000
        Number of resamples (>= 1).
    confidence : float in (0, 1), default 0.95
        Level of the two-sided percentile intervals.
    seed : int, default 0
        Seed of ``np.random.default_rng``: the same seed gives the draws of
        ``bootstrap_distribution`` with that seed, so ``a``'s values per round are
        that function's values for ``score_a``.

    Returns
    -------
    PairedComparison
        With nan values and ``"not resolved"``, and an ``UndefinedMetricWarning``,
        when the pool lacks members or non-members.

    Raises
    ------
    ValueError
        If the labels or either score column is invalid (:func:`mlflow_mia.metrics.roc.roc`'s
        checks) or the score columns differ in length; if not exactly one of
        ``factor`` and ``margin`` is given, or it is not finite (``factor`` < 0);
        if ``statistic`` is not callable; if ``rounds`` is not a positive int,
        ``confidence`` is not in (0, 1), or ``groups`` is invalid
        (:func:`~mlflow_mia.metrics.bootstrap.bootstrap_distribution`).

    Notes
    -----
    Each round draws the units once and evaluates the statistic of both score
    columns on that draw; with identical columns the difference is 0 in every
    round. The ratio is ``inf`` in a round where ``a = 0 < b``: it sorts above every
    finite ratio, and an interval bound that reaches it is ``inf`` (so
    ``"b >= factor * a"`` can still be reproduced). A round with ``a = b = 0`` has no
    ratio (nan): the ratio's interval is then ``(nan, nan)`` and a ratio claim is
    ``"not resolved"``; ``n_ratio_undefined`` counts those rounds (the difference
    stays defined). A TPR at FPR alpha needs ``ceil(1 / alpha)`` non-member units to
    be resolvable (:func:`mlflow_mia.metrics.thresholds.unresolved_reason`): the
    caller checks that before comparing.

    References
    ----------
    .. [1] Efron and Tibshirani, "An Introduction to the Bootstrap", 1993, Ch. 13.
    .. [2] Field and Welsh, "Bootstrapping clustered data", JRSS B 69(3), 2007.

    Examples
    --------
    >>> import numpy as np
    >>> from mlflow_mia.metrics.roc import auc_statistic
    >>> rng = np.random.default_rng(0)
    >>> y = np.repeat([1, 0], 200)
    >>> weak, strong = rng.normal(size=400) + 0.3 * y, rng.normal(size=400) + 1.5 * y
    >>> c = paired_bootstrap(y, weak, strong, statistic=auc_statistic, margin=0.0, rounds=200)
    >>> c.claim, c.verdict, bool(c.difference_interval[0] > 0)
    ('b - a >= 0', 'reproduced', True)
    >>> same = paired_bootstrap(y, weak, weak, statistic=auc_statistic, factor=1.5, rounds=200)
    >>> same.difference_interval, same.verdict
    ((0.0, 0.0), 'not reproduced')
    """
    labels, a_scores = check_pair(y_true, score_a)
    b_scores = check_scores(score_b, "score_b")
    if b_scores.shape[0] != labels.shape[0]:
        raise ValueError(f"score_a and score_b have inconsistent lengths: {labels.shape[0]} != {b_scores.shape[0]}")
    kind, bound = _claim(factor, margin)
    claim = f"b >= {bound:g} a" if kind == "ratio" else f"b - a >= {bound:g}"
    if not callable(statistic):
        raise ValueError("statistic must be callable: f(y_true, y_score) -> float")
    confidence = check_rate(confidence, "confidence", low_closed=False, high_closed=False)
    plan = resample_plan(labels, groups, rounds=rounds)
    name = getattr(statistic, "__name__", "statistic")
    if plan.one_class:
        warn_one_class(int(labels.sum()), int(labels.size - labels.sum()), "A paired bootstrap")
        empty = BootstrapDistribution({k: np.empty(0) for k in ("a", "b", "difference", "ratio")}, plan.unit,
                                      plan.n_member_units, plan.n_non_member_units)
        nan2 = (math.nan, math.nan)
        return PairedComparison(name, math.nan, math.nan, math.nan, math.nan, nan2, nan2, claim, "not resolved",
                                confidence, 0, 0, empty)
    pools = ScoredPool(labels, a_scores, plan.unit_of_row), ScoredPool(labels, b_scores, plan.unit_of_row)
    values = {"a": np.empty(plan.rounds), "b": np.empty(plan.rounds)}
    for rows, counts in plan.chunks(seed):  # one draw per round, both columns evaluated on it
        for key, pool in zip(("a", "b"), pools):
            values[key][rows] = pool.evaluate({name: statistic}, counts)[name]
    values["difference"] = values["b"] - values["a"]
    values["ratio"] = _ratio(values["b"], values["a"])
    dist = BootstrapDistribution(values, plan.unit, plan.n_member_units, plan.n_non_member_units)
    a, b = float(statistic(labels, a_scores)), float(statistic(labels, b_scores))
    diff_ci = dist.interval("difference", confidence=confidence)
    ratio_ci = _interval_with_inf(values["ratio"], confidence)
    verdict = claim_verdict(*(ratio_ci if kind == "ratio" else diff_ci), bound)
    return PairedComparison(name, a, b, b - a, float(_ratio(b, a)), diff_ci, ratio_ci, claim, verdict, confidence,
                            int(np.isposinf(values["ratio"]).sum()), int(np.isnan(values["ratio"]).sum()), dist)
