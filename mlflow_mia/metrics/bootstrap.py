"""Stratified (optionally cluster) bootstrap confidence intervals over the target pool.

The unit resampled is the unit whose membership was decided: a sample when
samples were assigned to members and non-members one by one, a group (article,
user, patient) when every sample of a group shares its label. Units are drawn
with replacement, members' units and non-members' units separately (stratified
by label), so no resample holds a single class and paired columns (target and
reference scores of one sample) stay paired. Resampling samples when membership
was decided per group ignores that samples of one group share their group's
effect on the score, and gives intervals that are too narrow (Field and Welsh
2007; Davison and Hinkley 1997, Sec. 3.8).

A resample is a vector of weights, the number of times each pool row was drawn
(a row counts as often as its unit was drawn). The built-in statistics (AUC, TPR
at a fixed FPR, precision and recall at a fixed threshold) read every round of a
chunk at once from weighted cumulative counts over the pool sorted once; any
other statistic is called once per round on the resampled rows.

References
----------
.. [1] B. Efron and R. J. Tibshirani, "An Introduction to the Bootstrap",
   Chapman & Hall, 1993 (percentile intervals, Ch. 13).
.. [2] A. C. Davison and D. V. Hinkley, "Bootstrap Methods and their
   Application", Cambridge University Press, 1997, Sec. 3.8 (hierarchical data:
   resample the top-level units).
.. [3] C. A. Field and A. H. Welsh, "Bootstrapping clustered data", J. R. Stat.
   Soc. B 69(3), 2007.
.. [4] F. Mireshghallah et al., "Quantifying Privacy Risks of Masked Language
   Models Using Membership Inference Attacks", EMNLP 2022.
.. [5] N. Carlini et al., "Membership Inference Attacks From First
   Principles", IEEE S&P 2022.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Mapping

import numpy as np

from .population_resampling import (PopulationThresholds, precision_at_population_threshold_statistic,
                                    recall_at_population_threshold_statistic)
from .resampling import ResamplePlan, ScoredPool, Statistic, resample_plan
from .roc import tpr_at_fpr
from .validation import check_pair, check_rate, warn_one_class
from .weighted_roc import (batch_tpr_at_fpr, named_statistic, precision_at_threshold_statistic,
                           recall_at_threshold_statistic)

__all__ = ["bootstrap_distribution", "bootstrap_ci", "tpr_at_fpr_statistic",
           "recall_at_population_threshold_statistic", "precision_at_population_threshold_statistic"]




def tpr_at_fpr_statistic(alpha: float) -> Statistic:
    """A bootstrap statistic computing TPR at FPR ``alpha`` off the exact ROC.

    Parameters
    ----------
    alpha : float in [0, 1]
        Target false-positive rate.

    Returns
    -------
    callable
        ``f(y_true, y_score) -> float`` equal to
        ``tpr_at_fpr(y_true, y_score, alpha=alpha)``; its ``batch`` attribute
        gives the same for every resample of a chunk at once.

    Raises
    ------
    ValueError
        If ``alpha`` is outside [0, 1].

    References
    ----------
    .. [1] Carlini et al., "Membership Inference Attacks From First
       Principles", IEEE S&P 2022.

    Examples
    --------
    >>> f = tpr_at_fpr_statistic(0.0)
    >>> f([1, 1, 0, 0], [0.9, 0.5, 0.5, 0.1])
    0.5
    """
    alpha = check_rate(alpha, "alpha", low_closed=True, high_closed=True)

    def statistic(y_true, y_score) -> float:
        return tpr_at_fpr(y_true, y_score, alpha=alpha)

    return named_statistic(statistic, f"tpr_at_fpr_{alpha:g}", partial(batch_tpr_at_fpr, alpha=alpha))


@dataclass(frozen=True)
class BootstrapDistribution:
    """Values of each statistic over the bootstrap resamples of one pool.

    Attributes
    ----------
    values : dict of str to ndarray of shape (rounds,), float64
        One value per resample and statistic (nan where a resample leaves it undefined).
    unit : {"sample", "group"}
        What was resampled: pool rows, or whole groups (all their rows at once).
    n_member_units, n_non_member_units : int
        Units drawn per resample from the members and from the non-members.
    """

    values: dict
    unit: str
    n_member_units: int
    n_non_member_units: int

    def interval(self, name: str, *, confidence: float) -> tuple[float, float]:
        """Two-sided percentile interval: the ``(1 -+ confidence) / 2`` quantiles (linear interpolation).

        ``(nan, nan)`` when some resample gave nan.
        """
        confidence = check_rate(confidence, "confidence", low_closed=False, high_closed=False)
        vals = self.values[name]
        if vals.size == 0 or np.isnan(vals).any():
            return (math.nan, math.nan)
        low, high = np.quantile(vals, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0])
        return (float(low), float(high))

    def upper(self, name: str, *, confidence: float) -> float:
        """One-sided percentile upper bound: the ``confidence`` quantile; nan when some resample gave nan."""
        confidence = check_rate(confidence, "confidence", low_closed=False, high_closed=False)
        return self._quantile(name, confidence)

    def lower(self, name: str, *, confidence: float) -> float:
        """One-sided percentile lower bound: the ``1 - confidence`` quantile; nan when some resample gave nan."""
        confidence = check_rate(confidence, "confidence", low_closed=False, high_closed=False)
        return self._quantile(name, 1.0 - confidence)

    def _quantile(self, name: str, q: float) -> float:
        vals = self.values[name]
        if vals.size == 0 or np.isnan(vals).any():
            return math.nan
        return float(np.quantile(vals, q))


def _check_statistics(statistics) -> None:
    if not isinstance(statistics, Mapping) or not statistics:
        raise ValueError("statistics must be a non-empty mapping of name -> f(y_true, y_score)")
    for name, fn in statistics.items():
        if not callable(fn):
            raise ValueError(f"statistics[{name!r}] is not callable")


def bootstrap_distribution(y_true, y_score, *, statistics: Mapping[str, Statistic], rounds: int = 1000,
                           seed: int = 0, groups=None, population=None,
                           population_groups=None) -> BootstrapDistribution:
    """Bootstrap values of each statistic, resampling samples or groups by class.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,), 0/1 or bool
        Membership labels of the target pool, 1 = member.
    y_score : array-like of shape (n_samples,), float
        Attack scores, higher = more likely a member. Must be finite.
    statistics : mapping of str to callable
        ``name -> f(y_true, y_score) -> float``, e.g.
        ``{"auc": auc_statistic, "tpr_at_fpr_0.01": tpr_at_fpr_statistic(0.01)}``
        (:func:`mlflow_mia.metrics.roc.auc_statistic`).
        A callable with a ``batch`` attribute (the statistics of this module)
        is evaluated on all resamples at once; any other is called once per
        resample with read-only int8 labels and float64 scores (members first).
    rounds : int, default 1000
        Number of bootstrap resamples (>= 1).
    seed : int, default 0
        Seed of ``np.random.default_rng``; equal seeds give equal values.
    groups : array-like of shape (n_samples,), optional
        Group id of each sample (article, user), when membership was decided
        per group. Then whole groups are resampled (a cluster bootstrap); each
        group's samples must share one label.
    population : array-like of shape (n_population,), float, optional
        Population scores. Needed by the statistics read at a population
        threshold (:func:`recall_at_population_threshold_statistic`,
        :func:`precision_at_population_threshold_statistic`): each round also
        resamples the population (its rows, or its groups) and sets that
        round's thresholds from it, so their intervals carry the thresholds'
        noise. Drawn from a generator of its own (``default_rng([seed, 1])``),
        so the pool's draws do not depend on it.
    population_groups : array-like of shape (n_population,), optional
        Group of each population score: whole groups are resampled.

    Returns
    -------
    BootstrapDistribution
        Empty value arrays, with an ``UndefinedMetricWarning``, when the pool
        lacks members or non-members.

    Raises
    ------
    ValueError
        As :func:`mlflow_mia.metrics.roc.roc` for the inputs; if
        ``statistics`` is empty or holds a non-callable; if ``rounds`` is not
        a positive int; if ``groups`` has another length or a group mixes
        members and non-members.

    Notes
    -----
    Each round draws, with replacement, as many member units as the pool has
    and as many non-member units (a stratified bootstrap; a unit is a sample,
    or a group with all its samples). Every statistic is evaluated on the same
    draw. Without groups the draws are those of earlier releases (per round,
    the member rows, then the non-member rows), so the same seed gives the same
    intervals. With groups, the member groups of all rounds of a chunk are
    drawn in one call, then the non-member groups; the number of rows per
    resample varies with the sizes of the groups drawn.

    References
    ----------
    .. [1] Efron and Tibshirani, 1993, Ch. 13; Davison and Hinkley, 1997, Sec. 3.8.
    .. [2] Field and Welsh, "Bootstrapping clustered data", JRSS B, 2007.
    """
    labels, scores = check_pair(y_true, y_score)
    _check_statistics(statistics)
    thresholds = PopulationThresholds.of(statistics, population, population_groups, seed)
    plan = resample_plan(labels, groups, rounds=rounds)
    if plan.one_class:
        warn_one_class(int(labels.sum()), int(labels.size - labels.sum()), "A bootstrap interval")
        return BootstrapDistribution({name: np.empty(0) for name in statistics}, plan.unit, plan.n_member_units,
                                     plan.n_non_member_units)
    scored = ScoredPool(labels, scores, plan.unit_of_row)
    values = {name: np.empty(plan.rounds) for name in statistics}
    for rows, counts in plan.chunks(seed):
        for name, vals in scored.evaluate(statistics, counts, thresholds=thresholds, rounds=rows).items():
            values[name][rows] = vals
    return BootstrapDistribution(values, plan.unit, plan.n_member_units, plan.n_non_member_units)


def bootstrap_ci(y_true, y_score, *, statistics: Mapping[str, Statistic], rounds: int = 1000,
                 confidence: float = 0.95, seed: int = 0, groups=None) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap confidence intervals, resampling the pool (or its groups) by class.

    Parameters
    ----------
    y_true, y_score, statistics, rounds, seed, groups
        As :func:`bootstrap_distribution`.
    confidence : float in (0, 1), default 0.95
        Two-sided level of the percentile interval.

    Returns
    -------
    dict of str to (float, float)
        ``name -> (low, high)``, the ``(1 - confidence) / 2`` and
        ``(1 + confidence) / 2`` quantiles (linear interpolation) of the
        statistic over the resamples. ``(nan, nan)``, with an
        ``UndefinedMetricWarning``, when the pool lacks members or
        non-members. A statistic that returns nan in some round gives nan
        bounds.

    Raises
    ------
    ValueError
        As :func:`bootstrap_distribution`, and if ``confidence`` is not in (0, 1).

    References
    ----------
    .. [1] Efron and Tibshirani, "An Introduction to the Bootstrap", 1993.
    .. [2] Mireshghallah et al., "Quantifying Privacy Risks of Masked Language
       Models Using Membership Inference Attacks", EMNLP 2022.

    Examples
    --------
    >>> import numpy as np
    >>> from mlflow_mia.metrics.roc import auc_statistic
    >>> rng = np.random.default_rng(0)
    >>> y = np.repeat([1, 0], 100)
    >>> s = rng.normal(size=200) + y
    >>> ci = bootstrap_ci(y, s, statistics={"auc": auc_statistic}, rounds=200, seed=1)
    >>> low, high = ci["auc"]
    >>> bool(low < auc_statistic(y, s) < high)
    True
    >>> by_article = np.repeat(np.arange(40), 5)  # 20 member and 20 non-member articles
    >>> low_g, high_g = bootstrap_ci(y, s, statistics={"auc": auc_statistic}, rounds=200, seed=1,
    ...                              groups=by_article)["auc"]
    >>> bool(low_g < auc_statistic(y, s) < high_g)
    True
    """
    confidence = check_rate(confidence, "confidence", low_closed=False, high_closed=False)
    dist = bootstrap_distribution(y_true, y_score, statistics=statistics, rounds=rounds, seed=seed, groups=groups)
    return {name: dist.interval(name, confidence=confidence) for name in statistics}
