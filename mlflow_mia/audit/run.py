"""``run_audit``: the two stages in a row (compute the signals, then score them)."""

from __future__ import annotations

import logging
import time

from mlflow_mia.attacks import required_inputs
from mlflow_mia.audit.checks import check_data
from mlflow_mia.audit.compute import AuditModels, compute_audit_signals
from mlflow_mia.audit.result import AuditResult
from mlflow_mia.audit.scoring import score_audit
from mlflow_mia.config import AuditConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.signals import SignalCache
from mlflow_mia.signals.runtime import resolve_device

__all__ = ["run_audit"]

log = logging.getLogger(__name__)


def run_audit(target, pool: AuditDataset, population: PopulationSet, *, reference=None, generator=None,
              config: AuditConfig | None = None, cache: SignalCache | str | None = None, device=None,
              progress: bool = True) -> AuditResult:
    """Audit a target masked LM for membership leakage.

    :func:`~mlflow_mia.audit.compute_audit_signals` on the pool texts then the
    population texts, followed by :func:`~mlflow_mia.audit.score_audit`.

    Parameters
    ----------
    target : MaskedLM, (model, tokenizer) or str
        The model under audit (a local folder for a str).
    pool : AuditDataset
        Members (label 1) and non-members (label 0) of the target's training data.
    population : PopulationSet
        Samples from the general distribution, disjoint from the pool; only used for
        thresholds. Needs at least ``ceil(1 / min(fprs))`` samples.
    reference : MaskedLM, (model, tokenizer) or str, optional
        A model trained on similar but disjoint data; required by ``likelihood_ratio``.
    generator : MaskedLM, (model, tokenizer) or str, optional
        The masked LM proposing neighbours for ``neighbourhood`` (Mattern et al.
        2023, Sec. 3). Precedence (:func:`~mlflow_mia.signals.neighbours.choose_generator`):
        this argument, then ``config.neighbourhood.generator_model`` (a local
        folder), then ``reference``.
    config : AuditConfig, optional
        Attacks, signal and metric settings (defaults: loss and likelihood ratio,
        energy with K=10 masks at 15%, FPRs 0.1/0.01/0.001).
    cache : SignalCache or str, optional
        Signal cache (or its directory): re-runs and shared references cost nothing.
    device : str, optional
        Default: CUDA when available, else CPU.
    progress : bool
        Show progress bars.

    Returns
    -------
    AuditResult

    Raises
    ------
    ValueError
        Before any model loads: a device that does not exist. Before any model runs:
        unknown attacks, a missing reference or generator, a reference whose
        tokenizer differs from the target's (unless ``config.allow_tokenizer_mismatch``),
        a pool with one class, a missing or too small population set, pool and
        population overlap.
    """
    config = config or AuditConfig()
    t0 = time.perf_counter()
    resolve_device(device)  # a bad device fails here, before any model loads or cache lookup
    required_inputs(config.attacks)  # unknown attacks fail first
    models = AuditModels.build(target, reference=reference, generator=generator, config=config)
    notes = models.check(config)
    check_data(pool, population, config)
    if isinstance(cache, str):
        cache = SignalCache(cache)
    signals = compute_audit_signals(models, list(pool.texts) + list(population.texts), config, cache=cache,
                                    device=device, progress=progress,
                                    text_hashes=list(pool.text_hashes) + list(population.text_hashes))
    result = score_audit(signals, pool, population, config, models=models, cache=cache, device=device,
                         notes=notes)
    result.info["timings"]["total_s"] = round(time.perf_counter() - t0, 3)
    log.info("audit done in %.1f s", result.info["timings"]["total_s"])
    return result
