"""Exact binomial bounds: Clopper-Pearson, and a TPR at a fixed FPR bounded with its threshold's uncertainty.

A "TPR at FPR alpha" is read at a threshold that is itself estimated from the
non-members' scores. A bound on the member side alone (Clopper-Pearson on the
members caught at the estimated threshold) treats that threshold as known and is
too narrow: with 500 non-members the threshold of FPR 0.01 is the 5th highest
non-member score, and it moves a lot from pool to pool. :func:`tpr_bounds_at_fpr`
bounds both sides, each at level ``1 - beta / 2`` (Bonferroni, so the pair holds
at ``1 - beta``):

- **upper bound**: the highest threshold ``t_U`` whose false-positive rate is
  ``>= alpha`` with confidence ``1 - beta / 2`` (the Clopper-Pearson *lower*
  bound of the non-members flagged at ``t_U`` is ``>= alpha``). Then the true
  threshold of FPR alpha lies above ``t_U``, so ``TPR(alpha) <= TPR(t_U)``, and
  the Clopper-Pearson *upper* bound of the members flagged at ``t_U`` bounds it.
- **lower bound**: the lowest threshold ``t_L`` whose false-positive rate is
  ``<= alpha`` with confidence ``1 - beta / 2`` (the Clopper-Pearson *upper*
  bound of the non-members flagged is ``<= alpha``); the Clopper-Pearson *lower*
  bound of the members flagged at ``t_L`` bounds ``TPR(alpha)`` from below.

With independent samples this is exact and distribution-free: the non-member
count above the k-th largest non-member score is an order statistic whose
false-positive rate is Beta(k, n - k + 1) distributed, the dual of the binomial
tail the Clopper-Pearson bound inverts, and the member counts are independent of
the threshold chosen from the non-members.

When membership was decided per group (article, user), the rates stay sample rates
(a member group of ``n_i`` samples weighs ``n_i``) and the groups are the trials:

- **non-members**: one trial per non-member group (``fpr * n_groups`` of
  ``n_groups``, fractional counts through the Beta quantile).
- **members**: Kish's effective number of units,
  ``n_eff = (sum_i n_i) ** 2 / sum_i n_i ** 2`` over the member groups' sizes
  (:func:`kish_effective_units`), rounded down to a whole number of trials
  (fewer trials, a wider bound), with ``tpr * n_eff`` successes (fractional). It
  equals the group count for groups of equal size and the sample count without
  groups. The reason: when a group's samples are all caught or all missed (an
  intra-class correlation of 1), the sample TPR is ``sum_i n_i c_i / sum_i n_i`` for
  independent group indicators ``c_i`` of rate ``p``, whose variance
  ``p (1 - p) sum_i n_i ** 2 / (sum_i n_i) ** 2 = p (1 - p) / n_eff`` is that of a
  binomial rate over ``n_eff`` trials (Kish's design effect of unequal weights,
  ``deff = n sum w ** 2 / (sum w) ** 2``); a within-group correlation below 1 only
  lowers it. Counting each member group as one trial instead let audits with skewed
  group sizes pass too often: with 300 member articles of log-normal sizes, 20,000
  non-members and a true TPR at the budget, the gate passed 7.7 % of audits at an
  intra-class correlation (ICC) of 0.99 and 6.3 % at 0.95 (security review, item 6),
  and about 10 % in ``benchmarks/gate_calibration.py --skewed`` (sizes
  ``round(5 exp(N(0, 1.5)))``, ICC 0.99).

With groups the member bound is an approximation, not exact: the weighted count
is not binomial (one large group moves the rate by ``n_i / sum n`` at once), so the
Clopper-Pearson bound over ``n_eff`` trials matches its variance, not its whole
distribution. Its coverage is measured, not proven: ``benchmarks/gate_calibration.py
--skewed`` simulates the case above and reports the pass rate at the budget, and
``tests/metrics/test_release_gate.py`` repeats a smaller version. The release gate
takes the larger of this bound and the cluster bootstrap's, but the bootstrap does
not make up for a bound that counts too many trials: with one trial per article,
the gate passed the skewed audits above at the budget as often as said, bootstrap
included.

References
----------
.. [1] C. J. Clopper and E. S. Pearson, "The use of confidence or fiducial limits
   illustrated in the case of the binomial", Biometrika 26(4), 1934.
.. [2] H. A. David and H. N. Nagaraja, "Order Statistics", 3rd ed., Wiley 2003,
   Sec. 7.2 (distribution-free confidence intervals for quantiles).
.. [3] N. Carlini et al., "Membership Inference Attacks From First Principles",
   IEEE S&P 2022 (TPR at a fixed low FPR).
.. [4] L. Kish, "Survey Sampling", Wiley 1965 (the design effect of cluster samples
   and of unequal weights).
.. [5] L. Kish, "Weighting for unequal P_i", Journal of Official Statistics 8(2),
   183-200, 1992 (``deff = n sum w ** 2 / (sum w) ** 2``, the effective sample size
   ``(sum w) ** 2 / sum w ** 2``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

from .resampling import units_of_rows
from .roc import roc
from .validation import check_pair, check_rate

__all__ = ["kish_effective_units", "tpr_bounds_at_fpr"]


def check_counts(k, n, what: str, *, whole: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(k, n)`` as broadcast arrays, checked: ``n >= 1``, ``0 <= k <= n``, whole numbers unless ``whole=False``.

    Raises
    ------
    ValueError
        A count that is not a whole number (with ``whole``), ``n < 1``, or ``k`` outside ``[0, n]``.
    """
    k_arr, n_arr = np.asarray(k), np.asarray(n)
    for name, arr in ((f"{what} count", k_arr), (f"{what} trials", n_arr)):
        if not whole and arr.dtype.kind in "iuf":
            continue
        if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(arr == np.round(arr))):
            raise ValueError(f"{name} must hold whole numbers, got {arr!r}")
    dtype = np.int64 if whole else np.float64
    k_arr, n_arr = np.broadcast_arrays(k_arr.astype(dtype), n_arr.astype(dtype))
    if np.any(n_arr < 1):
        raise ValueError(f"{what}: the number of trials must be >= 1, got {n_arr!r}")
    if np.any((k_arr < 0) | (k_arr > n_arr)):
        raise ValueError(f"{what}: counts must lie in [0, trials], got {k_arr!r} of {n_arr!r}")
    return k_arr, n_arr


