"""Empirical lower bound on the differential-privacy epsilon of a training run.

Any training algorithm that is (eps, delta)-differentially private bounds every
membership test built on its output: at any decision threshold, the
false-positive rate FPR and the false-negative rate FNR of the test satisfy

    FPR + exp(eps) * FNR >= 1 - delta   and   FNR + exp(eps) * FPR >= 1 - delta

(Kairouz et al. 2015, Thm. 2.1; used for auditing by Jagielski et al. 2020,
Sec. 3, and Nasr et al. 2021). An attack with rates (FPR, FNR) therefore proves

    eps >= max(0, log((1 - delta - FPR) / FNR), log((1 - delta - FNR) / FPR)).

This module turns the counts of an attack at the population thresholds
(:class:`~mlflow_mia.metrics.thresholds.ThresholdMetrics`) into that bound,
once with one-sided Clopper-Pearson upper bounds on FPR and FNR (the
conservative bound, valid at a stated confidence) and once with the observed
rates (the point bound, no confidence attached). A small value is not a
privacy guarantee: it only says what this attack could prove.

The bound is about the unit whose inclusion in training was randomised: each
member and non-member is one trial. When membership was decided per article or
user, the trials are the groups (scores aggregated per group), and the bound is
on group-level epsilon; sample-level trials then bound group-level epsilon at
best, and only independently included records (e.g. canaries) give a
record-level bound. With ``n`` trials per class no outcome can certify more than
about ``log(n / log(1 / beta'))`` (:func:`max_certifiable_epsilon`), so a check
"bound <= accountant's epsilon" cannot fail when that ceiling is below the
accountant's epsilon. A DP check compares like with like: a group-level bound
against the record-level guarantee converted to groups (:func:`group_privacy`).

References
----------
.. [1] M. Jagielski, J. Ullman and A. Oprea, "Auditing Differentially Private
   Machine Learning: How Private is Private SGD?", NeurIPS 2020, Sec. 3 and
   Algorithm 2.
.. [2] M. Nasr, S. Song, A. Thakurta, N. Papernot and N. Carlini, "Adversary
   Instantiation: Lower Bounds for Differentially Private Machine Learning",
   IEEE S&P 2021.
.. [3] P. Kairouz, S. Oh and P. Viswanath, "The Composition Theorem for
   Differential Privacy", ICML 2015.
.. [4] C. J. Clopper and E. S. Pearson, "The use of confidence or fiducial
   limits illustrated in the case of the binomial", Biometrika 26(4), 1934.
.. [5] C. Dwork and A. Roth, "The Algorithmic Foundations of Differential
   Privacy", Foundations and Trends in Theoretical Computer Science 9(3-4),
   2014, Sec. 2.3, Theorem 2.2 (group privacy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .binomial import check_counts, clopper_pearson_upper
from .validation import check_rate
from .thresholds import ThresholdMetrics

__all__ = ["EpsilonLowerBound", "epsilon_lower_bound", "epsilon_lower_bound_from_counts", "max_certifiable_epsilon"]

#: Default delta of the (eps, delta) guarantee tested against.
DEFAULT_DELTA = 1e-5


def _log_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """log(num / den) where num > 0 (+inf when den == 0), else 0 (the inequality is vacuous)."""
    out = np.zeros(np.broadcast(num, den).shape)
    num, den = np.broadcast_arrays(num, den)
    pos = num > 0
    with np.errstate(divide="ignore"):
        out[pos] = np.log(num[pos]) - np.log(den[pos])
    return out


def epsilon_from_rates(fpr, fnr, *, delta: float = DEFAULT_DELTA):
    """The smallest epsilon compatible with rates ``(fpr, fnr)`` under (eps, delta)-DP.

    Parameters
    ----------
    fpr : float or array-like of float in [0, 1]
        False-positive rate (non-members flagged / non-members).
    fnr : float or array-like of float in [0, 1]
        False-negative rate (members not flagged / members); broadcast with ``fpr``.
    delta : float in [0, 1), default 1e-5
        The delta of the guarantee tested against.

    Returns
    -------
    float or ndarray of float
        ``max(0, log((1 - delta - fpr) / fnr), log((1 - delta - fnr) / fpr))``,
        elementwise, in nats (the unit of epsilon). A term whose numerator is
        ``<= 0`` proves nothing and counts as 0. A zero rate under a positive
        numerator gives ``+inf``: no finite epsilon allows an error-free test.
        A float for scalar inputs.

    Raises
    ------
    ValueError
        If a rate is NaN or outside [0, 1], or ``delta`` is outside [0, 1).

    References
    ----------
    .. [1] Jagielski, Ullman and Oprea, NeurIPS 2020, Sec. 3 (from Kairouz et
       al. 2015, Thm. 2.1).

    Examples
    --------
    >>> round(epsilon_from_rates(0.01, 0.5, delta=0.0), 4)  # log(0.5 / 0.01)
    3.912
    >>> epsilon_from_rates(0.3, 0.7)  # TPR = FPR: nothing proved
    0.0
    """
    delta = check_rate(delta, "delta", low_closed=True, high_closed=False)
    fpr_arr, fnr_arr = np.asarray(fpr, dtype=float), np.asarray(fnr, dtype=float)
    for name, arr in (("fpr", fpr_arr), ("fnr", fnr_arr)):
        if np.any(np.isnan(arr)) or np.any((arr < 0) | (arr > 1)):
            raise ValueError(f"{name} must hold rates in [0, 1] (no NaN), got {arr!r}")
    eps = np.maximum(_log_ratio(1.0 - delta - fpr_arr, fnr_arr), _log_ratio(1.0 - delta - fnr_arr, fpr_arr))
    eps = np.maximum(eps, 0.0)
    return float(eps) if eps.ndim == 0 else eps


@dataclass(frozen=True)
class EpsilonLowerBound:
    """Epsilon lower bounds of one attack over several thresholds.

    Attributes
    ----------
    epsilon : float
        Conservative bound: the maximum over thresholds of
        :func:`epsilon_from_rates` at the Clopper-Pearson upper bounds
        ``fpr_upper`` and ``fnr_upper``. Finite. Holds with probability at
        least ``confidence`` (see :func:`epsilon_lower_bound_from_counts`).
    epsilon_point : float
        The same with the observed rates (a point estimate, no confidence);
        ``+inf`` where a threshold makes no error of one kind.
    alpha : float
        Population FPR of the threshold that gives ``epsilon`` (the first one
        on ties); nan when ``epsilon`` is 0.
    delta : float
        Delta of the guarantee tested against.
    confidence : float
        Family-wise confidence of ``epsilon``.
    bound_confidence : float
        One-sided level of each Clopper-Pearson bound,
        ``1 - (1 - confidence) / (2 * n_thresholds)``.
    alphas, fpr, fnr, fpr_upper, fnr_upper, epsilons, epsilons_point : tuple of float
        Per threshold, in the order given: population FPR, observed FPR and
        FNR on the pool, their upper bounds, and the two bounds.
    max_certifiable : float
        The largest ``epsilon`` these trial counts could give at this
        confidence and number of thresholds, whatever the attack
        (:func:`max_certifiable_epsilon`).
    n_members, n_non_members : int
        Trials per class: members and non-members of the pool at the level used
        (samples, or groups at user level).
    """

    epsilon: float
    epsilon_point: float
    alpha: float
    delta: float
    confidence: float
    bound_confidence: float
    alphas: tuple
    fpr: tuple
    fnr: tuple
    fpr_upper: tuple
    fnr_upper: tuple
    epsilons: tuple
    epsilons_point: tuple
    max_certifiable: float = math.nan
    n_members: int = 0
    n_non_members: int = 0


def epsilon_lower_bound_from_counts(tp, fp, *, n_members: int, n_non_members: int, delta: float = DEFAULT_DELTA,
                                    confidence: float = 0.95, alphas=None) -> EpsilonLowerBound:
    """Empirical epsilon lower bound from an attack's counts at fixed thresholds.

    Parameters
    ----------
    tp : int or array-like of int, shape (n_thresholds,)
        Members flagged at each threshold (true positives).
    fp : int or array-like of int, shape (n_thresholds,)
        Non-members flagged at each threshold (false positives).
    n_members, n_non_members : int
        Members and non-members of the pool (each >= 1).
    delta : float in [0, 1), default 1e-5
        Delta of the (eps, delta) guarantee tested against.
    confidence : float in (0, 1), default 0.95
        Family-wise confidence of the conservative bound.
    alphas : array-like of float, shape (n_thresholds,), optional
        Population FPRs of the thresholds, stored in the result (default nan).

    Returns
    -------
    EpsilonLowerBound
        ``epsilon`` is the maximum over thresholds of
        ``epsilon_from_rates(FPR_ub, FNR_ub)`` where ``FPR_ub`` bounds
        ``fp / n_non_members`` and ``FNR_ub`` bounds
        ``(n_members - tp) / n_members`` from above; ``epsilon_point`` the
        maximum of ``epsilon_from_rates(FPR, FNR)`` at the observed rates.

    Raises
    ------
    ValueError
        Empty or mismatched counts, counts outside ``[0, n]``, a class with no
        sample, or ``delta`` / ``confidence`` out of range.

    Notes
    -----
    Each of the ``2 * n_thresholds`` one-sided bounds is taken at level
    ``1 - (1 - confidence) / (2 * n_thresholds)`` (Bonferroni). The bound is
    wrong only if some true rate exceeds its upper bound at some threshold, so
    the maximum over thresholds holds with probability >= ``confidence``.
    With one threshold this is Jagielski et al.'s Algorithm 2 (each rate
    bounded at ``1 - (1 - confidence) / 2``). Thresholds must be fixed without
    looking at the pool (population thresholds are).

    Each member and non-member is one trial of one trained model (Jagielski
    et al. count trials over separately trained models; Steinke, Nasr and
    Jagielski, NeurIPS 2023, show when a single run suffices: units included
    at random, independently). The bound is therefore on the epsilon of the
    unit whose inclusion was randomised: pass group counts (one trial per
    article or user) when membership was decided per group; sample counts
    then bound group-level epsilon at best (``docs/explanations/epsilon_lower_bound.md``).

    References
    ----------
    .. [1] Jagielski, Ullman and Oprea, NeurIPS 2020, Algorithm 2.
    .. [2] Nasr et al., IEEE S&P 2021.

    Examples
    --------
    >>> b = epsilon_lower_bound_from_counts([60], [1], n_members=100, n_non_members=100, delta=0.0)
    >>> round(b.epsilon_point, 4)  # log((1 - 0.40) / 0.01)
    4.0943
    >>> 0.0 < b.epsilon < b.epsilon_point
    True
    """
    delta = check_rate(delta, "delta", low_closed=True, high_closed=False)
    confidence = check_rate(confidence, "confidence", low_closed=False, high_closed=False)
    tp_arr, fp_arr = np.atleast_1d(np.asarray(tp)), np.atleast_1d(np.asarray(fp))
    if tp_arr.ndim != 1 or tp_arr.shape != fp_arr.shape or tp_arr.size == 0:
        raise ValueError(f"tp and fp must be non-empty 1-D arrays of one length, got shapes "
                         f"{tp_arr.shape} and {fp_arr.shape}")
    for name, n in (("n_members", n_members), ("n_non_members", n_non_members)):
        if isinstance(n, bool) or int(n) != n or n < 1:
            raise ValueError(f"{name} must be an int >= 1 (the pool needs both classes), got {n!r}")
    tp_arr, _ = check_counts(tp_arr, n_members, "true positive")
    fn_arr = n_members - tp_arr
    fp_arr, _ = check_counts(fp_arr, n_non_members, "false positive")
    alphas = np.full(tp_arr.shape, np.nan) if alphas is None else np.asarray(alphas, dtype=float)
    if alphas.shape != tp_arr.shape:
        raise ValueError(f"alphas has shape {alphas.shape}, the counts have {tp_arr.shape}")
    level = 1.0 - (1.0 - confidence) / (2 * tp_arr.size)
    fpr_ub = np.atleast_1d(clopper_pearson_upper(fp_arr, n_non_members, confidence=level))
    fnr_ub = np.atleast_1d(clopper_pearson_upper(fn_arr, n_members, confidence=level))
    fpr, fnr = fp_arr / n_non_members, fn_arr / n_members
    eps = np.atleast_1d(epsilon_from_rates(fpr_ub, fnr_ub, delta=delta))
    eps_point = np.atleast_1d(epsilon_from_rates(fpr, fnr, delta=delta))
    best = int(np.argmax(eps))
    as_tuple = lambda a: tuple(float(x) for x in a)  # noqa: E731
    ceiling = max_certifiable_epsilon(int(n_members), int(n_non_members), delta=delta, confidence=confidence,
                                      n_thresholds=tp_arr.size)
    return EpsilonLowerBound(
        epsilon=float(eps[best]), epsilon_point=float(eps_point.max()),
        alpha=float(alphas[best]) if eps[best] > 0 else math.nan, delta=delta, confidence=confidence,
        bound_confidence=float(level), alphas=as_tuple(alphas), fpr=as_tuple(fpr), fnr=as_tuple(fnr),
        fpr_upper=as_tuple(fpr_ub), fnr_upper=as_tuple(fnr_ub), epsilons=as_tuple(eps),
        epsilons_point=as_tuple(eps_point), max_certifiable=ceiling, n_members=int(n_members),
        n_non_members=int(n_non_members))


def max_certifiable_epsilon(n_members: int, n_non_members: int, *, delta: float = DEFAULT_DELTA,
                            confidence: float = 0.95, n_thresholds: int = 1) -> float:
    """The largest conservative epsilon lower bound that these trial counts could certify.

    Parameters
    ----------
    n_members, n_non_members : int
        Trials per class (>= 1): members and non-members at the level used.
    delta : float in [0, 1), default 1e-5
    confidence : float in (0, 1), default 0.95
        Family-wise confidence of the bound.
    n_thresholds : int, default 1
        Thresholds the bound is maximised over (Bonferroni, as in
        :func:`epsilon_lower_bound_from_counts`).

    Returns
    -------
    float
        :func:`epsilon_from_rates` at the Clopper-Pearson upper bounds of a
        perfect attack (no false positive, no false negative), each at level
        ``1 - (1 - confidence) / (2 * n_thresholds)``. The bound falls with
        either count of errors, so no outcome certifies more. About
        ``log(n / log(1 / beta'))`` for ``n`` trials per class and
        ``beta' = (1 - confidence) / (2 * n_thresholds)``.

    Raises
    ------
    ValueError
        A count below 1, ``n_thresholds`` below 1, or ``delta`` /
        ``confidence`` out of range.

    Notes
    -----
    A comparison "empirical bound <= accountant's epsilon" cannot fail when
    this ceiling is below the accountant's epsilon: the check is vacuous.

    References
    ----------
    .. [1] Jagielski, Ullman and Oprea, NeurIPS 2020, Sec. 3.
    .. [2] Clopper and Pearson, Biometrika 26(4), 1934.

    Examples
    --------
    >>> round(max_certifiable_epsilon(985, 985, n_thresholds=3), 2)  # the demo's sentences
    5.32
    >>> round(max_certifiable_epsilon(100, 100, n_thresholds=2), 2)  # its articles
    3.11
    """
    delta = check_rate(delta, "delta", low_closed=True, high_closed=False)
    confidence = check_rate(confidence, "confidence", low_closed=False, high_closed=False)
    for name, n in (("n_members", n_members), ("n_non_members", n_non_members), ("n_thresholds", n_thresholds)):
        if isinstance(n, bool) or int(n) != n or n < 1:
            raise ValueError(f"{name} must be an int >= 1, got {n!r}")
    level = 1.0 - (1.0 - confidence) / (2 * int(n_thresholds))
    fpr_ub = clopper_pearson_upper(0, int(n_non_members), confidence=level)
    fnr_ub = clopper_pearson_upper(0, int(n_members), confidence=level)
    return epsilon_from_rates(fpr_ub, fnr_ub, delta=delta)


def epsilon_lower_bound(thresholds: Sequence[ThresholdMetrics], *, delta: float = DEFAULT_DELTA,
                        confidence: float = 0.95) -> EpsilonLowerBound:
    """Empirical epsilon lower bound of an attack at its population thresholds.

    Parameters
    ----------
    thresholds : sequence of ThresholdMetrics
        The attack's metrics at each population threshold (from
        :func:`~mlflow_mia.metrics.thresholds.population_threshold_metrics`),
        all on the same pool.
    delta : float in [0, 1), default 1e-5
    confidence : float in (0, 1), default 0.95
        Family-wise confidence of the conservative bound.

    Returns
    -------
    EpsilonLowerBound
        See :func:`epsilon_lower_bound_from_counts`.

    Raises
    ------
    ValueError
        No threshold, thresholds counted on different pools, or a pool
        without members or non-members.

    Examples
    --------
    >>> from mlflow_mia.metrics import population_threshold_metrics
    >>> pop = [float(i) for i in range(10)]
    >>> ms = population_threshold_metrics([1, 1, 1, 0, 0, 0], [12., 11., 10., 1., 2., 9.5], pop,
    ...                                   alphas=[0.1])
    >>> epsilon_lower_bound(ms, delta=0.0).epsilon_point
    inf
    """
    thresholds = tuple(thresholds)
    if not thresholds:
        raise ValueError("no threshold given; pass the metrics at the population thresholds")
    pools = {(t.n_members, t.n_non_members) for t in thresholds}
    if len(pools) > 1:
        raise ValueError(f"thresholds were counted on different pools (members, non-members): {sorted(pools)}")
    n_members, n_non_members = pools.pop()
    return epsilon_lower_bound_from_counts(
        [t.tp for t in thresholds], [t.fp for t in thresholds], n_members=n_members,
        n_non_members=n_non_members, delta=delta, confidence=confidence, alphas=[t.alpha for t in thresholds])
