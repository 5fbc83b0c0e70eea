"""Exposure of secret-format canaries (Carlini et al. 2019, "The Secret Sharer", Sec. 4).

A secret-format canary holds a random secret ``s`` from a space ``R`` (every N-digit
string: ``|R| = 10 ** N``). The model scores every candidate ``c`` of ``R`` in the same
sentence; here the score is an energy or pseudo-log-likelihood, **lower = likelier**
(the paper uses the log-perplexity, also lower = likelier). The rank of ``s`` is the
number of candidates at least as likely as ``s``, ``s`` itself included (the paper's
Definition 3: ``|{r' in R : Px(s[r']) <= Px(s[r])}|``), and

    exposure(s) = log2 |R| - log2 rank(s)   (bits),

from 0 (every candidate is at least as likely as the true secret) to log2 |R| (it is
strictly the likeliest of all: guessing candidates in the model's order finds it first).
**Ties count against the secret**: candidates [0, 0, 0, 1] with the secret at 0 give
rank 3 and ``log2 4 - log2 3 = 0.415`` bits, not 2 bits; a model that cannot tell the
secrets apart shows no exposure.

Three ways to get the exposure (paper Sec. 4.2-4.3):

- **exact** (:func:`exposure`, with every candidate of ``R`` scored): the rank over the
  full space, ``#{c : score(c) <= score(s)}``.
- **sampled** (a uniform sample of ``n`` candidates): the fraction ``k / n`` of the
  sample at least as likely as ``s`` estimates the fraction of the space;
  ``rank ~ 1 + (|R| - 1) k / n``. A sample of ``n`` resolves at most ``log2(n + 1)``
  bits (the secret ahead of all ``n``): the estimate is **capped** there, and a capped
  value is a lower bound (reported as ``>=``). Without the cap a secret ahead of the
  whole sample would get ``log2 |R|`` (29.9 bits for ``10 ** 9`` secrets) from 1,000
  candidates that resolve about 10 bits.
- **extrapolated** (Sec. 4.3, "approximation by distribution modeling"): fit a
  skew-normal distribution to the sampled candidates' scores and read
  ``exposure ~ -log2 P[score(c) <= score(s)]`` off its CDF, which reaches beyond
  ``log2(n + 1)``. Capped at ``log2 |R|`` (the largest exposure the rank allows). It is
  the headline exposure when candidates were sampled (:attr:`ExposureResult.headline`).

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

__all__ = ["ExposureResult", "exposure"]


def exposure_from_rank(rank, space_size: int) -> np.ndarray:
    """``log2(space_size) - log2(rank)`` (bits), element-wise.

    Parameters
    ----------
    rank : array-like of shape (n_secrets,)
        Ranks in [1, space_size] (may be fractional: a sampled estimate).
    space_size : int
        ``|R|``.

    Returns
    -------
    ndarray of shape (n_secrets,), float64
        Bits, in [0, log2 space_size].

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


def sampled_resolution(n_candidates: int) -> float:
    """The largest exposure (bits) ``n`` sampled candidates resolve: ``log2(n + 1)``.

    The secret ranked ahead of all ``n`` sampled candidates is first of ``n + 1``; how far
    ahead of the rest of the space it lies, the sample cannot tell.

    Parameters
    ----------
    n_candidates : int
        Candidates sampled (>= 1).

    Returns
    -------
    float
        Bits.

    Raises
    ------
    ValueError
        ``n_candidates < 1``.

    Examples
    --------
    >>> round(sampled_resolution(1000), 3)
    9.967
    """
    if n_candidates < 1:
        raise ValueError(f"n_candidates must be >= 1, got {n_candidates!r}")
    return math.log2(n_candidates + 1)


