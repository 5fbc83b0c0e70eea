"""Stratified (cluster) resamples of one pool, and the score columns read on them.

:func:`resample_plan` draws the resamples from the labels (and groups) alone, so every
score column of a pool (two attacks, a target and its reference) is read on the same
draws; :class:`ScoredPool` reads the statistics of one column on each chunk of them.
:func:`~mlflow_mia.metrics.bootstrap.bootstrap_distribution` and
:func:`~mlflow_mia.metrics.paired.paired_bootstrap` are built on both.

References
----------
.. [1] A. C. Davison and D. V. Hinkley, "Bootstrap Methods and their Application",
   Cambridge University Press, 1997, Sec. 3.8 (resample the top-level units).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from .population_resampling import PopulationThresholds
from .roc import auc_statistic
from .validation import as_1d
from .weighted_roc import WeightedResamples, batch_auc

__all__: list[str] = []

#: A statistic of one resample: ``f(y_true, y_score) -> float``.
Statistic = Callable[[np.ndarray, np.ndarray], float]

#: Batch forms (all resamples at once) of statistics defined elsewhere.
_BATCH_FORMS = {auc_statistic: batch_auc}

# Weights held at once (rounds x pool rows) when the statistics are read chunk by chunk.
_CHUNK_CELLS = 2_000_000


def units_of_rows(labels: np.ndarray, groups, *, why: str = "the cluster bootstrap resamples groups by label"
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Unit of each row (its row index without groups) and the label of each unit.

    Parameters
    ----------
    labels : ndarray of shape (n_samples,), 0/1
    groups : array-like of shape (n_samples,) or None
    why : str
        Why a group must hold one label, for the error message.

    Returns
    -------
    (ndarray of shape (n_samples,), int; ndarray of shape (n_units,), int8)

    Raises
    ------
    ValueError
        ``groups`` of another length, ids that cannot be ordered, or a group that mixes
        members and non-members.
    """
    if groups is None:
        return np.arange(labels.size), labels
    ids = as_1d(groups, "groups")
    if ids.shape[0] != labels.shape[0]:
        raise ValueError(f"groups has {ids.shape[0]} entries for {labels.shape[0]} samples; give one group id "
                         "per sample")
    try:
        _, unit_of_row = np.unique(ids, return_inverse=True)
    except TypeError as exc:
        raise ValueError(f"group ids must be mutually comparable (all str or all int): {exc}") from None
    unit_of_row = unit_of_row.ravel()
    sizes = np.bincount(unit_of_row)
    n_member_rows = np.bincount(unit_of_row, weights=labels)
    mixed = np.flatnonzero((n_member_rows > 0) & (n_member_rows < sizes))
    if mixed.size:
        first = ids[np.flatnonzero(unit_of_row == mixed[0])[0]]
        raise ValueError(f"{mixed.size} group(s) mix members and non-members (first: {first!r}); {why}, so a "
                         "group's samples must share one label")
    return unit_of_row, (n_member_rows > 0).astype(np.int8)


def _unit_counts(rng, member_units, non_member_units, n_units: int, rounds: int, grouped: bool) -> np.ndarray:
    """(rounds, n_units) draw counts of each unit: members' units and non-members' units drawn apart."""
    offsets = (np.arange(rounds) * n_units)[:, None]  # one bincount for all rounds
    if grouped:  # all rounds' member groups in one call, then all rounds' non-member groups
        drawn = [units[rng.integers(0, units.size, size=(rounds, units.size))] + offsets
                 for units in (member_units, non_member_units)]
    else:
        # Per round, the member rows then the non-member rows: the draws of earlier releases.
        n1, n0 = member_units.size, non_member_units.size
        both = np.empty((rounds, n1 + n0), dtype=np.int64)
        for r in range(rounds):
            both[r, :n1] = member_units[rng.integers(0, n1, size=n1)]
            both[r, n1:] = non_member_units[rng.integers(0, n0, size=n0)]
        drawn = [both + offsets]
    counts = np.bincount(np.concatenate([d.ravel() for d in drawn]), minlength=rounds * n_units)
    return counts.reshape(rounds, n_units).astype(np.float64)


