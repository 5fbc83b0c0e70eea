"""The canary audit: exposure, included vs excluded metrics and the one-run epsilon bound of planted canaries.

- :mod:`.signals`: stage 1, :func:`~.signals.canary_signals` (the only part that runs models);
- :mod:`.audit`: stage 2, :func:`~.audit.score_canaries` (pure), and :func:`~.audit.canary_audit`, the two in a row;
- :mod:`.kind`: the audit's parts as one :class:`~mlflow_mia.audits.base.Audit`.
"""

from mlflow_mia.audits.canary.audit import CanaryAuditResult, canary_audit, score_canaries
from mlflow_mia.audits.canary.signals import CanarySignals, canary_signals, candidate_secrets

__all__ = ["CanaryAuditResult", "CanarySignals", "canary_audit", "canary_signals", "candidate_secrets",
           "score_canaries"]
