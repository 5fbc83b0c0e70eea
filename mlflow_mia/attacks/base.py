"""The attack protocol and the ``ATTACKS`` registry.

An attack maps per-sample signals to one score per sample, with the convention
used everywhere in mlflow-mia: **a higher score means "more likely a member"**.
Energies and losses are "lower = member", so attacks built on them negate them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mlflow_mia.signals.types import SignalResult

__all__ = ["Attack", "AttackInputs", "ATTACKS", "INPUTS", "NEIGHBOUR_INPUTS", "register_attack", "get_attack",
           "check_attack_names", "required_inputs"]

#: Every input an attack may declare in ``requires``: the fields of :class:`AttackInputs`.
INPUTS = ("target", "reference", "neighbour_energy", "neighbour_local")
#: Inputs that are one number per row (ndarray of shape (n_rows,)) and need a neighbour generator.
NEIGHBOUR_INPUTS = ("neighbour_energy", "neighbour_local")


@dataclass(frozen=True)
class AttackInputs:
    """Signals of one sample set (the target pool or the population set).

    Attributes
    ----------
    texts : tuple of str, length n_samples
    target : SignalResult
        Signals of the target model.
    reference : SignalResult or None
        Signals of the reference model, row-aligned with ``target``.
    neighbour_energy : ndarray of shape (n_samples,) or None
        Mean target-model energy of each sample's neighbours (NaN where a sample has none).
    neighbour_local : ndarray of shape (n_samples,) or None
        Mean per-position neighbour difference (nats) at the swapped tokens
        (:mod:`mlflow_mia.signals.neighbour_local`); NaN where a sample has no neighbours.
    """

    texts: tuple[str, ...]
    target: SignalResult
    reference: SignalResult | None = None
    neighbour_energy: np.ndarray | None = None
    neighbour_local: np.ndarray | None = None

    def __post_init__(self):
        n = len(self.texts)
        for name in ("target", "reference"):
            sig = getattr(self, name)
            if sig is not None and len(sig) != n:
                raise ValueError(f"{name} signals have {len(sig)} rows, expected {n}: rows must pair up")
        if self.neighbour_energy is not None and np.shape(self.neighbour_energy) != (n,):
            raise ValueError(f"neighbour_energy has shape {np.shape(self.neighbour_energy)}, expected ({n},)")
        if self.neighbour_local is not None and np.shape(self.neighbour_local) != (n,):
            raise ValueError(f"neighbour_local has shape {np.shape(self.neighbour_local)}, expected ({n},)")


class Attack:
    """Base class of attacks. Subclasses set the class attributes and ``score``.

    An attack receives only its own settings, as keyword arguments of its
    constructor (e.g. ``MinKAttack(fraction=0.2)``), never the whole audit config.

    Attributes
    ----------
    name : str
        Registry key, used in configs, on the CLI and in metric names.
    citation : str
        The paper the attack comes from.
    requires : tuple of str
        Which :class:`AttackInputs` fields must be present (``"target"``,
        ``"reference"``, ``"neighbour_energy"``).
    higher_is_member : bool
        Always True: scores are oriented so that higher means member.
    allows_nan : bool
        True when a NaN score marks a sample the attack cannot score (left out of
        its metrics and counted); False makes a NaN score an error.
    """

    name: ClassVar[str]
    citation: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ("target",)
    higher_is_member: ClassVar[bool] = True
    allows_nan: ClassVar[bool] = False

    def score(self, inputs: AttackInputs) -> np.ndarray:
        """Return scores of shape (n_samples,), dtype float64, higher = member."""
        raise NotImplementedError

    def __call__(self, inputs: AttackInputs) -> np.ndarray:
        missing = [r for r in self.requires if getattr(inputs, r) is None]
        if missing:
            raise ValueError(f"attack {self.name!r} needs {missing}; " + _HOW_TO_PROVIDE.get(missing[0], ""))
        scores = np.asarray(self.score(inputs), dtype=np.float64)
        if scores.shape != (len(inputs.texts),):
            raise RuntimeError(f"attack {self.name!r} returned shape {scores.shape}, expected ({len(inputs.texts)},)")
        return scores


_HOW_TO_PROVIDE = {
    "reference": "give a reference model (reference_model=...) trained on similar but disjoint data",
    "neighbour_energy": "neighbour energies are computed by the audit when 'neighbourhood' is requested",
    "neighbour_local": "per-position neighbour differences are computed by the audit when 'neighbourhood_local' "
                       "is requested",
}

ATTACKS: dict[str, type[Attack]] = {}


def register_attack(cls: type[Attack] | None = None, *, force: bool = False):
    """Class decorator adding an attack to :data:`ATTACKS` under ``cls.name``.

    Raises
    ------
    ValueError
        The name is already registered and ``force`` is False.
    """

    def deco(c: type[Attack]) -> type[Attack]:
        if not force and c.name in ATTACKS and ATTACKS[c.name] is not c:
            raise ValueError(f"an attack named {c.name!r} is already registered; pass force=True to replace it")
        ATTACKS[c.name] = c
        return c

    return deco(cls) if cls is not None else deco


def check_attack_names(names) -> tuple[str, ...]:
    """``names`` as a tuple, after checking that every one is registered.

    Raises
    ------
    ValueError
        Unknown name(s); the message lists the registered names.
    """
    names = tuple(names)
    unknown = [a for a in names if a not in ATTACKS]
    if unknown:
        raise ValueError(f"unknown attack(s) {unknown}; registered attacks: {sorted(ATTACKS)}")
    return names


def required_inputs(names) -> dict[str, tuple[str, ...]]:
    """Which attacks need each input: ``{input: (attack, ...)}``, inputs in :data:`INPUTS` order.

    Only inputs some attack needs are keys, so ``"reference" in required_inputs(names)``
    asks whether any of them needs a reference model.

    Raises
    ------
    ValueError
        Unknown attack name(s).
    """
    names = check_attack_names(names)
    return {need: tuple(a for a in names if need in ATTACKS[a].requires) for need in INPUTS
            if any(need in ATTACKS[a].requires for a in names)}


def get_attack(name: str, **settings) -> Attack:
    """Instantiate the registered attack ``name`` with its own ``settings``.

    Raises
    ------
    ValueError
        Unknown name; the message lists the registered names.
    """
    check_attack_names([name])
    return ATTACKS[name](**settings)
