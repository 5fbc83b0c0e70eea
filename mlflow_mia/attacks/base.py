"""The attack protocol and the ``ATTACKS`` registry.

An attack maps per-sample signals to one score per sample, with the convention
used everywhere in mlflow-mia: **a higher score means "more likely a member"**.
Energies and losses are "lower = member", so attacks built on them negate them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mlflow_mia.attack_settings import ATTACK_SETTINGS
from mlflow_mia.attacks.inputs import INPUTS, MODEL_ROLES, TOKEN_QUANTITIES, AttackInputs
from mlflow_mia.config import AuditConfig, MetricConfig, NeighbourhoodConfig, SignalConfig
from mlflow_mia.option import declared_options, same_option_fields
from mlflow_mia.naming import did_you_mean

__all__ = ["Attack", "NoSettings", "ATTACKS", "register_attack", "get_attack", "make_attacks", "check_attack_names",
           "gate_attacks", "required_inputs", "required_roles"]

@dataclass(frozen=True)
class NoSettings:
    """The settings of an attack that has none."""


class Attack:
    """Base class of attacks. Subclasses set the class attributes and ``score``.

    An attack receives only its own settings: an instance of its ``Settings``
    dataclass (``MinKAttack(MinKSettings(fraction=0.2))``, or the fields as keywords,
    ``MinKAttack(fraction=0.2)``), never the whole audit config. In an audit,
    :meth:`from_config` takes them from ``AuditConfig.attack_settings``.

    A new attack is its file plus one import line in :mod:`mlflow_mia.attacks`: its
    ``Settings`` fields declared with :func:`~mlflow_mia.option.option` (a key unique among
    the audit options, default, help, range) become options of the membership audit's
    command line, evaluator config, MLproject entry points and options reference, and
    ``AuditConfig.attack_settings[name]`` holds their values; ``gate_min_references`` puts it
    in a release gate's attacks (:func:`gate_attacks`).

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
        A frozen dataclass of the attack's settings (default :class:`NoSettings`). Fields
        declared with :func:`~mlflow_mia.option.option` are user options; a field declared
        with ``same_option(key, default)`` carries the audit config's value of the option
        ``key`` (``same_option("mask_rate", 0.15)``: the signal's mask rate).
    gate_min_references : int or None
        When a release gate runs the attack unasked (:func:`gate_attacks`): None never
        (default); k when the audit has at least k reference models (0: always), and
        the shadow membership where the attack requires it.
    gate_order : float
        The attack's place in a gate's list (ascending, ties in registration order; the
        built-in ones weakest to strongest on the default demo, docs/results/attacks.md).
        Default: after them.
    settings : Settings
        This instance's settings.
    token_quantities : tuple of str
        Optional per-token quantities (:data:`mlflow_mia.attacks.inputs.TOKEN_QUANTITIES`)
        the attack reads in the ``"signal"``/``"signals"`` inputs it requires, e.g.
        ``("token_stats",)`` for Min-K%++; stage 1 computes them only when an attack
        declares them (default none).
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
    gate_min_references: ClassVar[int | None] = None
    gate_order: ClassVar[float] = 1000.0
    per_reference: ClassVar[bool] = False
    token_quantities: ClassVar[tuple[str, ...]] = ()

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
        """The attack with its settings from an :class:`~mlflow_mia.config.AuditConfig`:
        ``config.attack_settings[cls.name]``, else the defaults with the config's carried values."""
        return cls(config.settings_of({cls.name: cls.Settings})[cls.name])

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


#: The audit config's own options (an attack option may not reuse their keys; ``same_option`` fields read them).
_AUDIT_KEYS = frozenset(k for cls in (AuditConfig, SignalConfig, MetricConfig, NeighbourhoodConfig)
                        for k in declared_options(cls))


def _check_declaration(c: type[Attack]) -> None:
    """Raise when an attack requires an undeclared input or declares settings the audit config cannot hold."""
    for need in c.requires:
        if need not in INPUTS:
            raise ValueError(f"attack {c.name!r} requires {need!r}, which is not a declared input; declared inputs: "
                             f"{list(INPUTS)} (declare new ones with mlflow_mia.attacks.declare_input)")
    undeclared = [q for q in c.token_quantities if q not in TOKEN_QUANTITIES]
    if undeclared:
        raise ValueError(f"attack {c.name!r} declares token quantities {undeclared}; declared ones: "
                         f"{list(TOKEN_QUANTITIES)}")
    if "settings_from_config" in vars(c):
        raise ValueError(f"attack {c.name!r} declares settings_from_config, which is gone: declare each option on "
                         f"{c.Settings.__name__} with mlflow_mia.option.option(default, help, key=...), and a value "
                         "of the audit config with same_option(key, default)")
    taken = {k: n for n, cls in ATTACK_SETTINGS.items() if n != c.name and cls is not c.Settings
             for k in declared_options(cls)}
    for key in declared_options(c.Settings):
        if key in _AUDIT_KEYS or key in taken:
            raise ValueError(f"attack {c.name!r} declares the option {key!r}, which "
                             + (f"attack {taken[key]!r} declares" if key in taken else "is an audit config option")
                             + f"; give {c.Settings.__name__}'s option another key (e.g. {c.name}_{key})")
    unknown = sorted(k for k in same_option_fields(c.Settings).values() if k not in _AUDIT_KEYS)
    if unknown:
        raise ValueError(f"attack {c.name!r}: {c.Settings.__name__} carries {unknown}, which are not options of the "
                         f"audit config; its options: {sorted(_AUDIT_KEYS)}")
    if c.gate_min_references is not None and (isinstance(c.gate_min_references, bool)
                                              or not isinstance(c.gate_min_references, int)
                                              or c.gate_min_references < 0):
        raise ValueError(f"attack {c.name!r}: gate_min_references must be None or an int >= 0, got "
                         f"{c.gate_min_references!r}")


ATTACKS: dict[str, type[Attack]] = {}


def register_attack(cls: type[Attack] | None = None, *, force: bool = False):
    """Class decorator adding an attack to :data:`ATTACKS` under ``cls.name``.

    Raises
    ------
    ValueError
        The name is already registered and ``force`` is False; ``requires`` names an
        undeclared input; ``Settings`` declares an option key another attack or the audit
        config has, or carries (``same_option``) a key the audit config lacks; a stale
        ``settings_from_config``; ``gate_min_references`` not None or an int >= 0.
    """

    def deco(c: type[Attack]) -> type[Attack]:
        _check_declaration(c)
        if not force and c.name in ATTACKS and ATTACKS[c.name] is not c:
            raise ValueError(f"an attack named {c.name!r} is already registered; pass force=True to replace it")
        ATTACKS[c.name] = c
        ATTACK_SETTINGS.pop(c.name, None)
        if declared_options(c.Settings):  # the audit config holds its settings (mlflow_mia.attack_settings)
            ATTACK_SETTINGS[c.name] = c.Settings
        return c

    return deco(cls) if cls is not None else deco


def gate_attacks(n_references: int, *, shadow_membership: bool = False) -> tuple[str, ...]:
    """The attacks a release gate runs when none are named: every attack the reference models allow.

    A gate is only as strong as the strongest attack it runs, and it covers every attack
    that ran (each one's confidence bound is checked), so a gated audit runs them all:
    each registered attack whose ``gate_min_references`` is at most ``n_references`` (and
    that has the shadow membership, when it requires it), in ``gate_order``. Built in: the
    reference-free ones always, ``likelihood_ratio`` and ``rmia`` with one reference or
    more, ``lira_offline`` with two or more (with one it ranks as the likelihood ratio),
    ``lira_online`` with 4 shadows of known halves. On the default demo the strongest at
    1 % FPR were ``lira_offline`` with 4 shadow references, the likelihood ratio with one,
    ``min_k_plus_plus`` with none (``docs/results/attacks.md``, ``benchmarks/attacks_table.py``).

    Parameters
    ----------
    n_references : int
        Reference models of the audit (>= 0).
    shadow_membership : bool
        The references are shadow models whose training halves are known (the
        ``shadow_membership`` input): the attacks that require it may join.

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
    eligible = [c for c in ATTACKS.values() if c.gate_min_references is not None
                and c.gate_min_references <= n_references
                and (shadow_membership or "shadow_membership" not in c.requires)]
    return tuple(c.name for c in sorted(eligible, key=lambda c: c.gate_order))


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
        near = "".join(did_you_mean(a, ATTACKS).replace("; did you mean", f"; for {a!r} did you mean") for a in unknown)
        raise ValueError(f"unknown attack(s) {unknown}{near}; registered attacks: {sorted(ATTACKS)}")
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


def required_token_quantities(names) -> dict[str, tuple[str, ...]]:
    """The optional per-token quantities each model-signal input needs: ``{input: (quantity, ...)}``.

    An input is a key when some attack of ``names`` requires it and declares a
    quantity (``Attack.token_quantities``); inputs no attack asks more of are absent,
    so ``"token_stats" in required_token_quantities(names).get("target", ())`` asks
    whether stage 1 computes Min-K%++'s statistics of the target.

    Raises
    ------
    ValueError
        Unknown attack name(s).

    Examples
    --------
    >>> required_token_quantities(["loss", "likelihood_ratio"])
    {}
    >>> required_token_quantities(["loss", "min_k_plus_plus"])
    {'target': ('token_stats',)}
    """
    names = check_attack_names(names)
    out: dict[str, tuple[str, ...]] = {}
    for need in INPUTS:
        quantities = tuple(dict.fromkeys(q for a in names if need in ATTACKS[a].requires
                                         for q in ATTACKS[a].token_quantities))
        if quantities:
            out[need] = quantities
    return out


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


def make_attacks(config) -> dict[str, Attack]:
    """Every attack of an :class:`~mlflow_mia.config.AuditConfig` (``config.attacks``, in order) with its settings.

    The settings of all of them are read from the config in one call
    (:meth:`~mlflow_mia.config.AuditConfig.settings_of`); each attack is then built from its own
    settings alone, never the whole config.

    Raises
    ------
    ValueError
        An unknown attack name; the message lists the registered names.
    """
    check_attack_names(config.attacks)
    settings = config.settings_of({name: ATTACKS[name].Settings for name in config.attacks})
    return {name: ATTACKS[name](settings[name]) for name in config.attacks}


def get_attack(name: str, config=None, **settings) -> Attack:
    """Instantiate the registered attack ``name``: with its settings from ``config``, or from ``settings``.

    Parameters
    ----------
    name : str
    config : AuditConfig, optional
        Its ``attack_settings`` (:meth:`Attack.from_config`).
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
