"""The registry of signal kinds: each kind's name, the model kind it needs and the function computing it.

A signal kind is the per-text, per-token quantity a language model gives (the masked
energy, the pseudo-log-likelihood, a causal LM's mean NLL per token). Its module in
``mlflow_mia/signals/`` registers it with :func:`register_signal_kind`, and
``mlflow_mia/signals/__init__.py`` imports that module: those are the two files a new
kind touches. The registry sits in the core layer, beside :mod:`mlflow_mia.config`,
so :class:`~mlflow_mia.config.SignalConfig` reads the ``signal`` option's choices
from it (:data:`SIGNAL_KINDS`, a live view: the options reference, ``--help`` and
``MLproject`` list every registered kind) without importing the signals layer above
it; :mod:`mlflow_mia.signals.dispatch` looks the compute function up here.

The built-in kinds (:data:`BUILTIN_SIGNAL_KINDS`) are named here as well, so a config
naming one validates in a process that has not imported :mod:`mlflow_mia.signals`
yet; their modules register their functions like any other kind.

Examples
--------
>>> "energy" in SIGNAL_KINDS, tuple(SIGNAL_KINDS)[:3]
(True, ('energy', 'pll', 'causal'))
>>> signal_kind("no_such_kind")
Traceback (most recent call last):
    ...
ValueError: unknown signal kind 'no_such_kind'; the registered kinds are ...
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Callable

from mlflow_mia.model_kinds import model_kinds
from mlflow_mia.naming import did_you_mean


class _ModelKindsView(Sequence):
    """The registered model kinds' names, read live (a kind registered later shows)."""

    def __getitem__(self, index):
        return model_kinds()[index]

    def __len__(self) -> int:
        return len(model_kinds())

    def __repr__(self) -> str:
        return repr(model_kinds())

__all__ = ["register_signal_kind", "signal_kind", "signal_kinds", "SIGNAL_KINDS", "SIGNAL_UNITS"]

#: The kinds of language model a signal may be defined for: a live view of :mod:`mlflow_mia.model_kinds`.
MODEL_KINDS = _ModelKindsView()
#: The package's own kinds, registered by ``signals/energy.py`` (energy, pll) and ``signals/causal.py``
#: (causal); named here so a config naming one validates before those modules are imported.
BUILTIN_SIGNAL_KINDS = ("energy", "pll", "causal")
_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class SignalKind:
    """One registered signal kind.

    Attributes
    ----------
    name : str
        The ``signal`` option's value (``SignalConfig.kind``), lower-case letters, digits and ``_``.
    model : {"masked", "causal"}
        The kind of language model it is computed from; a model of the other kind is refused
        (:func:`mlflow_mia.signals.dispatch.signal_config_for`).
    unit : str
        Unit of ``SignalResult.values`` (``"nats"``, ``"nats/token"``).
    compute : callable
        ``compute(lm, texts, config, *, cache, device, progress, chunk_size, desc, mask_keys, text_key, stats)
        -> SignalResult`` of this kind (the signature of :func:`mlflow_mia.signals.energy.compute_signals`),
        row-aligned with ``texts``, ``values`` lower = more likely under the model.
    """

    name: str
    model: str
    unit: str
    compute: Callable


_KINDS: dict[str, SignalKind] = {}


