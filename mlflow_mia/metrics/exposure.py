"""Exposure of secret-format canaries (Carlini et al. 2019, "The Secret Sharer", Sec. 4).

A secret-format canary holds a random secret ``s`` from a space ``R`` (every N-digit
string: ``|R| = 10 ** N``). The model scores every candidate ``c`` of ``R`` in the same
sentence; here the score is an energy or pseudo-log-likelihood, **lower = likelier**
(the paper uses the log-perplexity, also lower = likelier). The rank of ``s`` is its
position among all candidates ordered by score, and

    exposure(s) = log2 |R| - log2 rank(s),

from 0 (the true secret is the least likely candidate) to log2 |R| (it is the likeliest
of all: guessing candidates in the model's order finds it first).

Three ways to get the rank (paper Sec. 4.2-4.3):

- **exact** (:func:`exposure`, with every candidate of ``R`` scored): the rank over the
  full space, ``1 + #{c : score(c) < score(s)}``. Ties are resolved in the secret's
  favour (the rank is the best position it shares), so exposure is never understated.
- **sampled** (a uniform sample of ``n`` candidates): the fraction of the sample that
  is likelier than ``s`` estimates the fraction of the space; rank ~
  ``1 + (|R| - 1) * k / n``. It cannot resolve exposures above about ``log2 n``.
- **extrapolated** (Sec. 4.3, "approximation by distribution modeling"): fit a
  skew-normal distribution to the sampled candidates' scores and read
  ``exposure ~ -log2 P[score(c) <= score(s)]`` off its CDF, which reaches beyond
  ``log2 n``. Capped at ``log2 |R|`` (the largest exposure the rank allows).

References
----------
.. [1] N. Carlini, C. Liu, U. Erlingsson, J. Kos, D. Song, "The Secret Sharer: Evaluating and Testing
   Unintended Memorization in Neural Networks", USENIX Security 2019, Sec. 4 (Definitions 3-4), Sec. 4.3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["ExposureResult", "exposure", "exposure_from_rank", "extrapolated_exposure"]


def exposure_from_rank(rank, space_size: int) -> np.ndarray:
    """``log2(space_size) - log2(rank)``, element-wise.

    Raises
    ------
    ValueError
        A rank outside [1, space_size].

    Examples
    --------
    >>> exposure_from_rank([1, 2, 1000], 1000).round(3).tolist()
    [9.966, 8.966, 0.0]
    """
    rank = np.asarray(rank, dtype=np.float64)
    if space_size < 1 or np.any(rank < 1) or np.any(rank > space_size):
        raise ValueError(f"ranks must be in [1, {space_size}] (the size of the secret space)")
    return math.log2(space_size) - np.log2(rank)


def extrapolated_exposure(secret_scores, candidate_scores, *, space_size: int) -> np.ndarray:
    """Exposure from a skew-normal fit of the candidates' scores (paper Sec. 4.3), lower score = likelier.

    Parameters
    ----------
    secret_scores : array-like of shape (n_secrets,)
    candidate_scores : array-like of shape (n_candidates,)
        Scores of random candidates of the same format (at least 10, not all equal).
    space_size : int
        ``|R|``; the result is capped at ``log2 |R|``.

    Returns
    -------
    ndarray of shape (n_secrets,)
        ``min(log2 |R|, -log2 F(score))``, ``F`` the fitted CDF (``logcdf`` for the far tail).

    Raises
    ------
    ValueError
        Fewer than 10 candidates or all candidate scores equal.
    """
    cand = np.asarray(candidate_scores, dtype=np.float64)
    if cand.size < 10 or np.ptp(cand) == 0:
        raise ValueError("the extrapolated exposure needs at least 10 candidate scores that are not all equal")
    a, loc, scale = stats.skewnorm.fit(cand)
    log_cdf = stats.skewnorm.logcdf(np.asarray(secret_scores, dtype=np.float64), a, loc=loc, scale=scale)
    return np.minimum(-log_cdf / math.log(2.0), math.log2(space_size))


@dataclass(frozen=True)
class ExposureResult:
    """Exposure of a set of secrets of one format.

    Attributes
    ----------
    exposure : ndarray of shape (n_secrets,)
        Bits, from the exact rank (``exact``) or the sampled estimate.
    rank : ndarray of shape (n_secrets,)
        The rank (exact) or its estimate ``1 + (|R| - 1) k / n`` (sampled; may be fractional).
    extrapolated : ndarray of shape (n_secrets,)
        The skew-normal estimate (nan when it cannot be fitted).
    space_size : int
        ``|R|``.
    n_candidates : int
        Candidates scored.
    exact : bool
        True when every candidate of the space was scored.
    resolution : float
        The largest exposure the candidates can show: ``log2 |R|`` (exact) or
        ``log2 |R| - log2(1 + (|R| - 1) / (2 n))`` (sampled; an estimate above it is read as
        "at least this"; use ``extrapolated`` beyond).
    """

    exposure: np.ndarray
    rank: np.ndarray
    extrapolated: np.ndarray
    space_size: int
    n_candidates: int
    exact: bool
    resolution: float


def exposure(secret_scores, candidate_scores, *, space_size: int, exact: bool) -> ExposureResult:
    """Exposure of each secret among candidates of its format (lower score = likelier).

    Parameters
    ----------
    secret_scores : array-like of shape (n_secrets,)
        Score of the text with each true secret.
    candidate_scores : array-like of shape (n_candidates,)
        With ``exact=True``: the score of every secret of the space (the true ones
        included), so ``n_candidates == space_size``. With ``exact=False``: a uniform
        random sample of the space.
    space_size : int
        ``|R|``.
    exact : bool

    Returns
    -------
    ExposureResult

    Raises
    ------
    ValueError
        NaN scores, no candidates, or ``exact=True`` with ``n_candidates != space_size``.

    Examples
    --------
    >>> cand = np.arange(10.0)          # a space of 10 secrets, scores 0..9
    >>> res = exposure([0.0, 4.0, 9.0], cand, space_size=10, exact=True)
    >>> res.rank.tolist(), res.exposure.round(3).tolist()
    ([1.0, 5.0, 10.0], [3.322, 1.0, 0.0])
    """
    secret = np.asarray(secret_scores, dtype=np.float64)
    cand = np.sort(np.asarray(candidate_scores, dtype=np.float64))
    if secret.ndim != 1 or cand.ndim != 1 or cand.size == 0:
        raise ValueError("secret_scores and candidate_scores must be 1-D, with at least one candidate")
    if np.isnan(secret).any() or np.isnan(cand).any():
        raise ValueError("exposure scores hold NaN; score every secret and candidate")
    if exact and cand.size != space_size:
        raise ValueError(f"exact=True needs a score for every one of the {space_size} secrets of the space, got "
                         f"{cand.size}; pass exact=False for a sample")
    likelier = np.searchsorted(cand, secret, side="left")  # candidates strictly likelier than each secret
    if exact:
        rank = 1.0 + likelier
        resolution = math.log2(space_size)
    else:
        rank = 1.0 + (space_size - 1) * likelier / cand.size
        resolution = math.log2(space_size) - math.log2(1.0 + (space_size - 1) / (2.0 * cand.size))
    try:
        extra = extrapolated_exposure(secret, cand, space_size=space_size)
    except ValueError:
        extra = np.full(secret.shape, np.nan)
    return ExposureResult(exposure=exposure_from_rank(rank, space_size), rank=rank, extrapolated=extra,
                          space_size=int(space_size), n_candidates=int(cand.size), exact=bool(exact),
                          resolution=float(resolution))
