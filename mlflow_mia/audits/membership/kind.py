"""The membership audit as an :class:`~mlflow_mia.audits.base.Audit`: its parts, by name.

Registered (with its run and log) in :data:`mlflow_mia.pipeline.AUDITS` under the
evaluator method ``"mia"``; the ``mlflow-mia audit`` command and the ``audit`` MLproject
entry point reach it there.
"""

from __future__ import annotations

from typing import Any, Mapping

from mlflow_mia.audits.base import Audit, Settings, resolve_target
from mlflow_mia.audits.membership.inputs import load_inputs as load_tables
from mlflow_mia.audits.membership.signals import compute_audit_signals
from mlflow_mia.audits.membership.scoring import score_audit
from mlflow_mia.config import AuditConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.metrics.gate import Gate
from mlflow_mia.options.audit import MiaOptions, parse_options
import pandas as pd

__all__ = ["MEMBERSHIP"]


def parse(flat: Mapping[str, Any] | None, *, targets: str | None = None) -> Settings[AuditConfig, MiaOptions]:
    """``Settings(AuditConfig, MiaOptions)`` from flat ``evaluator_config["mia"]`` keys or the ``audit`` flags.

    Raises
    ------
    ValueError
        As :func:`~mlflow_mia.options.audit.parse_options` (unknown key, bad value).
    """
    return Settings(*parse_options(flat, targets=targets))


def load_inputs(frame: Any, settings: Settings[AuditConfig, MiaOptions]) -> tuple[AuditDataset, PopulationSet]:
    """``(AuditDataset, PopulationSet)``: the pool from ``frame``, the population set the options name.

    Raises
    ------
    ValueError
        ``frame`` is not a DataFrame, or as :func:`~mlflow_mia.audits.membership.inputs.load_inputs`.
    """
    if not isinstance(frame, pd.DataFrame):
        raise ValueError("the mia evaluator needs `data` as a pandas DataFrame (or a dataset built from one) "
                         "with a text column and a membership label column")
    return load_tables(frame, settings.options)


def gate(settings: Settings[AuditConfig, MiaOptions], inputs: tuple[AuditDataset, PopulationSet]) -> Gate | None:
    """The membership release gate: the ``max_tpr_at_fpr`` budgets (:class:`~mlflow_mia.metrics.gate.Gate`,
    checked when the options were parsed), None without one. The inputs are not read."""
    return settings.options.gate


MEMBERSHIP = Audit(
    name="mia", command="audit", target_flag="--target",
    help="audit one model and log the result to an MLflow run",
    description="Audit one language model (masked or causal LM, or a LoRA adapter) for membership leakage and "
                "log metrics, figures, tables, a report and registry tags to one MLflow run. Without --target, audits the built-in BBC News demo "
                "(trained and registered on first use).",
    parse=parse, load_inputs=load_inputs, resolve=resolve_target, signals=compute_audit_signals, score=score_audit,
    gate=gate)
