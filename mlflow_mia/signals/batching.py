"""Length-sorted batches under a token budget, right-padding, length buckets, and halving on out-of-memory.

Used by every forward loop of the signals layer (masked energy, PLL, causal NLL,
entity confidence, neighbour generation): rows are sorted by length, longest first,
and each batch takes as many rows as fit in ``token_budget`` padded tokens, so
batches are large for short texts and padding stays small.

On CUDA the padded width is rounded up to a length bucket (:func:`bucket_width`):
attention kernels that build a plan per input shape (cuDNN's attention, which held
80 % of the host's time of a bf16 energy call on an H200, issue 45) then see a few
dozen shapes instead of one per length. Padding is masked, so the values of the
real tokens do not depend on the width (to float rounding; ``tests/signals/
test_gpu_path.py`` compares both on CPU). :func:`run_batches` runs a plan and
halves a batch that runs out of memory.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

__all__ = ["plan_batches", "pad_batch", "bucket_width"]

log = logging.getLogger(__name__)

#: Smallest step between two length buckets (tokens): widths up to 64 are multiples of 8.
BUCKET_STEP = 8
#: Length buckets per power-of-two octave above 64 (a step of 1/8 of the octave's start).
BUCKETS_PER_OCTAVE = 8


def bucket_width(n: int, limit: int | None = None) -> int:
    """The padded width of a batch whose longest row has ``n`` tokens: ``n`` rounded up to a length bucket.

    Buckets are multiples of :data:`BUCKET_STEP` (8) up to 64, then
    :data:`BUCKETS_PER_OCTAVE` (8) per power-of-two octave ``[2^k, 2^(k+1))``, a step of
    ``2^k / 8``: 64, 72, ..., 128, 144, ..., 256, 288, ..., 512, 576, ... So at most
    7 tokens or 12.5 % of the length are padding added, and lengths up to 512 fall into
    32 widths (eight each in 8-64, 72-128, 144-256 and 288-512), which attention kernels
    that plan per shape (cuDNN) reuse.

    Parameters
    ----------
    n : int
        Longest row of the batch, >= 1.
    limit : int, optional
        The model's position limit: the width never exceeds it (nor falls below ``n``),
        so absolute position embeddings are never indexed past their table.

    >>> [bucket_width(n) for n in (1, 8, 9, 27, 64, 65, 100, 128, 129, 200, 512, 513)]
    [8, 8, 16, 32, 64, 72, 104, 128, 144, 208, 512, 576]
    >>> bucket_width(509, limit=510)
    510
    """
    n = int(n)
    if n < 1:
        raise ValueError(f"a batch's longest row has {n} tokens; it needs at least 1")
    step = max(BUCKET_STEP, (1 << (n.bit_length() - 1)) // BUCKETS_PER_OCTAVE)
    width = -(-n // step) * step
    return max(n, min(width, limit)) if limit else width


def plan_batches(lengths, token_budget: int, *, max_padding: float = 0.05,
                 min_fill: float = 0.25, width: Callable[[int], int] | None = None) -> Iterator[np.ndarray]:
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
    width : callable, optional
        Padded width of a batch whose longest row has ``n`` tokens (e.g. :func:`bucket_width`);
        the budget counts that width. Default: ``n`` itself.

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
        longest = int(lengths[order[start]])
        padded = width(longest) if width is not None else longest
        stop = min(len(order), start + max(1, token_budget // padded))
        shorter = lengths[order[start:stop]] < longest * (1.0 - max_padding)
        shorter[:max(1, -(-int(min_fill * token_budget) // padded))] = False  # fill the batch first
        if shorter.any():
            stop = start + int(np.argmax(shorter))
        yield order[start:stop]
        start = stop


def pad_batch(sequences: Sequence[np.ndarray], pad_id: int, width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad token id sequences to the longest one's length, or to ``width`` (>= it) when given.

    Returns
    -------
    input_ids : ndarray of shape (n_rows, max_len), int64
    attention_mask : ndarray of shape (n_rows, max_len), int64
        1 on real tokens, 0 on padding.

    >>> ids, mask = pad_batch([np.array([5, 6, 7]), np.array([8])], pad_id=0)
    >>> ids.tolist(), mask.tolist()
    ([[5, 6, 7], [8, 0, 0]], [[1, 1, 1], [1, 0, 0]])
    >>> pad_batch([np.array([5, 6, 7])], pad_id=0, width=4)[1].tolist()
    [[1, 1, 1, 0]]
    """
    longest = max(len(s) for s in sequences)
    if width is not None and width < longest:
        raise ValueError(f"width {width} is shorter than the longest sequence ({longest} tokens)")
    width = width or longest
    input_ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    attention_mask = np.zeros((len(sequences), width), dtype=np.int64)
    for r, seq in enumerate(sequences):
        input_ids[r, :len(seq)] = seq
        attention_mask[r, :len(seq)] = 1
    return input_ids, attention_mask


