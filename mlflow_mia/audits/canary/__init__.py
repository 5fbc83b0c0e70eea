"""The canary audit: exposure, included vs excluded metrics and the one-run epsilon bound of planted canaries.

One folder, the shape of every audit kind:

- :mod:`.kind`: the audit's parts as one :class:`~mlflow_mia.audits.base.Audit`;
- :mod:`.inputs`: the auditor's canary set, loaded and checked;
- :mod:`.signals`: stage 1, :func:`~.signals.canary_signals` (the only part that runs models);
- :mod:`.scoring`: stage 2, :func:`~.scoring.score_canaries` (pure; the scores from the attack
  registry :data:`~mlflow_mia.attacks.ATTACKS`: ``loss`` or ``likelihood_ratio``);
- :mod:`.run`: :func:`~.run.canary_audit`, the two in a row.

The Markdown report is written where the result is logged (:mod:`mlflow_mia.tracking.canary_log`).
"""

from mlflow_mia.audits.canary.run import canary_audit
from mlflow_mia.audits.canary.scoring import CanaryAuditResult, score_canaries
from mlflow_mia.audits.canary.signals import CanarySignals, canary_signals, candidate_secrets

__all__ = ["CanaryAuditResult", "CanarySignals", "canary_audit", "canary_signals", "candidate_secrets",
           "score_canaries"]