def extrapolated_exposure(secret_scores, candidate_scores, *, space_size: int) -> np.ndarray:
    """Exposure (bits) from a skew-normal fit of the candidates' scores (paper Sec. 4.3), lower score = likelier.

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
        ``min(log2 |R|, -log2 F(score))`` bits, ``F`` the fitted CDF (``logcdf`` for the far tail).

    Raises
    ------
    ValueError
        Fewer than 10 candidates or all candidate scores equal.

    References
    ----------
    .. [1] Carlini et al. 2019, "The Secret Sharer", Sec. 4.3.
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
        Bits, from the rank: the exact rank (``exact``), or the sampled estimate capped at
        ``resolution`` (``log2(n_candidates + 1)``; a lower bound where ``capped``).
    rank : ndarray of shape (n_secrets,)
        The rank, ``#{c : score(c) <= score(s)}`` (exact), or its estimate
        ``1 + (|R| - 1) k / n`` before the cap (sampled; may be fractional).
    capped : ndarray of shape (n_secrets,), bool
        Where the sampled estimate exceeded ``resolution`` and ``exposure`` holds the cap:
        the secret scored ahead of every sampled candidate, so its exposure is at least
        that (``>=``). Always False when ``exact``.
    extrapolated : ndarray of shape (n_secrets,)
        The skew-normal estimate, bits (nan when it cannot be fitted).
    space_size : int
        ``|R|``.
    n_candidates : int
        Candidates scored.
    exact : bool
        True when every candidate of the space was scored.
    resolution : float
        The largest exposure (bits) the ranks can show: ``log2 |R|`` (exact) or
        ``log2(n_candidates + 1)`` (sampled).
    """

    exposure: np.ndarray
    rank: np.ndarray
    capped: np.ndarray
    extrapolated: np.ndarray
    space_size: int
    n_candidates: int
    exact: bool
    resolution: float

    @property
    def headline(self) -> np.ndarray:
        """The exposure to report, bits, shape (n_secrets,).

        The exact rank's exposure when every candidate was scored; with sampled candidates
        the skew-normal extrapolation (paper Sec. 4.3), which reaches past the sample's
        resolution, and the capped :attr:`exposure` where the fit failed (nan extrapolation).
        """
        if self.exact:
            return self.exposure
        return np.where(np.isfinite(self.extrapolated), self.extrapolated, self.exposure)

    @property
    def headline_is_extrapolated(self) -> np.ndarray:
        """Where :attr:`headline` is the skew-normal extrapolation, bool of shape (n_secrets,)."""
        return np.isfinite(self.extrapolated) & (not self.exact)


def exposure(secret_scores, candidate_scores, *, space_size: int, exact: bool) -> ExposureResult:
    """Exposure (bits) of each secret among candidates of its format (lower score = likelier).

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
        Ranks count every candidate scored at least as likely as the secret (ties against
        it). Exact: ``rank = #{c : score(c) <= score(s)}``, at least 1 (the secret's own
        candidate, should its two scores differ by rounding). Sampled: ``k`` candidates of
        ``n`` at least as likely, ``rank = 1 + (|R| - 1) k / n``, exposure capped at
        ``log2(n + 1)`` (``capped`` marks where), and the skew-normal extrapolation.

    Raises
    ------
    ValueError
        NaN scores, no candidates, or ``exact=True`` with ``n_candidates != space_size``.

    References
    ----------
    .. [1] Carlini et al. 2019, "The Secret Sharer", Sec. 4 (Definitions 3-4), Sec. 4.3.

    Examples
    --------
    >>> res = exposure([0.0], [0.0, 0.0, 0.0, 1.0], space_size=4, exact=True)  # ties count against the secret
    >>> res.rank.tolist(), res.exposure.round(3).tolist()
    ([3.0], [0.415])
    >>> cand = np.arange(10.0)          # a space of 10 secrets, scores 0..9
    >>> res = exposure([0.0, 4.0, 9.0], cand, space_size=10, exact=True)
    >>> res.rank.tolist(), res.exposure.round(3).tolist()
    ([1.0, 5.0, 10.0], [3.322, 1.0, 0.0])
    >>> res = exposure([-1.0, 24.5], np.arange(100.0), space_size=10**9, exact=False)  # 100 sampled candidates
    >>> res.exposure.round(3).tolist(), res.capped.tolist(), round(res.resolution, 3)
    ([6.658, 2.0], [True, False], 6.658)
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
    at_least_as_likely = np.searchsorted(cand, secret, side="right")  # candidates scored <= each secret
    if exact:
        rank = np.maximum(at_least_as_likely, 1).astype(np.float64)
        resolution = math.log2(space_size)
        values = exposure_from_rank(rank, space_size)
        capped = np.zeros(secret.shape, dtype=bool)
    else:
        rank = 1.0 + (space_size - 1) * at_least_as_likely / cand.size
        resolution = sampled_resolution(cand.size)
        raw = exposure_from_rank(rank, space_size)
        capped = raw > resolution
        values = np.minimum(raw, resolution)
    try:
        extra = extrapolated_exposure(secret, cand, space_size=space_size)
    except ValueError:
        extra = np.full(secret.shape, np.nan)
    return ExposureResult(exposure=values, rank=rank, capped=capped, extrapolated=extra,
                          space_size=int(space_size), n_candidates=int(cand.size), exact=bool(exact),
                          resolution=float(resolution))
