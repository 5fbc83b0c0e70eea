"""Containers for per-sample signals of one model on one sample set."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SignalResult"]


@dataclass(frozen=True)
class SignalResult:
    """Per-sample signals of one masked LM, row-aligned with the input texts.

    Attributes
    ----------
    energy : ndarray of shape (n_samples,), dtype float64
        Masked energy in nats, lower = more likely under the model. For
        ``kind="energy"`` the sum of masked-token NLLs averaged over the K masks
        (Mireshghallah et al. 2022, Eq. 2); for ``kind="pll"`` the mean NLL per token
        (appendix A.3.2).
    token_logprobs : tuple of ndarray (float32), length n_samples
        The log-probabilities (nats, <= 0) of every masked token of every mask, in
        mask order; the raw material of min-k% and similar signals.
    n_tokens : ndarray of shape (n_samples,), dtype int64
        Maskable tokens T of each sample after truncation.
    truncated : ndarray of shape (n_samples,), dtype bool
        Samples longer than the model limit, scored on their first tokens.
    """

    energy: np.ndarray
    token_logprobs: tuple
    n_tokens: np.ndarray
    truncated: np.ndarray

    def __len__(self) -> int:
        return len(self.energy)

    @property
    def n_truncated(self) -> int:
        return int(np.count_nonzero(self.truncated))

    def take(self, index) -> "SignalResult":
        """Rows ``index`` (an int array), keeping all fields aligned."""
        index = np.asarray(index, dtype=np.int64)
        return SignalResult(
            energy=self.energy[index],
            token_logprobs=tuple(self.token_logprobs[i] for i in index),
            n_tokens=self.n_tokens[index],
            truncated=self.truncated[index],
        )