def clopper_pearson_upper(k, n, *, confidence: float = 0.95, whole: bool = True):
    """One-sided Clopper-Pearson upper confidence bound on a binomial rate.

    Parameters
    ----------
    k : int or array-like of int
        Observed events (e.g. false positives), ``0 <= k <= n``.
    n : int or array-like of int
        Trials (e.g. non-members), ``n >= 1``; broadcast against ``k``.
    confidence : float in (0, 1), default 0.95
        One-sided level: ``P(rate <= bound) >= confidence`` for every true rate.
    whole : bool, default True
        Require whole counts. False lets ``k`` and ``n`` be fractional (the Beta
        quantile interpolates between counts): for effective counts of groups and for
        solving the pool size at which the bound reaches a budget (:func:`members_needed`).

    Returns
    -------
    float or ndarray of float
        ``beta.ppf(confidence, k + 1, n - k)`` (the exact bound), and 1.0 where
        ``k == n``. A float for scalar inputs. Always > 0, also for ``k = 0``
        (then ``1 - (1 - confidence) ** (1 / n)``).

    Raises
    ------
    ValueError
        If ``confidence`` is not in (0, 1), a count is not a whole number,
        ``n < 1`` or ``k`` lies outside ``[0, n]``.

    Notes
    -----
    The same as ``scipy.stats.binomtest(k, n, alternative="less").proportion_ci(
    confidence_level=confidence, method="exact").high``.

    References
    ----------
    .. [1] Clopper and Pearson, Biometrika 26(4), 1934.

    Examples
    --------
    >>> round(clopper_pearson_upper(0, 10, confidence=0.95), 6)
    0.258866
    >>> clopper_pearson_upper(10, 10)
    1.0
    """
    confidence = check_rate(confidence, "confidence", low_closed=False, high_closed=False)
    k_arr, n_arr = check_counts(k, n, "clopper_pearson_upper", whole=whole)
    full = k_arr >= n_arr
    # Shape parameters must be > 0: put a placeholder where k == n (answer 1.0 there).
    upper = np.where(full, 1.0, beta.ppf(confidence, k_arr + 1, np.where(full, 1, n_arr - k_arr)))
    return float(upper) if upper.ndim == 0 else upper


