"""Loss attack (the baseline): the target model's energy alone.

Yeom et al. (2018), "Privacy Risk in Machine Learning: Analyzing the Connection to
Overfitting", CSF; for MLMs Jagannatha et al. (2021), "Membership Inference Attack
Susceptibility of Clinical Language Models"; the baseline (A) of Mireshghallah et
al. (2022), Table 2.
"""

import numpy as np

from mlflow_mia.attacks.base import Attack, register_attack


@register_attack
class LossAttack(Attack):
    """Score = ``-E(s; theta)``: low target energy (loss) means member.

    For a causal target (``kind="causal"``) the value is the mean NLL per predicted
    token, ``-(1/(n-1)) sum_{t=2..n} log p(x_t | x_<t)`` (nats/token), so the score is
    its negation: Yeom et al.'s loss as MIMIR's ``LOSSAttack`` computes it (MIMIR
    returns the NLL, lower = member; here it is negated, higher = member).

    Examples
    --------
    >>> from mlflow_mia.attacks.base import AttackInputs
    >>> from mlflow_mia.signals.types import SignalResult
    >>> sig = SignalResult(np.array([1.0, 3.0]), (), np.array([5, 5]), np.zeros(2, bool))
    >>> LossAttack()(AttackInputs(("a", "b"), target=sig)).tolist()
    [-1.0, -3.0]
    """

    name = "loss"
    citation = "Yeom et al. 2018; Jagannatha et al. 2021"
    requires = ("target",)
    gate_min_references = 0
    gate_order = 10

    def score(self, inputs):
        return -inputs.target.values  # energy, PLL or causal mean NLL: lower for members; negate so higher = member
