"""Plant a canary set's included canaries in training data, at random positions.

:func:`insert` takes the training texts as a list of str, a pandas Series, a pandas
DataFrame (with a text column), or a Hugging Face ``datasets.Dataset`` (with a text
column), and returns the same kind with every included canary's copies added: ``r``
copies of a canary with repetition count ``r``. The original rows keep their order;
the copies take random slots among them (a seeded permutation), so a fine-tuning job
that reads the data in order (or shuffles it) sees them spread through an epoch.

``insert(..., with_digest=True)`` also returns the digest of the training texts it made
(:func:`dataset_digest`). Pass it to the audit (``--planted-in``, evaluator key
``planted_in``): the canary gate's record then names the data the set was planted in.
The tool cannot see which canaries were trained on, so this is the auditor's statement,
kept beside the verdict for a reviewer to check against the training run.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from mlflow_mia.canaries.canary_set import CanarySet
from mlflow_mia.data import text_hash

__all__ = ["insert", "dataset_digest", "Planted"]


class Planted(NamedTuple):
    """What ``insert(..., with_digest=True)`` returns.

    Attributes
    ----------
    data : list, pandas.Series, pandas.DataFrame or datasets.Dataset
        The training data with the canaries' copies (the kind given).
    planted_in : str
        :func:`dataset_digest` of its texts: the value of ``--planted-in``.
    """

    data: Any
    planted_in: str


def dataset_digest(texts) -> str:
    """``sha256:<64 hex>`` naming a training set: the sha256 of its texts' sha256s, in order.

    Computed by :func:`insert` over the texts it returns, canary copies included, so the
    digest names the data a model was trained on; anyone holding that data can recompute
    it (a missing text counts as its ``str``).

    Parameters
    ----------
    texts : iterable of str

    Returns
    -------
    str

    Examples
    --------
    >>> digest = dataset_digest(["a", "b"])
    >>> digest == dataset_digest(["a", "b"]), digest == dataset_digest(["b", "a"])
    (True, False)
    >>> dataset_digest(["a"])[:7]
    'sha256:'
    """
    h = hashlib.sha256()
    for text in texts:
        h.update(text_hash(str(text)).encode("ascii"))
    return f"sha256:{h.hexdigest()}"


def insertion_order(n_rows: int, n_copies: int, *, seed: int) -> np.ndarray:
    """Where rows go: ``order[j]`` is the source row of output row ``j``.

    Sources ``0 .. n_rows - 1`` are the original rows, in their order; sources
    ``n_rows ..`` are the canary copies, placed in ``n_copies`` random output slots
    in a random order (``numpy.random.default_rng(seed)``).

    Returns
    -------
    ndarray of shape (n_rows + n_copies,), dtype int64
        A permutation of ``range(n_rows + n_copies)``.

    Examples
    --------
    >>> order = insertion_order(5, 2, seed=0)
    >>> sorted(order.tolist()) == list(range(7)), [int(i) for i in order if i < 5]
    (True, [0, 1, 2, 3, 4])
    """
    rng = np.random.default_rng(seed)
    total = n_rows + n_copies
    order = np.empty(total, dtype=np.int64)
    slots = np.zeros(total, dtype=bool)
    slots[rng.choice(total, size=n_copies, replace=False)] = True
    order[slots] = n_rows + rng.permutation(n_copies)
    order[~slots] = np.arange(n_rows)
    return order


def insert(data, canary_set: CanarySet, *, seed: int = 0, text_column: str = "text", with_digest: bool = False):
    """The training data with the included canaries' copies placed at random positions.

    Parameters
    ----------
    data : list of str, pandas.Series, pandas.DataFrame or datasets.Dataset
        The training texts (a DataFrame or Dataset holds them in ``text_column``; the
        copies' other columns are missing values: None / NaN).
    canary_set : CanarySet
        Its included canaries are inserted, each ``repetitions`` times.
    seed : int
        Seed of the positions (the same seed and inputs give the same output).
    text_column : str
        Text column of a DataFrame or Dataset.
    with_digest : bool
        Also return the :func:`dataset_digest` of the output's texts (see the module docstring).

    Returns
    -------
    Same kind as ``data``, or Planted
        ``len(data) + canary_set.n_copies`` rows (a Series or DataFrame gets a fresh
        RangeIndex; a Series keeps its name); with ``with_digest``, a :class:`Planted`
        ``(data, planted_in)``.

    Raises
    ------
    ValueError
        ``text_column`` missing from a DataFrame or Dataset.
    TypeError
        Another kind of ``data``.

    Examples
    --------
    >>> from mlflow_mia.canaries.canary_set import make_canaries
    >>> cs = make_canaries(4, ["my pin is {digits:4}"], repetitions=(2,), seed=1)
    >>> out = insert(["a", "b", "c"], cs, seed=0)
    >>> len(out) == 3 + 2 * int(cs.included.sum()), [t for t in out if len(t) == 1]
    (True, ['a', 'b', 'c'])
    >>> out, planted_in = insert(["a", "b", "c"], cs, seed=0, with_digest=True)
    >>> planted_in == dataset_digest(out)
    True
    """
    out = _insert(data, canary_set, seed=seed, text_column=text_column)
    if not with_digest:
        return out
    if isinstance(out, (list, tuple)):
        texts = out
    elif hasattr(out, "columns"):  # a DataFrame
        texts = out[text_column].tolist()
    elif hasattr(out, "column_names"):  # a datasets.Dataset
        texts = out[text_column]
    else:  # a Series
        texts = out.tolist()
    return Planted(out, dataset_digest(texts))


def _insert(data, canary_set: CanarySet, *, seed: int, text_column: str):
    copies = canary_set.copies()
    if isinstance(data, (list, tuple)):
        rows = list(data) + copies
        order = insertion_order(len(data), len(copies), seed=seed)
        return [rows[i] for i in order]

    if isinstance(data, pd.Series):
        order = insertion_order(len(data), len(copies), seed=seed)
        both = pd.concat([data.reset_index(drop=True), pd.Series(copies, dtype=data.dtype if data.dtype == object
                                                                  else None)], ignore_index=True)
        return both.iloc[order].reset_index(drop=True).rename(data.name)
    if isinstance(data, pd.DataFrame):
        if text_column not in data.columns:
            raise ValueError(f"text_column {text_column!r} is not a column of the DataFrame: {list(data.columns)}")
        order = insertion_order(len(data), len(copies), seed=seed)
        both = pd.concat([data.reset_index(drop=True), pd.DataFrame({text_column: copies})], ignore_index=True)
        return both.iloc[order].reset_index(drop=True)
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a dependency
        datasets = None
    if datasets is not None and isinstance(data, datasets.Dataset):
        if text_column not in data.column_names:
            raise ValueError(f"text_column {text_column!r} is not a column of the Dataset: {data.column_names}")
        extra = {c: [None] * len(copies) for c in data.column_names}
        extra[text_column] = copies
        added = datasets.Dataset.from_dict(extra, features=data.features)
        order = insertion_order(len(data), len(copies), seed=seed)
        return datasets.concatenate_datasets([data, added]).select(order.tolist()).flatten_indices()
    raise TypeError(f"insert takes a list of str, a pandas Series or DataFrame, or a datasets.Dataset; got "
                    f"{type(data).__name__}")
