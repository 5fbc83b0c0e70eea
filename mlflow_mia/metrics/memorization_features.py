"""Which members does the attack flag, and why? Memorization-feature analysis.

("Exposure" is also the name of the canary metric of Carlini et al. 2019, a
different thing. A member is called "exposed" below when the attack flags it.)

Mireshghallah et al. (2022), Sec. 4.6 and Table 7: label each *member* sample
"exposed" when the attack flags it at a chosen false-positive rate, describe each
member with simple features, fit a logistic regression on a train split, and
report precision and recall on the train and test splits for each feature set
and their union. The paper finds the number of non-alphanumeric characters the
most predictive single feature.

Features (the paper's letters):

* ``A_digits``: number of digit characters;
* ``B_length``: length in tokens;
* ``C_non_alnum``: number of non-alphanumeric, non-space characters;
* ``D_rare_tokens``: frequencies (in the training set) of the sample's 3 least
  frequent tokens, ascending.

The paper's feature (E), an encoder's [CLS] embedding, can be passed as an extra
feature set.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import precision_score, recall_score
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
import pandas as pd

__all__ = ["token_frequencies", "sample_features", "memorization_feature_analysis"]


def token_frequencies(token_ids: Sequence[Sequence[int]], *, vocab_size: int) -> np.ndarray:
    """Count of each token id over a training set.

    Parameters
    ----------
    token_ids : sequence of int sequences
        Token ids of each training sample (special tokens excluded by the caller).
    vocab_size : int
        Use ``len(tokenizer)`` (it counts added tokens; ``tokenizer.vocab_size`` does not).

    Returns
    -------
    ndarray of shape (vocab_size,), dtype int64

    >>> token_frequencies([[1, 2, 2], [2, 3]], vocab_size=5).tolist()
    [0, 1, 3, 1, 0]
    """
    flat = np.concatenate([np.asarray(t, dtype=np.int64) for t in token_ids]) if len(token_ids) else np.zeros(0, int)
    if flat.size and (flat.min() < 0 or flat.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size}); pass vocab_size=len(tokenizer)")
    return np.bincount(flat, minlength=vocab_size).astype(np.int64)


def sample_features(texts: Sequence[str], token_ids: Sequence[Sequence[int]], frequencies: np.ndarray,
                    ) -> dict[str, np.ndarray]:
    """Features A-D of each sample.

    Parameters
    ----------
    texts : sequence of str, length n_samples
    token_ids : sequence of int sequences, length n_samples
        Maskable token ids of each sample.
    frequencies : ndarray of shape (vocab_size,)
        From :func:`token_frequencies` over the target's training data.

    Returns
    -------
    dict of str to ndarray of shape (n_samples, d), dtype float64
        ``A_digits`` (d=1), ``B_length`` (d=1), ``C_non_alnum`` (d=1),
        ``D_rare_tokens`` (d=3; a sample with fewer than 3 tokens repeats its rarest).

    >>> f = sample_features(["Room 12, bed 3!"], [[5, 6, 7, 8]], np.array([0, 0, 0, 0, 0, 9, 1, 4, 2]))
    >>> f["A_digits"].ravel().tolist(), f["C_non_alnum"].ravel().tolist(), f["D_rare_tokens"].tolist()
    ([3.0], [2.0], [[1.0, 2.0, 4.0]])
    """
    if len(texts) != len(token_ids):
        raise ValueError(f"texts has {len(texts)} entries but token_ids has {len(token_ids)}")
    digits = [sum(c.isdigit() for c in t) for t in texts]
    non_alnum = [sum(not c.isalnum() and not c.isspace() for c in t) for t in texts]
    rare = []
    for ids in token_ids:
        f = np.sort(frequencies[np.asarray(ids, dtype=np.int64)])[:3].astype(np.float64)
        rare.append(np.pad(f, (0, 3 - len(f)), mode="edge") if 0 < len(f) < 3 else f if len(f) else np.zeros(3))
    col = lambda x: np.asarray(x, dtype=np.float64).reshape(-1, 1)  # noqa: E731
    return {"A_digits": col(digits), "B_length": col([len(i) for i in token_ids]), "C_non_alnum": col(non_alnum),
            "D_rare_tokens": np.asarray(rare, dtype=np.float64).reshape(-1, 3)}


def memorization_feature_analysis(features: Mapping[str, np.ndarray], exposed, *, test_size: float = 0.3,
                                  seed: int = 0):
    """Precision and recall of a logistic regression predicting "exposed" from each feature set.

    Parameters
    ----------
    features : mapping of str to ndarray of shape (n_members, d)
        Named feature sets (e.g. from :func:`sample_features`); each is fitted
        alone, and all together as ``"all"``.
    exposed : array-like of shape (n_members,), bool
        Whether the attack flags each member at the chosen FPR.
    test_size : float
        Fraction of members in the stratified test split.
    seed : int

    Returns
    -------
    pandas.DataFrame
        One row per feature set: ``features``, ``train_precision``, ``train_recall``,
        ``test_precision``, ``test_recall``, ``n_train``, ``n_test``, ``exposed_rate``.

    Raises
    ------
    ValueError
        Fewer than 2 exposed or 2 unexposed members: nothing to learn.

    Notes
    -----
    Features are standardised and the classes weighted ("balanced") because few
    members are exposed at low FPR; the paper does not state its settings.
    """
    y = np.asarray(exposed, dtype=bool)
    n_pos = int(y.sum())
    if n_pos < 2 or len(y) - n_pos < 2:
        raise ValueError(f"{n_pos} of {len(y)} members are exposed; the analysis needs at least 2 exposed and 2 "
                         "unexposed members (try a larger FPR)")
    sets = dict(features)
    for name, x in sets.items():
        if np.shape(x)[0] != len(y):
            raise ValueError(f"feature set {name!r} has {np.shape(x)[0]} rows, expected {len(y)}")
    sets["all"] = np.hstack([np.asarray(x, dtype=np.float64) for x in features.values()])
    idx_train, idx_test = train_test_split(np.arange(len(y)), test_size=test_size, random_state=seed, stratify=y)
    rows = []
    for name, x in sets.items():
        x = np.asarray(x, dtype=np.float64)
        clf = make_pipeline(StandardScaler(), LogisticRegression(class_weight="balanced", max_iter=1000))
        clf.fit(x[idx_train], y[idx_train])
        row: dict[str, str | int | float] = {"features": name}
        for split, idx in (("train", idx_train), ("test", idx_test)):
            pred = clf.predict(x[idx])
            row[f"{split}_precision"] = precision_score(y[idx], pred, zero_division=np.nan)
            row[f"{split}_recall"] = recall_score(y[idx], pred, zero_division=np.nan)
        row.update(n_train=len(idx_train), n_test=len(idx_test), exposed_rate=float(y.mean()))
        rows.append(row)
    return pd.DataFrame(rows)
