"""The pipeline: run an audit, then hand its result to :mod:`mlflow_mia.tracking`, which only logs.

``AUDITS`` maps each evaluator ``method`` to its :class:`LoggedAudit`: the kind's
:class:`~mlflow_mia.audits.base.Audit` with the parts that log, ``run`` (stage 1, stage 2, the gate,
the log), ``log`` and ``metrics``, all required and typed with the audit's settings, inputs and
result. :func:`register_audit` builds it once; nothing is filled in later. Every entry point looks
an audit up here: the ``mia`` evaluator by ``method``, the CLI's subcommands by
:attr:`~mlflow_mia.audits.base.Audit.command`.

- :mod:`.membership`: :func:`~.membership.audit_and_log` (evaluator, CLI, ``compare``, ``analyze``);
- :mod:`.ner`: :func:`~.ner.ner_audit_and_log`;
- :mod:`.canary`: :func:`~.canary.canary_audit_and_log`;
- :mod:`.compare`: several registry versions audited with :func:`~.membership.audit_and_log` and compared
  (``mlflow-mia compare``).

A new audit kind is one folder ``audits/<kind>/`` (its ``Audit`` with its release ``gate``, and its option
family registered with :func:`~mlflow_mia.options.families.register_family` with ``command=`` and ``summary=``)
and one :func:`register_audit` line below (its ``run``, ``log``, ``metrics`` and tag ``scope``): the evaluator
answers its ``method``, the CLI gets its subcommand (the generic front end of :mod:`mlflow_mia.entrypoints.cli`),
the MLproject generator its entry point, every front end refuses a bad budget before any model loads, and its
``log`` puts the gate's verdict on the audited registry versions with
:func:`~mlflow_mia.tracking.version_verdict.record_verdict`, the writer every kind shares (sealed records, a
verdict only the tool's own audits set, no weaker audit lifting a blocking one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol, TypeVar

from mlflow_mia.audits.base import Audit, Settings
from mlflow_mia.audits.canary.kind import CANARY
from mlflow_mia.audits.membership.kind import MEMBERSHIP
from mlflow_mia.audits.ner.kind import NER
from mlflow_mia.pipeline import canary, membership, ner
from mlflow_mia.tracking.audit_log import log_audit
from mlflow_mia.tracking.canary_log import log_canary_audit
from mlflow_mia.tracking.log_settings import LogSettings
from mlflow_mia.tracking.ner_log import log_ner_audit
from mlflow_mia.tracking.scopes import CANARY_PREFIX, NER_PREFIX, register_scope
from mlflow_mia.options.families import FAMILIES
from mlflow_mia.models.resolve import ResolvedModel
from mlflow_mia.options.values import mia_section

__all__ = ["AUDITS", "Audit", "LoggedAudit", "Log", "Run", "Settings", "register_audit", "get_audit", "audit_for"]

SettingsT = TypeVar("SettingsT", bound="Settings[Any, Any]")
InputsT = TypeVar("InputsT")
SignalsT = TypeVar("SignalsT")
ResultT = TypeVar("ResultT")
SettingsT_contra = TypeVar("SettingsT_contra", bound="Settings[Any, Any]", contravariant=True)
InputsT_contra = TypeVar("InputsT_contra", contravariant=True)
ResultT_co = TypeVar("ResultT_co", covariant=True)
ResultT_contra = TypeVar("ResultT_contra", contravariant=True)


class Run(Protocol[SettingsT_contra, InputsT_contra, ResultT_co]):
    """An audit's ``run``: both stages, the gate and the log, in the MLflow run ``run_id``."""

    def __call__(self, target: ResolvedModel, inputs: InputsT_contra, settings: SettingsT_contra, /, *,
                 run_id: str | None, log_metrics: bool, notes: Sequence[str]) -> tuple[ResultT_co, dict[str, Any]]:
        """``(result, artifacts by name)``.

        ``target`` comes from the audit's ``resolve``, ``inputs`` from its ``load_inputs``, ``settings``
        from its ``parse``; ``log_metrics`` is False when ``mlflow.models.evaluate`` logs the returned
        metrics itself; ``notes`` are the caller's warnings, added to the result's (and the report's).
        """
        ...


class Log(Protocol[ResultT_contra]):
    """An audit's ``log`` (:mod:`mlflow_mia.tracking`): ``log(result, run_id, *, settings) -> artifacts``."""

    def __call__(self, result: ResultT_contra, run_id: str | None = None, /, *,
                 settings: LogSettings) -> Mapping[str, Any]:
        """Log ``result`` to the run ``run_id`` (default: the active run); returns the artifacts by name."""
        ...


