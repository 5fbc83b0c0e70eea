"""The Spark engine (``engine="spark"``): each model's signals on Apache Spark executors.

:class:`SparkEngine` resolves a model on the driver (a URI or a folder the executors can
read) and runs its per-model signal job on the executors (:func:`spark_model_signals`,
:mod:`mlflow_mia.engines.spark_executors`): the per-text signals of one model over the
texts given; only the signals (a few numbers and the masked-token log-probs per text)
come back to the driver, one :class:`~mlflow_mia.signals.SignalResult` per model,
row-aligned with the texts. It knows no audit: an audit's stage 1 asks it for the
signals of each model it needs and computes the rest on the driver, which holds the
tokenizers. It is ``remote``: only per-model jobs run there, so an audit refuses the
inputs it would compute from models on the driver (the neighbourhood attacks' neighbours,
:func:`mlflow_mia.audits.membership.signals.check_engine_inputs`) before any model loads.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import pandas as pd

from mlflow_mia.config import SignalConfig
from mlflow_mia.signals.types import SignalResult
from mlflow_mia.engines.spark_executors import collect_signals, model_spec, spark_signals
from mlflow_mia.models.resolve import resolve_model

__all__ = ["SparkEngine", "spark_session"]

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


def spark_model_signals(spark, texts: Sequence[str], models: Mapping[str, Any], config: SignalConfig | None = None,
                        *, store: str | None = None, partitions: int | None = None, device: str | None = None,
                        waves: int | None = None, stats=True) -> dict[str, SignalResult]:
    """Signals of every model over ``texts``, computed on Spark, row-aligned with ``texts``.

    Parameters
    ----------
    spark : SparkSession
    texts : sequence of str, length n_samples
        The texts, in the order of the rows returned (an audit: pool texts then population texts).
    models : mapping of role to str or ResolvedModel
        E.g. ``{"target": "models:/m@candidate", "reference": "models:/r@champion"}``.
    config : SignalConfig, optional
    store : str, optional
        Parquet store (see :func:`~mlflow_mia.engines.spark_executors.spark_signals`):
        a re-run computes only the texts missing there.
    partitions : int, optional
        Spark partitions of the texts (default: Spark's default parallelism).
    device : str, optional
        Torch device on the executors (default: the task's GPU, else CPU).
    waves : int, optional
        Separate append jobs per model (store only); default one per 250 texts to
        compute, 1 to 8 (:func:`~mlflow_mia.engines.spark_store.auto_waves`).
    stats : bool or collection of str
        Which roles also get Min-K%++'s per-token statistics: True (every role, the
        default), False (none) or the roles' names; an audit names those its attacks
        declare them for (:func:`mlflow_mia.attacks.required_token_quantities`).

    Returns
    -------
    dict of str to SignalResult
        One per role; row i is ``texts[i]``.
    """
    config = config or SignalConfig()
    ids = np.arange(len(texts), dtype=np.int64)
    df = spark.createDataFrame(pd.DataFrame({"id": ids, "text": list(texts)}))
    if partitions:
        df = df.repartition(int(partitions))
    out = {}
    for role, model in models.items():
        start = time.perf_counter()
        spec = model_spec(model, config, role=role)
        with_stats = stats if isinstance(stats, bool) else role in stats
        job = spark_signals(df, None, config, spec=spec, store=store, device=device, check_ids=False, waves=waves,
                            stats=with_stats)
        out[role] = collect_signals(job.frame, ids, kind=config.kind)
        log.info("%s signals of %d texts on Spark in %.1f s", role, len(texts), time.perf_counter() - start)
    return out


class SparkEngine:
    """Per-model signal jobs on Apache Spark executors; models are resolved on the driver.

    Parameters
    ----------
    spark : SparkSession, optional
        Default: the active session, or a new one on ``spark_master`` (:func:`spark_session`).
    spark_master : str, optional
        E.g. ``"local[2]"``, ``"spark://host:7077"``.
    store : str, optional
        Parquet signal store shared across runs (resumable, idempotent).
    partitions : int, optional
        Spark partitions of the texts (default: Spark's default parallelism).

    Attributes
    ----------
    remote : bool
        True: only per-model signal jobs run on the executors.
    """

    name = "spark"
    options: ClassVar[tuple[str, ...]] = ("spark", "spark_master", "store", "partitions")
    remote: ClassVar[bool] = True

    def __init__(self, spark=None, spark_master: str | None = None, store: str | None = None,
                 partitions: int | None = None):
        self.spark, self.spark_master, self.store, self.partitions = spark, spark_master, store, partitions
        self._resolved: dict = {}

    def check_device(self, device) -> None:
        """Nothing to check on the driver: ``device`` is the executors' torch device."""

    def load(self, model, *, role: str):
        """Resolve ``model`` (a URI, a folder on shared storage, or a resolved model) on the driver; keep it for the executors."""
        resolved = resolve_model(model, role=role)
        self._resolved[role] = resolved
        return resolved.lm

    def model_signals(self, lm, texts: Sequence[str], config: SignalConfig, *, role: str, stats: bool = False,
                      cache=None, device=None, progress: bool = False, desc: str | None = None) -> SignalResult:
        """The signals of the model loaded as ``role`` over ``texts``, computed on the executors, row-aligned.

        Parameters
        ----------
        lm : MaskedLM or CausalLM
            What :meth:`load` returned for ``role``; the executors load the model :meth:`load` resolved.
        texts : sequence of str, length n
        config : SignalConfig
        role : str
            The role the model was loaded with.
        stats : bool
            Also Min-K%++'s per-token statistics.
        cache, progress, desc
            Not used: the executors keep their signals in ``store``.
        device : str, optional
            The executors' torch device (default: the task's GPU, else CPU).

        Returns
        -------
        SignalResult
            n rows.

        Raises
        ------
        ValueError
            No model was loaded as ``role`` by this engine, or one the executors cannot load (an
            in-memory model), before any Spark job.
        """
        resolved = self._resolved.get(role)
        if resolved is None or resolved.lm is not lm:
            raise ValueError(f"the Spark engine runs models it loaded: load the {role} with engine.load(model, "
                             f"role={role!r}) first (a URI or a folder the executors can read)")
        if self.spark is None:
            self.spark = spark_session(self.spark_master)
        return spark_model_signals(self.spark, list(texts), {role: resolved}, config, store=self.store,
                                   partitions=self.partitions, device=device, stats=stats)[role]
