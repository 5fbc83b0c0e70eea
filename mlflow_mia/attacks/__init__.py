"""Membership inference attacks: signals in, one score per sample out (higher = member)."""

from mlflow_mia.attacks import (likelihood_ratio, loss, min_k, neighbourhood,  # noqa: F401  (register)
                                neighbourhood_local, zlib)
from mlflow_mia.attacks.base import (ATTACKS, INPUTS, NEIGHBOUR_INPUTS, Attack, AttackInputs, check_attack_names, get_attack,
                                    register_attack, required_inputs)

__all__ = ["ATTACKS", "INPUTS", "Attack", "AttackInputs", "check_attack_names", "get_attack", "register_attack",
           "required_inputs"]
