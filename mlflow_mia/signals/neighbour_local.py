"""Per-position neighbour differences: the target's loss at the swapped tokens only.

The neighbourhood attack of Mattern et al. (2023, Eq. 3) compares whole-text
losses, ``L(x_j) - L(x)``. A swap changes one word, but every other token's loss
also moves, because each sees the new word in its context; with a masked LM and
a short text that context term is as large as the swapped-word term and carries
little membership signal (``docs/explanations/neighbourhood.md``). This module keeps the
paper's comparison -- the target's loss on the text against its loss on a close
variant it has not seen -- but reads it at the swapped tokens only.

Definition
----------
Under the target tokenizer, a text ``x`` (ids ``a``) and a neighbour ``x_j``
(ids ``b``) share a common prefix of ``p`` tokens and a common suffix of ``s``
tokens (the longest ones, with ``p + s <= min(len a, len b)``). The changed
region is ``R(x) = [p, len a - s)`` in ``x`` and ``R(x_j) = [p, len b - s)`` in
``x_j``. With the pseudo-log-likelihood NLL of one masked token,
``l(y, t) = -log p_theta(y_t | y_{\\t})`` (one copy per token, the others
unmasked), the local difference of the pair is::

    delta_j(x) = sum_{t in R(x_j)} l(x_j, t) - sum_{t in R(x)} l(x, t)        (nats)

and the per-text signal is ``mean_j delta_j(x)`` (higher = the original words
fit the target better than plausible substitutes = member). For ``m = 1`` and a
single-token word the two masked inputs are identical, so ``delta_j`` is
``log p(original) - log p(substitute)`` at that position, in one context. For
``m > 1`` the region spans from the first to the last changed token and
includes the unchanged tokens in between.

Cost: one masked copy per changed token per pair (a few per neighbour), instead
of one per token of every neighbour for the paper's PLL variant.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mlflow_mia.config import SignalConfig
from mlflow_mia.signals.energy import masked_token_logprobs, tokenize
from mlflow_mia.signals.model import MaskedLM
from mlflow_mia.signals.runtime import token_limit

__all__ = ["changed_region", "local_scores"]


def changed_region(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """Lengths ``(p, s)`` of the longest common prefix and suffix of ``a`` and ``b``, ``p + s <= min(len)``.

    >>> changed_region(np.array([1, 2, 3, 4]), np.array([1, 9, 9, 4]))
    (1, 1)
    >>> changed_region(np.array([1, 2, 4]), np.array([1, 2, 2, 4]))
    (2, 1)
    """
    n = min(len(a), len(b))
    p = 0
    while p < n and a[p] == b[p]:
        p += 1
    s = 0
    while s < n - p and a[len(a) - 1 - s] == b[len(b) - 1 - s]:
        s += 1
    return p, s


def local_differences(target: MaskedLM, texts: Sequence[str], neighbours: Sequence[Sequence[str]], *,
                      config: SignalConfig | None = None, device=None) -> list[np.ndarray]:
    """``delta_j(x)`` of every neighbour of every text (module docstring), in nats.

    Parameters
    ----------
    target : MaskedLM
    texts : sequence of str, length n_texts
    neighbours : sequence (n_texts) of sequence of str
        Each text's neighbours (in an audit, from
        :meth:`~mlflow_mia.signals.neighbour_recipe.NeighbourRecipe.neighbours`).
    config : SignalConfig, optional
        ``max_length`` and ``token_budget`` are used; the kind is always PLL at the changed tokens.

    Returns
    -------
    list (n_texts) of ndarray of shape (n_neighbours_i,), float64
        Empty for a text without neighbours. A neighbour whose tokens equal the
        text's (no changed token) gets 0.
    """
    config = config or SignalConfig()
    limit = token_limit(config.max_length, target.max_length)
    flat = [x for nb in neighbours for x in nb]
    if not flat:
        return [np.zeros(0) for _ in texts]
    ids, maskable, _ = tokenize(target, list(texts) + flat, max_length=limit)
    owner = np.repeat(np.arange(len(texts)), [len(nb) for nb in neighbours])
    copies, slots = [], []  # slots[c] = (pair index, sign)
    for j, i in enumerate(owner):
        a, b = ids[i], ids[len(texts) + j]
        p, s = changed_region(a, b)
        for seq, sign, stop in ((i, -1.0, len(a) - s), (len(texts) + j, 1.0, len(b) - s)):
            keep = set(maskable[seq].tolist())
            for t in range(p, stop):
                if t in keep:
                    copies.append((seq, np.array([t], dtype=np.int64)))
                    slots.append((j, sign))
    out = np.zeros(len(flat), dtype=np.float64)
    if copies:
        logp = masked_token_logprobs(target, ids, copies, token_budget=config.token_budget, device=device)
        for (j, sign), lp in zip(slots, logp):
            out[j] += sign * -float(lp[0])
    return np.split(out, np.cumsum([len(nb) for nb in neighbours])[:-1]) if len(texts) else []


def local_scores(target: MaskedLM, texts: Sequence[str], neighbours: Sequence[Sequence[str]], *,
                 config: SignalConfig | None = None, device=None) -> np.ndarray:
    """``mean_j delta_j(x)`` per text, shape (n_texts,), float64, nats; NaN without neighbours.

    Higher = member (the text's own words beat the generator's substitutes under the target).
    """
    diffs = local_differences(target, texts, neighbours, config=config, device=device)
    return np.array([d.mean() if len(d) else np.nan for d in diffs], dtype=np.float64)
