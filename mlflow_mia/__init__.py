"""Privacy audits of fine-tuned language models (masked and causal LMs, NER taggers), recorded in MLflow.

The public entry points, imported on first use (``import mlflow_mia`` stays cheap)::

    from mlflow_mia import (run_audit, score_audit, compute_audit_signals, AuditConfig, SignalConfig,
                            AuditDataset, PopulationSet, AuditResult, run_analysis)
"""

from __future__ import annotations

import importlib

__all__ = ["run_audit", "score_audit", "compute_audit_signals", "AuditModels", "AuditSignals", "AuditResult",
           "AuditConfig", "SignalConfig", "MetricConfig", "NeighbourhoodConfig", "AuditDataset", "PopulationSet",
           "SignalResult", "lookup_hash", "run_analysis"]

_WHERE = {
    "run_audit": "mlflow_mia.audits.membership", "score_audit": "mlflow_mia.audits.membership", "compute_audit_signals": "mlflow_mia.audits.membership",
    "AuditModels": "mlflow_mia.audits.membership", "AuditSignals": "mlflow_mia.audits.membership", "AuditResult": "mlflow_mia.audits.membership",
    "AuditConfig": "mlflow_mia.config", "SignalConfig": "mlflow_mia.config", "MetricConfig": "mlflow_mia.config",
    "NeighbourhoodConfig": "mlflow_mia.config", "AuditDataset": "mlflow_mia.data",
    "PopulationSet": "mlflow_mia.data", "SignalResult": "mlflow_mia.signals.types",
    "lookup_hash": "mlflow_mia.hashing", "run_analysis": "mlflow_mia.analyze",
}


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'mlflow_mia' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
