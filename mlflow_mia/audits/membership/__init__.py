"""The audit pipeline in two stages: signals (runs the models), then scores (runs none).

- :func:`compute_audit_signals`: everything that needs a model -- the inputs the
  chosen attacks declare in their ``requires``, for the pool texts then the
  population texts, and what the report tables read -> :class:`AuditSignals`;
- :func:`score_audit`: signals -> attack scores -> metrics -> tables -> :class:`AuditResult`;
  runs no model, so it accepts signals computed anywhere (a cache, another process, a cluster);
- :func:`run_audit`: the two in a row on an engine (``engine="local"`` or ``"spark"``,
  :mod:`mlflow_mia.engines.registry`), the function behind every entry point (Python
  API, MLflow evaluator, CLI, MLproject). No MLflow code here: :mod:`mlflow_mia.tracking`
  logs what it returns.
"""

from mlflow_mia.audits.membership.result import AttackReport, AuditResult
from mlflow_mia.audits.membership.run import compute_audit_signals, run_audit
from mlflow_mia.audits.membership.scoring import score_audit
from mlflow_mia.engines.audit_signals import AuditExtras, AuditSignals
from mlflow_mia.engines.models import AuditModels
from mlflow_mia.engines.registry import ENGINES, get_engine
from mlflow_mia.naming import fmt_alpha

__all__ = ["run_audit", "score_audit", "compute_audit_signals", "AuditModels", "AuditSignals", "AuditExtras",
           "AuditResult", "AttackReport", "ENGINES", "get_engine", "fmt_alpha"]
