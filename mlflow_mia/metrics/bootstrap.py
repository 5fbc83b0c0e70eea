"""Stratified bootstrap confidence intervals over the target pool.

Pool rows are resampled by index, members and non-members separately, so the
class counts stay fixed, no resample holds a single class, and paired columns
(for example target and reference scores of one sample) stay paired.

References
----------
.. [1] B. Efron and R. J. Tibshirani, "An Introduction to the Bootstrap",
   Chapman & Hall, 1993 (percentile intervals, Ch. 13).
.. [2] F. Mireshghallah et al., "Quantifying Privacy Risks of Masked Language
   Models Using Membership Inference Attacks", EMNLP 2022.
.. [3] N. Carlini et al., "Membership Inference Attacks From First
   Principles", IEEE S&P 2022.
"""

from __future__ import annotations

import math
import numbers
from typing import Callable, Mapping

import numpy as np

from .roc import tpr_at_fpr
from .validation import check_pair, check_rate, warn_one_class

__all__ = ["bootstrap_ci", "tpr_at_fpr_statistic"]

Statistic = Callable[[np.ndarray, np.ndarray], float]


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
        ``tpr_at_fpr(y_true, y_score, alpha=alpha)``.

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

    statistic.__name__ = f"tpr_at_fpr_{alpha:g}"
    statistic.__qualname__ = statistic.__name__
    return statistic


def bootstrap_ci(
    y_true,
    y_score,
    *,
    statistics: Mapping[str, Statistic],
    rounds: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap confidence intervals, resampling the pool by class.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,), 0/1 or bool
        Membership labels of the target pool, 1 = member.
    y_score : array-like of shape (n_samples,), float
        Attack scores, higher = more likely a member. Must be finite.
    statistics : mapping of str to callable
        ``name -> f(y_true, y_score) -> float``, e.g.
        ``{"auc": auc_statistic, "tpr_at_alpha_0.01": tpr_at_fpr_statistic(0.01)}``
        (:func:`mlflow_mia.metrics.roc.auc_statistic`).
        Each callable receives resampled ``(n_samples,)`` int8 labels and
        float64 scores and must not modify them.
    rounds : int, default 1000
        Number of bootstrap resamples (>= 1).
    confidence : float in (0, 1), default 0.95
        Two-sided level of the percentile interval.
    seed : int, default 0
        Seed of ``np.random.default_rng``; equal seeds give equal intervals.

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
        As :func:`mlflow_mia.metrics.roc.roc` for the inputs; if
        ``statistics`` is empty or holds a non-callable; if ``rounds`` is not
        a positive int or ``confidence`` is not in (0, 1).

    Notes
    -----
    Each round draws ``n_members`` member rows and ``n_non_members``
    non-member rows with replacement (a stratified bootstrap), and every
    statistic is evaluated on the same draw. Resamples keep the pool's class
    balance, which the audit fixes by design.

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
    """
    labels, scores = check_pair(y_true, y_score)
    if not isinstance(statistics, Mapping) or not statistics:
        raise ValueError("statistics must be a non-empty mapping of name -> f(y_true, y_score)")
    for name, fn in statistics.items():
        if not callable(fn):
            raise ValueError(f"statistics[{name!r}] is not callable")
    if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 1:
        raise ValueError(f"rounds must be an int >= 1, got {rounds!r}")
    confidence = check_rate(confidence, "confidence", low_closed=False, high_closed=False)

    member_idx = np.flatnonzero(labels == 1)
    non_member_idx = np.flatnonzero(labels == 0)
    n1, n0 = member_idx.size, non_member_idx.size
    if n1 == 0 or n0 == 0:
        warn_one_class(n1, n0, "A bootstrap interval")
        return {name: (math.nan, math.nan) for name in statistics}

    rng = np.random.default_rng(seed)
    # Labels of every resample are the same: members first, then non-members.
    boot_labels = np.concatenate([np.ones(n1, dtype=np.int8), np.zeros(n0, dtype=np.int8)])
    boot_labels.setflags(write=False)
    values = {name: np.empty(int(rounds), dtype=np.float64) for name in statistics}
    for r in range(int(rounds)):
        idx = np.concatenate(
            [member_idx[rng.integers(0, n1, size=n1)], non_member_idx[rng.integers(0, n0, size=n0)]]
        )
        boot_scores = scores[idx]
        boot_scores.setflags(write=False)
        for name, fn in statistics.items():
            values[name][r] = float(fn(boot_labels, boot_scores))

    q = [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0]
    out: dict[str, tuple[float, float]] = {}
    for name, vals in values.items():
        if np.isnan(vals).any():
            out[name] = (math.nan, math.nan)
        else:
            low, high = np.quantile(vals, q)
            out[name] = (float(low), float(high))
    return out
