"""Containers for per-sample signals of one model on one sample set."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlflow_mia.signal_kinds import SIGNAL_KINDS, SIGNAL_UNITS

__all__ = ["SignalResult"]


@dataclass(frozen=True)
class SignalResult:
    """Per-sample signals of one masked LM, row-aligned with the input texts.

    Build one from arrays computed anywhere (another process, a cluster) with
    ``SignalResult(values, token_logprobs, n_tokens, truncated, kind=...)`` or
    :meth:`from_arrays`.

    Attributes
    ----------
    values : ndarray of shape (n_samples,), dtype float64
        The signal, lower = more likely under the model. For ``kind="energy"``
        the masked energy in nats: the sum of masked-token NLLs averaged over the
        K masks (Mireshghallah et al. 2022, Eq. 2); for ``kind="pll"`` the
        pseudo-log-likelihood's mean NLL per token in nats/token (appendix A.3.2); for
        ``kind="causal"`` a causal LM's mean NLL per predicted token (nats/token).
    token_logprobs : tuple of ndarray (float32), length n_samples
        The log-probabilities (nats, <= 0) of every masked token of every mask, in
        mask order; the raw material of min-k% and similar signals.
    n_tokens : ndarray of shape (n_samples,), dtype int64
        Maskable tokens T of each sample after truncation.
    truncated : ndarray of shape (n_samples,), dtype bool
        Samples longer than the model limit, scored on their first tokens.
    kind : str
        What ``values`` holds: ``"energy"``, ``"pll"``, ``"causal"`` or another kind of
        :mod:`mlflow_mia.signal_kinds` (its unit in :data:`SIGNAL_UNITS`).
    token_mu, token_sigma : tuple of ndarray (float32), length n_samples, or None
        At each scored position of :attr:`token_logprobs` (same order and length per
        sample): the mean (nats, <= 0) and standard deviation (nats, >= 0) of
        ``log p(v)`` for ``v`` drawn from the model's own distribution there, the
        normalisers of Min-K%++ (Zhang et al. 2024, Sec. 3). None when the signals
        were made without them (e.g. :meth:`from_arrays` without them).
    token_top1 : tuple of ndarray (bool), length n_samples, or None
        At each scored position of :attr:`token_logprobs`: True where the scored token
        is the model's top-1 prediction there (its argmax, the first on a tie).
        EZ-MIA's error positions are the False ones (Ilić et al. 2026). Computed with
        ``token_mu``/``token_sigma`` from the same logits; None when the signals were
        made without it.
    """

    values: np.ndarray
    token_logprobs: tuple
    n_tokens: np.ndarray
    truncated: np.ndarray
    kind: str = "energy"
    token_mu: tuple | None = None
    token_sigma: tuple | None = None
    token_top1: tuple | None = None

    @property
    def has_token_stats(self) -> bool:
        """True when :attr:`token_mu` and :attr:`token_sigma` are present."""
        return self.token_mu is not None and self.token_sigma is not None

    def __len__(self) -> int:
        return len(self.values)

    @property
    def n_truncated(self) -> int:
        return int(np.count_nonzero(self.truncated))

    @classmethod
    def from_arrays(cls, values, *, n_tokens, truncated=None, token_logprobs=None,
                    kind: str = "energy", token_mu=None, token_sigma=None, token_top1=None) -> "SignalResult":
        """A SignalResult from plain arrays, e.g. signals computed on a cluster.

        Parameters
        ----------
        values : array-like of shape (n_samples,)
            The signal (see :attr:`values`), cast to float64.
        n_tokens : array-like of shape (n_samples,)
            Maskable tokens per sample (the length breakdown reads them).
        truncated : array-like of shape (n_samples,), optional
            Default: no sample truncated.
        token_logprobs : sequence of arrays, optional
            Masked-token log-probs per sample; ``min_k`` and ``min_k_plus_plus`` read them. Default:
            empty arrays (``min_k`` then cannot score).
        kind : {"energy", "pll", "causal"} or another registered kind
        token_mu, token_sigma : sequences of arrays, optional
            Min-K%++'s per-position statistics, each array as long as the sample's
            ``token_logprobs`` array; give both or neither (default: none, and
            ``min_k_plus_plus`` cannot score).
        token_top1 : sequence of arrays, optional
            Per scored token, whether it is the model's top-1 prediction (bool; EZ-MIA's
            error positions are the False ones), each array as long as the sample's
            ``token_logprobs`` array (default: none, and ``ez_mia`` cannot score).

        Raises
        ------
        ValueError
            An array is not 1-D or the lengths differ; a ``kind`` that is not registered
            (:data:`mlflow_mia.signal_kinds.SIGNAL_KINDS`); only one of ``token_mu`` and
            ``token_sigma``; a statistics array of another length than its log-probs.
        """
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 1:
            raise ValueError(f"signal values must be 1-D of shape (n_samples,), got shape {values.shape}")
        n = len(values)
        n_tokens = np.asarray(n_tokens, dtype=np.int64)
        truncated = np.zeros(n, dtype=bool) if truncated is None else np.asarray(truncated, dtype=bool)
        logprobs = tuple(np.zeros(0, np.float32) for _ in range(n)) if token_logprobs is None else tuple(
            np.asarray(x, dtype=np.float32) for x in token_logprobs)
        for name, got in (("n_tokens", n_tokens.shape), ("truncated", truncated.shape),
                          ("token_logprobs", (len(logprobs),))):
            if got != (n,):
                raise ValueError(f"{name} has shape {got}, expected ({n},): one entry per value")
        if kind not in SIGNAL_KINDS:
            raise ValueError(f"signal kind must be one of {tuple(SIGNAL_KINDS)} (the registered kinds), got {kind!r}")
        mu, sigma = _token_stats(token_mu, token_sigma, logprobs)
        top1 = None if token_top1 is None else _aligned("token_top1", token_top1, logprobs, bool)
        return cls(values, logprobs, n_tokens, truncated, kind, mu, sigma, top1)

    def take(self, index) -> "SignalResult":
        """Rows ``index`` (an int array), keeping all fields aligned."""
        index = np.asarray(index, dtype=np.int64)
        return SignalResult(
            values=self.values[index],
            token_logprobs=tuple(self.token_logprobs[i] for i in index),
            n_tokens=self.n_tokens[index],
            truncated=self.truncated[index],
            kind=self.kind,
            token_mu=None if self.token_mu is None else tuple(self.token_mu[i] for i in index),
            token_sigma=None if self.token_sigma is None else tuple(self.token_sigma[i] for i in index),
            token_top1=None if self.token_top1 is None else tuple(self.token_top1[i] for i in index),
        )


def _token_stats(token_mu, token_sigma, logprobs: tuple) -> tuple[tuple | None, tuple | None]:
    """``token_mu`` and ``token_sigma`` as float32 tuples aligned with ``logprobs``, or (None, None)."""
    if token_mu is None and token_sigma is None:
        return None, None
    if token_mu is None or token_sigma is None:
        raise ValueError("give token_mu and token_sigma together (Min-K%++ needs both), or neither")
    return (_aligned("token_mu", token_mu, logprobs, np.float32),
            _aligned("token_sigma", token_sigma, logprobs, np.float32))


def _aligned(name: str, arrays, logprobs: tuple, dtype) -> tuple:
    """``arrays`` as a tuple of ``dtype`` arrays, each of its row's ``logprobs`` shape (else ValueError)."""
    arrays = tuple(np.asarray(x, dtype=dtype) for x in arrays)
    if len(arrays) != len(logprobs):
        raise ValueError(f"{name} has {len(arrays)} rows, expected {len(logprobs)}: one array per value")
    bad = next((i for i, (a, lp) in enumerate(zip(arrays, logprobs)) if a.shape != lp.shape), None)
    if bad is not None:
        raise ValueError(f"{name}[{bad}] has shape {arrays[bad].shape}, but token_logprobs[{bad}] has shape "
                         f"{logprobs[bad].shape}: one statistic per scored token")
    return arrays