def clopper_pearson_lower(k, n, *, confidence: float = 0.95, whole: bool = True):
    """One-sided Clopper-Pearson lower confidence bound on a binomial rate.

    Parameters
    ----------
    k, n, confidence, whole
        As :func:`clopper_pearson_upper`.

    Returns
    -------
    float or ndarray of float
        ``beta.ppf(1 - confidence, k, n - k + 1)``, and 0.0 where ``k == 0``.
        Equals ``1 - clopper_pearson_upper(n - k, n)``.

    Raises
    ------
    ValueError
        As :func:`clopper_pearson_upper`.

    Examples
    --------
    >>> clopper_pearson_lower(0, 10)
    0.0
    >>> round(clopper_pearson_lower(10, 10, confidence=0.95), 6)
    0.741134
    """
    confidence = check_rate(confidence, "confidence", low_closed=False, high_closed=False)
    k_arr, n_arr = check_counts(k, n, "clopper_pearson_lower", whole=whole)
    none = k_arr <= 0
    lower = np.where(none, 0.0, beta.ppf(1.0 - confidence, np.where(none, 1, k_arr), n_arr - k_arr + 1))
    return float(lower) if lower.ndim == 0 else lower


def per_side_confidence(confidence: float) -> float:
    """Level of each of two one-sided bounds that hold together at ``confidence`` (Bonferroni).

    >>> per_side_confidence(0.95)
    0.975
    """
    confidence = check_rate(confidence, "confidence", low_closed=False, high_closed=False)
    return 1.0 - (1.0 - confidence) / 2.0


def kish_effective_units(sizes) -> float:
    """Kish's effective number of units of a cluster sample: ``(sum n_i) ** 2 / sum n_i ** 2``.

    Parameters
    ----------
    sizes : array-like of shape (n_units,), int
        Samples per unit (e.g. per member article), each >= 1.

    Returns
    -------
    float
        In ``[1, n_units]``: ``n_units`` exactly when all sizes are equal, less the
        more skewed they are (``n_units / deff`` with Kish's design effect of unequal
        weights ``deff = n_units * sum n_i ** 2 / (sum n_i) ** 2``). Computed in whole
        numbers, so equal sizes give the unit count exactly.

    Raises
    ------
    ValueError
        No units, or a size that is not a whole number >= 1.

    Notes
    -----
    :func:`tpr_bounds_at_fpr` takes it, rounded down, as the trials of the member
    bound when membership was decided per group: at an intra-class correlation of 1
    the size-weighted rate of ``n_units`` groups has the variance of a binomial rate
    over this many trials.

    References
    ----------
    .. [1] L. Kish, "Survey Sampling", Wiley 1965.
    .. [2] L. Kish, "Weighting for unequal P_i", Journal of Official Statistics 8(2),
       183-200, 1992.

    Examples
    --------
    >>> kish_effective_units([5, 5, 5, 5])
    4.0
    >>> kish_effective_units([1, 1, 1, 9])   # 12 ** 2 / 84: one large article dominates
    1.7142857142857142
    """
    s1, s2 = _size_sums(sizes)
    return s1 * s1 / s2


