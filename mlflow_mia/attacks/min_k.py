"""Min-k% attack on masked-token log-probabilities.

Shi et al. (2024), "Detecting Pretraining Data from Large Language Models", ICLR:
the mean of the lowest k% token log-probs. Here the tokens are the masked
positions of the energy masks (or every token for the PLL signal).
"""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mlflow_mia.attacks.base import Attack, register_attack
from mlflow_mia.option import option


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


@dataclass(frozen=True)
class MinKSettings:
    """Settings of :class:`MinKAttack`.

    Attributes
    ----------
    fraction : float
        k of the min-k% attack, in (0, 1] (default 0.2). The option ``min_k_fraction``
        (an audit holds it in ``AuditConfig.attack_settings["min_k"]``).

    Raises
    ------
    ValueError
        ``fraction`` outside (0, 1].
    """

    fraction: float = option(0.2, "k of the min_k attack: the fraction of lowest token log-probs averaged",
                             key="min_k_fraction", gt=0, le=1)
    attack: ClassVar[str] = "min_k"  # named in the error

    def __post_init__(self):
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"{self.attack} fraction must be in (0, 1], got {self.fraction!r}")
        object.__setattr__(self, "fraction", float(self.fraction))


@register_attack
class MinKAttack(Attack):
    """Score = mean of the lowest ``fraction`` of masked-token log-probs (higher = member).

    For a causal target the tokens are ``x_2 .. x_n`` with ``log p(x_t | x_<t)``
    (Shi et al. 2024's setting). Where MIMIR differs: it keeps ``int(k n)`` tokens
    (none for a short text, whose score is then NaN) and returns the negated mean;
    here ``ceil(k n)``, at least one, and the mean itself (higher = member).

    Settings: :class:`MinKSettings` (``MinKAttack(fraction=0.2)``), read in an audit
    from ``AuditConfig.attack_settings["min_k"]`` (the option ``min_k_fraction``).

    Examples
    --------
    >>> from mlflow_mia.attacks.base import AttackInputs
    >>> from mlflow_mia.signals.types import SignalResult
    >>> sig = SignalResult.from_arrays([0.0, 0.0], n_tokens=[4, 2], token_logprobs=[[-1.0, -5.0, -2.0, -4.0], [-3.0, -1.0]])
    >>> MinKAttack(fraction=0.5)(AttackInputs(("a", "b"), target=sig)).tolist()
    [-4.5, -3.0]
    """

    name = "min_k"
    citation = "Shi et al. 2024"
    requires = ("target",)
    Settings = MinKSettings
    gate_min_references = 0
    gate_order = 30

    def score(self, inputs):
        return np.array([min_k_mean(lp, self.settings.fraction) for lp in inputs.target.token_logprobs])
