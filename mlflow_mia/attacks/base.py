"""The attack protocol and the ``ATTACKS`` registry.

An attack maps per-sample signals to one score per sample, with the convention
used everywhere in mlflow-mia: **a higher score means "more likely a member"**.
Energies and losses are "lower = member", so attacks built on them negate them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar, Mapping

import numpy as np

from mlflow_mia.attacks.inputs import INPUTS, MODEL_ROLES, AttackInputs
from mlflow_mia.config import AuditConfig

__all__ = ["Attack", "AttackInputs", "NoSettings", "ATTACKS", "INPUTS", "register_attack", "get_attack",
           "check_attack_names", "gate_attacks", "required_inputs", "required_roles"]

#: Reference-free attacks, weakest to strongest on the default demo (docs/results/attacks.md).
REFERENCE_FREE_ATTACKS = ("loss", "zlib", "min_k", "min_k_plus_plus")


@dataclass(frozen=True)
class NoSettings:
    """The settings of an attack that has none."""


class Attack:
    """Base class of attacks. Subclasses set the class attributes and ``score``.

    An attack receives only its own settings: an instance of its ``Settings``
    dataclass (``MinKAttack(MinKSettings(fraction=0.2))``, or the fields as keywords,
    ``MinKAttack(fraction=0.2)``), never the whole audit config. In an audit,
    :meth:`from_config` builds them through the declared ``settings_from_config``.

    Attributes
    ----------
    name : str
        Registry key, used in configs, on the CLI and in metric names.
    citation : str
        The paper the attack comes from.
    requires : tuple of str
        Which declared inputs (:data:`mlflow_mia.attacks.INPUTS`) must be present:
        ``"target"``, ``"reference"``, ``"neighbour_values"``, ``"neighbour_local"``.
    higher_is_member : bool
        Always True: scores are oriented so that higher means member.
    allows_nan : bool
        True when a NaN score marks a sample the attack cannot score (left out of
        its metrics and counted); False makes a NaN score an error.
    Settings : type
        A frozen dataclass of the attack's settings (default :class:`NoSettings`).
    settings_from_config : mapping of str to str
        ``{settings field: attribute path in AuditConfig}``, e.g.
        ``{"fraction": "metrics.min_k_fraction"}``: where :meth:`from_config` reads each field.
    settings : Settings
        This instance's settings.
    per_reference : bool
        True when, with two or more reference models, the audit reports the attack
        once against each reference (``likelihood_ratio``): under its own name against
        the first and as ``<name>.<role>`` (``likelihood_ratio.reference_2``, ...)
        against the others.
    """

    name: ClassVar[str]
    citation: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ("target",)
    higher_is_member: ClassVar[bool] = True
    allows_nan: ClassVar[bool] = False
    Settings: ClassVar[type] = NoSettings
    settings_from_config: ClassVar[Mapping[str, str]] = {}
    per_reference: ClassVar[bool] = False

    def __init__(self, settings=None, **fields_):
        if settings is not None and fields_:
            raise TypeError(f"attack {self.name!r}: pass a {self.Settings.__name__} or its fields as keywords, "
                            "not both")
        if settings is None:
            settings = self.Settings(**fields_)
        if not isinstance(settings, self.Settings):
            raise TypeError(f"attack {self.name!r} takes {self.Settings.__name__} settings, got "
                            f"{type(settings).__name__}")
        self.settings = settings

    @classmethod
    def from_config(cls, config) -> "Attack":
        """The attack with its settings read from an :class:`~mlflow_mia.config.AuditConfig`.

        The fields go in as keywords (``cls(**fields)``), so an attack without settings is ``cls()``.
        """
        return cls(**{f: _read(config, path) for f, path in cls.settings_from_config.items()})

    def score(self, inputs: AttackInputs) -> np.ndarray:
        """Return scores of shape (n_samples,), dtype float64, higher = member."""
        raise NotImplementedError

    def record(self, inputs: AttackInputs) -> dict:
        """Settings this attack resolved from ``inputs`` (e.g. a parameter chosen from the data), for the run.

        The audit writes them to ``AuditResult.info["attack_settings"][name]`` (``audit_summary.json``).
        Default: nothing.
        """
        return {}

    def __call__(self, inputs: AttackInputs) -> np.ndarray:
        missing = [r for r in self.requires if getattr(inputs, r) is None]
        if missing:
            raise ValueError(f"attack {self.name!r} needs {missing}; " + INPUTS[missing[0]].how_to_provide)
        scores = np.asarray(self.score(inputs), dtype=np.float64)
        if scores.shape != (len(inputs.texts),):
            raise RuntimeError(f"attack {self.name!r} returned shape {scores.shape}, expected ({len(inputs.texts)},)")
        return scores


def _read(config, path: str):
    """``config.<path>`` for a dotted attribute path such as ``"metrics.min_k_fraction"``."""
    value = config
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _check_declaration(c: type[Attack]) -> None:
    """Raise when an attack requires an undeclared input or maps settings that do not exist."""
    for need in c.requires:
        if need not in INPUTS:
            raise ValueError(f"attack {c.name!r} requires {need!r}, which is not a declared input; declared inputs: "
                             f"{list(INPUTS)} (declare new ones with mlflow_mia.attacks.declare_input)")
    names = {f.name for f in fields(c.Settings)}
    unknown = sorted(set(c.settings_from_config) - names)
    if unknown:
        raise ValueError(f"attack {c.name!r} maps {unknown} from the audit config, but {c.Settings.__name__} has "
                         f"fields {sorted(names)}")
    for path in c.settings_from_config.values():
        try:
            _read(AuditConfig(), path)
        except AttributeError:
            raise ValueError(f"attack {c.name!r} reads settings from {path!r}, which is not an AuditConfig "
                             "attribute") from None


ATTACKS: dict[str, type[Attack]] = {}


def register_attack(cls: type[Attack] | None = None, *, force: bool = False):
    """Class decorator adding an attack to :data:`ATTACKS` under ``cls.name``.

    Raises
    ------
    ValueError
        The name is already registered and ``force`` is False; ``requires`` names an
        undeclared input; ``settings_from_config`` maps a field ``Settings`` lacks or
        an ``AuditConfig`` attribute that does not exist.
    """

    def deco(c: type[Attack]) -> type[Attack]:
        _check_declaration(c)
        if not force and c.name in ATTACKS and ATTACKS[c.name] is not c:
            raise ValueError(f"an attack named {c.name!r} is already registered; pass force=True to replace it")
        ATTACKS[c.name] = c
        return c

    return deco(cls) if cls is not None else deco


def gate_attacks(n_references: int, *, shadow_membership: bool = False) -> tuple[str, ...]:
    """The attacks a release gate runs when none are named: every attack the reference models allow.

    A gate is only as strong as the strongest attack it runs, and it covers every attack
    that ran (each one's confidence bound is checked), so a gated audit runs them all:
    the reference-free ones always, ``likelihood_ratio`` and ``rmia`` with one reference or
    more, and ``lira_offline`` with two or more (with one it ranks as the likelihood
    ratio). On the default demo the strongest at 1 % FPR were ``lira_offline`` with 4
    shadow references, the likelihood ratio with one, ``min_k_plus_plus`` with none
    (``docs/results/attacks.md``, ``benchmarks/attacks_table.py``).

    Parameters
    ----------
    n_references : int
        Reference models of the audit (>= 0).
    shadow_membership : bool
        The references are shadow models whose training halves are known (the
        ``shadow_membership`` input): with 4 or more (two IN and two OUT of each text, the
        least its global spreads need), ``lira_online`` joins the set, last.

    Returns
    -------
    tuple of str
        Attack registry names.

    Raises
    ------
    ValueError
        ``n_references`` below 0.

    Examples
    --------
    >>> gate_attacks(0)
    ('loss', 'zlib', 'min_k', 'min_k_plus_plus')
    >>> gate_attacks(4)[-3:]
    ('likelihood_ratio', 'lira_offline', 'rmia')
    >>> gate_attacks(4, shadow_membership=True)[-2:]
    ('rmia', 'lira_online')
    """
    if n_references < 0:
        raise ValueError(f"n_references must be >= 0, got {n_references}")
    if n_references == 0:
        return REFERENCE_FREE_ATTACKS
    with_set = ("likelihood_ratio", "lira_offline", "rmia") if n_references >= 2 else ("likelihood_ratio", "rmia")
    online = ("lira_online",) if shadow_membership and n_references >= 4 else ()
    return REFERENCE_FREE_ATTACKS + with_set + online


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


def required_roles(names) -> dict[str, tuple[str, ...]]:
    """Which attacks need each model role: ``{role: (attack, ...)}``, from the roles of their inputs.

    ``target`` is always a key (every audit computes the target's signals).

    Raises
    ------
    ValueError
        Unknown attack name(s).
    """
    needs = required_inputs(names)
    out = {}
    for role in MODEL_ROLES:
        attacks = tuple(dict.fromkeys(a for name, by in needs.items() if role in INPUTS[name].roles for a in by))
        if attacks or role == "target":
            out[role] = attacks
    return out


def get_attack(name: str, config=None, **settings) -> Attack:
    """Instantiate the registered attack ``name``: with its settings from ``config``, or from ``settings``.

    Parameters
    ----------
    name : str
    config : AuditConfig, optional
        Read through the attack's ``settings_from_config``.
    **settings
        The fields of the attack's ``Settings`` (without ``config``).

    Raises
    ------
    ValueError
        Unknown name; the message lists the registered names.
    TypeError
        Both ``config`` and ``settings``, or an unknown setting.
    """
    check_attack_names([name])
    cls = ATTACKS[name]
    if config is not None:
        if settings:
            raise TypeError("get_attack takes config or settings, not both")
        return cls.from_config(config)
    return cls(**settings)
