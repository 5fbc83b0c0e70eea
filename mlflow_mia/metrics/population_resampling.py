"""Population thresholds re-estimated in every bootstrap round.

A population threshold (:func:`~mlflow_mia.metrics.thresholds.population_threshold`) is
an estimate: another population set of the same size would give another one. An
interval for the recall or precision at that threshold that holds the threshold fixed
is conditional on the population set drawn, and read as an interval for the TPR at
FPR alpha it covers too rarely. Here each bootstrap round resamples the population
too (its rows, or its groups when the population has a group column), sets that
round's threshold by the same rule on the resampled scores, and reads the pool's
resample at it (Efron and Tibshirani 1993, Ch. 6: resample every estimated input).

The population is drawn by a generator of its own, seeded from the audit's seed, so
the pool's resamples are the same with or without these statistics.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from .thresholds import metrics_at_threshold, min_population_size, population_threshold
from .validation import as_1d, check_rate, check_scores
from .weighted_roc import WeightedResamples, named_statistic

__all__: list[str] = []


class PopulationThresholds:
    """Per-round population thresholds of a bootstrap, drawn chunk by chunk.

    Parameters
    ----------
    scores : ndarray of shape (n_population,), float64
        Population scores (higher = member).
    groups : array-like of shape (n_population,), optional
        Group of each score; whole groups are resampled.
    seed : int
        The bootstrap's seed; the population's generator is ``default_rng([seed, 1])``.
    """

    def __init__(self, scores, groups, seed: int):
        scores = check_scores(scores, "population")
        order = np.argsort(-scores, kind="stable")
        self._desc = scores[order]  # scores in decreasing order
        if groups is None:  # each position's unit: its row, or its group
            self._unit_of_row, n_units = order, scores.size
        else:
            ids = as_1d(groups, "population_groups")
            if ids.shape[0] != scores.shape[0]:
                raise ValueError(f"population_groups has {ids.shape[0]} entries for {scores.shape[0]} population "
                                 "scores; give one group id per score")
            _, unit = np.unique(ids, return_inverse=True)
            self._unit_of_row, n_units = unit.ravel()[order], int(unit.max()) + 1
        self._n_units = n_units
        self._rng = np.random.default_rng([int(seed), 1])
        self._chunk: tuple[int, int, np.ndarray] | None = None

    @classmethod
    def of(cls, statistics, population, groups, seed: int) -> "PopulationThresholds | None":
        """The thresholds the statistics need, or None when none reads a population threshold.

        Raises
        ------
        ValueError
            A statistic reads a population threshold and no population was given.
        """
        if not any(getattr(fn, "population_alpha", None) is not None for fn in statistics.values()):
            return None
        if population is None:
            raise ValueError("a statistic at a population threshold needs the population scores: pass "
                             "population=... to bootstrap_distribution")
        return cls(population, groups, seed)

    def _weights(self, start: int, stop: int) -> np.ndarray:
        """(stop - start, n_population) draw counts of each population row, in decreasing score order."""
        if self._chunk is None or self._chunk[:2] != (start, stop):
            rounds, n = stop - start, self._n_units
            drawn = self._rng.integers(0, n, size=(rounds, n)) + (np.arange(rounds) * n)[:, None]
            counts = np.bincount(drawn.ravel(), minlength=rounds * n).reshape(rounds, n).astype(np.float64)
            self._chunk = (start, stop, counts[:, self._unit_of_row])
        return self._chunk[2]

    def draw(self, alpha: float, start: int, stop: int) -> np.ndarray:
        """Thresholds at ``alpha`` of rounds ``start .. stop - 1``, shape (stop - start,).

        Each is :func:`~mlflow_mia.metrics.thresholds.population_threshold` of that round's
        resampled scores (the ``floor(alpha * n) + 1``-th largest); nan in a round that drew fewer
        than ``ceil(1 / alpha)`` scores.
        """
        weights = self._weights(start, stop)
        cumulative = np.cumsum(weights, axis=1)
        total = cumulative[:, -1]
        x = alpha * total
        allowed = np.floor(x + 1e-9 * np.maximum(1.0, x))  # floor(alpha * n) as population_threshold takes it
        first = np.argmax(cumulative > allowed[:, None], axis=1)
        out = self._desc[first]
        return np.where(total >= min_population_size(alpha), out, math.nan)


def batch_at_thresholds(res: WeightedResamples, *, thresholds: np.ndarray, kind: str) -> np.ndarray:
    """Recall (``kind="recall"``) or precision of ``score > thresholds[r]`` in each resample r, shape (n_rounds,).

    Precision is nan in a resample that flags no row; both are nan where the threshold is.
    """
    distinct = res.scores[res._ends]  # decreasing
    # Columns of tps / fps: the number of distinct scores above each round's threshold.
    cols = np.searchsorted(-distinct, -np.nan_to_num(thresholds, nan=np.inf), side="left")
    rows = np.arange(res.unit_counts.shape[0])
    tp, fp = res.tps[rows, cols], res.fps[rows, cols]
    with np.errstate(invalid="ignore", divide="ignore"):
        out = tp / res.tps[:, -1] if kind == "recall" else np.where(tp + fp > 0, tp / (tp + fp), np.nan)
    return np.where(np.isnan(thresholds), np.nan, out)


def _population_statistic(alpha: float, kind: str):
    alpha = check_rate(alpha, "alpha", low_closed=False, high_closed=False)

    def statistic(y_true, y_score, population) -> float:
        m = metrics_at_threshold(y_true, y_score, threshold=population_threshold(population, alpha=alpha))
        return m.tpr if kind == "recall" else m.precision

    fn = named_statistic(statistic, f"{kind}_at_pop_fpr_{alpha:g}", partial(batch_at_thresholds, kind=kind))
    fn.population_alpha = alpha
    return fn


def recall_at_population_threshold_statistic(alpha: float):
    """A bootstrap statistic: recall (TPR) at the population threshold of FPR ``alpha``, re-estimated per round.

    Parameters
    ----------
    alpha : float in (0, 1)
        Target false-positive rate of the population threshold.

    Returns
    -------
    callable
        ``f(y_true, y_score, population) -> float`` (the value on one sample), with
        ``population_alpha`` and a ``batch`` form that
        :func:`~mlflow_mia.metrics.bootstrap.bootstrap_distribution` evaluates with each
        round's resampled population (pass ``population=`` there).

    Raises
    ------
    ValueError
        If ``alpha`` is not in (0, 1).

    References
    ----------
    .. [1] Mireshghallah et al., EMNLP 2022, Sec. 2.4 (thresholds from population data).

    Examples
    --------
    >>> f = recall_at_population_threshold_statistic(0.25)
    >>> f([1, 1, 0, 0], [3.0, 2.0, 2.5, 1.0], [0.0, 1.0, 2.0, 2.2])   # threshold 2.0
    0.5
    """
    return _population_statistic(alpha, "recall")


def precision_at_population_threshold_statistic(alpha: float):
    """A bootstrap statistic: precision at the population threshold of FPR ``alpha``, re-estimated per round.

    As :func:`recall_at_population_threshold_statistic`; nan in a round that flags no row.

    Examples
    --------
    >>> f = precision_at_population_threshold_statistic(0.25)
    >>> f([1, 1, 0, 0], [3.0, 2.0, 2.5, 1.0], [0.0, 1.0, 2.0, 2.2])
    0.5
    """
    return _population_statistic(alpha, "precision")
