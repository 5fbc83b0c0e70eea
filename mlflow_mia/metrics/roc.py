"""Exact ROC curve, AUC and TPR at a fixed FPR over the target pool.

Convention: ``y_true`` is 1 for a member and 0 for a non-member, and a higher
``y_score`` means "more likely a member". The curve is exact: one point per
distinct score (ties form a single step), never a threshold grid.

References
----------
.. [1] F. Mireshghallah, K. Goyal, A. Uniyal, T. Berg-Kirkpatrick and R. Shokri,
   "Quantifying Privacy Risks of Masked Language Models Using Membership
   Inference Attacks", EMNLP 2022.
.. [2] N. Carlini, S. Chien, M. Nasr, S. Song, A. Terzis and F. Tramer,
   "Membership Inference Attacks From First Principles", IEEE S&P 2022.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import roc_auc_score, roc_curve

__all__ = ["RocResult", "roc", "tpr_at_fpr", "tpr_at_fpr_from_roc"]


# ---------------------------------------------------------------------------
# Input validation shared by the metrics modules.
# ---------------------------------------------------------------------------


def _as_1d(x, name: str) -> np.ndarray:
    """Return ``x`` as a 1-D array (a view where possible, never modified)."""
    arr = np.asarray(x)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.ravel()
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D of shape (n_samples,), got shape {arr.shape}")
    return arr


def _check_scores(y_score, name: str = "y_score", *, allow_empty: bool = False) -> np.ndarray:
    """Validate a 1-D array of finite real scores and return it as float64."""
    arr = _as_1d(y_score, name)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if not allow_empty and arr.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(arr)):
        n_bad = int(np.count_nonzero(~np.isfinite(arr)))
        raise ValueError(f"{name} contains NaN or infinity ({n_bad} value(s)); scores must be finite")
    return arr


def _check_labels(y_true, name: str = "y_true", *, allow_empty: bool = False) -> np.ndarray:
    """Validate 0/1 membership labels (1 = member) and return them as int8."""
    arr = _as_1d(y_true, name)
    if not allow_empty and arr.size == 0:
        raise ValueError(f"{name} is empty")
    if arr.dtype == np.bool_:
        return arr.astype(np.int8)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name} must hold 0/1 labels (1 = member), got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinity; labels must be 0 (non-member) or 1 (member)")
    bad = (arr != 0) & (arr != 1)
    if np.any(bad):
        found = np.unique(arr[bad])[:5].tolist()
        raise ValueError(
            f"{name} must hold 0/1 labels (1 = member, 0 = non-member), found other values {found}"
        )
    return arr.astype(np.int8)


def _check_pair(y_true, y_score, *, allow_empty: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Validate labels and scores together (same length, finite, 0/1)."""
    labels = _check_labels(y_true, allow_empty=allow_empty)
    scores = _check_scores(y_score, allow_empty=allow_empty)
    if labels.shape[0] != scores.shape[0]:
        raise ValueError(
            f"y_true and y_score have inconsistent lengths: {labels.shape[0]} != {scores.shape[0]}"
        )
    return labels, scores


def _check_rate(value, name: str, *, low_closed: bool, high_closed: bool) -> float:
    """Validate a rate in [0, 1] with the given open/closed ends."""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}") from None
    ok_low = rate >= 0.0 if low_closed else rate > 0.0
    ok_high = rate <= 1.0 if high_closed else rate < 1.0
    if math.isnan(rate) or not (ok_low and ok_high):
        interval = ("[" if low_closed else "(") + "0, 1" + ("]" if high_closed else ")")
        raise ValueError(f"{name} must be in {interval}, got {value!r}")
    return rate


