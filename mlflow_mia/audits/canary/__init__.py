"""The canary audit: exposure, included vs excluded metrics and the one-run epsilon bound of planted canaries."""

from mlflow_mia.audits.canary.audit import CanaryAuditResult, canary_audit, candidate_secrets

__all__ = ["CanaryAuditResult", "canary_audit", "candidate_secrets"]
