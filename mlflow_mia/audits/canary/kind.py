"""The canary audit as an :class:`~mlflow_mia.audits.base.Audit`: its parts, by name.

Registered (with its run and log) in :data:`mlflow_mia.pipeline.AUDITS` under the
evaluator method ``"canaries"``; the ``mlflow-mia canary-audit`` command reaches it there.
"""

from __future__ import annotations

from typing import Any, Mapping

from mlflow_mia.audits.base import Audit, Settings, resolve_target
from mlflow_mia.audits.canary.inputs import load_canary_inputs
from mlflow_mia.audits.canary.scoring import score_canaries
from mlflow_mia.audits.canary.signals import canary_signals
from mlflow_mia.canaries import CanarySet
from mlflow_mia.canaries.config import CanaryAuditConfig
from mlflow_mia.metrics.canary_gate import CanaryGate
from mlflow_mia.options.canary import CanaryOptions, parse_canary_config

__all__ = ["CANARY"]


def parse(flat: Mapping[str, Any] | None, *, targets: str | None = None
          ) -> Settings[CanaryAuditConfig, CanaryOptions]:
    """``Settings(CanaryAuditConfig, CanaryOptions)``; ``targets`` is not read (the set holds the bits).

    Raises
    ------
    ValueError
        As :func:`~mlflow_mia.options.canary.parse_canary_config`.
    """
    return Settings(*parse_canary_config(flat))


def gate(settings: Settings[CanaryAuditConfig, CanaryOptions], canaries: CanarySet) -> CanaryGate | None:
    """The canary release gate of the exposure and epsilon budgets, checked against the set to audit
    (:meth:`~mlflow_mia.options.canary.CanaryOptions.gate`); None without a budget.

    Raises
    ------
    ValueError
        A set drawn from an explicit seed without ``allow_seeded_canaries``, or an exposure budget above the
        set's candidate space without ``allow_loose_budget``.
    """
    return settings.options.gate(canaries)


CANARY = Audit(
    name="canaries", command="canary-audit", target_flag="--target",
    help="canary audit: exposure and the one-run epsilon bound of planted canaries",
    description="Score every canary of the auditor's canary set under a model fine-tuned with the included "
                "canaries inserted: included vs excluded AUC and TPR per repetition count, exposure of the "
                "secret-format canaries (Carlini et al. 2019) and the one-run epsilon lower bound (Steinke et al. "
                "2023), record-level for the canaries inserted once. Without --target and --canaries, builds "
                "and audits the canary demo (a non-private and a DP-SGD target).",
    parse=parse, load_inputs=load_canary_inputs, resolve=resolve_target, signals=canary_signals, score=score_canaries,
    gate=gate)
