"""User-level aggregation, length breakdowns and the riskiest member records.

References
----------
.. [1] F. Mireshghallah, K. Goyal, A. Uniyal, T. Berg-Kirkpatrick and R. Shokri,
   "Quantifying Privacy Risks of Masked Language Models Using Membership
   Inference Attacks", EMNLP 2022 (patient-level results; Table 3, length).
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from sklearn.exceptions import UndefinedMetricWarning

from .roc import roc
from .validation import as_1d, check_pair

__all__ = ["group_scores", "length_breakdown", "riskiest_records"]


@dataclass(frozen=True)
class GroupScores:
    """Samples aggregated to one row per group (e.g. per user or patient).

    Attributes
    ----------
    groups : ndarray of shape (n_groups,)
        Unique group ids, sorted (the order of ``np.unique``).
    y_true : ndarray of shape (n_groups,), dtype int8
        1 if the group's samples are members, else 0.
    y_score : ndarray of shape (n_groups,), dtype float64
        Mean score of the group's samples (higher = member).
    sizes : ndarray of shape (n_groups,), dtype int64
        Number of samples in each group.
    """

    groups: np.ndarray
    y_true: np.ndarray
    y_score: np.ndarray
    sizes: np.ndarray


def group_scores(y_true, y_score, groups) -> GroupScores:
    """Aggregate sample scores to group level: a group's score is their mean.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,), 0/1 or bool
        Membership labels, 1 = member.
    y_score : array-like of shape (n_samples,), float
        Attack scores, higher = more likely a member. Must be finite.
    groups : array-like of shape (n_samples,)
        Group id of each sample (e.g. ``user_id``); ints or strings, in any
        order (need not be sorted or contiguous).

    Returns
    -------
    GroupScores
        One row per distinct id, ids sorted; every group is kept, including
        the last one and singletons.

    Raises
    ------
    ValueError
        As :func:`mlflow_mia.metrics.roc.roc` for ``y_true``/``y_score``; if
        ``groups`` has a different length, holds NaN/None, or if a group has
        both members and non-members (the error names it).

    References
    ----------
    .. [1] Mireshghallah et al., "Quantifying Privacy Risks of Masked Language
       Models Using Membership Inference Attacks", EMNLP 2022, Sec. 4
       (patient-level attack: mean over a patient's samples).

    Examples
    --------
    >>> g = group_scores([0, 1, 1, 0], [1.0, 4.0, 2.0, 3.0], ["b", "a", "a", "c"])
    >>> g.groups.tolist(), g.y_true.tolist(), g.y_score.tolist(), g.sizes.tolist()
    (['a', 'b', 'c'], [1, 0, 0], [3.0, 1.0, 3.0], [2, 1, 1])
    """
    labels, scores = check_pair(y_true, y_score)
    ids = as_1d(groups, "groups")
    if ids.shape[0] != labels.shape[0]:
        raise ValueError(
            f"groups and y_true have inconsistent lengths: {ids.shape[0]} != {labels.shape[0]}"
        )
    if np.issubdtype(ids.dtype, np.floating) and np.isnan(ids).any():
        raise ValueError("groups contains NaN; every sample needs a group id")
    if ids.dtype == object and any(g is None or (isinstance(g, float) and math.isnan(g)) for g in ids):
        raise ValueError("groups contains None or NaN; every sample needs a group id")
    try:
        uniq, inverse = np.unique(ids, return_inverse=True)
    except TypeError as exc:
        raise ValueError(f"groups ids must be mutually comparable (all str or all int): {exc}") from None
    inverse = inverse.ravel()
    n_groups = uniq.shape[0]
    sizes = np.bincount(inverse, minlength=n_groups).astype(np.int64)
    n_member_rows = np.bincount(inverse, weights=labels, minlength=n_groups)
    mixed = (n_member_rows > 0) & (n_member_rows < sizes)
    if mixed.any():
        bad = np.flatnonzero(mixed)
        shown = ", ".join(repr(uniq[i].item() if hasattr(uniq[i], "item") else uniq[i]) for i in bad[:5])
        more = f" (and {bad.size - 5} more)" if bad.size > 5 else ""
        raise ValueError(
            f"group(s) {shown}{more} mix members and non-members; a group's samples must "
            f"share one label"
        )
    mean_scores = np.bincount(inverse, weights=scores, minlength=n_groups) / sizes
    return GroupScores(
        groups=uniq,
        y_true=(n_member_rows > 0).astype(np.int8),
        y_score=mean_scores.astype(np.float64),
        sizes=sizes,
    )


def _format_edge(x) -> str:
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    if float(x).is_integer():
        return str(int(x))
    return f"{x:g}"


def length_breakdown(y_true, y_score, lengths, *, bins: Sequence[tuple[float, float]]) -> list[dict]:
    """AUC per length bin (paper Table 3: short 10-20 vs long 20-60 tokens).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,), 0/1 or bool
        Membership labels, 1 = member.
    y_score : array-like of shape (n_samples,), float
        Attack scores, higher = more likely a member. Must be finite.
    lengths : array-like of shape (n_samples,), int
        Length of each sample in tokens (non-negative).
    bins : sequence of (lo, hi)
        Half-open bins ``[lo, hi)`` with ``lo < hi``, e.g.
        ``((10, 20), (20, 60))``; ``hi`` may be ``math.inf``. Bins may
        overlap; samples outside every bin are left out.

    Returns
    -------
    list of dict
        One dict per bin, in the order given, with keys ``bin`` (``"10-20"``),
        ``lo``, ``hi``, ``n_members``, ``n_non_members`` and ``auc`` (exact,
        ties = 1/2; nan with an ``UndefinedMetricWarning`` when the bin lacks
        a class).

    Raises
    ------
    ValueError
        As :func:`mlflow_mia.metrics.roc.roc`; if ``lengths`` has a different
        length, is negative or not finite; or if ``bins`` is empty or holds a
        pair with ``lo >= hi``.

    References
    ----------
    .. [1] Mireshghallah et al., "Quantifying Privacy Risks of Masked Language
       Models Using Membership Inference Attacks", EMNLP 2022, Table 3.

    Examples
    --------
    >>> rows = length_breakdown([1, 0, 1, 0], [0.9, 0.1, 0.2, 0.8], [12, 15, 30, 40],
    ...                         bins=[(10, 20), (20, 60)])
    >>> [(r["bin"], r["n_members"], r["n_non_members"], r["auc"]) for r in rows]
    [('10-20', 1, 1, 1.0), ('20-60', 1, 1, 0.0)]
    """
    labels, scores = check_pair(y_true, y_score)
    lens = as_1d(lengths, "lengths")
    if lens.shape[0] != labels.shape[0]:
        raise ValueError(
            f"lengths and y_true have inconsistent lengths: {lens.shape[0]} != {labels.shape[0]}"
        )
    if lens.dtype == object or not np.issubdtype(lens.dtype, np.number):
        raise ValueError(f"lengths must hold token counts, got dtype {lens.dtype}")
    lens = lens.astype(np.float64)
    if not np.all(np.isfinite(lens)) or np.any(lens < 0):
        raise ValueError("lengths must be finite and non-negative token counts")
    bins = list(bins)
    if not bins:
        raise ValueError("bins is empty; give (lo, hi) pairs such as ((10, 20), (20, 60))")
    rows = []
    for b in bins:
        try:
            lo, hi = b
        except (TypeError, ValueError):
            raise ValueError(f"each bin must be a (lo, hi) pair, got {b!r}") from None
        if math.isnan(float(lo)) or math.isnan(float(hi)) or not float(lo) < float(hi):
            raise ValueError(f"bin {b!r} must satisfy lo < hi")
        in_bin = (lens >= lo) & (lens < hi)
        lab = labels[in_bin]
        n_members = int(lab.sum())
        n_non_members = int(lab.size - n_members)
        name = f"{_format_edge(lo)}-{_format_edge(hi)}"
        if n_members == 0 or n_non_members == 0:
            warnings.warn(
                f"AUC of length bin {name} is undefined: it has {n_members} members and "
                f"{n_non_members} non-members; reporting nan",
                UndefinedMetricWarning,
                stacklevel=2,
            )
            auc = float("nan")
        else:
            auc = roc(lab, scores[in_bin]).auc
        rows.append(
            {
                "bin": name,
                "lo": lo,
                "hi": hi,
                "n_members": n_members,
                "n_non_members": n_non_members,
                "auc": auc,
            }
        )
    return rows


def riskiest_records(y_true, y_score, *, threshold: float, top: int) -> np.ndarray:
    """Indices of the members flagged with the highest scores.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,), 0/1 or bool
        Membership labels, 1 = member.
    y_score : array-like of shape (n_samples,), float
        Attack scores, higher = more likely a member. Must be finite.
    threshold : float
        Decision threshold; a member is flagged iff ``score > threshold``
        (ties are not flagged).
    top : int >= 0
        Maximum number of indices returned.

    Returns
    -------
    ndarray of shape (n_returned,), dtype intp
        Row indices into the inputs of flagged members, by descending score;
        equal scores keep their original order (stable). ``n_returned <= top``.

    Raises
    ------
    ValueError
        As :func:`mlflow_mia.metrics.roc.roc`; if ``threshold`` is NaN or
        ``top`` is not an int >= 0.

    References
    ----------
    .. [1] Mireshghallah et al., "Quantifying Privacy Risks of Masked Language
       Models Using Membership Inference Attacks", EMNLP 2022, Sec. 4.6
       (members exposed by the attack).

    Examples
    --------
    >>> riskiest_records([1, 0, 1, 1, 1], [0.5, 9.0, 0.7, 0.7, 0.1], threshold=0.2, top=10).tolist()
    [2, 3, 0]
    """
    labels, scores = check_pair(y_true, y_score)
    t = float(threshold)
    if math.isnan(t):
        raise ValueError("threshold is NaN")
    if isinstance(top, bool) or not isinstance(top, numbers.Integral) or top < 0:
        raise ValueError(f"top must be an int >= 0, got {top!r}")
    candidates = np.flatnonzero((labels == 1) & (scores > t))
    order = np.argsort(-scores[candidates], kind="stable")
    return candidates[order][: int(top)].astype(np.intp)
