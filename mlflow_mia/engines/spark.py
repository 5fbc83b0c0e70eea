"""The Spark engine of :func:`mlflow_mia.audits.membership.run_audit` (``engine="spark"``).

Stage 1 (:class:`SparkEngine`, :func:`spark_audit_signals`): the per-text signals of
each model role the attacks need (target, reference; with a reference set, every
reference model: ``reference``, ``reference_2``, ...) over the pool texts then the
population texts, computed on the executors (:mod:`mlflow_mia.engines.spark_executors`);
only the signals (a few numbers and the masked-token log-probs per text) come back
to the driver, one :class:`~mlflow_mia.signals.SignalResult` per role, row-aligned
with the texts. The rest of stage 1 (the target's token ids for the report tables)
runs on the driver, which holds the tokenizers.

Stage 2: attacks, thresholds, metrics and plots on the driver, exactly as in a
local audit (``run_audit`` has one setup path for every engine); no model runs there.

Inputs that are not one model's signals (``neighbour_values``, ``neighbour_local``:
the neighbourhood attacks, whose neighbours are generated on the driver) do not run
on Spark yet: asking for them is a clear error before any model loads.
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

from mlflow_mia.config import AuditConfig, SignalConfig
from mlflow_mia.signals.types import SignalResult
from mlflow_mia.attacks import INPUTS, ReferenceSignals, reference_roles, required_token_quantities
from mlflow_mia.engines.local import needed_inputs, stage_one
from mlflow_mia.engines.spark_executors import collect_signals, model_spec, spark_signals
from mlflow_mia.models.resolve import resolve_model

__all__ = ["SparkEngine", "spark_session", "local_with_retries", "spark_audit_signals"]

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
                        waves: int | None = None, stats=True) -> dict[str, SignalResult]:
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
    """Stage 1 on Apache Spark: each model's signals on the executors, the rest on the driver.

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
    """

    name = "spark"
    options: ClassVar[tuple[str, ...]] = ("spark", "spark_master", "store", "partitions")

    def __init__(self, spark=None, spark_master: str | None = None, store: str | None = None,
                 partitions: int | None = None):
        self.spark, self.spark_master, self.store, self.partitions = spark, spark_master, store, partitions
        self._resolved: dict = {}

    def check_device(self, device) -> None:
        """Nothing to check on the driver: ``device`` is the executors' torch device."""

    def check_inputs(self, needs) -> None:
        """Refuse inputs that are not models' signals (:data:`mlflow_mia.attacks.INPUTS` ``rows="values"``).

        Every model's signals run on the executors: one model's (``rows="signal"``) and
        each model of a reference set (``rows="signals"``).

        Raises
        ------
        ValueError
            Such an input is needed; the message names its attacks and the way out.
        """
        local = {name: attacks for name, attacks in needs.items() if INPUTS[name].rows not in ("signal", "signals")}
        if local:
            attacks = list(dict.fromkeys(a for by in local.values() for a in by))
            raise ValueError(f"attack(s) {attacks} do not run on the Spark engine yet: their input(s) {list(local)} "
                             "come from neighbours generated on the driver; drop them from attacks or use "
                             "engine='local'")

    def load(self, model, *, role: str):
        """Resolve ``model`` (a URI, a folder on shared storage, or a resolved model) on the driver; keep it for the executors."""
        resolved = resolve_model(model, role=role)
        self._resolved[role] = resolved
        return resolved.lm

    def signals(self, models, pool, population, config: AuditConfig, *, cache=None, device=None,
                progress: bool = False):
        """The signals of every model role the attacks need, on Spark; the rest of stage 1 on the driver.

        ``cache`` (the local signal cache) is not used: the executors keep their
        signals in ``store``.

        Raises
        ------
        ValueError
            A model the executors cannot load (an in-memory model), before any Spark job.
        """
        ref_roles = reference_roles(len(models.references))
        needs = ["target", *needed_inputs(config, len(ref_roles))]
        roles = {name: INPUTS[name].roles[0] for name in needs if INPUTS[name].rows == "signal"}
        wanted = dict.fromkeys(roles.values())
        if "references" in needs:
            wanted.update(dict.fromkeys(ref_roles))  # every reference model's signals, on the executors
        quantities = required_token_quantities(config.attacks)  # Min-K%++'s statistics only where declared
        stats = {roles[name] for name in roles if "token_stats" in quantities.get(name, ())}
        if "token_stats" in quantities.get("references", ()):
            stats.update(ref_roles)
        session = self.spark or spark_session(self.spark_master)
        start = time.perf_counter()
        computed = spark_audit_signals(session, list(pool.texts) + list(population.texts),
                                       {role: self._resolved[role] for role in wanted},
                                       config.signal, store=self.store, partitions=self.partitions, device=device,
                                       stats=stats)
        spark_s = round(time.perf_counter() - start, 3)
        given = {name: computed[role] for name, role in roles.items()}
        if "references" in needs:
            given["references"] = ReferenceSignals(tuple(computed[r] for r in ref_roles), ref_roles)
        signals = stage_one(models, pool, population, config, device=device, progress=progress, given=given)
        signals.info["engine"] = self.name
        signals.info["timings"]["signals_spark_s"] = spark_s
        return signals
