"""Membership inference attacks: signals in, one score per sample out (higher = member).

The inputs attacks read are declared once in :mod:`mlflow_mia.attacks.inputs`; the
attacks in :mod:`mlflow_mia.attacks.base`'s ``ATTACKS`` registry.
"""

from mlflow_mia.attacks import (likelihood_ratio, loss, min_k, neighbourhood,  # noqa: F401  (register)
                                neighbourhood_local, zlib)
from mlflow_mia.attacks import min_k_plus_plus  # noqa: F401  (register)
from mlflow_mia.attacks import lira_offline, lira_online, rmia  # noqa: F401  (register: attacks over a reference set)
from mlflow_mia.attacks import dc_pdd, grad_norm, recall  # noqa: F401  (register: MIMIR's newer attacks)
from mlflow_mia.attacks import ez_mia, wbc  # noqa: F401  (register: LeakPro's attacks against a pretrained reference)
from mlflow_mia.attacks.base import (ATTACKS, Attack, NoSettings, check_attack_names, gate_attacks, get_attack,
                                     make_attacks, register_attack, required_inputs, required_roles,
                                     required_token_quantities)
from mlflow_mia.attacks.inputs import INPUTS, MODEL_ROLES, AttackInput, AttackInputs, declare_input, input_spec
from mlflow_mia.attacks.inputs import ReferenceSignals, reference_roles

__all__ = ["ATTACKS", "INPUTS", "MODEL_ROLES", "Attack", "AttackInput", "AttackInputs", "NoSettings",
           "ReferenceSignals", "check_attack_names", "declare_input", "gate_attacks", "get_attack", "input_spec",
           "make_attacks", "reference_roles", "register_attack", "required_inputs", "required_roles", "required_token_quantities"]
