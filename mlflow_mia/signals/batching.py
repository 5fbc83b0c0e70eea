"""Length-sorted batches under a token budget, and right-padding.

Used by every forward loop of the signals layer (masked energy, PLL, neighbour
generation): rows are sorted by length, longest first, and each batch takes as
many rows as fit in ``token_budget`` padded tokens, so batches are large for
short texts and padding stays small.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

__all__ = ["plan_batches", "pad_batch"]


def plan_batches(lengths, token_budget: int, *, max_padding: float = 0.05,
                 min_fill: float = 0.25) -> Iterator[np.ndarray]:
    """Yield the row indices of each batch.

    Rows are taken longest first; a batch takes rows while they fit in
    ``token_budget`` padded tokens, and closes early at a row shorter than
    ``(1 - max_padding)`` of its width once it holds ``min_fill * token_budget``
    tokens. Few samples of spread-out lengths thus get smaller batches of similar
    lengths instead of large batches that are mostly padding (with 100 BBC sentences
    at K = 10: 5 % padding instead of 17 %), while many samples still fill the budget.

    Parameters
    ----------
    lengths : array-like of shape (n_rows,), int
        Token count of each row.
    token_budget : int
        Upper bound of ``rows x padded width`` per batch (a longer row still gets a
        batch of its own).
    max_padding : float
        Padding share a batch accepts before closing early (1.0: never close early).
    min_fill : float
        Fraction of ``token_budget`` a batch holds before it may close early.

    Yields
    ------
    ndarray of int64
        Indices into ``lengths``, longest first (stable for equal lengths).

    >>> [b.tolist() for b in plan_batches([3, 9, 4, 4], token_budget=9)]
    [[1], [2, 3], [0]]
    >>> [b.tolist() for b in plan_batches([10, 10, 6, 6], token_budget=40, min_fill=0.5)]
    [[0, 1], [2, 3]]
    >>> [b.tolist() for b in plan_batches([10, 10, 6, 6], token_budget=40, max_padding=1.0)]
    [[0, 1, 2, 3]]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    start = 0
    while start < len(order):
        width = int(lengths[order[start]])
        stop = min(len(order), start + max(1, token_budget // width))
        shorter = lengths[order[start:stop]] < width * (1.0 - max_padding)
        shorter[:max(1, -(-int(min_fill * token_budget) // width))] = False  # fill the batch first
        if shorter.any():
            stop = start + int(np.argmax(shorter))
        yield order[start:stop]
        start = stop


def pad_batch(sequences: Sequence[np.ndarray], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad token id sequences.

    Returns
    -------
    input_ids : ndarray of shape (n_rows, max_len), int64
    attention_mask : ndarray of shape (n_rows, max_len), int64
        1 on real tokens, 0 on padding.

    >>> ids, mask = pad_batch([np.array([5, 6, 7]), np.array([8])], pad_id=0)
    >>> ids.tolist(), mask.tolist()
    ([[5, 6, 7], [8, 0, 0]], [[1, 1, 1], [1, 0, 0]])
    """
    width = max(len(s) for s in sequences)
    input_ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    attention_mask = np.zeros((len(sequences), width), dtype=np.int64)
    for r, seq in enumerate(sequences):
        input_ids[r, :len(seq)] = seq
        attention_mask[r, :len(seq)] = 1
    return input_ids, attention_mask
