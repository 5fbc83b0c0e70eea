"""One NER prompt audit run and logged: stage 1, stage 2, the gate, then :mod:`mlflow_mia.tracking` logs it.

:func:`ner_audit_and_log` is the shared core of the ``ner-audit`` command and the
``method="ner_prompts"`` evaluator; :func:`evaluate_run` and :func:`evaluator_metrics`
are the parts :data:`mlflow_mia.pipeline.AUDITS` registers.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import pandas as pd

from mlflow_mia.audits.base import Settings
from mlflow_mia.audits.ner.kind import NER
from mlflow_mia.audits.ner.scoring import NerAuditResult, score_ner
from mlflow_mia.audits.ner.signals import ner_signals
from mlflow_mia.progress import step
from mlflow_mia.config import NerAuditConfig
from mlflow_mia.models.ner import tagger_params
from mlflow_mia.models.resolve import ResolvedModel
from mlflow_mia.options.ner import NerOptions
from mlflow_mia.signals.entity_confidence import ConfidenceCache
from mlflow_mia.tracking.log_settings import LogSettings
from mlflow_mia.tracking.ner_log import log_ner_audit

__all__ = ["ner_audit_and_log", "evaluate_run", "evaluator_metrics"]

log = logging.getLogger(__name__)


def ner_audit_and_log(tagger, names, settings, *, reference=None, run_id=None, log_metrics: bool = True, notes=(),
                      title: str | None = None, run_name: str | None = None):
    """Audit one tagger on a names table and log it to a run.

    Parameters
    ----------
    tagger, reference : ResolvedModel
        From :func:`mlflow_mia.models.ner.resolve_token_classifier`; ``reference`` (optional) is the
        reference tagger of the ratio score.
    names : pandas.DataFrame
        ``name, entity_type, is_member`` (checked: :func:`mlflow_mia.audits.ner.kind.load_names`).
    settings : Settings
        ``(NerAuditConfig, NerOptions)``.
    run_id : str, optional
        Default: the active run.
    log_metrics : bool
        False when ``mlflow.models.evaluate`` logs the returned metrics itself.
    notes : sequence of str
        Warnings of the caller, added to the result's warnings (and so to the report).
    title : str, optional
        The report's title.
    run_name : str, optional
        The run's name (the verdict goes in front); None leaves the run's name as it is.

    Returns
    -------
    (NerAuditResult, GateResult or None, dict of artifacts)
        The verdict of the release gate (``max_tpr_at_fpr``; :meth:`~mlflow_mia.metrics.ner_gate.NerGate.check`),
        None without one.

    The audited registry version(s) (``tagger.registry_versions``) get the ``mia.ner.*`` headline tags, the gate
    record and ``mia.verdict`` with a description (:func:`~mlflow_mia.tracking.ner_log.log_ner_audit`).
    """
    cfg, options = settings
    gate = NER.gate(settings, names)
    signals = ner_signals(tagger.lm, names, prompts=options.prompts, handwritten=options.handwritten_prompts,
                          config=cfg, cache=ConfidenceCache(options.cache_dir), device=options.device,
                          progress=options.progress, reference=reference.lm if reference is not None else None)
    with step("M-MEM per prompt and type, intervals"):
        result = score_ner(signals, config=cfg, hash_key=options.hash_key)
    result.warnings.extend(notes)
    verdict = gate.check(result) if gate is not None else None
    if verdict is not None:
        log.info(verdict.verdict())
    params = tagger_params(tagger)
    if reference is not None:
        params["ner.reference_model"] = reference.resolved_uri
    logged = LogSettings.from_options(options, log_metrics=log_metrics, params=params, run_name=run_name,
                                      gate=verdict, model_version=tagger.registry_versions or None,
                                      weights_id=tagger.lm.weights_id)
    artifacts = log_ner_audit(result, run_id, settings=logged, title=title)
    return result, verdict, artifacts


def evaluate_run(tagger: ResolvedModel, names: pd.DataFrame, settings: Settings[NerAuditConfig, NerOptions], *,
                 run_id: str | None = None, log_metrics: bool = True, notes: Sequence[str] = ()
                 ) -> tuple[NerAuditResult, dict[str, Any]]:
    """The ``method="ner_prompts"`` evaluator's audit: :func:`ner_audit_and_log` without a reference tagger.

    Returns
    -------
    (NerAuditResult, dict of artifacts)
    """
    result, _, artifacts = ner_audit_and_log(tagger, names, settings, run_id=run_id, log_metrics=log_metrics,
                                             notes=notes)
    return result, artifacts


def evaluator_metrics(result: NerAuditResult, settings: Settings[NerAuditConfig, NerOptions]) -> dict[str, float]:
    """Every metric of the audit, prefixed (as :func:`~mlflow_mia.tracking.ner_log.log_ner_audit` logs them)."""
    return {f"{settings.options.metric_prefix}{k}": v for k, v in result.metrics.items()}