def is_out_of_memory(exc: BaseException) -> bool:
    """True for an allocation failure a smaller batch may avoid.

    ``torch.OutOfMemoryError`` (CUDA's, raised by the caching allocator) and the
    ``RuntimeError`` of other backends whose message says "out of memory" (CUDA kernels,
    MPS, cuDNN/cuBLAS workspaces) or "can't allocate memory" (the CPU allocator).
    """
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _free_cached_memory(device) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def run_batches(batches: Iterable[np.ndarray], lengths, step: Callable[[np.ndarray], None], *,
                width: Callable[[int], int] | None = None, device=None) -> int:
    """Call ``step(rows)`` for each planned batch; a batch that runs out of memory is halved and retried.

    A failed batch (:func:`is_out_of_memory`) is split in two halves, which run in
    its place (and split again, down to one row); from then on every batch is split
    to at most half the padded tokens of the batch that failed, so one oversized plan
    costs one failure, not one per batch. ``step`` must not keep anything from a call
    that raises (compute first, store last): a retried row is stored once.

    Parameters
    ----------
    batches : iterable of ndarray (int64)
        Row indices of each batch (:func:`plan_batches`).
    lengths : array-like of shape (n_rows,), int
        Token count of each row: a split batch's padded tokens are ``rows x width(longest)``.
    step : callable
        Runs and stores one batch.
    width : callable, optional
        As in :func:`plan_batches`.
    device : torch.device or str, optional
        CUDA: the allocator's cached blocks are released before a retry.

    Returns
    -------
    int
        Out-of-memory failures absorbed (0 when every batch fitted).

    Raises
    ------
    MemoryError
        One row alone does not fit (with its length and what to change); other exceptions pass through.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    cap, failures = None, 0  # most padded tokens per batch since the last failure
    for planned in batches:
        queue = [planned]
        while queue:
            rows = queue.pop(0)
            longest = int(lengths[rows].max())
            padded = width(longest) if width is not None else longest
            if cap is not None and len(rows) > 1 and len(rows) * padded > cap:
                size = max(1, cap // padded)
                queue[0:0] = [rows[i:i + size] for i in range(0, len(rows), size)]
                continue
            try:
                step(rows)
                continue
            except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
                if not is_out_of_memory(exc):
                    raise
                if len(rows) == 1:
                    raise MemoryError(f"one text of {longest} tokens does not fit in the memory of {device or 'the'}"
                                      " device even alone; lower max_length, choose dtype bfloat16, or free the "
                                      "device's memory") from exc
                message = str(exc).splitlines()[0][:200]
            # out of the except block: the failed batch's tensors (held by the traceback) are freed now
            failures += 1
            _free_cached_memory(device)
            half = (len(rows) + 1) // 2
            cap = half * padded
            log.warning("a batch of %d rows x %d tokens ran out of memory (%s); retrying in halves, and at most "
                        "%d padded tokens per batch from now on", len(rows), padded, message, cap)
            queue[0:0] = [rows[:half], rows[half:]]
    return failures