@dataclass(frozen=True)
class LoggedAudit(Audit[SettingsT, InputsT, SignalsT, ResultT]):
    """An :class:`~mlflow_mia.audits.base.Audit` with the parts that log: what :data:`AUDITS` holds.

    Built by :func:`register_audit` only; every field is required and typed with the audit's own
    settings, inputs and result.

    Attributes
    ----------
    run : Run[SettingsT, InputsT, ResultT]
        ``run(target, inputs, settings, *, run_id, log_metrics, notes) -> (result, artifacts)``: both
        stages, the gate and the log (:func:`.membership.evaluate_run`, :func:`.ner.evaluate_run`,
        :func:`.canary.evaluate_run`).
    log : Log[ResultT]
        The tracking function that logs a result: ``log(result, run_id, *, settings=LogSettings)`` (the
        canary audit's set rides in ``LogSettings.canaries``).
    metrics : callable
        ``metrics(result, settings) -> dict of str to float``: the metrics logged to MLflow, which an
        ``EvaluationResult`` returns.
    scope : str
        The prefix of the kind's tags on registry versions (``mia.`` membership, ``mia.ner.``,
        ``mia.canary.``): its ``log`` hands it to :func:`~mlflow_mia.tracking.version_verdict.record_verdict`,
        and an audit of another kind never deletes its tags
        (:data:`~mlflow_mia.tracking.registry_tags.KIND_SCOPES`).
    """

    run: Run[SettingsT, InputsT, ResultT]
    log: Log[ResultT]
    metrics: Callable[[ResultT, SettingsT], dict[str, float]]
    scope: str


#: The audits by evaluator ``method``; the only module-level mutable of this layer.
AUDITS: dict[str, LoggedAudit[Any, Any, Any, Any]] = {}


def register_audit(audit: Audit[SettingsT, InputsT, SignalsT, ResultT], *, run: Run[SettingsT, InputsT, ResultT],
                   log: Log[ResultT], metrics: Callable[[ResultT, SettingsT], dict[str, float]],
                   scope: str, force: bool = False) -> LoggedAudit[SettingsT, InputsT, SignalsT, ResultT]:
    """Add ``audit`` to :data:`AUDITS` with the parts that log; returns the registered :class:`LoggedAudit`.

    Parameters
    ----------
    audit : Audit
        The kind's parts (its ``kind.py``); a registered :class:`LoggedAudit` is taken as its ``Audit``
        part, its own ``run``, ``log`` and ``metrics`` replaced by the ones given.
    run, log, metrics, scope
        As the fields of :class:`LoggedAudit`, typed with the audit's settings, inputs and result; ``scope``
        is registered with :func:`~mlflow_mia.tracking.registry_tags.register_scope`.
    force : bool
        Replace an audit registered under the same name or command.

    Raises
    ------
    ValueError
        ``audit.name`` or its ``command`` is already registered (``force=True`` replaces it), no option
        family takes both (the audit's folder registers one), or ``scope`` is not ``mia.`` / ``mia.<name>.``.
    """
    taken = {a.command: name for name, a in AUDITS.items()}
    if not force and (audit.name in AUDITS or audit.command in taken):
        raise ValueError(f"an audit named {audit.name!r} or with command {audit.command!r} is already registered; "
                         "pass force=True to replace it")
    if not any({audit.name, audit.command} <= fam[1] for fam in FAMILIES.values()):
        raise ValueError(f"audit {audit.name!r} has no option family: register one in its folder with "
                         f"register_family({audit.name!r}, (<its config classes>), {{{audit.command!r}, "
                         f"{audit.name!r}}}, command={audit.command!r}, summary=...) before register_audit")
    parts = {f.name: getattr(audit, f.name) for f in fields(Audit)}  # the Audit part of a LoggedAudit too
    logged = LoggedAudit(**parts, run=run, log=log, metrics=metrics, scope=register_scope(scope))
    AUDITS[audit.name] = logged
    return logged


def get_audit(method: str) -> LoggedAudit[Any, Any, Any, Any]:
    """The audit registered under ``method``.

    Raises
    ------
    ValueError
        Unknown ``method`` (the message lists the registered ones).
    """
    try:
        return AUDITS[method]
    except (KeyError, TypeError):
        raise ValueError(f"unknown audit method {method!r}; use one of {', '.join(sorted(AUDITS))}") from None


def audit_for(evaluator_config: Mapping[str, Any] | None) -> LoggedAudit[Any, Any, Any, Any]:
    """The audit an ``evaluator_config`` selects by its ``method`` key (default ``"mia"``)."""
    return get_audit(mia_section(evaluator_config).get("method") or "mia")


register_audit(MEMBERSHIP, run=membership.evaluate_run, log=log_audit, metrics=membership.evaluator_metrics,
               scope="mia.")
register_audit(NER, run=ner.evaluate_run, log=log_ner_audit, metrics=ner.evaluator_metrics, scope=NER_PREFIX)
register_audit(CANARY, run=canary.evaluate_run, log=log_canary_audit, metrics=canary.evaluator_metrics,
               scope=CANARY_PREFIX)