def _warn_one_class(n_members: int, n_non_members: int, what: str) -> None:
    missing = "members (label 1)" if n_members == 0 else "non-members (label 0)"
    warnings.warn(
        f"{what} is undefined: the pool has no {missing} "
        f"({n_members} members, {n_non_members} non-members); returning nan",
        UndefinedMetricWarning,
        stacklevel=3,
    )


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RocResult:
    """An exact ROC curve over the target pool, and its AUC.

    Attributes
    ----------
    fpr : ndarray of shape (n_thresholds,), dtype float64
        Non-decreasing false-positive rates; ``fpr[i]`` is the fraction of
        non-members with ``score >= thresholds[i]``. ``fpr[0] == 0``.
    tpr : ndarray of shape (n_thresholds,), dtype float64
        Non-decreasing true-positive rates (recall on members), same indexing.
        ``tpr[0] == 0``.
    thresholds : ndarray of shape (n_thresholds,), dtype float64
        Decreasing thresholds: ``thresholds[0] = inf`` (nothing flagged, the
        point (0, 0)), then one entry per distinct score, so
        ``n_thresholds = n_distinct_scores + 1``.
    auc : float
        Area under the curve, i.e. P(score of a member > score of a non-member)
        + 1/2 P(equal); nan when the pool holds one class only.
    """

    fpr: np.ndarray
    tpr: np.ndarray
    thresholds: np.ndarray
    auc: float


def roc(y_true, y_score) -> RocResult:
    """Exact ROC curve and AUC of an attack over the target pool.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,), 0/1 or bool
        Membership labels: 1 = member (in the target model's training data),
        0 = non-member.
    y_score : array-like of shape (n_samples,), float
        Attack scores, higher = more likely a member. Must be finite.

    Returns
    -------
    RocResult
        The full curve (one point per distinct score, starting at (0, 0),
        increasing FPR) and the exact AUC with ties counted as 1/2. With one
        class in the pool the rate of the missing class is nan throughout, the
        AUC is nan and an ``UndefinedMetricWarning`` is emitted.

    Raises
    ------
    ValueError
        If ``y_true`` holds values other than 0/1, if ``y_score`` holds NaN or
        infinity, if either is empty or not 1-D, or if their lengths differ.

    See Also
    --------
    tpr_at_fpr : TPR at a fixed FPR read off this curve.

    Notes
    -----
    Computed with ``sklearn.metrics.roc_curve(..., drop_intermediate=False)``
    (a stable descending sort with cumulative counts, so each tie is a single
    step) and ``sklearn.metrics.roc_auc_score``. The label convention is fixed
    (no ``pos_label`` inference).

    References
    ----------
    .. [1] Mireshghallah et al., "Quantifying Privacy Risks of Masked Language
       Models Using Membership Inference Attacks", EMNLP 2022, Sec. 4 (AUC).
    .. [2] Carlini et al., "Membership Inference Attacks From First
       Principles", IEEE S&P 2022 (ROC curves on log axes).

    Examples
    --------
    >>> r = roc([1, 1, 0, 0], [0.9, 0.5, 0.5, 0.1])
    >>> r.fpr.tolist(), r.tpr.tolist()
    ([0.0, 0.0, 0.5, 1.0], [0.0, 0.5, 1.0, 1.0])
    >>> r.auc
    0.875
    """
    labels, scores = _check_pair(y_true, y_score)
    n_members = int(labels.sum())
    n_non_members = int(labels.size - n_members)
    with warnings.catch_warnings():
        # sklearn warns on its own for a single class; we emit one clearer warning.
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        fpr, tpr, thresholds = roc_curve(labels, scores, pos_label=1, drop_intermediate=False)
    if n_members == 0 or n_non_members == 0:
        _warn_one_class(n_members, n_non_members, "ROC AUC")
        auc = float("nan")
    else:
        auc = float(roc_auc_score(labels, scores))
    return RocResult(
        fpr=np.asarray(fpr, dtype=np.float64),
        tpr=np.asarray(tpr, dtype=np.float64),
        thresholds=np.asarray(thresholds, dtype=np.float64),
        auc=auc,
    )


