"""The audit pipeline in two stages: signals (runs the models), then scores (runs none).

- :func:`compute_audit_signals`: the signals the chosen attacks declare in their
  ``requires``, for the pool texts then the population texts -> :class:`AuditSignals`;
- :func:`score_audit`: signals -> attack scores -> metrics -> tables -> :class:`AuditResult`;
  it accepts signals computed anywhere (a cache, another process, a cluster);
- :func:`run_audit`: the two in a row, the function behind every entry point
  (Python API, MLflow evaluator, CLI, MLproject). No MLflow code here: the
  integrations log what it returns.
"""

from mlflow_mia.audit.compute import AuditModels, AuditSignals, compute_audit_signals
from mlflow_mia.audit.result import AttackReport, AuditResult
from mlflow_mia.audit.run import run_audit
from mlflow_mia.audit.scoring import score_audit
from mlflow_mia.naming import fmt_alpha

__all__ = ["run_audit", "score_audit", "compute_audit_signals", "AuditModels", "AuditSignals", "AuditResult",
           "AttackReport", "fmt_alpha"]
