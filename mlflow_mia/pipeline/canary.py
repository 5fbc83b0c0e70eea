"""One canary audit run and logged: stage 1, stage 2, the gate, then :mod:`mlflow_mia.tracking` logs it.

:func:`canary_audit_and_log` is the shared core of the ``canary-audit`` command, the
``method="canaries"`` evaluator and ``analyze``; :func:`evaluate_run` and
:func:`evaluator_metrics` are the parts :data:`mlflow_mia.pipeline.AUDITS` registers.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Sequence

from mlflow_mia.tracking.canary_log import log_canary_audit
from mlflow_mia.tracking.log_settings import LogSettings
from mlflow_mia.audits.base import Settings
from mlflow_mia.audits.canary import canary_audit
from mlflow_mia.audits.canary.kind import CANARY
from mlflow_mia.audits.canary.scoring import CanaryAuditResult
from mlflow_mia.canaries import CanarySet
from mlflow_mia.canaries.config import CanaryAuditConfig
from mlflow_mia.options.canary import CanaryOptions
from mlflow_mia.models.resolve import ResolvedModel, resolve_reference
from mlflow_mia.signals import SignalCache

__all__ = ["canary_audit_and_log", "evaluate_run", "evaluator_metrics"]

log = logging.getLogger(__name__)


def canary_audit_and_log(target, canaries, config, options, *, reference=None, run_id=None, log_metrics: bool = True,
                         notes=(), extra_params: dict | None = None, run_name: str | None = None):
    """Run one canary audit, decide its gate and log it: the shared core of the CLI and the evaluator.

    Parameters
    ----------
    target, reference : ResolvedModel
        From :func:`mlflow_mia.models.resolve.resolve_model`.
    canaries : CanarySet
    config : CanaryAuditConfig
    options : CanaryOptions
    run_id : str, optional
    log_metrics : bool
        False when ``mlflow.models.evaluate`` logs the returned metrics itself.
    notes : sequence of str
        Warnings of the caller, added to the report.
    run_name : str, optional
        Name the run (also a run ``mlflow run`` created).

    Returns
    -------
    (CanaryAuditResult, CanaryGateResult or None, dict of artifacts)

    Raises
    ------
    ValueError
        Before any signal is computed: a gate over a canary set drawn from an explicit seed
        without ``allow_seeded_canaries``, or an exposure budget above the set's candidate
        space without ``allow_loose_budget`` (:meth:`~mlflow_mia.options.canary.CanaryOptions.gate`).
    """
    # the kind's gate part: a seeded set or a budget that states nothing is refused before anything runs
    gate = CANARY.gate(Settings(config, options), canaries)
    result = canary_audit(target.lm, canaries, reference=reference.lm if reference is not None else None,
                          config=config, cache=SignalCache(options.cache_dir), device=options.device,
                          progress=options.progress, hash_key=options.hash_key)
    result.warnings.extend(notes)
    result.warnings.extend(_set_warnings(canaries, options))
    for role, resolved in (("target", target), ("reference", reference)):
        if resolved is not None:
            result.models[role]["uri"] = resolved.resolved_uri
    verdict = None
    if gate is not None:
        verdict = gate.check(result)
        log.info(verdict.verdict())
    logged = LogSettings.from_options(options, gate=verdict, log_metrics=log_metrics, params=extra_params,
                                        model_version=target.registry_versions or None,
                                        weights_id=target.lm.weights_id, run_name=run_name,
                                        canaries=canaries)
    artifacts = log_canary_audit(result, run_id, settings=logged)
    return result, verdict, artifacts


def _set_warnings(canaries, options) -> list[str]:
    """What the report says about the canary set itself: a seeded set, and what a gate's record cannot show."""
    out = []
    if canaries.seed is not None:
        out.append("this canary set was drawn from a seed (make_canaries(seed=...)): whoever knows or guesses the "
                   "seed regenerates its secrets and inclusion bits; draw an audit's set without a seed")
    if options.gate() is not None:
        if options.hash_key.is_random:
            out.append("the gate record names the canary set by a digest under a random hash key, which is not "
                       "kept: a fail recorded by this audit can be cleared by no later audit; set --hash-key-file "
                       "(evaluator key hash_key_file) or MLFLOW_MIA_HASH_KEY")
        if not options.planted_in:
            out.append("where the canary set was planted is not stated (--planted-in, evaluator key planted_in): "
                       "the audit cannot see which canaries were trained on, and a set never planted passes any "
                       "budget")
    return out


def evaluate_run(target: ResolvedModel, canaries: CanarySet, settings: Settings[CanaryAuditConfig, CanaryOptions], *,
                 run_id: str | None = None, log_metrics: bool = True, notes: Sequence[str] = ()
                 ) -> tuple[CanaryAuditResult, dict[str, Any]]:
    """The ``method="canaries"`` evaluator's audit: the reference the options name, then :func:`canary_audit_and_log`.

    Returns
    -------
    (CanaryAuditResult, dict of artifacts)
    """
    cfg, options = settings
    reference = (resolve_reference(options.reference_model, target=target,
                                   trust_remote_code=options.trust_remote_code) if options.reference_model else None)
    result, _, artifacts = canary_audit_and_log(target, canaries, cfg, options, reference=reference, run_id=run_id,
                                                log_metrics=log_metrics, notes=notes)
    return result, artifacts


def evaluator_metrics(result: CanaryAuditResult, settings: Settings[CanaryAuditConfig, CanaryOptions]
                      ) -> dict[str, float]:
    """The metrics as :func:`~mlflow_mia.tracking.canary_log.log_canary_audit` logs them: finite values only
    (an unresolved TPR stays out; its reason is in the report), prefixed."""
    prefix = settings.options.metric_prefix
    return {f"{prefix}{k}": float(v) for k, v in result.metrics.items() if v is not None and math.isfinite(float(v))}