def _unsort(weights: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Weights of rows in score order -> weights of rows in pool order."""
    out = np.empty_like(weights)
    out[:, order] = weights
    return out


def _per_round(fn, labels, scores, member_rows, non_member_rows, weights) -> np.ndarray:
    """A statistic without a batch form, called on each resample's rows (members first)."""
    out = np.empty(weights.shape[0])
    for r, w in enumerate(weights.astype(np.int64)):
        idx = np.concatenate([np.repeat(member_rows, w[member_rows]), np.repeat(non_member_rows, w[non_member_rows])])
        boot_labels, boot_scores = labels[idx], scores[idx]
        boot_labels.setflags(write=False)
        boot_scores.setflags(write=False)
        out[r] = float(fn(boot_labels, boot_scores))
    return out


@dataclass(frozen=True)
class ResamplePlan:
    """The stratified (cluster) resamples of one pool's labels: who is drawn, from what, in which chunks.

    Built by :func:`resample_plan`; it depends on the labels and groups only, never
    on scores, so every score column of the pool (two attacks, target and
    reference) sees the same draws.

    Attributes
    ----------
    unit_of_row : ndarray of shape (n_samples,), int
        Unit of each pool row (its row index without groups).
    member_units, non_member_units : ndarray of int
        The units of each class, drawn apart.
    n_units : int
        Number of units.
    grouped : bool
        Whether units are groups.
    rounds : int
        Number of resamples.
    chunk : int
        Resamples held at once.
    """

    unit_of_row: np.ndarray
    member_units: np.ndarray
    non_member_units: np.ndarray
    n_units: int
    grouped: bool
    rounds: int
    chunk: int

    @property
    def unit(self) -> str:
        return "group" if self.grouped else "sample"

    @property
    def n_member_units(self) -> int:
        return int(self.member_units.size)

    @property
    def n_non_member_units(self) -> int:
        return int(self.non_member_units.size)

    @property
    def one_class(self) -> bool:
        return self.n_member_units == 0 or self.n_non_member_units == 0

    def chunks(self, seed: int):
        """Yield ``(slice of rounds, unit counts of shape (rounds in chunk, n_units))``, all rounds in order.

        One ``np.random.default_rng(seed)`` drives every chunk, so equal seeds give equal draws.
        """
        rng = np.random.default_rng(seed)
        for start in range(0, self.rounds, self.chunk):
            stop = min(self.rounds, start + self.chunk)
            yield slice(start, stop), _unit_counts(rng, self.member_units, self.non_member_units, self.n_units,
                                                   stop - start, self.grouped)


def resample_plan(labels: np.ndarray, groups=None, *, rounds: int) -> ResamplePlan:
    """The resamples :func:`bootstrap_distribution` draws for a pool with these labels (and groups).

    Parameters
    ----------
    labels : ndarray of shape (n_samples,), int
        Checked 0/1 labels (:func:`~mlflow_mia.metrics.validation.check_labels`).
    groups : array-like of shape (n_samples,), optional
        Group id of each sample, as :func:`bootstrap_distribution`.
    rounds : int
        Number of resamples (>= 1).

    Returns
    -------
    ResamplePlan

    Raises
    ------
    ValueError
        If ``rounds`` is not a positive int; if ``groups`` has another length or
        a group mixes members and non-members.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 1:
        raise ValueError(f"rounds must be an int >= 1, got {rounds!r}")
    unit_of_row, unit_labels = units_of_rows(labels, groups)
    return ResamplePlan(unit_of_row=unit_of_row, member_units=np.flatnonzero(unit_labels == 1),
                        non_member_units=np.flatnonzero(unit_labels == 0), n_units=int(unit_labels.size),
                        grouped=groups is not None, rounds=int(rounds),
                        chunk=max(1, _CHUNK_CELLS // max(1, labels.size)))


class ScoredPool:
    """One score column of a pool, sorted once, read by statistics on any resample of a :class:`ResamplePlan`.

    Parameters
    ----------
    labels : ndarray of shape (n_samples,), int
        Checked 0/1 labels.
    scores : ndarray of shape (n_samples,), float64
        Checked finite scores, higher = member.
    unit_of_row : ndarray of shape (n_samples,), int
        :attr:`ResamplePlan.unit_of_row`.
    """

    def __init__(self, labels: np.ndarray, scores: np.ndarray, unit_of_row: np.ndarray):
        self.labels, self.scores, self.unit_of_row = labels, scores, unit_of_row
        self.order = np.argsort(-scores, kind="stable")
        self._sorted = (scores[self.order], labels[self.order].astype(np.float64), unit_of_row[self.order])
        self._member_rows, self._non_member_rows = np.flatnonzero(labels == 1), np.flatnonzero(labels == 0)

    def evaluate(self, statistics: Mapping[str, Statistic], counts: np.ndarray, *,
                 thresholds: PopulationThresholds | None = None, rounds: slice | None = None) -> dict[str, np.ndarray]:
        """Each statistic on each resample of a chunk: ``name -> ndarray of shape (rounds in chunk,)``.

        ``thresholds`` (:class:`~mlflow_mia.metrics.population_resampling.PopulationThresholds`) gives the
        statistics read at a population threshold that chunk's thresholds (``rounds``: its rounds).

        Raises
        ------
        ValueError
            A statistic read at a population threshold without ``thresholds`` and ``rounds``.
        """
        # Rows in score order: the statistics read cumulative counts down the sorted pool.
        resamples = WeightedResamples(*self._sorted, counts)
        in_pool_order, out = None, {}
        for name, fn in statistics.items():
            alpha = getattr(fn, "population_alpha", None)
            if alpha is not None:
                at_thresholds = getattr(fn, "batch", None)
                if thresholds is None or rounds is None or at_thresholds is None:
                    raise ValueError(f"the statistic {name!r} is read at a population threshold (FPR {alpha:g}): "
                                     "evaluate it with the population's thresholds and the chunk's rounds "
                                     "(bootstrap_distribution(..., population=...) does)")
                out[name] = at_thresholds(resamples, thresholds=thresholds.draw(alpha, rounds.start, rounds.stop))
                continue
            batch = getattr(fn, "batch", None) or _BATCH_FORMS.get(fn)
            if batch is not None:
                out[name] = batch(resamples)
                continue
            if in_pool_order is None:
                in_pool_order = _unsort(resamples.weights, self.order)
            out[name] = _per_round(fn, self.labels, self.scores, self._member_rows, self._non_member_rows,
                                   in_pool_order)
        return out


