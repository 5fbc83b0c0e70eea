"""An audit whose signals are computed on Apache Spark, scored on the driver.

Stage 1 (:func:`spark_audit_signals`): the per-text signals of the target and the
reference model over the pool texts then the population texts, computed on the
executors (:mod:`mlflow_mia.integrations.spark`); only the signals (a few numbers
and the masked-token log-probs per text) come back to the driver, one
:class:`~mlflow_mia.signals.SignalResult` per role, row-aligned with the texts.

Stage 2 (:func:`score_signals`): attacks, thresholds, metrics and plots on the
driver by :func:`mlflow_mia.audit.score_audit`, exactly as in a local audit; no
model runs there.

The neighbourhood attack is not supported on Spark (its neighbour generation and
neighbour energies run on the driver only): it raises a clear error.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from typing import Any, Mapping, Sequence

import numpy as np

from mlflow_mia.config import AuditConfig, SignalConfig
from mlflow_mia.signals.types import SignalResult

__all__ = ["spark_session", "local_with_retries", "spark_audit_signals", "score_signals", "run_spark_audit"]

log = logging.getLogger(__name__)


def spark_session(master: str | None = None, *, app_name: str = "mlflow-mia", conf: Mapping | None = None):
    """The active Spark session, or a new one on ``master`` (e.g. ``"local[2]"``, ``"spark://host:7077"``).

    Sets ``PYSPARK_PYTHON`` to this interpreter when it is unset (the workers must
    run an interpreter with mlflow-mia installed; the builder option alone does not
    reach them) and enables Arrow for ``toPandas``. A local master without a retry
    count (``local``, ``local[N]``, ``local[*]``) gets one (``local[N,R]``): local mode
    ignores ``spark.task.maxFailures`` and would otherwise give up on a task at its
    first failure (a killed Python worker, a lost executor). ``R`` is
    ``conf["spark.task.maxFailures"]`` when given, else 4 (Spark's cluster default).

    Raises
    ------
    ImportError
        pyspark is not installed (``pip install 'mlflow-mia[spark]'``).
    ValueError
        ``spark.task.maxFailures`` is not a positive int.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise ImportError("the Spark engine needs pyspark: pip install 'mlflow-mia[spark]'") from None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active
    builder = SparkSession.builder.appName(app_name).config("spark.sql.execution.arrow.pyspark.enabled", "true")
    if master:
        builder = builder.master(local_with_retries(master, (conf or {}).get("spark.task.maxFailures", 4)))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def local_with_retries(master: str, max_failures=4) -> str:
    """``master`` with a task retry count when it is a local master without one.

    >>> local_with_retries("local[2]"), local_with_retries("local"), local_with_retries("local[*]", 3)
    ('local[2,4]', 'local[1,4]', 'local[*,3]')
    >>> local_with_retries("local[2,1]"), local_with_retries("spark://host:7077")
    ('local[2,1]', 'spark://host:7077')
    """
    try:
        tries = int(max_failures)
    except (TypeError, ValueError):
        tries = 0
    if tries < 1 or str(max_failures).strip() != str(tries):
        raise ValueError(f"spark.task.maxFailures must be a positive int, got {max_failures!r}")
    found = re.fullmatch(r"local(?:\[(\d+|\*)\])?", master.strip())
    if found is None:
        return master
    return f"local[{found.group(1) or 1},{tries}]"


def spark_audit_signals(spark, texts: Sequence[str], models: Mapping[str, Any], config: SignalConfig | None = None,
                        *, store: str | None = None, partitions: int | None = None, device: str | None = None,
                        waves: int | None = None) -> dict[str, SignalResult]:
    """Signals of every model over ``texts``, computed on Spark, row-aligned with ``texts``.

    Parameters
    ----------
    spark : SparkSession
    texts : sequence of str, length n_samples
        Pool texts then population texts (the order the audit scores them in).
    models : mapping of role to str or ResolvedModel
        E.g. ``{"target": "models:/m@candidate", "reference": "models:/r@champion"}``.
    config : SignalConfig, optional
    store : str, optional
        Parquet store (see :func:`~mlflow_mia.integrations.spark.spark_signals`):
        a re-run computes only the texts missing there.
    partitions : int, optional
        Spark partitions of the texts (default: Spark's default parallelism).
    device : str, optional
        Torch device on the executors (default: the task's GPU, else CPU).
    waves : int, optional
        Separate append jobs per model (store only); default one per 250 texts to
        compute, 1 to 8 (:func:`~mlflow_mia.integrations.spark_store.auto_waves`).

    Returns
    -------
    dict of str to SignalResult
        One per role; row i is ``texts[i]``.
    """
    import pandas as pd

    from mlflow_mia.integrations.spark import collect_signals, model_spec, spark_signals

    config = config or SignalConfig()
    ids = np.arange(len(texts), dtype=np.int64)
    df = spark.createDataFrame(pd.DataFrame({"id": ids, "text": list(texts)}))
    if partitions:
        df = df.repartition(int(partitions))
    out = {}
    for role, model in models.items():
        start = time.perf_counter()
        spec = model_spec(model, config, role=role)
        job = spark_signals(df, None, config, spec=spec, store=store, device=device, check_ids=False, waves=waves)
        out[role] = collect_signals(job.frame, ids, kind=config.kind)
        log.info("%s signals of %d texts on Spark in %.1f s", role, len(texts), time.perf_counter() - start)
    return out


def score_signals(signals: Mapping[str, SignalResult], pool, population, config: AuditConfig, *,
                  models=None, notes=()):
    """Score the Spark signals on the driver: :func:`~mlflow_mia.audit.score_audit`, no model runs.

    Parameters
    ----------
    signals : mapping of role to SignalResult
        ``"target"`` (and ``"reference"`` when an attack needs it), each of length
        ``len(pool) + len(population)``: pool rows, then population rows.
    pool : AuditDataset
    population : PopulationSet
    config : AuditConfig
    models : AuditModels, optional
        The models the signals come from (their identities, and the target's
        tokenizer for the memorization-feature table); no forward pass runs.
    notes : sequence of str
        Warnings of earlier checks (:meth:`~mlflow_mia.audit.AuditModels.check`).

    Returns
    -------
    AuditResult

    Raises
    ------
    ValueError
        A signal an attack needs is missing, or a signal does not have one row per
        pool and population text (see :func:`~mlflow_mia.audit.score_audit`).
    """
    from mlflow_mia.audit import AuditSignals, score_audit

    hashes = list(pool.text_hashes) + list(population.text_hashes)
    return score_audit(AuditSignals(dict(signals), text_hashes=tuple(hashes)), pool, population, config,
                       models=models, notes=notes)


def run_spark_audit(spark, target, pool, population, *, reference=None, config: AuditConfig | None = None,
                    store: str | None = None, partitions: int | None = None, device: str | None = None,
                    progress: bool = False):
    """:func:`~mlflow_mia.audit.run_audit` with the signals computed on Spark.

    Parameters
    ----------
    spark : SparkSession
        E.g. :func:`spark_session` ``("local[2]")`` or a cluster's session.
    target, reference : str or ResolvedModel
        Model URIs or folders every executor can read; resolved (and pinned) once on
        the driver, which also keeps the tokenizer for the length breakdown.
    pool : AuditDataset
    population : PopulationSet
    config : AuditConfig, optional
    store : str, optional
        Parquet signal store shared across runs (resumable, idempotent).
    partitions : int, optional
        Spark partitions of the texts.
    device : str, optional
        Torch device on the executors.

    Returns
    -------
    AuditResult
        As from ``run_audit``; ``info["engine"] == "spark"`` and the Spark stage's
        time in ``info["timings"]["signals_spark_s"]``.

    Raises
    ------
    ValueError
        The neighbourhood attack (not supported on Spark), an in-memory model, and
        every input error of ``run_audit``, before any Spark job runs.
    """
    from mlflow_mia.attacks import required_inputs
    from mlflow_mia.audit import AuditModels
    from mlflow_mia.audit.checks import check_data
    from mlflow_mia.integrations.models import resolve_model

    config = config or AuditConfig()
    if "neighbourhood" in config.attacks:
        raise ValueError("the neighbourhood attack does not run on the Spark engine yet (its neighbours are "
                         "generated on the driver); drop it from attacks or use the local engine")
    target = resolve_model(target, role="target")
    reference = None if reference is None else resolve_model(reference, role="reference")
    audit_models = AuditModels.build(target.lm, reference=None if reference is None else reference.lm, config=config)
    notes = audit_models.check(config)
    check_data(pool, population, config)
    models = {"target": target}
    if reference is not None and "reference" in required_inputs(config.attacks):
        models["reference"] = reference
    start = time.perf_counter()
    signals = spark_audit_signals(spark, list(pool.texts) + list(population.texts), models, config.signal,
                                  store=store, partitions=partitions, device=device)
    spark_s = round(time.perf_counter() - start, 3)
    result = score_signals(signals, pool, population, config, models=audit_models, notes=notes)
    result.info["engine"] = "spark"
    result.info["timings"]["signals_spark_s"] = spark_s
    return result
