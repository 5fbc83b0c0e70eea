"""The membership audit in two stages: signals (runs the models), then scores (runs none).

One folder, the shape of every audit kind:

- :mod:`.kind`: the audit's parts as one :class:`~mlflow_mia.audits.base.Audit`;
- :mod:`.inputs`: the pool and the population set from tables;
- :mod:`.models`: :class:`AuditModels`, the audit's models by role;
- :mod:`.signals`: stage 1, :func:`compute_audit_signals` -- everything that needs a model: the
  inputs the chosen attacks declare in their ``requires``, for the pool texts then the
  population texts, and what the report tables read -> :class:`AuditSignals` (each model's
  signals a per-model job of an engine, :mod:`mlflow_mia.engines`);
- :mod:`.checks`: the checks every audit runs before a model does;
- :mod:`.scoring`: stage 2, :func:`score_audit` -- signals -> attack scores (through
  :data:`~mlflow_mia.attacks.ATTACKS`) -> metrics -> tables -> :class:`AuditResult` (:mod:`.result`,
  :mod:`.extras`); runs no model, so it accepts signals computed anywhere (a cache, another
  process, a cluster);
- :mod:`.run`: :func:`run_audit`, the two in a row on an engine (``engine="local"`` or ``"spark"``),
  the function behind every entry point (Python API, MLflow evaluator, CLI, MLproject);
- :mod:`.report`: the Markdown report.

No MLflow code here: :mod:`mlflow_mia.tracking` logs what it returns.
"""

from mlflow_mia.audits.membership.models import AuditModels
from mlflow_mia.audits.membership.result import AttackReport, AuditResult
from mlflow_mia.audits.membership.run import run_audit
from mlflow_mia.audits.membership.scoring import score_audit
from mlflow_mia.audits.membership.signals import AuditExtras, AuditSignals, compute_audit_signals
from mlflow_mia.naming import fmt_alpha

__all__ = ["run_audit", "score_audit", "compute_audit_signals", "AuditModels", "AuditSignals", "AuditExtras",
           "AuditResult", "AttackReport", "fmt_alpha"]
