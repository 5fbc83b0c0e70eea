"""Maskable positions and seeded mask subsets for the masked energy.

Mireshghallah et al. (2022), Sec. 2.3, Eq. 2: for a sequence of ``T`` maskable
tokens, a mask is a subset ``I`` of ``l = ceil(0.15 T)`` positions; the energy
averages the masked-token NLL over K such subsets.

Special tokens ([CLS], [SEP], <s>, </s>, padding) are never maskable; they are
read from the tokenizer's special-tokens mask, never hard-coded.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np

__all__ = ["num_masked", "sample_masks"]


def num_masked(n_tokens: int, rate: float) -> int:
    """``l = ceil(rate * T)``, the number of positions in each mask subset.

    The product is rounded to 9 decimals first, so that ``0.15 * 20`` gives 3, not 4
    from floating-point error.

    >>> num_masked(20, 0.15), num_masked(21, 0.15), num_masked(1, 0.15)
    (3, 4, 1)
    """
    if n_tokens < 1:
        raise ValueError(f"a sample needs at least one maskable token, got T={n_tokens}")
    return max(1, min(n_tokens, math.ceil(round(rate * n_tokens, 9))))


def mask_rng(seed: int, key: str) -> np.random.Generator:
    """A generator owned by one sample: derived from ``(seed, key)`` alone.

    ``key`` is the sample's hex sha256 text hash, so masks do not depend on batch
    order, and two models with the same tokenizer draw the same masks (common
    random numbers for the likelihood ratio).
    """
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(key, 16)]))


def sample_masks(n_tokens: int, *, rate: float, num_masks: int, seed: int, key: str) -> np.ndarray:
    """Draw the K mask subsets of one sample.

    Parameters
    ----------
    n_tokens : int
        T, the number of maskable tokens.
    rate : float
        Mask rate; each subset has ``l = num_masked(T, rate)`` positions.
    num_masks : int
        K. When ``K >= C(T, l)`` every subset is returned once, in lexicographic
        order, so the energy is exactly Eq. 2. Otherwise K *distinct* subsets are drawn
        uniformly (without replacement among subsets).
    seed : int
    key : str
        Hex text hash of the sample (see :func:`mask_rng`).

    Returns
    -------
    ndarray of shape (n_masks, l), dtype int64
        Indices into the sample's maskable positions (0..T-1), each row sorted.
        ``n_masks = min(K, C(T, l))``.

    Examples
    --------
    >>> sample_masks(4, rate=0.5, num_masks=10, seed=0, key="ab").tolist()
    [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]
    >>> a = sample_masks(40, rate=0.15, num_masks=3, seed=0, key="ab")
    >>> a.shape, bool((a == sample_masks(40, rate=0.15, num_masks=3, seed=0, key="ab")).all())
    ((3, 6), True)
    """
    length = num_masked(n_tokens, rate)
    if math.comb(n_tokens, length) <= num_masks:
        return np.array(list(combinations(range(n_tokens), length)), dtype=np.int64).reshape(-1, length)
    rng = mask_rng(seed, key)
    seen: set[tuple[int, ...]] = set()
    rows = []
    while len(rows) < num_masks:
        row = tuple(sorted(rng.choice(n_tokens, size=length, replace=False).tolist()))
        if row not in seen:
            seen.add(row)
            rows.append(row)
    return np.array(rows, dtype=np.int64)


def pll_masks(n_tokens: int) -> np.ndarray:
    """One mask per maskable token (pseudo-log-likelihood, appendix A.3.2).

    >>> pll_masks(3).tolist()
    [[0], [1], [2]]
    """
    return np.arange(n_tokens, dtype=np.int64).reshape(-1, 1)
