"""Decision thresholds and the metrics they give on the target pool.

A threshold ``t`` turns scores into decisions with one rule used everywhere in
this package: a sample is predicted a member iff ``score > t`` (strict). Ties
at ``t`` are predicted non-members.

The main threshold is the population threshold (Mireshghallah et al. 2022,
Sec. 3): the ``1 - alpha`` quantile of the attack score over a population set
disjoint from the target pool, so that about ``alpha`` of non-members are
flagged. The mean-member-loss threshold (``mu`` in Jagannatha et al. 2021) is
the loss-attack baseline.

References
----------
.. [1] F. Mireshghallah, K. Goyal, A. Uniyal, T. Berg-Kirkpatrick and R. Shokri,
   "Quantifying Privacy Risks of Masked Language Models Using Membership
   Inference Attacks", EMNLP 2022.
.. [2] A. Jagannatha, B. P. S. Rawat and H. Yu, "Membership Inference Attack
   Susceptibility of Clinical Language Models", arXiv:2104.08305, 2021.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Iterable

import numpy as np
from sklearn.exceptions import UndefinedMetricWarning

from .validation import check_pair, check_rate, check_scores, warn_one_class

__all__ = [
    "ThresholdMetrics",
    "min_population_size",
    "unresolved_reason",
    "population_threshold",
    "metrics_at_threshold",
    "population_threshold_metrics",
    "mean_member_loss_threshold",
]

# Relative slack when flooring ``alpha * n``: decimal alphas such as 0.7 are not
# exact in binary, and 0.7 * 90 evaluates to 62.99999999999999.
_REL_TOL = 1e-9


def min_population_size(alpha: float) -> int:
    """Smallest population set that can resolve a target FPR ``alpha``.

    Parameters
    ----------
    alpha : float in (0, 1)
        Target false-positive rate.

    Returns
    -------
    int
        ``ceil(1 / alpha)``. With fewer samples ``alpha * n < 1``: the
        threshold could flag no population sample at all, and the achieved
        FPR would be 0 rather than ``alpha``.

    Raises
    ------
    ValueError
        If ``alpha`` is not in (0, 1).

    Examples
    --------
    >>> min_population_size(0.01), min_population_size(0.001), min_population_size(0.3)
    (100, 1000, 4)
    """
    alpha = check_rate(alpha, "alpha", low_closed=False, high_closed=False)
    # Round first so that 1 / 0.001 (= 1000.0000000000001 in some cases) gives 1000.
    return int(math.ceil(round(1.0 / alpha, 9)))


def unresolved_reason(n: int, alpha: float, *, unit: str) -> str | None:
    """Why a rate at FPR ``alpha`` cannot be read from ``n`` units, or None when it can.

    A false-positive rate ``alpha`` is resolved by ``n`` negatives (pool
    non-members for a TPR read off the ROC, population samples or groups for
    a population threshold) only when ``n >= ceil(1 / alpha)``: with fewer,
    the rate can only be 0 or at least ``1 / n > alpha``, and a "TPR at FPR
    alpha" is in fact the TPR at zero false positives.

    Parameters
    ----------
    n : int
        Negatives at the level in question (samples, or users / groups).
    alpha : float in (0, 1)
        Target false-positive rate.
    unit : str
        What ``n`` counts, as it should read in the reason (``"non-members"``,
        ``"population groups"``).

    Returns
    -------
    str or None
        ``"<n> <unit> < <needed> needed for FPR <alpha>"``, or None when
        ``n >= min_population_size(alpha)``.

    Raises
    ------
    ValueError
        If ``alpha`` is not in (0, 1).

    Examples
    --------
    >>> unresolved_reason(985, 0.001, unit="non-members")
    '985 non-members < 1000 needed for FPR 0.001'
    >>> unresolved_reason(59, 0.1, unit="population groups") is None
    True
    """
    needed = min_population_size(alpha)
    return None if n >= needed else f"{int(n)} {unit} < {needed} needed for FPR {alpha:g}"


def _n_allowed_above(alpha: float, n: int) -> int:
    """floor(alpha * n), robust to the binary rounding of decimal alphas."""
    x = alpha * n
    return int(math.floor(x + _REL_TOL * max(1.0, x)))


def population_threshold(population_scores, *, alpha: float) -> float:
    """Threshold at target FPR ``alpha``: the ``1 - alpha`` population quantile.

    Parameters
    ----------
    population_scores : array-like of shape (n_population,), float
        Attack scores (higher = member) of the population set: samples from
        the general distribution, disjoint from the target pool. Must be
        finite.
    alpha : float in (0, 1)
        Target false-positive rate.

    Returns
    -------
    float
        The smallest population score ``t`` such that
        ``#(population_scores > t) <= alpha * n_population``. This is
        ``np.quantile(population_scores, 1 - alpha, method="inverted_cdf")``
        (one of the population scores, no interpolation). Predict member iff
        ``score > t``; ties at ``t`` are non-members, so at most ``alpha`` of
        the population is flagged.

    Raises
    ------
    ValueError
        If ``alpha`` is not in (0, 1); if ``population_scores`` is empty,
        not 1-D or holds NaN/infinity; or if it has fewer than
        ``min_population_size(alpha) = ceil(1 / alpha)`` samples.

    Notes
    -----
    The quantile is computed from the count above (sorting once and taking
    the order statistic at ``n - 1 - floor(alpha * n)``) rather than by
    calling ``np.quantile`` on ``1 - alpha``: the two agree except where
    ``1 - alpha`` rounds in binary across an integer boundary of
    ``(1 - alpha) * n`` (e.g. ``alpha = 0.7``, ``n = 10``, where
    ``np.quantile`` allows only 6 of 10 samples above ``t``).

    References
    ----------
    .. [1] Mireshghallah et al., "Quantifying Privacy Risks of Masked Language
       Models Using Membership Inference Attacks", EMNLP 2022, Sec. 3
       (threshold from the population's score distribution).

    Examples
    --------
    >>> pop = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    >>> population_threshold(pop, alpha=0.1)
    8.0
    >>> population_threshold(pop, alpha=0.3)
    6.0
    """
    alpha = check_rate(alpha, "alpha", low_closed=False, high_closed=False)
    pop = check_scores(population_scores, "population_scores")
    return _population_threshold(np.sort(pop), alpha)


def _population_threshold(sorted_pop: np.ndarray, alpha: float) -> float:
    n = int(sorted_pop.shape[0])
    needed = min_population_size(alpha)
    if n < needed:
        raise ValueError(
            f"population set has {n} samples; alpha={alpha:g} needs at least {needed}: "
            f"add population data or drop this alpha"
        )
    k = min(_n_allowed_above(alpha, n), n - 1)
    return float(sorted_pop[n - 1 - k])


@dataclass(frozen=True)
class ThresholdMetrics:
    """Decisions ``score > threshold`` scored on the target pool.

    Attributes
    ----------
    alpha : float
        Target FPR the threshold was chosen for (nan if not from a population
        quantile).
    threshold : float
        The threshold ``t``; member iff ``score > t``.
    tpr : float
        True-positive rate = recall: flagged members / members (nan if the
        pool has no member).
    fpr : float
        False-positive rate actually achieved on the pool's non-members
        (nan if the pool has no non-member).
    precision : float
        Flagged members / flagged samples; nan when nothing is flagged.
    n_flagged : int
        Number of pool samples with ``score > t``.
    tp : int
        Members flagged (true positives).
    fp : int
        Non-members flagged (false positives); ``n_flagged = tp + fp``.
    n_members : int
        Members in the pool (``tpr = tp / n_members``).
    n_non_members : int
        Non-members in the pool (``fpr = fp / n_non_members``).
    """

    alpha: float
    threshold: float
    tpr: float
    fpr: float
    precision: float
    n_flagged: int
    tp: int = 0
    fp: int = 0
    n_members: int = 0
    n_non_members: int = 0


def _metrics_from_checked(labels, scores, threshold, alpha) -> ThresholdMetrics:
    n_members = int(labels.sum())
    n_non_members = int(labels.size - n_members)
    flagged = scores > threshold
    tp = int(np.count_nonzero(flagged & (labels == 1)))
    n_flagged = int(np.count_nonzero(flagged))
    fp = n_flagged - tp
    tpr = tp / n_members if n_members else float("nan")
    fpr = fp / n_non_members if n_non_members else float("nan")
    precision = tp / n_flagged if n_flagged else float("nan")
    return ThresholdMetrics(
        alpha=float(alpha),
        threshold=float(threshold),
        tpr=float(tpr),
        fpr=float(fpr),
        precision=float(precision),
        n_flagged=n_flagged,
        tp=tp,
        fp=fp,
        n_members=n_members,
        n_non_members=n_non_members,
    )


def _check_threshold(threshold) -> float:
    try:
        t = float(threshold)
    except (TypeError, ValueError):
        raise ValueError(f"threshold must be a real number, got {threshold!r}") from None
    if math.isnan(t):
        raise ValueError("threshold is NaN")
    return t


def metrics_at_threshold(y_true, y_score, *, threshold: float, alpha: float = float("nan")) -> ThresholdMetrics:
    """TPR, achieved FPR and precision on the target pool at a fixed threshold.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,), 0/1 or bool
        Membership labels, 1 = member.
    y_score : array-like of shape (n_samples,), float
        Attack scores, higher = more likely a member. Must be finite.
    threshold : float
        Decision threshold: member iff ``score > threshold`` (ties at the
        threshold are non-members).
    alpha : float, default nan
        The target FPR the threshold was chosen for; stored as is in the result.

    Returns
    -------
    ThresholdMetrics
        ``precision`` is nan when no sample is flagged (no warning: this is
        expected at small alphas). ``tpr`` or ``fpr`` is nan, with an
        ``UndefinedMetricWarning``, when the pool lacks members or
        non-members.

    Raises
    ------
    ValueError
        If ``y_true`` holds values other than 0/1, ``y_score`` holds NaN or
        infinity, the lengths differ, an input is empty, or ``threshold`` is
        NaN.

    References
    ----------
    .. [1] Mireshghallah et al., "Quantifying Privacy Risks of Masked Language
       Models Using Membership Inference Attacks", EMNLP 2022 (recall and
       precision at a population threshold).

    Examples
    --------
    >>> m = metrics_at_threshold([1, 1, 0, 0], [3.0, 2.0, 2.0, 1.0], threshold=2.0)
    >>> m.tpr, m.fpr, m.precision, m.n_flagged
    (0.5, 0.0, 1.0, 1)
    """
    t = _check_threshold(threshold)
    labels, scores = check_pair(y_true, y_score)
    _warn_if_one_class(labels, "TPR or FPR at a threshold")
    return _metrics_from_checked(labels, scores, t, alpha)


def _warn_if_one_class(labels: np.ndarray, what: str) -> None:
    n_members = int(labels.sum())
    n_non_members = int(labels.size - n_members)
    if n_members == 0 or n_non_members == 0:
        warnings.warn(
            f"{what} is undefined: the pool has {n_members} members and {n_non_members} "
            f"non-members; the missing class's rate is nan",
            UndefinedMetricWarning,
            stacklevel=3,
        )


def population_threshold_metrics(
    y_true, y_score, population_scores, *, alphas: Iterable[float]
) -> tuple[ThresholdMetrics, ...]:
    """Metrics on the target pool at the population threshold of each alpha.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,), 0/1 or bool
        Membership labels of the target pool, 1 = member.
    y_score : array-like of shape (n_samples,), float
        Attack scores of the target pool, higher = more likely a member.
    population_scores : array-like of shape (n_population,), float
        Attack scores of the population set (disjoint from the pool).
    alphas : iterable of float in (0, 1)
        Target FPRs, e.g. ``(0.1, 0.01, 0.001)``.

    Returns
    -------
    tuple of ThresholdMetrics
        One entry per alpha, in the order given; each threshold comes from
        :func:`population_threshold`.

    Raises
    ------
    ValueError
        As :func:`population_threshold` (including a population set too small
        for one of the alphas) and :func:`metrics_at_threshold`, or if
        ``alphas`` is empty.

    References
    ----------
    .. [1] Mireshghallah et al., "Quantifying Privacy Risks of Masked Language
       Models Using Membership Inference Attacks", EMNLP 2022, Sec. 4.

    Examples
    --------
    >>> pop = [float(i) for i in range(10)]
    >>> (m,) = population_threshold_metrics([1, 1, 0, 0], [9.5, 8.5, 7.0, 8.5],
    ...                                     pop, alphas=[0.1])
    >>> m.threshold, m.tpr, m.fpr, m.precision
    (8.0, 1.0, 0.5, 0.6666666666666666)
    """
    alphas = tuple(check_rate(a, "alphas", low_closed=False, high_closed=False) for a in alphas)
    if not alphas:
        raise ValueError("alphas is empty; give at least one target FPR in (0, 1)")
    labels, scores = check_pair(y_true, y_score)
    sorted_pop = np.sort(check_scores(population_scores, "population_scores"))
    # Check every alpha before computing anything, so the error lists the problem up front.
    for a in alphas:
        _population_threshold(sorted_pop, a)
    _warn_if_one_class(labels, "TPR or FPR at a population threshold")
    return tuple(
        _metrics_from_checked(labels, scores, _population_threshold(sorted_pop, a), a) for a in alphas
    )


def mean_member_loss_threshold(y_true, y_score) -> float:
    """The loss baseline's mean-member-loss threshold (``mu`` of Jagannatha et al.): the mean score of the members.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,), 0/1 or bool
        Membership labels, 1 = member (a training sample of the target model).
    y_score : array-like of shape (n_samples,), float
        Attack scores, higher = more likely a member. For the loss attack the
        score is the negated loss (energy), so ``score > threshold`` is equivalent to
        ``loss < mean member loss``.

    Returns
    -------
    float
        Mean of ``y_score`` over the members; nan with an
        ``UndefinedMetricWarning`` if there is no member.

    Raises
    ------
    ValueError
        As :func:`metrics_at_threshold`.

    Notes
    -----
    Jagannatha et al. use the average loss over the target model's training
    set; here it is averaged over the members of the target pool (a sample of
    that training set). The threshold is chosen with member labels, so it is
    a baseline only, meaningful for the ``loss`` attack.

    References
    ----------
    .. [1] Jagannatha, Rawat and Yu, "Membership Inference Attack
       Susceptibility of Clinical Language Models", arXiv:2104.08305, 2021.
    .. [2] Mireshghallah et al., "Quantifying Privacy Risks of Masked Language
       Models Using Membership Inference Attacks", EMNLP 2022, Sec. 4.1.

    Examples
    --------
    >>> mean_member_loss_threshold([1, 1, 0], [-2.0, -4.0, -10.0])
    -3.0
    """
    labels, scores = check_pair(y_true, y_score)
    n_members = int(labels.sum())
    if n_members == 0:
        warn_one_class(n_members, int(labels.size), "The mean-member-loss threshold")
        return float("nan")
    members = scores[labels == 1]
    return float(np.sum(members / members.size))  # divided first: a mean of values near 1e308 does not overflow
