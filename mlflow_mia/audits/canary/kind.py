"""The canary audit as an :class:`~mlflow_mia.audits.base.Audit`: its parts, by name.

Registered (with its run and log) in :data:`mlflow_mia.pipeline.AUDITS` under the
evaluator method ``"canaries"``; the ``mlflow-mia canary-audit`` command reaches it there.
"""

from __future__ import annotations

from mlflow_mia.audits.base import Audit, Settings, resolve_target
from mlflow_mia.audits.canary.audit import score_canaries
from mlflow_mia.audits.canary.signals import canary_signals
from mlflow_mia.canaries import CanarySet
from mlflow_mia.options.canary import parse_canary_config
import pandas as pd

__all__ = ["CANARY", "parse", "load_canary_set", "load_canary_inputs"]


def parse(flat, *, targets: str | None = None) -> Settings:
    """``Settings(CanaryAuditConfig, CanaryOptions)``; ``targets`` is not read (the set holds the bits).

    Raises
    ------
    ValueError
        As :func:`~mlflow_mia.options.canary.parse_canary_config`.
    """
    return Settings(*parse_canary_config(flat))


def load_canary_set(source) -> CanarySet:
    """A :class:`~mlflow_mia.canaries.CanarySet` from one, or from the path of its secret file.

    Raises
    ------
    ValueError
        No canary set given.
    """
    if isinstance(source, CanarySet):
        return source
    if source is None or (isinstance(source, str) and not source.strip()):
        raise ValueError("the canary audit needs the auditor's canary set: --canaries PATH (the file written by "
                         "CanarySet.save), or evaluator key 'canaries'")
    return CanarySet.load(str(source))


def load_canary_inputs(frame, settings: Settings) -> CanarySet:
    """The canary set the ``canaries`` key names, checked against ``frame`` (its id table, in order).

    ``frame`` must be :meth:`CanarySet.id_frame` of that set: its ``canary_id`` column lists the
    set's ids in order, so the audited data is the set named by the key (no text, secret or bit
    passes through ``mlflow.models.evaluate``).

    Raises
    ------
    ValueError
        No canary set named, or ``frame`` is not the set's id table; a gate the set refuses
        (:meth:`~mlflow_mia.options.canary.CanaryOptions.gate`: a seeded set, a loose exposure budget).
    """
    canaries = load_canary_set(settings.options.canaries)
    if not isinstance(frame, pd.DataFrame) or "canary_id" not in frame or list(frame["canary_id"]) != list(
            canaries.ids):
        raise ValueError("method='canaries' takes data=canary_set.id_frame() (the set's canary ids in order, no texts "
                         "or bits), for the set named by the 'canaries' key")
    settings.options.gate(canaries)  # before the model loads
    return canaries


CANARY = Audit(
    name="canaries", command="canary-audit", target_flag="--target",
    help="canary audit: exposure and the one-run epsilon bound of planted canaries",
    description="Score every canary of the auditor's canary set under a model fine-tuned with the included "
                "canaries inserted: included vs excluded AUC and TPR per repetition count, exposure of the "
                "secret-format canaries (Carlini et al. 2019) and the one-run epsilon lower bound (Steinke et al. "
                "2023), record-level for the canaries inserted once. Without --target and --canaries, builds "
                "and audits the canary demo (a non-private and a DP-SGD target).",
    parse=parse, load_inputs=load_canary_inputs, resolve=resolve_target, signals=canary_signals, score=score_canaries)
