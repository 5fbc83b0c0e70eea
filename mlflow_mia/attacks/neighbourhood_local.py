"""Neighbourhood attack read at the swapped tokens only (``neighbourhood_local``).

The comparison of Mattern et al. (2023, Eq. 3) -- the target's loss on a text
against its loss on close variants it has not seen -- restricted to the tokens a
swap changed: ``mean_j [sum_{R(x_j)} l(x_j, t) - sum_{R(x)} l(x, t)]`` with ``l`` the
target's one-token masked NLL (:mod:`mlflow_mia.signals.neighbour_local`). The
paper's whole-text variant stays available as ``neighbourhood``; this one is not a
default (``docs/explanations/neighbourhood.md`` gives the measurements: on the small BBC demo
it scores below the paper's variant).
"""

import numpy as np

from mlflow_mia.attacks.base import Attack, register_attack


@register_attack
class NeighbourhoodLocalAttack(Attack):
    """Score = mean over neighbours of the target's NLL at the substitute minus at the original, higher = member.

    NaN for a sample without neighbours (left out of the metrics, as for ``neighbourhood``).

    Examples
    --------
    >>> from mlflow_mia.attacks.base import AttackInputs
    >>> from mlflow_mia.signals.types import SignalResult
    >>> sig = SignalResult(np.array([1.0, 3.0]), (), np.array([5, 5]), np.zeros(2, bool))
    >>> NeighbourhoodLocalAttack()(AttackInputs(("a", "b"), target=sig, neighbour_local=np.array([0.5, np.nan]))).tolist()
    [0.5, nan]
    """

    name = "neighbourhood_local"
    citation = "Mattern et al. 2023, Eq. 3, at the swapped tokens"
    requires = ("target", "neighbour_local")
    allows_nan = True

    def score(self, inputs):
        return np.asarray(inputs.neighbour_local, dtype=np.float64)