def _size_sums(sizes) -> tuple[int, int]:
    """``(sum n_i, sum n_i ** 2)`` as Python ints, the sizes checked."""
    arr = np.asarray(sizes)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"sizes must be a non-empty 1-d array of unit sizes, got shape {arr.shape}")
    if arr.dtype.kind not in "iuf" or np.any(arr != np.round(arr)) or np.any(arr < 1):
        raise ValueError(f"unit sizes must be whole numbers >= 1, got {arr!r}")
    arr = arr.astype(np.int64)
    return int(arr.sum()), int(np.dot(arr, arr))


def _member_trials(sizes) -> int:
    """``floor(kish_effective_units(sizes))``, exactly (integer division): the member bound's trials."""
    s1, s2 = _size_sums(sizes)
    return max(1, (s1 * s1) // s2)


@dataclass(frozen=True)
class TprBounds:
    """One-sided bounds on the TPR at FPR ``alpha`` that include the threshold's uncertainty.

    Attributes
    ----------
    alpha : float
        The false-positive rate.
    lower, upper : float
        Each a one-sided bound at ``confidence`` (the two sides of each at
        ``per_side_confidence(confidence)``).
    upper_fpr, upper_tpr : float
        The pool's observed FPR and TPR at the threshold the upper bound is read at
        (``upper_fpr >= alpha``; ``upper_tpr`` is what any number of members would
        bring the upper bound down to). ``nan`` when no threshold qualifies (then
        ``upper = 1``: too few non-members to place one).
    lower_fpr, lower_tpr : float
        The same at the threshold the lower bound is read at (``lower_fpr <= alpha``).
    n_member_units, n_non_member_units : int
        Units per class: samples, or groups when groups were given. The non-member
        units are the trials of the non-member bound.
    n_member_trials : int
        Trials of the member bound: Kish's effective number of member units, rounded
        down (:func:`kish_effective_units`); ``n_member_units`` for samples or for
        groups of equal size, fewer for groups of unequal size.
    confidence : float
    """

    alpha: float
    lower: float
    upper: float
    upper_fpr: float
    upper_tpr: float
    lower_fpr: float
    lower_tpr: float
    n_member_units: int
    n_non_member_units: int
    n_member_trials: int
    confidence: float


def tpr_bounds_at_fpr(y_true, y_score, *, alpha: float, confidence: float = 0.95, groups=None) -> TprBounds:
    """Lower and upper confidence bounds on the TPR at FPR ``alpha``, the threshold's noise included.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,), 0/1
        1 = member.
    y_score : array-like of shape (n_samples,), float
        Attack scores, higher = member; finite.
    alpha : float in (0, 1)
        False-positive rate.
    confidence : float in (0, 1), default 0.95
        Level of each one-sided bound; each of its two sides (non-members, members)
        is taken at ``1 - (1 - confidence) / 2``.
    groups : array-like of shape (n_samples,), optional
        Group of each sample when membership was decided per group: the non-member
        groups are the trials of the non-member side, Kish's effective number of
        member groups (rounded down) those of the member side (see the module
        docstring).

    Returns
    -------
    TprBounds
        ``upper = 1`` when no threshold's FPR is ``>= alpha`` with confidence;
        ``lower = 0`` when no threshold's FPR is ``<= alpha`` with confidence: fewer
        than ``log(beta / 2) / log(1 - alpha)`` non-member units, ``beta = 1 -
        confidence`` (368 at alpha 0.01 and confidence 0.95; about
        ``log(2 / beta) / alpha``).

    Raises
    ------
    ValueError
        Invalid scores or labels (:func:`~mlflow_mia.metrics.roc.roc`), a pool
        without members or non-members, ``alpha`` or ``confidence`` outside (0, 1).

    Examples
    --------
    >>> y = [1] * 3 + [0] * 200
    >>> s = list(range(3)) + list(range(10, 210))  # no member above any non-member
    >>> b = tpr_bounds_at_fpr(y, s, alpha=0.01)
    >>> b.lower, round(b.upper, 3)   # 0 of 3 caught; Clopper-Pearson at 97.5 %
    (0.0, 0.708)
    """
    alpha = check_rate(alpha, "alpha", low_closed=False, high_closed=False)
    side = per_side_confidence(confidence)
    labels, scores = check_pair(y_true, y_score)
    unit_of_row, unit_labels = units_of_rows(labels, groups, why="the bound counts groups as trials")
    g1 = int(unit_labels.sum())
    g0 = int(unit_labels.size) - g1
    if g1 == 0 or g0 == 0:
        raise ValueError(f"bounds on a TPR need members and non-members; the pool has {g1} member and {g0} "
                         "non-member units")
    # Member trials: Kish's effective number of member units (the unit count for samples or equal sizes).
    t1 = g1 if groups is None else _member_trials(np.bincount(unit_of_row)[unit_labels == 1])
    curve = roc(labels, scores)
    fpr, tpr = curve.fpr, curve.tpr
    # Upper bound: the first point (highest threshold) whose FPR is >= alpha with confidence.
    fpr_low = clopper_pearson_lower(np.minimum(fpr * g0, g0), g0, confidence=side, whole=False)
    ok = np.flatnonzero(fpr_low >= alpha)
    if ok.size:
        i = ok[0]
        upper = clopper_pearson_upper(min(tpr[i] * t1, t1), t1, confidence=side, whole=False)
        upper_fpr, upper_tpr = float(fpr[i]), float(tpr[i])
    else:
        upper, upper_fpr, upper_tpr = 1.0, math.nan, math.nan
    # Lower bound: the last point (lowest threshold) whose FPR is <= alpha with confidence.
    fpr_high = clopper_pearson_upper(np.minimum(fpr * g0, g0), g0, confidence=side, whole=False)
    ok = np.flatnonzero(fpr_high <= alpha)
    if ok.size:
        j = ok[-1]
        lower = clopper_pearson_lower(min(tpr[j] * t1, t1), t1, confidence=side, whole=False)
        lower_fpr, lower_tpr = float(fpr[j]), float(tpr[j])
    else:
        lower, lower_fpr, lower_tpr = 0.0, math.nan, math.nan
    return TprBounds(alpha=alpha, lower=float(lower), upper=float(upper), upper_fpr=upper_fpr, upper_tpr=upper_tpr,
                     lower_fpr=lower_fpr, lower_tpr=lower_tpr, n_member_units=g1, n_non_member_units=g0,
                     n_member_trials=t1, confidence=float(confidence))


def members_needed(tpr: float, max_tpr: float, confidence: float, *, limit: int = 10**9) -> int | None:
    """Smallest number of member units whose Clopper-Pearson bound at an observed rate is <= ``max_tpr``.

    Solves ``clopper_pearson_upper(tpr * n, n, confidence=confidence, whole=False) <= max_tpr`` for the
    integer ``n`` (``k = tpr * n`` kept fractional, so the bound falls smoothly in n).

    Parameters
    ----------
    tpr : float
        The observed rate (for the gate: the TPR at the threshold its upper bound is read at).
    max_tpr : float
        The budget.
    confidence : float in (0, 1)
        Level of the member-side bound.
    limit : int
        Largest pool searched.

    Returns
    -------
    int or None
        None when no pool up to ``limit`` gets there (``tpr >= max_tpr``: the bound
        never drops under the observed rate).

    Examples
    --------
    >>> members_needed(0.0, 0.5, 0.975)   # 0 of n caught: 1 - 0.025 ** (1 / n) <= 0.5 from n = 6
    6
    """
    if not tpr < max_tpr:
        return None

    def ok(n: int) -> bool:
        return clopper_pearson_upper(tpr * n, n, confidence=confidence, whole=False) <= max_tpr

    high = 1
    while not ok(high):
        high *= 2
        if high > limit:
            return None
    low = high // 2  # not ok (or 0)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if ok(mid) else (mid, high)
    return high
