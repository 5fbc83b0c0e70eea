"""Neighbourhood attack: the target's energy against that of generated neighbours.

Mattern et al. (2023), "Membership Inference Attacks against Language Models via
Neighbourhood Comparison", Findings of ACL, Eq. 3 (https://arxiv.org/abs/2305.18462):
a sample is a member when its loss is well below the mean loss of its
neighbours (texts with one word replaced by a masked LM):
``L(f, x) - (1/n) sum_j L(f, x_j) < gamma``. Reference-free: it needs no data
from the training distribution, only a generator masked LM.

Notes
-----
The paper attacks a causal LM (GPT-2) through its loss, with BERT as generator.
A causal target is audited in exactly that setting: its value is the mean NLL
per predicted token (:mod:`mlflow_mia.signals.causal`) and the generator must be a
masked LM (given, or configured; a causal reference cannot propose neighbours).
A masked target's masked energy (or pseudo-log-likelihood, per
``SignalConfig.kind``) plays the loss; the generator is any masked LM, by default
the reference model. Where MIMIR differs: its generator scores one position per
forward pass at batch size 1 and draws neighbours per position; here every
position of a text is proposed in one batched pass and the ``n`` most likely single
swaps over all positions are kept (:mod:`mlflow_mia.signals.neighbours`). Neighbour generation and its
departures from the paper: :mod:`mlflow_mia.signals.neighbours`.
"""

import numpy as np

from mlflow_mia.attacks.base import Attack, register_attack


@register_attack
class NeighbourhoodAttack(Attack):
    """Score = ``mean_j E(x_j; theta) - E(s; theta)``, higher = member.

    Both values are the target model's signal (``SignalResult.values``: the energy
    in nats, or the PLL in nats/token). A sample without neighbours (no replaceable
    word) has ``neighbour_values`` NaN and so a NaN score; the audit leaves such
    rows out of this attack's metrics and reports their count.

    Examples
    --------
    >>> from mlflow_mia.attacks.base import AttackInputs
    >>> from mlflow_mia.signals.types import SignalResult
    >>> sig = SignalResult(np.array([1.0, 3.0, 2.0]), (), np.array([5, 5, 1]), np.zeros(3, bool))
    >>> inputs = AttackInputs(("a", "b", "c"), target=sig, neighbour_values=np.array([4.0, 3.5, np.nan]))
    >>> NeighbourhoodAttack()(inputs).tolist()
    [3.0, 0.5, nan]
    """

    name = "neighbourhood"
    citation = "Mattern et al. 2023, Eq. 3"
    requires = ("target", "neighbour_values")
    allows_nan = True  # NaN scores mark samples without neighbours; they are excluded, not an error

    def score(self, inputs):
        # Eq. 3 compares L(x) - mean L(x_j) to a threshold (low = member); negated so that higher = member.
        return np.asarray(inputs.neighbour_values, dtype=np.float64) - inputs.target.values
