"""``canary_audit``: the canary audit's two stages in a row (the models' signals, then the scores)."""

from __future__ import annotations

import logging

import numpy as np

from mlflow_mia.audits.canary.scoring import CanaryAuditResult, check_both_classes, score_canaries
from mlflow_mia.audits.canary.signals import canary_signals
from mlflow_mia.canaries import CanarySet
from mlflow_mia.progress import step
from mlflow_mia.canaries.config import CanaryAuditConfig
from mlflow_mia.signals.dispatch import signal_note

__all__ = ["canary_audit"]

log = logging.getLogger(__name__)


def canary_audit(target, canaries: CanarySet, *, reference=None, config: CanaryAuditConfig | None = None,
                 cache=None, device=None, progress: bool = False, hash_key=None) -> CanaryAuditResult:
    """Audit ``target`` with a planted canary set (stage 1, then stage 2: see :mod:`mlflow_mia.audits.canary.scoring`).

    Parameters
    ----------
    target : MaskedLM
        The model fine-tuned on data holding the included canaries' copies.
    canaries : CanarySet
        The auditor's secret set (texts, repetition counts, inclusion bits).
    reference : MaskedLM, optional
        A model that never saw any canary: the score becomes the likelihood ratio
        ``E_ref - E_target`` instead of ``-E_target``. Either is then centred per template
        (:func:`~mlflow_mia.audits.canary.scoring.centre_by_template`).
    config : CanaryAuditConfig, optional
    cache : SignalCache, optional
        Canary and candidate rows are stored under their keyed hash (``hash_key``), never
        under the text's sha256; without a kept ``hash_key`` they are not cached.
    device : str, optional
    progress : bool
    hash_key : HashKey, bytes or str, optional
        The audit's hash key (:func:`mlflow_mia.hashing.resolve_hash_key`), which keys the
        cache rows; a random :class:`~mlflow_mia.hashing.HashKey` (not kept) or None turns
        the cache off for this audit.

    Returns
    -------
    CanaryAuditResult

    Raises
    ------
    ValueError
        Fewer than 2 included or 2 excluded canaries (nothing to compare), or a reference of
        another kind than the target (causal vs masked: their signals cannot be compared;
        :func:`~mlflow_mia.signals.dispatch.check_model_kinds`).
    """
    check_both_classes(canaries.included.astype(np.int64))  # before any model runs
    signals = canary_signals(target, canaries, reference=reference, config=config, cache=cache, device=device,
                             progress=progress, hash_key=hash_key)
    with step("canary scores, exposures and bounds"):
        result = score_canaries(signals, canaries, config)
    note = signal_note(target, (config or CanaryAuditConfig()).signal)  # a causal target ranks by its own signal
    if note:
        log.warning(note)
        result.warnings.append(note)
    return result
