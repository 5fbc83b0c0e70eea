"""ROC counts of many weighted resamples of one pool at once, for the bootstrap.

A resample draws units (samples, or groups of samples) with replacement; a row
counts as often as its unit was drawn. Sorting the pool once by score, the
weighted cumulative counts of members and non-members at each distinct score
give, for every resample of a chunk at once, the exact ROC of that resample
(ties as one step, as :func:`mlflow_mia.metrics.roc.roc`), its AUC and the
counts at any fixed threshold. With few units (groups) the AUC comes instead
from the Mann-Whitney kernel summed over each (member unit, non-member unit)
pair once, then one matrix product per chunk: ``U = c_M^T A c_N``. All counts
are whole or half numbers, exact in float64, so each value equals the one
computed on the resampled rows bit for bit.

The bootstrap statistics of precision and recall at a fixed threshold live here
too: their per-resample form is :func:`batch_at_threshold`.

References
----------
.. [1] H. B. Mann and D. R. Whitney, Ann. Math. Statist. 18(1), 1947.
.. [2] N. Carlini et al., "Membership Inference Attacks From First
   Principles", IEEE S&P 2022 (TPR at a fixed FPR).
"""

from __future__ import annotations

import math
from functools import cached_property, partial

import numpy as np

from .thresholds import metrics_at_threshold

__all__: list[str] = []

# The unit-pair AUC is used when its (member units x non-member units) matrix holds at most this
# many cells per pool row (a matrix product per chunk against a dozen passes over the rows), and
# the row-pair kernel fits in memory.
_PAIR_CELLS_PER_ROW = 50
_MAX_ROW_PAIRS = 4_000_000


class WeightedResamples:
    """A chunk of bootstrap resamples of one pool, as unit counts over its rows sorted by score.

    Parameters
    ----------
    scores : ndarray of shape (n_samples,), float64
        Pool scores, sorted in decreasing order (stable).
    labels : ndarray of shape (n_samples,), float64
        Their labels (1 = member) in the same order.
    unit_of_row : ndarray of shape (n_samples,), int
        Unit (0 .. n_units - 1) of each row, in the same order.
    unit_counts : ndarray of shape (n_rounds, n_units), float64
        How often each unit was drawn in each resample (whole numbers).
    """

    def __init__(self, scores: np.ndarray, labels: np.ndarray, unit_of_row: np.ndarray, unit_counts: np.ndarray):
        self.scores, self.labels, self.unit_of_row, self.unit_counts = scores, labels, unit_of_row, unit_counts
        # Last row of each run of equal scores: one ROC point per distinct score, ties as one step.
        self._ends = np.append(np.flatnonzero(np.diff(scores) != 0), scores.size - 1)

    @cached_property
    def weights(self) -> np.ndarray:
        """(n_rounds, n_samples): how often each row is in each resample."""
        return self.unit_counts[:, self.unit_of_row]

    @cached_property
    def tps(self) -> np.ndarray:
        """(n_rounds, n_distinct + 1): members with ``score >=`` each distinct score, after a 0 column."""
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

    @cached_property
    def _units_by_class(self) -> tuple[np.ndarray, np.ndarray]:
        member = self.labels == 1
        return np.unique(self.unit_of_row[member]), np.unique(self.unit_of_row[~member])

    def pairs_are_cheaper(self) -> bool:
        """Whether :meth:`pair_kernel` is the faster way to the AUC of this pool."""
        m, n = self._units_by_class
        n_member_rows = int(self.labels.sum())
        row_pairs = n_member_rows * (self.labels.size - n_member_rows)
        return m.size * n.size <= _PAIR_CELLS_PER_ROW * self.labels.size and row_pairs <= _MAX_ROW_PAIRS

    @cached_property
    def pair_kernel(self) -> np.ndarray:
        """(member units, non-member units): twice the Mann-Whitney kernel summed over their rows' pairs.

        ``2 [s_i > s_j] + [s_i = s_j]`` for member row ``i`` and non-member row ``j``: whole numbers.
        """
        member = self.labels == 1
        kernel = (2 * (self.scores[member][:, None] > self.scores[~member][None, :])
                  + (self.scores[member][:, None] == self.scores[~member][None, :])).astype(np.float64)
        m, n = self._units_by_class
        to_m = (self.unit_of_row[member][None, :] == m[:, None]).astype(np.float64)  # (member units, member rows)
        to_n = (self.unit_of_row[~member][:, None] == n[None, :]).astype(np.float64)  # (non-member rows, units)
        return to_m @ kernel @ to_n


