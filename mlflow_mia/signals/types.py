"""Containers for per-sample signals of one model on one sample set."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlflow_mia.config import SIGNAL_KINDS

__all__ = ["SignalResult", "SIGNAL_UNITS"]

#: Unit of ``SignalResult.values`` for each signal kind.
SIGNAL_UNITS = {"energy": "nats", "pll": "nats/token"}


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
        pseudo-log-likelihood's mean NLL per token in nats/token (appendix A.3.2).
    token_logprobs : tuple of ndarray (float32), length n_samples
        The log-probabilities (nats, <= 0) of every masked token of every mask, in
        mask order; the raw material of min-k% and similar signals.
    n_tokens : ndarray of shape (n_samples,), dtype int64
        Maskable tokens T of each sample after truncation.
    truncated : ndarray of shape (n_samples,), dtype bool
        Samples longer than the model limit, scored on their first tokens.
    kind : str
        What ``values`` holds: ``"energy"`` or ``"pll"`` (see :data:`SIGNAL_UNITS`).
    """

    values: np.ndarray
    token_logprobs: tuple
    n_tokens: np.ndarray
    truncated: np.ndarray
    kind: str = "energy"

    @property
    def energy(self):
        """Removed: read :attr:`values` (the masked energy, or the PLL's per-token NLL for ``kind="pll"``).

        Raises
        ------
        AttributeError
            Always, naming :attr:`values`.
        """
        raise AttributeError("SignalResult.energy was removed: read SignalResult.values (the masked energy, or the "
                             "PLL's mean NLL per token for kind='pll'; SignalResult.kind says which)")

    def __len__(self) -> int:
        return len(self.values)

    @property
    def n_truncated(self) -> int:
        return int(np.count_nonzero(self.truncated))

    @classmethod
    def from_arrays(cls, values, *, n_tokens, truncated=None, token_logprobs=None,
                    kind: str = "energy") -> "SignalResult":
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
            Masked-token log-probs per sample; only ``min_k`` reads them. Default:
            empty arrays (``min_k`` then cannot score).
        kind : {"energy", "pll"}

        Raises
        ------
        ValueError
            An array is not 1-D or the lengths differ.
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
            raise ValueError(f"signal kind must be one of {SIGNAL_KINDS}, got {kind!r}")
        return cls(values, logprobs, n_tokens, truncated, kind)

    def take(self, index) -> "SignalResult":
        """Rows ``index`` (an int array), keeping all fields aligned."""
        index = np.asarray(index, dtype=np.int64)
        return SignalResult(
            values=self.values[index],
            token_logprobs=tuple(self.token_logprobs[i] for i in index),
            n_tokens=self.n_tokens[index],
            truncated=self.truncated[index],
            kind=self.kind,
        )
