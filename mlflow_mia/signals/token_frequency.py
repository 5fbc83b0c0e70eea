"""Token counts of a reference corpus under a model's tokenizer: DC-PDD's token frequency distribution.

Zhang et al. (2024), "Pretraining Data Detection for Large Language Models: A
Divergence-based Calibration Method", Sec. 3: the frequency of token ``v`` in a
reference corpus, with Laplace smoothing,

    f(v) = (c(v) + 1) / (N + |V|),

``c(v)`` the count of ``v``, ``N`` the corpus's token count and ``|V|`` the
vocabulary size. Here the corpus is the audit's population texts (their tokens,
whole texts, without the special tokens the tokenizer adds around them) or a
frequency file of counts made elsewhere (:func:`load_counts`). The counts are
computed once per audit, and kept under the signal cache's folder, keyed by the
tokenizer and the corpus's text hashes, when the audit has a cache.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Sequence

import numpy as np

from mlflow_mia.data import text_hash
from mlflow_mia.signals.energy import tokenize

__all__ = ["corpus_counts", "load_counts", "log_frequencies", "vocab_size"]


def vocab_size(lm) -> int:
    """Rows of the frequency table: the tokenizer's length (added tokens included, never ``vocab_size``)."""
    return len(lm.tokenizer)


def count_ids(token_ids: Sequence[np.ndarray], size: int) -> np.ndarray:
    """How often each id occurs in ``token_ids``: int64 of shape (size,).

    >>> count_ids([np.array([0, 2, 2]), np.array([2])], 4).tolist()
    [1, 0, 3, 0]
    """
    flat = np.concatenate([np.asarray(x, dtype=np.int64) for x in token_ids]) if len(token_ids) else np.zeros(0, int)
    return np.bincount(flat, minlength=size).astype(np.int64)


def corpus_ids(lm, texts: Sequence[str]) -> list[np.ndarray]:
    """Each text's token ids, whole (no truncation), without the special tokens the tokenizer adds."""
    ids, maskable, _ = tokenize(lm, list(texts), max_length=10**9)
    return [x[m] for x, m in zip(ids, maskable)]


def corpus_counts(lm, texts: Sequence[str], *, cache_dir: str | None = None) -> np.ndarray:
    """Token counts of ``texts`` under ``lm``'s tokenizer (:func:`corpus_ids`): int64 of shape (vocab_size(lm),).

    With ``cache_dir``, the counts are read from (or written to) ``<cache_dir>/token_counts/<digest>.npy``,
    the digest of the tokenizer's identity and the texts' hashes.
    """
    size = vocab_size(lm)
    path = None
    if cache_dir is not None:
        digest = hashlib.sha256("\n".join([str(lm.tokenizer_id), str(size), *map(text_hash, texts)]).encode())
        path = os.path.join(cache_dir, "token_counts", f"{digest.hexdigest()}.npy")
        if os.path.exists(path):
            counts = np.load(path)
            if counts.shape == (size,):
                return counts.astype(np.int64)
    counts = count_ids(corpus_ids(lm, texts), size)
    if path is not None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.save(path, counts)
    return counts


def load_counts(path: str, size: int) -> np.ndarray:
    """A frequency file's token counts: ``.npy`` (an array) or ``.json`` (a list), one count per token id.

    Parameters
    ----------
    path : str
    size : int
        The tokenizer's length; a shorter table is padded with zeros (ids it never counted).

    Returns
    -------
    ndarray of shape (size,), int64

    Raises
    ------
    ValueError
        Another suffix, a table that is not 1-D, negative or non-integer counts, or more
        entries than the tokenizer has ids (a table made with another tokenizer).
    FileNotFoundError
        No such file.
    """
    if path.endswith(".npy"):
        table = np.load(path, allow_pickle=False)
    elif path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            table = np.asarray(json.load(f))
    else:
        raise ValueError(f"frequency file {path!r}: give token counts as .npy (an array) or .json (a list), one "
                         "count per token id of the target's tokenizer")
    if table.ndim != 1 or len(table) > size or not np.issubdtype(table.dtype, np.number):
        raise ValueError(f"frequency file {path!r} holds shape {table.shape}; expected one count per token id, at "
                         f"most {size} (the target tokenizer's length): a table made with another tokenizer?")
    if (table < 0).any() or (table != np.round(table)).any():
        raise ValueError(f"frequency file {path!r}: counts must be non-negative integers")
    out = np.zeros(size, dtype=np.int64)
    out[:len(table)] = table.astype(np.int64)
    return out


def log_frequencies(counts: np.ndarray) -> np.ndarray:
    """``log f(v) = log((c(v) + 1) / (N + |V|))`` for every id (float64, nats, < 0): Laplace-smoothed.

    >>> np.exp(log_frequencies(np.array([1, 0, 3]))).round(3).tolist()
    [0.286, 0.143, 0.571]
    """
    counts = np.asarray(counts, dtype=np.float64)
    return np.log(counts + 1.0) - np.log(counts.sum() + len(counts))
