"""The audit pipeline in two stages: signals (runs the models), then scores (runs none).

- :func:`compute_audit_signals`: everything that needs a model -- the inputs the
  chosen attacks declare in their ``requires``, for the pool texts then the
  population texts, and what the report tables read -> :class:`AuditSignals`;
- :func:`score_audit`: signals -> attack scores -> metrics -> tables -> :class:`AuditResult`;
  runs no model, so it accepts signals computed anywhere (a cache, another process, a cluster);
- :func:`run_audit`: the two in a row on an engine (``engine="local"`` or ``"spark"``,
  :mod:`mlflow_mia.audit.engines`), the function behind every entry point (Python
  API, MLflow evaluator, CLI, MLproject). No MLflow code here: the integrations
  log what it returns.
"""

from mlflow_mia.audit.audit_signals import AuditExtras, AuditSignals
from mlflow_mia.audit.compute import AuditModels, compute_audit_signals
from mlflow_mia.audit.engines import ENGINES, get_engine
from mlflow_mia.audit.result import AttackReport, AuditResult
from mlflow_mia.audit.run import run_audit
from mlflow_mia.audit.scoring import score_audit
from mlflow_mia.naming import fmt_alpha

__all__ = ["run_audit", "score_audit", "compute_audit_signals", "AuditModels", "AuditSignals", "AuditExtras",
           "AuditResult", "AttackReport", "ENGINES", "get_engine", "fmt_alpha"]
