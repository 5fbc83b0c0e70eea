"""Seeds and paired differences: what a finding's verdict is decided on.

Every setting of ``mlflow-mia analyze`` is trained and audited with each seed of its
size (:attr:`~mlflow_mia.analyze.plan.AnalysisSize.seeds`). Two settings of one finding
are *paired*: the same seed trains both targets from the same base and draws the same
masks, and both are audited on the same pool against the same population. A
comparison reads one metric (e.g. the likelihood-ratio AUC) of both settings per seed
and decides on the difference ``d_s = m_b(s) - m_a(s)``.

Two sources of error, and how :func:`paired_difference` combines them:

- **Seed** (training randomness: batch order, masking, dropout, DP noise; and the
  audit's mask draw). The seeds are independent repetitions, so the mean difference
  ``d = mean_s d_s`` has variance ``s_seed^2 / n`` (``s_seed``: sample standard
  deviation of the ``d_s``), with a Student t quantile on ``n - 1`` degrees of freedom.
- **Pool** (which articles happened to be members and non-members). Each run's
  article-level cluster bootstrap interval measures it
  (:mod:`mlflow_mia.metrics.bootstrap`; the unit is the article). Its standard error is
  read off the logged 95 % interval, ``se = (high - low) / (2 * 1.96)``. Every seed
  audits the *same* pool, so this error is shared by all seeds and does not shrink
  with ``n``: the pool part of the mean's variance is the mean over seeds of
  ``se_a(s)^2 + se_b(s)^2``. Adding the two settings' variances treats their bootstrap
  errors as independent; on one pool they are positively correlated (the same articles
  are resampled), so the true variance of the difference is smaller and the interval is
  conservative.

The interval is ``d +/- sqrt((t_{n-1} * s_seed / sqrt(n))^2 + (z * se_pool)^2)``: the
half-widths of the seed interval and the pool interval, added in quadrature (the two
errors are independent). With one seed the seed part is unknown and left out; the
result says so (``n_seeds == 1``), and such a verdict backs no claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm, t

__all__: list[str] = []

Z95 = 1.959963984540054  # standard normal 97.5 % quantile: the runs log 95 % intervals


@dataclass(frozen=True)
class PairedDifference:
    """Mean over seeds of a paired difference ``b - a`` and its interval.

    Attributes
    ----------
    mean : float
        ``mean_s (m_b(s) - m_a(s))``, in the metric's unit (AUC, TPR, nats).
    low, high : float
        Bounds of the interval at ``level`` (NaN when no seed has both values).
    n_seeds : int
        Seeds with both values.
    seed_sd : float
        Sample standard deviation of the per-seed differences (NaN with one seed).
    pool_se : float
        Standard error from the runs' bootstrap intervals (NaN when none was logged).
    level : float
    """

    mean: float
    low: float
    high: float
    n_seeds: int
    seed_sd: float
    pool_se: float
    level: float = 0.95

    def covers_zero(self) -> bool:
        """True when the interval contains 0 (or is undefined)."""
        return not (self.low > 0 or self.high < 0)

    def text(self, digits: int = 3) -> str:
        """``"+0.012 [-0.004, +0.028] (3 seeds)"``."""
        if math.isnan(self.mean):
            return "n/a"
        seeds = f"{self.n_seeds} seed{'s' if self.n_seeds != 1 else ''}"
        return f"{self.mean:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}] ({seeds})"


def _se(low, high) -> np.ndarray:
    return (np.asarray(high, float) - np.asarray(low, float)) / (2 * Z95)


def paired_difference(a, b, *, a_ci=None, b_ci=None, level: float = 0.95) -> PairedDifference:
    """The mean over seeds of ``b - a`` with an interval combining seed and pool error.

    Parameters
    ----------
    a, b : array-like of shape (n_seeds,), float
        The metric of settings a and b, seed by seed (same order). Seeds where either
        is NaN (not run) are dropped from both.
    a_ci, b_ci : array-like of shape (n_seeds, 2), optional
        Each run's 95 % bootstrap interval (low, high) of the metric, article-level
        cluster bootstrap. None: that side is exact (no pool error; e.g. a constant).
        A NaN row: that seed's pool error is unknown and left out of the mean over seeds
        (``pool_se`` is NaN when no seed's is known; the interval then reflects the seed
        spread only).
    level : float
        Coverage of the returned interval, in (0, 1).

    Returns
    -------
    PairedDifference

    Raises
    ------
    ValueError
        ``a`` and ``b`` (or an interval array) differ in length, or ``level`` is not in (0, 1).

    Notes
    -----
    The combination rule and why it is conservative are in the module docstring. The
    paired design follows the common-random-numbers argument: the same seed and pool
    for both settings remove the variance they share from the difference.

    Examples
    --------
    >>> d = paired_difference([0.80, 0.82, 0.81], [0.85, 0.86, 0.87])
    >>> round(d.mean, 3), d.n_seeds, d.low > 0
    (0.05, 3, True)
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    a, b = np.asarray(a, float).ravel(), np.asarray(b, float).ravel()
    if a.shape != b.shape:
        raise ValueError(f"a and b need one value per seed each, got {a.size} and {b.size}")
    cis = []
    for name, ci in (("a_ci", a_ci), ("b_ci", b_ci)):
        ci = np.zeros((a.size, 2)) if ci is None else np.asarray(ci, float).reshape(-1, 2)
        if len(ci) != a.size:
            raise ValueError(f"{name} needs one (low, high) row per seed ({a.size}), got {len(ci)}")
        cis.append(ci)
    keep = ~(np.isnan(a) | np.isnan(b))
    n = int(keep.sum())
    if n == 0:
        return PairedDifference(math.nan, math.nan, math.nan, 0, math.nan, math.nan, level)
    d = b[keep] - a[keep]
    mean = float(d.mean())
    seed_sd = float(d.std(ddof=1)) if n > 1 else math.nan
    var_pool = _se(cis[0][keep, 0], cis[0][keep, 1]) ** 2 + _se(cis[1][keep, 0], cis[1][keep, 1]) ** 2
    var_pool = var_pool[~np.isnan(var_pool)]
    pool_se = float(math.sqrt(var_pool.mean())) if var_pool.size else math.nan
    half_seed = float(t.ppf(0.5 + level / 2, n - 1) * seed_sd / math.sqrt(n)) if n > 1 else 0.0
    half_pool = float(norm.ppf(0.5 + level / 2) * pool_se) if not math.isnan(pool_se) else 0.0
    half = math.hypot(half_seed, half_pool)
    if n == 1 and math.isnan(pool_se):
        half = math.nan  # one seed and no bootstrap interval: nothing measures the error
    return PairedDifference(mean, mean - half, mean + half, n, seed_sd, pool_se, level)


def seed_summary(values) -> tuple[float, float, int]:
    """(mean, sample standard deviation, count) of a metric over seeds, NaNs (not run) dropped.

    The standard deviation is NaN with fewer than two seeds.

    >>> mean, sd, n = seed_summary([0.8, 0.9, float("nan")])
    >>> round(mean, 3), round(sd, 4), n
    (0.85, 0.0707, 2)
    """
    x = np.asarray(values, float)
    x = x[~np.isnan(x)]
    if x.size == 0:
        return math.nan, math.nan, 0
    return float(x.mean()), (float(x.std(ddof=1)) if x.size > 1 else math.nan), int(x.size)