def tpr_at_fpr_from_roc(roc_result: RocResult, alpha: float) -> float:
    """TPR at a fixed FPR, read off a precomputed exact ROC curve.

    Parameters
    ----------
    roc_result : RocResult
        Output of :func:`roc` (the full curve, not a thinned one).
    alpha : float in [0, 1]
        Target false-positive rate.

    Returns
    -------
    float
        The largest TPR among the curve's points with ``fpr <= alpha``; nan
        (with an ``UndefinedMetricWarning``) if the curve is undefined because
        the pool held one class only.

    Raises
    ------
    ValueError
        If ``alpha`` is outside [0, 1] or NaN.

    References
    ----------
    .. [1] Carlini et al., "Membership Inference Attacks From First
       Principles", IEEE S&P 2022, Sec. IV (TPR at low FPR).

    Examples
    --------
    >>> r = roc([1, 1, 0, 0], [0.9, 0.5, 0.5, 0.1])
    >>> tpr_at_fpr_from_roc(r, 0.0), tpr_at_fpr_from_roc(r, 0.5)
    (0.5, 1.0)
    """
    alpha = _check_rate(alpha, "alpha", low_closed=True, high_closed=True)
    fpr = np.asarray(roc_result.fpr, dtype=np.float64)
    tpr = np.asarray(roc_result.tpr, dtype=np.float64)
    if fpr.size == 0 or np.isnan(fpr).any() or np.isnan(tpr).any():
        warnings.warn(
            "TPR at fixed FPR is undefined: the ROC curve comes from a pool with one class "
            "only; returning nan",
            UndefinedMetricWarning,
            stacklevel=2,
        )
        return float("nan")
    ok = fpr <= alpha
    # fpr[0] == 0 <= alpha, so ``ok`` always holds at least the point (0, 0).
    return float(np.max(tpr[ok]))


def tpr_at_fpr(y_true, y_score, *, alpha: float) -> float:
    """TPR at a fixed FPR over the target pool (Carlini et al. style).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,), 0/1 or bool
        Membership labels, 1 = member.
    y_score : array-like of shape (n_samples,), float
        Attack scores, higher = more likely a member. Must be finite.
    alpha : float in [0, 1]
        Target false-positive rate.

    Returns
    -------
    float
        The largest TPR among the exact ROC points with ``fpr <= alpha``,
        i.e. the best recall any threshold on the pool's own scores reaches
        without flagging more than ``alpha`` of its non-members. nan with an
        ``UndefinedMetricWarning`` when the pool holds one class only.

    Raises
    ------
    ValueError
        As :func:`roc`, and if ``alpha`` is outside [0, 1] or NaN.

    See Also
    --------
    mlflow_mia.metrics.thresholds.population_threshold_metrics : TPR at a
        threshold chosen on the population set (no access to pool labels).

    Notes
    -----
    The threshold here is picked with the pool's labels (an oracle threshold),
    so it is an upper bound on what the population threshold achieves at the
    same alpha. Both are reported side by side.

    References
    ----------
    .. [1] Carlini et al., "Membership Inference Attacks From First
       Principles", IEEE S&P 2022, Sec. IV.
    .. [2] Mireshghallah et al., "Quantifying Privacy Risks of Masked Language
       Models Using Membership Inference Attacks", EMNLP 2022.

    Examples
    --------
    >>> tpr_at_fpr([1, 1, 1, 0, 0], [5.0, 4.0, 1.0, 3.0, 0.0], alpha=0.0)
    0.6666666666666666
    """
    alpha = _check_rate(alpha, "alpha", low_closed=True, high_closed=True)
    labels, scores = _check_pair(y_true, y_score)
    n_members = int(labels.sum())
    n_non_members = int(labels.size - n_members)
    if n_members == 0 or n_non_members == 0:
        _warn_one_class(n_members, n_non_members, "TPR at fixed FPR")
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        fpr, tpr, _ = roc_curve(labels, scores, pos_label=1, drop_intermediate=False)
    return float(np.max(tpr[fpr <= alpha]))
