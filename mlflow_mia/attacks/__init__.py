"""Membership inference attacks: signals in, one score per sample out (higher = member)."""

from mlflow_mia.attacks import likelihood_ratio, loss, min_k, neighbourhood, neighbourhood_local, zlib  # noqa: F401  (register)
from mlflow_mia.attacks.base import ATTACKS, Attack, AttackInputs, get_attack, register_attack

__all__ = ["ATTACKS", "Attack", "AttackInputs", "get_attack", "register_attack"]
