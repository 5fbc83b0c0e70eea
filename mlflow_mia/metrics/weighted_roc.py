"""ROC counts of many weighted resamples of one pool at once, for the bootstrap.

A resample is a vector of whole-number weights over the pool's rows (how often
each row was drawn). Sorting the pool once by score, the weighted cumulative
counts of members and non-members at each distinct score give, for every
resample of a chunk at once, the exact ROC of that resample (ties as one step,
as :func:`mlflow_mia.metrics.roc.roc`), its AUC (Mann-Whitney U) and the counts
at any fixed threshold. All counts are whole or half numbers, exact in float64,
so each value equals the one computed on the resampled rows bit for bit.

References
----------
.. [1] H. B. Mann and D. R. Whitney, Ann. Math. Statist. 18(1), 1947.
.. [2] N. Carlini et al., "Membership Inference Attacks From First
   Principles", IEEE S&P 2022 (TPR at a fixed FPR).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

__all__ = ["WeightedResamples", "batch_auc", "batch_tpr_at_fpr", "batch_at_threshold"]


class WeightedResamples:
    """A chunk of bootstrap resamples of one pool, as weights over its rows sorted by score.

    Attributes
    ----------
    scores : ndarray of shape (n_samples,), float64
        Pool scores, sorted in decreasing order (stable).
    labels : ndarray of shape (n_samples,), float64
        Their labels (1 = member) in the same order.
    weights : ndarray of shape (n_rounds, n_samples), float64
        How often each row is in each resample (whole numbers).
    """

    def __init__(self, scores: np.ndarray, labels: np.ndarray, weights: np.ndarray):
        self.scores, self.labels, self.weights = scores, labels, weights
        # Last row of each run of equal scores: one ROC point per distinct score, ties as one step.
        self._ends = np.append(np.flatnonzero(np.diff(scores) != 0), scores.size - 1)

    @cached_property
    def tps(self) -> np.ndarray:
        """(n_rounds, n_distinct + 1): members with ``score >= `` each distinct score, after a 0 column."""
        return self._cumulative(self.labels)

    @cached_property
    def fps(self) -> np.ndarray:
        """(n_rounds, n_distinct + 1): non-members with ``score >=`` each distinct score, after a 0 column."""
        return self._cumulative(1.0 - self.labels)

    def _cumulative(self, which: np.ndarray) -> np.ndarray:
        counts = np.cumsum(self.weights * which, axis=1)[:, self._ends]
        return np.concatenate([np.zeros((counts.shape[0], 1)), counts], axis=1)

    def above(self, threshold: float) -> int:
        """Column of :attr:`tps` / :attr:`fps` counting the rows with ``score > threshold``."""
        return int(np.count_nonzero(self.scores[self._ends] > threshold))


def batch_auc(res: WeightedResamples) -> np.ndarray:
    """AUC of each resample, shape (n_rounds,): P(member > non-member) + 1/2 P(equal), weighted.

    Examples
    --------
    >>> res = WeightedResamples(np.array([0.9, 0.5, 0.5, 0.1]), np.array([1.0, 1.0, 0.0, 0.0]),
    ...                         np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 2.0, 1.0, 1.0]]))
    >>> batch_auc(res).tolist()
    [0.875, 0.75]
    """
    tps, fps = res.tps, res.fps
    # Mann-Whitney U from the counts (pairs ordered correctly + 1/2 tied pairs): whole and half
    # numbers, exact in float64, so the AUC equals the rank formula's bit for bit.
    u = np.sum(np.diff(fps, axis=1) * (tps[:, 1:] + tps[:, :-1]), axis=1) / 2.0
    return u / (tps[:, -1] * fps[:, -1])


def batch_tpr_at_fpr(res: WeightedResamples, *, alpha: float) -> np.ndarray:
    """Largest TPR among each resample's ROC points with FPR <= ``alpha``, shape (n_rounds,)."""
    tpr = res.tps / res.tps[:, -1:]
    fpr = res.fps / res.fps[:, -1:]
    # Column 0 is the point (0, 0), always within alpha.
    return np.max(np.where(fpr <= alpha, tpr, 0.0), axis=1)


def batch_at_threshold(res: WeightedResamples, *, threshold: float, kind: str) -> np.ndarray:
    """Recall (``kind="recall"``) or precision of ``score > threshold`` per resample, shape (n_rounds,).

    Precision is nan in a resample that flags no row.
    """
    k = res.above(threshold)
    tp, fp = res.tps[:, k], res.fps[:, k]
    if kind == "recall":
        return tp / res.tps[:, -1]
    flagged = tp + fp
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(flagged > 0, tp / flagged, np.nan)
