"""Min-k% attack on masked-token log-probabilities.

Shi et al. (2024), "Detecting Pretraining Data from Large Language Models", ICLR:
the mean of the lowest k% token log-probs. Here the tokens are the masked
positions of the energy masks (or every token for the PLL signal).
"""

import numpy as np

from mlflow_mia.attacks.base import Attack, register_attack


def min_k_mean(logprobs: np.ndarray, fraction: float) -> float:
    """Mean of the ``ceil(fraction * n)`` smallest values (at least one).

    >>> min_k_mean(np.array([-1.0, -5.0, -2.0, -4.0]), 0.5)
    -4.5
    """
    logprobs = np.asarray(logprobs, dtype=np.float64)
    if logprobs.size == 0:
        return float("nan")
    k = max(1, int(np.ceil(round(fraction * logprobs.size, 9))))
    return float(np.partition(logprobs, k - 1)[:k].mean())


@register_attack
class MinKAttack(Attack):
    """Score = mean of the lowest ``k`` fraction of masked-token log-probs (higher = member).

    ``k`` is ``MetricConfig.min_k_fraction`` (default 0.2).
    """

    name = "min_k"
    citation = "Shi et al. 2024"
    requires = ("target",)

    def score(self, inputs, config):
        k = config.metrics.min_k_fraction
        return np.array([min_k_mean(lp, k) for lp in inputs.target.token_logprobs])
