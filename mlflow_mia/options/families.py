"""The option families: which config classes each audit is parsed into, and where their options are taken.

A family is one audit's configs (``AuditConfig`` and ``MiaOptions`` for the membership audit, ...)
and its *surfaces*: the ``mlflow-mia`` commands and evaluator methods that take their options.
Each audit registers its family with :func:`register_family` when its module is imported, as each
attack registers itself in ``ATTACKS``; :mod:`mlflow_mia.options.schema` derives the flags, evaluator
keys, MLproject parameters and reference rows from :data:`FAMILIES`.

A family registered with a ``command`` is a *generic* audit command: the CLI gives it the
command options of :data:`GENERIC_COMMAND_OPTIONS` (``--target``, ``--data``, where to log), and
the MLproject generator an entry point with ``summary`` as its comment, so an audit kind
declared in its own folder (``audits/<kind>/``) needs no line in ``options/`` or ``entrypoints/``.
The three built-in audits name their command options on the declarations themselves (``used_by``).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["FAMILIES"]

#: The built-in ``mlflow-mia`` commands and evaluator methods.
COMMANDS = ("audit", "compare", "ner-audit", "analyze", "build-demo", "canary-audit", "train-shadows")
METHODS = ("mia", "ner_prompts", "canaries")

#: The command options (:class:`~mlflow_mia.options.schema.CommandOptions`) of a generic audit command: the model
#: under audit, its input table and where to log.
GENERIC_COMMAND_OPTIONS = ("target", "data", "experiment", "run_name", "quiet", "tracking_uri")


class Family(NamedTuple):
    """One audit's option family.

    Attributes
    ----------
    classes : iterable of type
        The frozen config dataclasses the audit's options are declared on (with
        :func:`~mlflow_mia.option.option`) or held by (:func:`~mlflow_mia.option.shared_option`);
        a family registered with a function lists what it returns when read.
    surfaces : frozenset of str
        The commands and evaluator methods that take these options.
    command : str or None
        The family's own generic ``mlflow-mia`` command (one of ``surfaces``); None for the built-in audits,
        whose commands are written by hand.
    summary : str or None
        The MLproject entry point's comment of ``command``.
    """

    classes: tuple
    surfaces: frozenset
    command: str | None = None
    summary: str | None = None


class _Classes:
    """A family's config classes read from a function each time they are iterated."""

    def __init__(self, read):
        self.read = read

    def __iter__(self):
        return iter(self.read())

    def __repr__(self):
        return f"{self.read.__qualname__}() -> {tuple(self)!r}"


#: Config families, a registry: ``{name: Family}``. ``mlflow_mia.options`` imports the built-in audits' options
#: modules, which register theirs; an audit kind's own folder registers its family when imported.
FAMILIES: dict[str, Family] = {}


def register_family(name: str, classes: tuple, surfaces: frozenset, *, command: str | None = None,
                    summary: str | None = None) -> Family:
    """Register the config classes of one audit and the commands / methods that take their options.

    Parameters
    ----------
    name : str
        The family's name (an audit kind's: its evaluator ``method``).
    classes : tuple of type, or a function returning one
        The config dataclasses holding the options. A function is called each time the
        classes are read: the membership audit's grow with the attacks registered (each
        attack's ``Settings``).
    surfaces : iterable of str
        The commands and evaluator methods taking them.
    command : str, optional
        A generic audit command (see the module docstring); must be one of ``surfaces``.
    summary : str, optional
        Its MLproject comment; required with ``command``.

    Raises
    ------
    ValueError
        ``name`` is registered already, or ``command`` is not one of ``surfaces`` or comes without a summary.
    """
    if name in FAMILIES:
        raise ValueError(f"option family {name!r} is registered already")
    surfaces = frozenset(surfaces)
    if command is not None and (command not in surfaces or not summary):
        raise ValueError(f"option family {name!r}: its command {command!r} must be one of its surfaces "
                         f"{sorted(surfaces)} and come with a summary (the MLproject comment)")
    FAMILIES[name] = Family(_Classes(classes) if callable(classes) else tuple(classes), surfaces, command, summary)
    return FAMILIES[name]


def audit_commands() -> tuple[str, ...]:
    """The generic audit commands of the registered families, in registration order."""
    return tuple(f.command for f in FAMILIES.values() if getattr(f, "command", None))


def audit_methods() -> tuple[str, ...]:
    """The evaluator methods of the generic audit families (their surfaces other than their command)."""
    return tuple(s for f in FAMILIES.values() if getattr(f, "command", None)
                 for s in sorted(f.surfaces - {f.command}))


def surface_order() -> list[str]:
    """Every command, then every evaluator method: the built-in ones, then those of the generic audit families."""
    return [*COMMANDS, *(c for c in audit_commands() if c not in COMMANDS), *METHODS,
            *(m for m in audit_methods() if m not in METHODS)]
