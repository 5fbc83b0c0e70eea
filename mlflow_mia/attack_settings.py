"""The attacks' settings as the audit config holds them: a registry of ``Settings`` classes and their values.

Each attack declares its options once, on its own frozen ``Settings`` dataclass
(:func:`mlflow_mia.option.option`: key, default, help, range). When the attack registers
(:func:`mlflow_mia.attacks.register_attack`, a layer above), its ``Settings`` class is
added to :data:`ATTACK_SETTINGS` here, below the configs, so that
:class:`~mlflow_mia.config.AuditConfig` gives every registered attack its settings
(``AuditConfig.attack_settings``) without a field of its own, and the option schema
(:mod:`mlflow_mia.options`) offers their options on every front end. A ``Settings`` field
declared with :func:`~mlflow_mia.option.same_option` carries the value of an option of the
audit config (``same_option("mask_rate", 0.15)``: the signal's mask rate).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable

from mlflow_mia.option import declared_options, same_option_fields

__all__ = ["ATTACK_SETTINGS"]

#: The ``Settings`` class of each registered attack that declares options, by attack name (registration order).
ATTACK_SETTINGS: dict[str, type] = {}


class AttackSettings(Mapping):
    """``{attack name: its Settings instance}``, read-only and hashable (the configs are frozen).

    >>> AttackSettings({"a": 1})["a"], len(AttackSettings()), hash(AttackSettings({"a": 1})) == hash(AttackSettings({"a": 1}))
    (1, 0, True)
    """

    def __init__(self, items=()):
        self._items = dict(items)

    def __getitem__(self, name):
        return self._items[name]

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __hash__(self):
        return hash(tuple(self._items.items()))

    def __repr__(self):
        return f"AttackSettings({self._items!r})"


def attack_option_owners() -> dict[str, str]:
    """``{option key: attack name}`` of every registered attack's options (``{"min_k_fraction": "min_k", ...}``)."""
    return {key: name for name, cls in ATTACK_SETTINGS.items() for key in declared_options(cls)}


def with_carried(settings, option_value: Callable[[str], Any]):
    """``settings`` with each ``same_option(key)`` field set to ``option_value(key)`` (the audit's value)."""
    carried = {name: option_value(key) for name, key in same_option_fields(type(settings)).items()}
    return dataclasses.replace(settings, **carried) if carried else settings


def build_attack_settings(given, by_key: Mapping[str, Any], option_value: Callable[[str], Any]) -> AttackSettings:
    """The settings of every attack of :data:`ATTACK_SETTINGS`, checked against their declarations.

    Parameters
    ----------
    given : mapping of str to (Settings or mapping)
        Attack name -> its ``Settings`` instance or a dict of its fields; the others take their defaults.
    by_key : mapping of str to object
        Option values by key (``{"min_k_fraction": 0.5}``), set over ``given``.
    option_value : callable
        The audit config's value of an option key, for the ``same_option`` fields.

    Raises
    ------
    ValueError
        ``given`` names an attack that declares no options (the message lists those that do), or a value does
        not fit its option (named by its key, with the expected form).
    TypeError
        An entry is neither the attack's ``Settings`` nor a dict, or a dict names a field it lacks.
    """
    if not isinstance(given, Mapping) or set(given) - set(ATTACK_SETTINGS):
        raise ValueError(f"attack_settings must map attack names to their settings; attacks with settings: "
                         f"{sorted(ATTACK_SETTINGS)}, got {given!r}")
    out = {}
    for name, cls in ATTACK_SETTINGS.items():
        value = given.get(name, {})
        options = declared_options(cls)
        fields_ = {of.name: by_key[key] for key, of in options.items() if key in by_key}
        if isinstance(value, Mapping):
            value = cls(**{**value, **fields_})
        elif isinstance(value, cls):
            value = dataclasses.replace(value, **fields_) if fields_ else value
        else:
            raise TypeError(f"attack_settings[{name!r}] must be a {cls.__name__} or a dict of its fields, got "
                            f"{type(value).__name__}")
        value = with_carried(value, option_value)
        for key, of in options.items():
            of.check(getattr(value, of.name), name=key)
        out[name] = value
    return AttackSettings(out)
