"""The pipeline: run an audit, then hand its result to :mod:`mlflow_mia.tracking`, which only logs.

``AUDITS`` maps each evaluator ``method`` to its :class:`~mlflow_mia.audits.base.Audit`
(as ``ATTACKS`` maps attack names), completed here with the parts that log:
``run`` (stage 1, stage 2, the gate, the log), ``log`` and ``metrics``. Every entry
point looks an audit up here: the ``mia`` evaluator by ``method``, the CLI's subcommands
by :attr:`~mlflow_mia.audits.base.Audit.command`.

- :mod:`.membership`: :func:`~.membership.audit_and_log` (evaluator, CLI, ``compare``, ``analyze``);
- :mod:`.ner`: :func:`~.ner.ner_audit_and_log`;
- :mod:`.canary`: :func:`~.canary.canary_audit_and_log`;
- :mod:`.compare`: several registry versions audited with :func:`~.membership.audit_and_log` and compared
  (``mlflow-mia compare``).

A new audit kind is one folder ``audits/<kind>/`` (its ``Audit``, and its option family registered with
:func:`~mlflow_mia.options.families.register_family` with ``command=`` and ``summary=``) and one
:func:`register_audit` line below: the evaluator answers its ``method``, the CLI gets its subcommand (the
generic front end of :mod:`mlflow_mia.entrypoints.cli`), the MLproject generator its entry point.
"""

from __future__ import annotations

import dataclasses

from mlflow_mia.audits.base import Audit, Settings
from mlflow_mia.audits.canary.kind import CANARY
from mlflow_mia.audits.membership.kind import MEMBERSHIP
from mlflow_mia.audits.ner.kind import NER
from mlflow_mia.pipeline import canary, membership, ner
from mlflow_mia.tracking.audit_log import log_audit
from mlflow_mia.tracking.canary_log import log_canary_audit
from mlflow_mia.tracking.ner_log import log_ner_audit
from mlflow_mia.options.families import FAMILIES
from mlflow_mia.options.values import mia_section

__all__ = ["AUDITS", "Audit", "Settings", "register_audit", "get_audit", "audit_for"]

#: The audits by evaluator ``method``; the only module-level mutable of this layer.
AUDITS: dict[str, Audit] = {}


def register_audit(audit: Audit, *, run, log, metrics, force: bool = False) -> Audit:
    """Add ``audit`` to :data:`AUDITS` with the parts that log; returns the registered audit.

    Raises
    ------
    ValueError
        ``audit.name`` or its ``command`` is already registered (``force=True`` replaces it), or no option
        family takes both (the audit's folder registers one).
    """
    taken = {a.command: name for name, a in AUDITS.items()}
    if not force and (audit.name in AUDITS or audit.command in taken):
        raise ValueError(f"an audit named {audit.name!r} or with command {audit.command!r} is already registered; "
                         "pass force=True to replace it")
    if not any({audit.name, audit.command} <= fam[1] for fam in FAMILIES.values()):
        raise ValueError(f"audit {audit.name!r} has no option family: register one in its folder with "
                         f"register_family({audit.name!r}, (<its config classes>), {{{audit.command!r}, "
                         f"{audit.name!r}}}, command={audit.command!r}, summary=...) before register_audit")
    AUDITS[audit.name] = dataclasses.replace(audit, run=run, log=log, metrics=metrics)
    return AUDITS[audit.name]


def get_audit(method: str) -> Audit:
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


def audit_for(evaluator_config) -> Audit:
    """The audit an ``evaluator_config`` selects by its ``method`` key (default ``"mia"``)."""
    return get_audit(mia_section(evaluator_config).get("method") or "mia")


register_audit(MEMBERSHIP, run=membership.evaluate_run, log=log_audit, metrics=membership.evaluator_metrics)
register_audit(NER, run=ner.evaluate_run, log=log_ner_audit, metrics=ner.evaluator_metrics)
register_audit(CANARY, run=canary.evaluate_run, log=log_canary_audit, metrics=canary.evaluator_metrics)
