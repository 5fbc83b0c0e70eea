"""Input checks shared by the metrics and plots: 1-D finite scores, 0/1 labels, rates.

Every check returns the cleaned array (or value) or raises ``ValueError`` naming
the argument and what it should hold.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.exceptions import UndefinedMetricWarning

__all__ = ["check_scores"]


def as_1d(x, name: str) -> np.ndarray:
    """Return ``x`` as a 1-D array (a view where possible, never modified)."""
    arr = np.asarray(x)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.ravel()
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D of shape (n_samples,), got shape {arr.shape}")
    return arr


def check_scores(y_score, name: str = "y_score", *, allow_empty: bool = False) -> np.ndarray:
    """Validate a 1-D array of finite real scores and return it as float64.

    Raises
    ------
    ValueError
        Not 1-D, not real numbers, empty (unless ``allow_empty``), or holding NaN or an
        infinite value: the message counts each kind and names the first position (a
        finite value such as 1e308 is never called infinite).
    """
    arr = as_1d(y_score, name)
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
        raise ValueError(f"{name} contains {_non_finite(arr)}; scores must be finite (any float64 up to "
                         "+-1.8e308 is)")
    return arr


def _non_finite(arr: np.ndarray) -> str:
    """What is not finite in ``arr``, in words: counts of NaN and of infinite values, and the first one.

    A finite value, however large, is never counted.

    >>> _non_finite(np.array([1e308, np.inf, np.nan, -np.inf]))
    '1 NaN and 2 infinite value(s) (first at position 1: inf)'
    """
    nan, bad = np.isnan(arr), ~np.isfinite(arr)
    n_nan, n_inf = int(nan.sum()), int((bad & ~nan).sum())
    what = " and ".join(p for p in (f"{n_nan} NaN" if n_nan else "", f"{n_inf} infinite" if n_inf else "") if p)
    first = int(np.flatnonzero(bad)[0])
    return f"{what} value(s) (first at position {first}: {float(arr[first])!r})"


def check_labels(y_true, name: str = "y_true", *, allow_empty: bool = False) -> np.ndarray:
    """Validate 0/1 membership labels (1 = member) and return them as int8."""
    arr = as_1d(y_true, name)
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


def check_pair(y_true, y_score, *, allow_empty: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Validate labels and scores together (same length, finite, 0/1)."""
    labels = check_labels(y_true, allow_empty=allow_empty)
    scores = check_scores(y_score, allow_empty=allow_empty)
    if labels.shape[0] != scores.shape[0]:
        raise ValueError(
            f"y_true and y_score have inconsistent lengths: {labels.shape[0]} != {scores.shape[0]}"
        )
    return labels, scores


def check_rate(value, name: str, *, low_closed: bool, high_closed: bool) -> float:
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


def warn_one_class(n_members: int, n_non_members: int, what: str) -> None:
    missing = "members (label 1)" if n_members == 0 else "non-members (label 0)"
    warnings.warn(
        f"{what} is undefined: the pool has no {missing} "
        f"({n_members} members, {n_non_members} non-members); returning nan",
        UndefinedMetricWarning,
        stacklevel=3,
    )