def result_from_rows(rows: dict, hashes, kind: str, *, stats: bool = True) -> SignalResult:
    """Assemble a :class:`SignalResult` from cached per-text rows, in the order of ``hashes``.

    Parameters
    ----------
    rows : dict
        Text hash -> ``(value, n_tokens, truncated, logprobs, token_stats)``: ``value`` a float,
        ``n_tokens`` an int, ``truncated`` a bool, ``logprobs`` a float ``(l,)`` array and
        ``token_stats`` a float ``(3, l)`` array (mu, sigma, top1 rows) or ``None`` without ``stats``.
    hashes : sequence of str
        The texts' hashes, one per text, in output order; each must be a key of ``rows``.
    kind : str
        The signal kind stored in the result.
    stats : bool
        Whether to fill ``token_mu``, ``token_sigma`` and ``token_top1`` from the rows' ``token_stats``.

    Returns
    -------
    SignalResult

    Raises
    ------
    KeyError
        A hash with no row.
    """
    return SignalResult(
        values=np.array([rows[h][0] for h in hashes], dtype=np.float64),
        token_logprobs=tuple(rows[h][3] for h in hashes),
        n_tokens=np.array([rows[h][1] for h in hashes], dtype=np.int64),
        truncated=np.array([rows[h][2] for h in hashes], dtype=bool),
        kind=kind,
        token_mu=tuple(rows[h][4][0] for h in hashes) if stats else None,
        token_sigma=tuple(rows[h][4][1] for h in hashes) if stats else None,
        token_top1=tuple(rows[h][4][2] > 0.5 for h in hashes) if stats else None,
    )
