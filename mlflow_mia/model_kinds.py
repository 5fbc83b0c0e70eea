"""The registry of model kinds: which wrapper a loaded model gets, and how its kind is read from it.

A model kind is a family of language models the audits compute signals from: masked LMs
(:class:`~mlflow_mia.signals.model.MaskedLM`) and causal LMs
(:class:`~mlflow_mia.signals.causal_model.CausalLM`) are built in and register themselves
in ``mlflow_mia/signals/causal_model.py``. A new kind is one module that defines its wrapper
and calls :func:`register_model_kind`, plus one import line in ``mlflow_mia/signals/__init__.py``;
its signal kinds name it (:func:`mlflow_mia.signal_kinds.register_signal_kind`'s ``model``).

A PEFT adapter is not a kind of its own: it is merged into its base, a model of a registered
kind (:mod:`mlflow_mia.models.adapters`).

The registry sits in the core layer beside :mod:`mlflow_mia.signal_kinds`, so the signal-kind
registry validates ``model`` against it without importing the signals layer.

Examples
--------
>>> model_kind("no_such_kind")
Traceback (most recent call last):
    ...
ValueError: unknown model kind 'no_such_kind'; the registered kinds are ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

__all__ = ["register_model_kind", "model_kind", "model_kinds", "detect_kind"]

#: The package's own kinds, registered by ``signals/causal_model.py``; named here so a signal kind naming one
#: validates before that module is imported.
BUILTIN_MODEL_KINDS = ("masked", "causal")
_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class ModelKind:
    """One registered model kind.

    Attributes
    ----------
    name : str
        The kind's name (``"masked"``, ``"causal"``), named by signal kinds and in messages.
    wrapper : type
        What a loaded ``(model, tokenizer)`` of this kind becomes: a class taking
        ``(model, tokenizer, model_id=, name=)`` with a ``from_pretrained(path, trust_remote_code=)``
        classmethod that checks its own head.
    detect : callable
        ``detect(model_or_config) -> bool``: whether a loaded transformers model, its config or a
        ``config.json`` dict is of this kind. Kinds are asked in ``order``; the first yes wins.
    order : int
        Lower is asked first (a specific kind before a general one).
    description : str
        One line for the refusal of an unrecognised model (``"causal LMs (AutoModelForCausalLM: ...)"``).
    """

    name: str
    wrapper: type
    detect: Callable
    order: int = 100
    description: str = ""


_KINDS: dict[str, ModelKind] = {}


def register_model_kind(name: str, wrapper: type, detect: Callable, *, order: int = 100, description: str = "",
                        force: bool = False) -> ModelKind:
    """Register a model kind (once, at import of the module that defines ``wrapper``).

    Raises
    ------
    ValueError
        A malformed ``name``, or ``name`` taken by another wrapper without ``force``.
    TypeError
        ``detect`` is not callable or ``wrapper`` not a class.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"model kind name must match [a-z][a-z0-9_]*, got {name!r}")
    if not callable(detect) or not isinstance(wrapper, type):
        raise TypeError(f"model kind {name!r} needs a wrapper class and a callable detect")
    old = _KINDS.get(name)
    if old is not None and not force and old.wrapper.__qualname__ != wrapper.__qualname__:
        raise ValueError(f"model kind {name!r} is already registered by {old.wrapper.__qualname__}; pick another "
                         "name, or pass force=True to replace it")
    kind = ModelKind(name, wrapper, detect, order, description or name)
    _KINDS[name] = kind
    return kind


def unregister_model_kind(name: str) -> ModelKind:
    """Remove a registered kind (a test's throwaway kind); the built-in kinds stay.

    Raises
    ------
    ValueError
        ``name`` is not registered, or is built in.
    """
    if name in BUILTIN_MODEL_KINDS:
        raise ValueError(f"{name!r} is a built-in model kind and stays registered")
    model_kind(name)
    return _KINDS.pop(name)


def model_kind(name: str) -> ModelKind:
    """The registered kind ``name``.

    Raises
    ------
    ValueError
        Naming the registered kinds.
    """
    if name in _KINDS:
        return _KINDS[name]
    raise ValueError(f"unknown model kind {name!r}; the registered kinds are "
                     f"{', '.join(repr(k) for k in model_kinds())}")


def model_kinds() -> tuple[str, ...]:
    """Names of the registered kinds (the built-in ones even before their module is imported)."""
    return tuple(dict.fromkeys([*BUILTIN_MODEL_KINDS, *_KINDS]))


def detect_kind(model_or_config) -> ModelKind | None:
    """The first registered kind (by ``order``) whose ``detect`` accepts ``model_or_config``; None when none does."""
    for kind in sorted(_KINDS.values(), key=lambda k: (k.order, k.name)):
        if kind.detect(model_or_config):
            return kind
    return None


def describe_kinds() -> str:
    """The registered kinds, one description each, for a refusal."""
    return "; ".join(k.description for k in sorted(_KINDS.values(), key=lambda k: (k.order, k.name)))
