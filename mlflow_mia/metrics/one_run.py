"""The one-run epsilon lower bound of Steinke, Nasr and Jagielski (2023), from m canaries.

Setting (paper Sec. 3): m canaries, each included in training independently with
probability 1/2. After training, the auditor makes ``r`` guesses (included or not)
about the canaries it is most confident of and abstains on the rest; ``v`` of the
guesses are right. Under (eps, delta)-DP the number of correct guesses is at most
as large as that of randomised response, ``Binomial(r, e^eps / (1 + e^eps))``, up to
a delta term (Theorem 5.2 / Corollary 5.4; the paper's Appendix D computes it):

    p(eps) = P[Bin(r, q) >= v] + 2 m delta * max_{i = 1..v} P[v - i <= Bin(r, q) < v] / i,
    q = e^eps / (1 + e^eps).

A p-value below beta rejects (eps, delta)-DP at confidence 1 - beta; the lower bound is
the largest eps so rejected (found by bisection, keeping the low end).

**How many guesses.** The paper (Sec. 6-7) guesses "included" on the highest scores
and "excluded" on the lowest and abstains in between, and reports the best bound over
the numbers of guesses it tried. Picking the best after seeing the data is a multiple
test, so here the numbers of guesses come from a grid fixed before the data are seen
(:func:`default_guess_grid`), the level beta is split evenly over the grid
(Bonferroni), and the number of guesses giving the largest bound is recorded. The
reported bound therefore holds at the stated confidence whatever was chosen.

**Unit.** The bound is per canary: a canary repeated r times is one unit of r
records, so it bounds the epsilon of a group of r records (group privacy); only the
canaries inserted once (r = 1) give a record-level bound.

References
----------
.. [1] T. Steinke, M. Nasr, M. Jagielski, "Privacy Auditing with One (1) Training Run",
   NeurIPS 2023 (arXiv:2305.08846), Theorem 5.2, Corollary 5.4, Appendix D, Sec. 7.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln

__all__ = ["sparse_guess_grid", "one_run_audit", "OneRunBound"]

_BISECTIONS = 30


def _check_counts(m, r, v) -> tuple[int, int, int]:
    for name, x in (("m", m), ("r", r), ("v", v)):
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) and not (isinstance(x, float) and x.is_integer()):
            raise ValueError(f"{name} must be a whole number, got {x!r}")
    m, r, v = int(m), int(r), int(v)
    if not 0 <= v <= r <= m:
        raise ValueError(f"the counts must satisfy 0 <= v <= r <= m (correct guesses <= guesses <= canaries), got "
                         f"m={m}, r={r}, v={v}")
    return m, r, v


def _log_choose(r: int) -> np.ndarray:
    """``log C(r, k)`` for k = 0..r (computed once per r; the bisection reuses it)."""
    k = np.arange(r + 1, dtype=np.float64)
    return gammaln(r + 1.0) - gammaln(k + 1.0) - gammaln(r - k + 1.0)


def _p_value(m: int, r: int, v: int, eps: float, delta: float, log_choose: np.ndarray) -> float:
    """:func:`one_run_p_value` without checks, from a precomputed ``log C(r, k)`` table."""
    k = np.arange(r + 1, dtype=np.float64)
    # log pmf of Bin(r, q), q = e^eps / (1 + e^eps): log q = -log(1 + e^-eps), log(1 - q) = -log(1 + e^eps)
    pmf = np.exp(log_choose - k * np.logaddexp(0.0, -eps) - (r - k) * np.logaddexp(0.0, eps))
    tail = float(pmf[v:].sum())
    if delta == 0.0 or v == 0:
        return min(tail, 1.0)
    # P[v - i <= Bin < v] for i = 1..v: the cumulative pmf from v - 1 downwards.
    below = np.cumsum(pmf[v - 1::-1])
    worst = float(np.max(below / np.arange(1, v + 1)))
    return min(tail + 2.0 * m * delta * worst, 1.0)


def one_run_p_value(m: int, r: int, v: int, eps: float, *, delta: float) -> float:
    """P-value of ``v`` correct guesses out of ``r`` (m canaries) under (eps, delta)-DP.

    Parameters
    ----------
    m, r, v : int
        Canaries, guesses (not abstentions) and correct guesses, ``0 <= v <= r <= m``.
    eps : float >= 0
    delta : float in [0, 1]

    Returns
    -------
    float in [0, 1]
        ``min(1, P[Bin(r, q) >= v] + 2 m delta max_i P[v - i <= Bin(r, q) < v] / i)``.

    Raises
    ------
    ValueError
        Counts out of order, eps < 0 or delta outside [0, 1].

    Examples
    --------
    >>> round(one_run_p_value(100, 100, 75, math.log(3), delta=0.0), 3)  # 75 % right = eps log 3's mean
    0.553
    """
    m, r, v = _check_counts(m, r, v)
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta must be in [0, 1], got {delta!r}")
    return _p_value(m, r, v, float(eps), float(delta), _log_choose(r))


def one_run_epsilon(m: int, r: int, v: int, *, delta: float = 1e-5, confidence: float = 0.95) -> float:
    """Largest eps that ``v`` correct guesses out of ``r`` reject at confidence ``confidence``.

    Parameters
    ----------
    m, r, v : int
        Canaries, guesses and correct guesses.
    delta : float in [0, 1)
    confidence : float in (0, 1)
        ``1 - beta``.

    Returns
    -------
    float
        The lower bound (0 when even eps = 0 is not rejected); the low end of a
        bisection to 2**-30 of its bracket (as the paper's code), so never above the exact value.

    Raises
    ------
    ValueError
        As :func:`one_run_p_value`, or ``confidence`` outside (0, 1).

    References
    ----------
    Steinke, Nasr, Jagielski (2023), Appendix D; the worked figures of the paper
    (0.673 for m = 1000, r = 100, v = 75, delta = 1e-4; 2.675 for m = 1e5, r = 1510,
    v = 1439, delta = 1e-5; both at 95 %) are reproduced by the tests.

    Examples
    --------
    >>> round(one_run_epsilon(1000, 100, 75, delta=1e-4, confidence=0.95), 3)
    0.673
    >>> one_run_epsilon(1000, 100, 50)
    0.0
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    m, r, v = _check_counts(m, r, v)
    beta = 1.0 - confidence

    log_choose = _log_choose(r)

    def rejected(eps: float) -> bool:
        return _p_value(m, r, v, eps, delta, log_choose) < beta

    if not rejected(0.0):
        return 0.0
    low, high = 0.0, 1.0
    while rejected(high):
        low, high = high, high * 2.0
        if high > 1e3:  # p-values this small do not occur for finite counts; guard the loop
            return low
    for _ in range(_BISECTIONS):
        mid = (low + high) / 2.0
        low, high = (mid, high) if rejected(mid) else (low, mid)
    return low


@functools.lru_cache(maxsize=256)
def _ceiling(m: int, r: int, delta: float, level: float) -> float:
    """The bound of r guesses all right (the most m canaries can show with r guesses)."""
    return one_run_epsilon(m, r, r, delta=delta, confidence=level)


def default_guess_grid(m: int) -> tuple[int, ...]:
    """Numbers of guesses tried: 10, 20, 50, 100, 200, 500, ... below m, and m itself.

    Fixed before the data are seen (so the Bonferroni split over it is valid).

    >>> default_guess_grid(300)
    (10, 20, 50, 100, 200, 300)
    >>> default_guess_grid(6)
    (6,)
    """
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    grid, base = [], 10
    while base < m:
        grid += [g for g in (base, 2 * base, 5 * base) if g < m]
        base *= 10
    return tuple(sorted(set(grid))) + (int(m),)


SPARSE_FRACTIONS = (0.05, 0.2, 1.0)


def sparse_guess_grid(m: int, fractions=SPARSE_FRACTIONS) -> tuple[int, ...]:
    """Three numbers of guesses, as fractions of m: 5 %, 20 % and all m canaries (at least 10 each).

    The canary audit's grid, fixed before the data are seen. Fewer grid points cost less
    in the Bonferroni split (3 points: each at level beta / 3 instead of beta / 6 for
    the 6 points of :func:`default_guess_grid` at m = 500), and these three cover the two
    regimes of the paper's Sec. 7: a strong attack is most certain about its extreme
    scores (few guesses, 5 %), a weak but even one gains from guessing on every canary
    (the binomial test's power grows with the number of guesses); 20 % sits between.

    >>> sparse_guess_grid(500)
    (25, 100, 500)
    >>> sparse_guess_grid(60)
    (10, 12, 60)
    >>> sparse_guess_grid(8)
    (8,)
    """
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    return tuple(sorted({min(m, max(10, int(round(f * m)))) for f in fractions}))


def guesses_at(y_score, r: int, *, seed: int = 0) -> np.ndarray:
    """The auditor's guesses: +1 on the ``ceil(r / 2)`` highest scores, -1 on the ``floor(r / 2)`` lowest, 0 else.

    Ties are broken by a seeded random order, so equal scores are never ordered by
    their position in the input.

    Returns
    -------
    ndarray of shape (m,), dtype int8
    """
    y_score = np.asarray(y_score, dtype=np.float64)
    m = len(y_score)
    if not 0 <= r <= m:
        raise ValueError(f"r must be in 0..{m} (the number of canaries), got {r}")
    tiebreak = np.random.default_rng(seed).permutation(m)
    order = np.lexsort((tiebreak, -y_score))  # highest score first
    out = np.zeros(m, dtype=np.int8)
    n_pos = (r + 1) // 2
    out[order[:n_pos]] = 1
    if r - n_pos:
        out[order[m - (r - n_pos):]] = -1
    return out


@dataclass(frozen=True)
class OneRunBound:
    """The one-run bound of one set of canaries.

    Attributes
    ----------
    epsilon : float
        The lower bound at ``confidence`` (Bonferroni over ``grid``): the largest of ``epsilons``.
    n_guesses, n_correct : int
        r and v of the number of guesses that gave it.
    m : int
        Canaries (units; a canary repeated r times is one unit).
    grid, correct, epsilons : tuple
        Every number of guesses tried, its correct guesses and its bound (each at the split level).
    max_epsilon : float
        The largest bound these m canaries can give (every guess right, best r of the grid).
    confidence, delta : float
    """

    epsilon: float
    n_guesses: int
    n_correct: int
    m: int
    grid: tuple
    correct: tuple
    epsilons: tuple
    max_epsilon: float
    confidence: float
    delta: float

    def to_dict(self) -> dict:
        return {"epsilon": self.epsilon, "n_guesses": self.n_guesses, "n_correct": self.n_correct, "m": self.m,
                "max_epsilon": self.max_epsilon, "confidence": self.confidence, "delta": self.delta,
                "grid": list(self.grid), "correct": list(self.correct), "epsilons": list(self.epsilons)}


def one_run_audit(y_true, y_score, *, delta: float = 1e-5, confidence: float = 0.95, grid=None,
                  seed: int = 0) -> OneRunBound:
    """The one-run bound from the canaries' inclusion bits and attack scores (higher = included).

    Parameters
    ----------
    y_true : array-like of shape (m,)
        Inclusion bits, 1 = the canary was in the training data. They must have been
        drawn independently with probability 1/2 for the bound to hold.
    y_score : array-like of shape (m,)
        Attack score of each canary, higher = more likely included.
    delta : float in [0, 1)
    confidence : float in (0, 1)
        Of the reported bound, after the Bonferroni split over ``grid``.
    grid : sequence of int, optional
        Numbers of guesses to try (default :func:`default_guess_grid`); values above m are dropped.
    seed : int
        Tie-breaking seed of :func:`guesses_at`.

    Returns
    -------
    OneRunBound

    Raises
    ------
    ValueError
        Shapes differ, labels not 0/1, a non-finite score, or fewer than 2 canaries.

    Examples
    --------
    >>> y = np.array([1, 0] * 500); s = y + 0.01 * np.arange(1000) % 0.5
    >>> b = one_run_audit(y, s, delta=1e-5)
    >>> b.n_correct == b.n_guesses, b.epsilon > 2.0
    (True, True)
    """
    y_true = np.asarray(y_true)
    y_score = np.asarray(y_score, dtype=np.float64)
    if y_true.ndim != 1 or y_true.shape != y_score.shape:
        raise ValueError(f"y_true and y_score must be 1-D of equal length, got {y_true.shape} and {y_score.shape}")
    if len(y_true) < 2:
        raise ValueError(f"the one-run bound needs at least 2 canaries, got {len(y_true)}")
    if not np.isin(y_true, (0, 1)).all():
        raise ValueError("y_true must hold inclusion bits 0/1 (1 = included in training)")
    if not np.isfinite(y_score).all():
        raise ValueError("y_score holds NaN or inf; score every canary")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    m = len(y_true)
    grid = tuple(sorted({int(g) for g in (grid or default_guess_grid(m)) if 1 <= int(g) <= m}))
    if not grid:
        raise ValueError(f"no number of guesses of the grid is in 1..{m}")
    level = 1.0 - (1.0 - confidence) / len(grid)
    truth = np.where(y_true == 1, 1, -1)
    correct, epsilons = [], []
    for r in grid:
        guesses = guesses_at(y_score, r, seed=seed)
        v = int(np.count_nonzero(guesses == truth))
        correct.append(v)
        epsilons.append(one_run_epsilon(m, r, v, delta=delta, confidence=level))
    best = int(np.argmax(epsilons))
    ceiling = max(_ceiling(m, r, delta, level) for r in grid)
    return OneRunBound(epsilon=float(epsilons[best]), n_guesses=grid[best], n_correct=correct[best], m=m, grid=grid,
                       correct=tuple(correct), epsilons=tuple(float(e) for e in epsilons),
                       max_epsilon=float(ceiling), confidence=float(confidence), delta=float(delta))