def batch_auc(res: WeightedResamples) -> np.ndarray:
    """AUC of each resample, shape (n_rounds,): P(member > non-member) + 1/2 P(equal), weighted.

    Examples
    --------
    >>> res = WeightedResamples(np.array([0.9, 0.5, 0.5, 0.1]), np.array([1.0, 1.0, 0.0, 0.0]),
    ...                         np.arange(4), np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 2.0, 1.0, 1.0]]))
    >>> batch_auc(res).tolist()
    [0.875, 0.75]
    """
    if res.pairs_are_cheaper():
        m, n = res._units_by_class
        cm, cn = res.unit_counts[:, m], res.unit_counts[:, n]
        rows = np.bincount(res.unit_of_row, minlength=res.unit_counts.shape[1]).astype(np.float64)
        u = np.sum((cm @ res.pair_kernel) * cn, axis=1) / 2.0
        return u / ((cm @ rows[m]) * (cn @ rows[n]))
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


def named_statistic(fn, name: str, batch):
    """``fn`` named ``name``, with ``batch`` (all resamples of a chunk at once) as its ``batch`` attribute."""
    fn.__name__ = fn.__qualname__ = name
    fn.batch = batch
    return fn


def _threshold_statistic(threshold: float, kind: str):
    t = float(threshold)
    if math.isnan(t):
        raise ValueError("threshold is NaN; give the population threshold of a resolvable alpha")

    def statistic(y_true, y_score) -> float:
        m = metrics_at_threshold(y_true, y_score, threshold=t)
        return m.tpr if kind == "recall" else m.precision

    return named_statistic(statistic, f"{kind}_at_threshold_{t:g}", partial(batch_at_threshold, threshold=t, kind=kind))


def recall_at_threshold_statistic(threshold: float):
    """A bootstrap statistic: recall (TPR) of the decisions ``score > threshold``.

    Parameters
    ----------
    threshold : float
        A fixed threshold, e.g. a population threshold (it is not re-estimated
        per resample: the interval is conditional on the population set).

    Returns
    -------
    callable
        ``f(y_true, y_score) -> float`` equal to
        ``metrics_at_threshold(y_true, y_score, threshold=threshold).tpr``.

    Raises
    ------
    ValueError
        If ``threshold`` is NaN.

    References
    ----------
    .. [1] Mireshghallah et al., EMNLP 2022, Sec. 3.5 (recall at a population threshold).

    Examples
    --------
    >>> recall_at_threshold_statistic(2.0)([1, 1, 0, 0], [3.0, 2.0, 2.5, 1.0])
    0.5
    """
    return _threshold_statistic(threshold, "recall")


def precision_at_threshold_statistic(threshold: float):
    """A bootstrap statistic: precision of the decisions ``score > threshold`` (nan when none is flagged).

    The twin of :func:`recall_at_threshold_statistic` (one helper builds both).

    Parameters
    ----------
    threshold : float
        As :func:`recall_at_threshold_statistic`.

    Returns
    -------
    callable
        ``f(y_true, y_score) -> float`` equal to
        ``metrics_at_threshold(y_true, y_score, threshold=threshold).precision``.

    Raises
    ------
    ValueError
        As :func:`recall_at_threshold_statistic`.

    References
    ----------
    .. [1] Mireshghallah et al., EMNLP 2022, Sec. 3.5 (precision at a population threshold).

    Examples
    --------
    >>> precision_at_threshold_statistic(2.0)([1, 1, 0, 0], [3.0, 2.0, 2.5, 1.0])
    0.5
    """
    return _threshold_statistic(threshold, "precision")