def register_signal_kind(name: str, *, model: str, unit: str, compute: Callable,
                         force: bool = False) -> SignalKind:
    """Register a signal kind (once, at import of the module that defines ``compute``).

    Parameters
    ----------
    name : str
        The kind's name, matching ``[a-z][a-z0-9_]*``; it becomes a choice of the ``signal``
        option (CLI ``--signal``, evaluator key ``signal``, MLproject parameter).
    model : {"masked", "causal"}
    unit : str
        Unit of the values, e.g. ``"nats"`` or ``"nats/token"``.
    compute : callable
        See :attr:`SignalKind.compute`.
    force : bool
        Replace a kind registered under ``name`` by another function (default False: an error).

    Returns
    -------
    SignalKind

    Raises
    ------
    ValueError
        A malformed ``name``, an unknown ``model``, or ``name`` taken by another function
        without ``force`` (re-registering the same function, as a re-imported module does, is allowed).
    TypeError
        ``compute`` is not callable.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"signal kind name must match [a-z][a-z0-9_]* (it is an option value and a cache-key "
                         f"part), got {name!r}")
    if model not in model_kinds():
        raise ValueError(f"model of signal kind {name!r} must be one of {model_kinds()} (mlflow_mia.model_kinds), "
                         f"got {model!r}")
    if not callable(compute):
        raise TypeError(f"compute of signal kind {name!r} must be callable, got {type(compute).__name__}")
    old = _KINDS.get(name)
    if old is not None and not force and _qualname(old.compute) != _qualname(compute):
        raise ValueError(f"signal kind {name!r} is already registered by {_qualname(old.compute)}; pick another "
                         "name, or pass force=True to replace it")
    kind = SignalKind(name, model, unit, compute)
    _KINDS[name] = kind
    return kind


def unregister_signal_kind(name: str) -> SignalKind:
    """Remove a registered kind and return it (a test's throwaway kind, a plugin withdrawing its own).

    Raises
    ------
    ValueError
        ``name`` is not registered, or is one of :data:`BUILTIN_SIGNAL_KINDS`.
    """
    if name in BUILTIN_SIGNAL_KINDS:
        raise ValueError(f"{name!r} is a built-in signal kind and stays registered")
    signal_kind(name)
    return _KINDS.pop(name)


def signal_kind(name: str) -> SignalKind:
    """The registered kind ``name``.

    Raises
    ------
    ValueError
        ``name`` is not registered: the message lists the registered kinds and how a kind
        registers (and, for a built-in one, that its module has not been imported yet).
    """
    kind = _KINDS.get(name)
    if kind is not None:
        return kind
    known = ", ".join(repr(k) for k in signal_kinds())
    if name in BUILTIN_SIGNAL_KINDS:
        raise ValueError(f"signal kind {name!r} has no function registered yet: import mlflow_mia.signals "
                         "(its module registers it)")
    raise ValueError(f"unknown signal kind {name!r}{did_you_mean(name, SIGNAL_KINDS)}; the registered kinds are "
                     f"{known}. A kind registers itself "
                     "with mlflow_mia.signal_kinds.register_signal_kind in its module under mlflow_mia/signals/, "
                     "imported by mlflow_mia/signals/__init__.py")


def signal_kinds(model: str | None = None) -> tuple[str, ...]:
    """The names of the kinds: the built-in ones first, then the others in registration order.

    With ``model`` (``"masked"`` or ``"causal"``), only the registered kinds computed from
    that kind of model.
    """
    names = tuple(dict.fromkeys(BUILTIN_SIGNAL_KINDS + tuple(_KINDS)))
    if model is None:
        return names
    return tuple(n for n in names if n in _KINDS and _KINDS[n].model == model)


def _qualname(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


class _KindNames(Sequence):
    """The kinds' names (:func:`signal_kinds`), read at each use: a tuple that follows the registry."""

    def __getitem__(self, index):
        return signal_kinds()[index]

    def __len__(self) -> int:
        return len(signal_kinds())

    def __contains__(self, name) -> bool:
        return name in signal_kinds()

    def __iter__(self):
        return iter(signal_kinds())

    def __repr__(self) -> str:
        return repr(signal_kinds())


class _KindUnits(Mapping):
    """Registered kind -> unit of its values, read at each use."""

    def __getitem__(self, name):
        if name not in _KINDS:
            raise KeyError(name)
        return _KINDS[name].unit

    def __len__(self) -> int:
        return len(_KINDS)

    def __iter__(self):
        return iter([n for n in signal_kinds() if n in _KINDS])

    def __repr__(self) -> str:
        return repr(dict(self))


#: The ``signal`` option's choices: every kind's name (built-in first), as a live tuple-like view.
SIGNAL_KINDS: Sequence[str] = _KindNames()
#: Registered kind -> unit of ``SignalResult.values`` (``"nats"``, ``"nats/token"``), live.
SIGNAL_UNITS: Mapping[str, str] = _KindUnits()
