"""``run_audit``: the two stages in a row (stage 1 with each model's signals on an engine, then stage 2)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from mlflow_mia.attacks import make_attacks, required_inputs
from mlflow_mia.audits.membership.checks import check_audit
from mlflow_mia.audits.membership.models import AuditModels
from mlflow_mia.audits.membership.result import AuditResult
from mlflow_mia.audits.membership.scoring import score_checked
from mlflow_mia.audits.membership.signals import check_engine_inputs, engine_signals
from mlflow_mia.engines.registry import get_engine
from mlflow_mia.progress import step
from mlflow_mia.config import AuditConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.signals import SignalCache
from mlflow_mia.signals.dispatch import signal_note

__all__ = ["run_audit"]

log = logging.getLogger(__name__)


def run_audit(target, pool: AuditDataset, population: PopulationSet, *, references: Sequence | None = None,
              generator=None, config: AuditConfig | None = None, engine="local",
              cache: SignalCache | str | None = None, device=None, progress: bool = True,
              shadow_membership=None) -> AuditResult:
    """Audit a target masked LM for membership leakage.

    One setup path whatever the engine: the engine checks the device and the inputs
    it can compute, the models are loaded on this machine, every check of
    :func:`~mlflow_mia.audits.membership.checks.check_audit` runs once, then stage 1
    (:func:`~mlflow_mia.audits.membership.signals.engine_signals`: each model's signals on the
    engine, the rest here -> :class:`~mlflow_mia.audits.membership.AuditSignals`) and stage 2 scores it here
    (:func:`~mlflow_mia.audits.membership.scoring.score_checked`, no model runs).

    Parameters
    ----------
    target : MaskedLM, (model, tokenizer) or str
        The model under audit (a local folder for a str; with ``engine="spark"`` a
        model URI or a folder every executor can read).
    pool : AuditDataset
        Members (label 1) and non-members (label 0) of the target's training data.
    population : PopulationSet
        Samples from the general distribution, disjoint from the pool; only used for
        thresholds. Needs at least ``ceil(1 / min(fprs))`` samples.
    references : sequence of MaskedLM, (model, tokenizer) or str, optional
        Reference models, each trained on similar but disjoint data (one, ``[reference]``,
        for ``likelihood_ratio``); several make one audit over the set. The attacks
        over the set (``lira_offline``, ``rmia``) use every one;
        ``likelihood_ratio`` is reported against each (``likelihood_ratio`` against
        the first, ``likelihood_ratio.reference_<i>`` against the i-th). Every
        reference gets the checks of one (tokenizer agreement, loading without
        shipped code) and its signals are cached like one.
    generator : MaskedLM, (model, tokenizer) or str, optional
        The masked LM proposing neighbours for ``neighbourhood`` (Mattern et al.
        2023, Sec. 3). Precedence (:func:`~mlflow_mia.signals.neighbours.choose_generator`):
        this argument, then ``config.neighbourhood.generator_model`` (a local
        folder), then the first of ``references``.
    config : AuditConfig, optional
        Attacks, signal and metric settings (defaults: loss and likelihood ratio,
        energy with K=10 masks at 15%, FPRs 0.1/0.01/0.001).
    engine : {"local", "spark"} or engine object
        Where each model's signals are computed (:mod:`mlflow_mia.engines.registry`): this process
        (``LocalEngine()``), or Apache Spark executors (the per-text signals of each model;
        ``SparkEngine(spark=..., spark_master=..., store=...)`` configures the session and a
        shared Parquet signal store; needs ``pip install 'mlflow-mia[spark]'``; attacks
        reading neighbours are local only). A name gets the engine with its defaults.
    cache : SignalCache or str, optional
        Signal cache (or its directory) of the local engine: re-runs and shared
        references cost nothing.
    device : str, optional
        Default: CUDA when available, else CPU (on Spark: the executors' device,
        default the task's GPU).
    progress : bool
        Show progress bars.
    shadow_membership : callable, optional
        ``texts -> bool ndarray (len(texts), k)``: which of the ``references`` (shadow models)
        trained on each text, e.g. ``functools.partial(shadow_membership, record, key=key)``
        (:mod:`mlflow_mia.attacks.shadow_record`); stage 1 turns it into the input of ``lira_online``.

    Returns
    -------
    AuditResult
        ``info["engine"]`` names the engine.

    Raises
    ------
    ValueError
        Before any model loads: an unknown engine name, a
        device that does not exist, unknown attacks, attacks whose inputs the engine
        cannot compute, ``references`` not a non-empty list. Before any model runs: a
        missing reference or generator, a reference whose tokenizer differs from the target's (unless
        ``config.allow_tokenizer_mismatch``), a pool with one class, a missing or too
        small population set, pool and population overlap.
    """
    config = config or AuditConfig()
    t0 = time.perf_counter()
    runner = get_engine(engine)
    runner.check_device(device)  # a bad device fails here, before any model loads or cache lookup
    check_engine_inputs(runner, required_inputs(config.attacks))  # unknown attacks fail first
    models = AuditModels.build(target, references=references, generator=generator, config=config,
                               load=runner.load, shadow_membership=shadow_membership)
    asked = config.signal.kind
    config = models.config_for(config)  # a causal target records signal="causal"
    notes = check_audit(models, pool, population, config)
    note = signal_note(models.target, asked) if config.signal.kind != asked else None
    if note is not None:  # said once, in the log and the report (score_checked logs the notes)
        notes = [*notes, note]
    if isinstance(cache, str):
        cache = SignalCache(cache)
    signals = engine_signals(runner, models, pool, population, config, cache=cache, device=device,
                             progress=progress)
    attacks = make_attacks(config)  # each with its settings, once
    with step("scores, metrics and bootstrap intervals"):  # a line every 20 s off a terminal: never silent
        result = score_checked(signals, pool, population, config, notes=notes, attacks=attacks, started=t0)
    log.info("audit done in %.1f s (%s engine)", result.info["timings"]["total_s"], runner.name)
    return result

