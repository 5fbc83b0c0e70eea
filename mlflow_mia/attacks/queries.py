"""Per-mask queries: each mask's energy kept as a separate query of the model, as LiRA uses augmentations.

The masked energy averages K masks (Mireshghallah et al. 2022, Eq. 2). Carlini et al.
(2022), Sec. IV-C / VI-B, query each model on several augmentations of an example and
fit a Gaussian per augmentation; averaging the statistic first throws that away. For a
masked LM the K masks are such queries: the same subsets for every model of one text
(common random numbers, seeded by the text), so query q of a text is comparable across
the target and the shadows.

:func:`query_cells` splits each row's ``token_logprobs`` (every masked token of every
mask, in mask order; ``l = ceil(mask_rate * T)`` tokens per mask) into one value per
mask, and checks that their mean is the row's energy (a wrong ``mask_rate`` or
``energy_reduction`` fails there). The attacks then score each (text, mask) cell and
average the cells' scores per text (:func:`per_text_mean`): the average of per-query
log likelihood ratios.
"""

from __future__ import annotations

import numpy as np

from mlflow_mia.signals.masking import num_masked

__all__: list[str] = []


def mask_energies(signal, *, mask_rate: float, energy_reduction: str = "sum") -> tuple[np.ndarray, np.ndarray]:
    """The energy of each mask of each row, flattened: ``(values, rows)``.

    Parameters
    ----------
    signal : SignalResult
        ``kind="energy"`` with ``token_logprobs``.
    mask_rate : float
        The audit's ``SignalConfig.mask_rate``.
    energy_reduction : {"sum", "mean"}
        The audit's ``SignalConfig.energy_reduction``.

    Returns
    -------
    values : ndarray of shape (n_cells,), float64
        Minus the sum (or mean) of the mask's token log-probs (nats, lower = member).
    rows : ndarray of shape (n_cells,), int64
        The row of each cell, non-decreasing; row i has ``min(K, C(T_i, l_i))`` cells.

    Raises
    ------
    ValueError
        A PLL signal, a row without token log-probs, or log-probs that do not split
        into masks whose mean energy is the row's value (wrong ``mask_rate`` or reduction).

    Examples
    --------
    >>> from mlflow_mia.signals.types import SignalResult
    >>> s = SignalResult.from_arrays([3.0], n_tokens=[4], token_logprobs=[[-1.0, -2.0, -1.0, -2.0]])
    >>> v, rows = mask_energies(s, mask_rate=0.5)  # l = 2: two masks of 2 tokens
    >>> v.tolist(), rows.tolist()
    ([3.0, 3.0], [0, 0])
    """
    if signal.kind != "energy":
        raise ValueError(f"per-mask queries need the masked energy (kind='energy'), got kind={signal.kind!r}")
    if energy_reduction not in ("sum", "mean"):
        raise ValueError(f"energy_reduction must be 'sum' or 'mean', got {energy_reduction!r}")
    values, rows = [], []
    for i, (lp, t) in enumerate(zip(signal.token_logprobs, signal.n_tokens)):
        length = num_masked(int(t), mask_rate)
        lp = np.asarray(lp, dtype=np.float64)
        if lp.size == 0 or lp.size % length:
            raise ValueError(f"row {i}: {lp.size} token log-probs do not split into masks of {length} tokens; "
                             "per-mask queries need the signals' token log-probs and the audit's mask_rate")
        per_mask = -lp.reshape(-1, length).sum(axis=1)
        if energy_reduction == "mean":
            per_mask /= length
        if not np.isclose(per_mask.mean(), signal.values[i], rtol=1e-4, atol=1e-4):
            raise ValueError(f"row {i}: the masks' mean energy {per_mask.mean():.6g} is not the row's value "
                             f"{signal.values[i]:.6g}; check mask_rate and energy_reduction")
        values.append(per_mask)
        rows.append(np.full(per_mask.size, i, dtype=np.int64))
    return np.concatenate(values), np.concatenate(rows)


def query_cells(target, references, *, mask_rate: float, energy_reduction: str = "sum"):
    """Per-mask values of the target and every reference, cell-aligned.

    Parameters
    ----------
    target : SignalResult or None
    references : ReferenceSignals
    mask_rate, energy_reduction
        As for :func:`mask_energies`.

    Returns
    -------
    (ndarray of shape (n_cells,) or None, ndarray of shape (k, n_cells), ndarray of shape (n_cells,) int64)
        Target cells, reference cells, and each cell's row.

    Raises
    ------
    ValueError
        Models with different numbers of masks for a row (their masks are then not the
        same queries), and every error of :func:`mask_energies`.
    """
    cells = [mask_energies(s, mask_rate=mask_rate, energy_reduction=energy_reduction) for s in references.signals]
    rows = cells[0][1]
    if target is not None:
        t, t_rows = mask_energies(target, mask_rate=mask_rate, energy_reduction=energy_reduction)
        cells_rows = [t_rows] + [r for _, r in cells]
    else:
        t, cells_rows = None, [r for _, r in cells]
    if any(r.shape != rows.shape or (r != rows).any() for r in cells_rows):
        raise ValueError("the models have different numbers of masks for some texts, so their masks are not the same "
                         "queries; compute every model's signals with the same SignalConfig and tokenizer")
    return t, np.stack([v for v, _ in cells]), rows


def per_text_mean(cell_scores, rows, n: int) -> np.ndarray:
    """The mean of each text's cell scores: ``(n,)`` float64 (NaN for a text without cells).

    >>> per_text_mean(np.array([1.0, 3.0, 5.0]), np.array([0, 0, 2]), 3).tolist()
    [2.0, nan, 5.0]
    """
    sums = np.bincount(rows, weights=np.asarray(cell_scores, dtype=np.float64), minlength=n)
    counts = np.bincount(rows, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def query_arrays(inputs, settings, *, target: bool = True):
    """``(target values, reference values (k, m), membership (m, k) or None, rows or None)`` of ``inputs``.

    Without ``settings.per_mask_queries`` the m = n rows themselves (rows None); with it,
    one cell per (text, mask) (:func:`query_cells`), the
    membership repeated per cell and ``rows`` each cell's text.
    """
    member = inputs.shadow_membership
    if not settings.per_mask_queries:
        return (inputs.target.values if target else None), inputs.references.values, member, None
    t, values, rows = query_cells(inputs.target if target else None, inputs.references,
                                  mask_rate=settings.mask_rate, energy_reduction=settings.energy_reduction)
    return t, values, (None if member is None else member[rows]), rows
