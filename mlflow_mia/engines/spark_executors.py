"""Per-text signals of a masked LM computed on Apache Spark.

The distributed counterpart of :func:`mlflow_mia.signals.compute_signals`: a Spark
DataFrame of texts (an id and a text column, any size) goes in, a DataFrame of
per-text signals comes out::

    id, text_hash, energy (or pll), n_tokens, truncated, token_logprobs, token_mu, token_sigma

(``token_mu`` and ``token_sigma``, Min-K%++'s statistics, are null unless the job asks
for them: ``stats=True``, as a local run computes them only when an attack declares them)
computed by an iterator pandas UDF (``DataFrame.mapInPandas``). Each Python worker
loads the model once (a module-level cache that survives across tasks while Spark
reuses the worker), sets torch's thread count to the task's CPUs
(``spark.task.cpus``), uses the GPU Spark assigned to the task when there is one,
and runs ``compute_signals`` on every Arrow batch. Masks are drawn from
``(seed, sha256(text))``, never from the partitioning or the batch, so the values
equal the single-process ones up to float32 rounding from different padding.

With ``store=PATH`` the results are kept as Parquet partitioned by model identity
(weights, ``config.json`` architecture settings and tokenizer) and signal settings
(``model_key=<digest>/settings=<digest>``), keyed by text hash (no ids, no raw
text), each row signed with a keyed MAC (:mod:`mlflow_mia.engines.spark_store`).
A call computes only the texts missing there (an anti-join on text hash within the
model's and settings' partition) and appends them in waves (by default one per 250
texts, at most 8), separate jobs each committed on its own; Spark's output commit
protocol discards the files of failed or speculative task attempts, so retries
never duplicate rows, and a job that fails keeps the waves committed before it and
says so.

A model the driver loaded with its shipped code (``trust_remote_code``: its class
comes from the model's own files) is loaded the same way on the executors; any
other model is loaded there without running code.

Needs the optional extra ``pip install 'mlflow-mia[spark]'`` (``pyspark>=4``) and a
Java runtime that runs it (Java 17 or 21).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence
import dataclasses

import numpy as np
import pandas as pd
import torch
import mlflow

from mlflow_mia.config import SignalConfig, record_digest
from mlflow_mia.engines.spark_errors import EXECUTOR_TAG, SparkJobError, SparkSignalError, executor_errors
from mlflow_mia.engines.spark_store import fill_store, partition_mac_key, read_store, settings_digests
from mlflow_mia.signals.dispatch import value_settings
from mlflow_mia.signals.types import SignalResult
from mlflow_mia.models.resolve import ResolvedModel, resolve_model
from mlflow_mia.signals.dispatch import compute_signals

__all__ = ["spark_signals", "collect_signals", "model_spec"]

log = logging.getLogger(__name__)

_LOADED: dict = {}  # (load URI, device) -> MaskedLM, per Python worker
_MAX_LOADED = 2  # target and reference of one audit


@dataclass(frozen=True)
class SignalJob:
    """What :func:`spark_signals` returns.

    Attributes
    ----------
    frame : pyspark.sql.DataFrame
        One row per input row: ``id`` (the input's id column, same name and type),
        ``text_hash`` (hex sha256), the signal named by ``config.kind`` (``energy``
        or ``pll``, float64, nats), ``n_tokens`` (int64), ``truncated`` (bool) and
        ``token_logprobs`` (array<float>, the masked tokens' log-probs in mask order),
        ``token_mu`` and ``token_sigma`` (array<float>, Min-K%++'s statistics of each
        of those tokens; null when the job was run without ``stats``). Lazy without a
        store; read from the store with one.
    computed : int or None
        Distinct texts computed by this call (store only; None without a store).
    store : str or None
        Root of the Parquet store.
    model_key, settings : str
        The store's partition values of this model and these signal settings.
    """

    frame: Any
    computed: int | None
    store: str | None
    model_key: str
    settings: str


def model_spec(model, config: SignalConfig, *, role: str = "target") -> dict:
    """Resolve ``model`` on the driver into what the executors need to load and check it.

    Parameters
    ----------
    model : str or ResolvedModel
        ``models:/name/version``, ``models:/name@alias`` (pinned here to its version,
        so a moving alias cannot change the model mid-job), ``runs:/...`` or a folder
        every executor can read (shared storage).
    config : SignalConfig

    Returns
    -------
    dict
        ``load_uri``, ``model_id``, ``weights_id``, ``config_id``, ``tokenizer_id``,
        ``trust_remote_code`` (the driver's model runs code shipped with it),
        ``max_length``, ``role``, ``tracking_uri``, ``registry_uri``, ``config`` (a
        dict), ``model_key`` (digest of weights, config and tokenizer) and
        ``settings`` (store partition digests). Small and picklable.

    Raises
    ------
    ValueError
        An in-memory model (executors cannot load it), or what ``resolve_model`` raises.
    """
    if not isinstance(model, (str, os.PathLike, ResolvedModel)):
        raise ValueError(f"the {role} model must be a model URI or a folder on shared storage for Spark, got a "
                         f"{type(model).__name__}; executors load the model themselves")
    resolved = model if isinstance(model, ResolvedModel) else resolve_model(os.fspath(model), role=role)
    load_uri = resolved.resolved_uri
    if not (isinstance(load_uri, str) and (load_uri.startswith("models:/") or load_uri.startswith("runs:/"))):
        load_uri = resolved.requested
    if not isinstance(load_uri, str) or not (os.path.isdir(load_uri) or "://" in load_uri or ":/" in load_uri):
        raise ValueError(f"the {role} model {resolved.requested!r} has no URI or folder the executors can load; "
                         "register or log it in MLflow, or save it to shared storage")
    if os.path.isdir(load_uri):
        load_uri = os.path.abspath(load_uri)
    lm = resolved.lm
    settings = value_settings(lm, config)
    max_length = settings["max_length"]
    # Keyed by the weights, config and tokenizer, as the local signal cache is: a URI names different weights on
    # different servers, and the same weights compute other values under another config.json.
    identity = {"weights": lm.weights_id, "config": lm.config_id, "tokenizer_id": lm.tokenizer_id}
    digest, before_token_stats = settings_digests(settings)
    return {"role": role, "load_uri": load_uri, "model_id": lm.model_id, "weights_id": lm.weights_id,
            "config_id": lm.config_id, "tokenizer_id": lm.tokenizer_id, "trust_remote_code": _runs_shipped_code(lm),
            "max_length": max_length, "config": _config_dict(config),
            "tracking_uri": _absolute(mlflow.get_tracking_uri()),
            "registry_uri": _absolute(mlflow.get_registry_uri()),
            "model_key": record_digest(identity), "settings": digest,
            "settings_before_token_stats": before_token_stats}


def _runs_shipped_code(lm) -> bool:
    """True when the driver loaded ``lm`` with code shipped with the model (classes in ``transformers_modules``).

    Only a caller that passed ``trust_remote_code=True`` gets such a model; the
    executors then load it the same way, and every other model without running code.
    """
    return any(type(x).__module__.startswith("transformers_modules") for x in (lm.model, lm.tokenizer))


def _config_dict(config: SignalConfig) -> dict:
    return dataclasses.asdict(config)


def _absolute(uri: str | None) -> str | None:
    """``sqlite:///relative.db`` -> an absolute path: executors may run in another directory."""
    if uri and uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + os.path.abspath(uri[len("sqlite:///"):])
    return uri


def _output_schema(id_type, kind: str):
    from pyspark.sql.types import (ArrayType, BooleanType, DoubleType, FloatType, LongType, StringType,
                                   StructField, StructType)

    return StructType([StructField("id", id_type, False), StructField("text_hash", StringType(), False),
                       StructField(kind, DoubleType(), False), StructField("n_tokens", LongType(), False),
                       StructField("truncated", BooleanType(), False),
                       StructField("token_logprobs", ArrayType(FloatType(), False), False),
                       StructField("token_mu", ArrayType(FloatType(), False), True),
                       StructField("token_sigma", ArrayType(FloatType(), False), True)])


def _id(value):
    """A numpy scalar id as the plain Python value it shows as in messages."""
    return value.item() if hasattr(value, "item") else value


def _fail(message: str):
    raise SparkSignalError(f"{EXECUTOR_TAG} {message}")


def _worker_model(spec: Mapping):
    """The model of ``spec`` in this Python worker, loaded on first use and checked against the driver's."""
    from pyspark import TaskContext

    device = spec.get("device")
    ctx = TaskContext.get()
    if device is None and ctx is not None:
        gpus = (ctx.resources() or {}).get("gpu")
        if gpus is not None and gpus.addresses:
            device = f"cuda:{gpus.addresses[0]}"
    key = (spec["load_uri"], device)
    lm = _LOADED.get(key)
    if lm is None:
        lm = _load_on_worker(spec)
        while len(_LOADED) >= _MAX_LOADED:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = lm
    return lm, device


def _load_on_worker(spec: Mapping):
    role, uri = spec["role"], spec["load_uri"]
    if spec.get("tracking_uri"):
        mlflow.set_tracking_uri(spec["tracking_uri"])
    if spec.get("registry_uri"):
        mlflow.set_registry_uri(spec["registry_uri"])
    trust = bool(spec.get("trust_remote_code", False))
    try:
        lm = resolve_model(uri, role=role, trust_remote_code=trust).lm
    except Exception as exc:  # noqa: BLE001 - any load failure becomes one clear line on the driver
        _fail(f"an executor cannot load the {role} model {uri!r} ({type(exc).__name__}: {exc}); executors need the "
              "tracking server (MLFLOW_TRACKING_URI) or the folder on storage they can read")
    if lm.tokenizer_id != spec["tokenizer_id"]:
        _fail(f"the {role} model {uri!r} loaded on an executor has another tokenizer than on the driver "
              f"(digest {lm.tokenizer_id[:12]} vs {spec['tokenizer_id'][:12]}); give every machine the same copy")
    if lm.weights_id != spec["weights_id"]:
        _fail(f"the {role} model {uri!r} loaded on an executor has other weights than on the driver (digest "
              f"{lm.weights_id[7:19]} vs {spec['weights_id'][7:19]}); give every machine the same copy")
    if spec.get("config_id") and lm.config_id != spec["config_id"]:
        _fail(f"the {role} model {uri!r} loaded on an executor has another config.json than on the driver (digest "
              f"{lm.config_id[:12]} vs {spec['config_id'][:12]}); give every machine the same copy")
    return lm


def _score_batches(batches: Iterator, spec: Mapping, id_column: str, text_column: str) -> Iterator:
    """mapInPandas body: signals of every Arrow batch of one task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    cpus = ctx.cpus() if ctx is not None else int(os.environ.get("OMP_NUM_THREADS", "1"))
    if torch.get_num_threads() != cpus:
        torch.set_num_threads(max(1, cpus))  # follow spark.task.cpus: more threads than cores runs slower
    lm, device = _worker_model(spec)
    config = SignalConfig.from_dict(spec["config"])
    kind = config.kind
    stats = bool(spec.get("stats", True))
    for pdf in batches:
        if not len(pdf):
            continue
        texts = pdf[text_column]
        bad = texts.isna().to_numpy() | ~texts.map(lambda t: isinstance(t, str)).to_numpy()
        if bad.any():
            _fail(f"the text of id {_id(pdf[id_column].iloc[int(np.flatnonzero(bad)[0])])!r} is null or not a string; "
                  "drop or fill missing texts before computing signals")
        blank = texts.str.strip().eq("").to_numpy()
        if blank.any():
            _fail(f"the text of id {_id(pdf[id_column].iloc[int(np.flatnonzero(blank)[0])])!r} is empty; "
                  "remove empty texts: they have no tokens to score")
        try:
            res = compute_signals(lm, list(texts), config, device=device, progress=False, stats=stats)
        except ValueError as exc:
            row = re.search(r"row (\d+)", str(exc))
            where = f" (id {_id(pdf[id_column].iloc[int(row.group(1))])!r})" if row else ""
            _fail(f"signals of the {spec['role']} model failed{where}: {exc}")
        none = [None] * len(res.values)
        yield pd.DataFrame({"id": pdf[id_column].to_numpy(), "text_hash": pdf["text_hash"].to_numpy(),
                            kind: res.values, "n_tokens": res.n_tokens, "truncated": res.truncated,
                            "token_logprobs": list(res.token_logprobs),
                            "token_mu": list(res.token_mu) if stats else none,
                            "token_sigma": list(res.token_sigma) if stats else none})


def _checked_input(df, id_column: str, text_column: str, *, check_ids: bool):
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    names = df.columns
    for column, what in ((id_column, "id"), (text_column, "text")):
        if column not in names:
            raise SparkSignalError(f"the DataFrame has no {what} column {column!r}; its columns are {names}. "
                                   f"Pass {what}_column=...")
    if id_column == text_column:
        raise SparkSignalError("id_column and text_column name the same column; give each its own")
    text_type = df.schema[text_column].dataType
    if not isinstance(text_type, StringType):
        raise SparkSignalError(f"the text column {text_column!r} has type {text_type.simpleString()}, not string; "
                               f"cast it (F.col({text_column!r}).cast('string')) or name the right column")
    if check_ids:
        dup = df.groupBy(id_column).count().where(F.col("count") > 1).limit(1).collect()
        if dup:
            raise SparkSignalError(f"id {dup[0][0]!r} occurs {dup[0]['count']} times in column {id_column!r}; "
                                   "ids must be unique (signals are matched back to rows by id)")
    return df.select(F.col(id_column), F.col(text_column),
                     F.sha2(F.col(text_column), 256).alias("text_hash"))


def _compute(df, spec: Mapping, id_column: str, text_column: str):
    kind = spec["config"]["kind"]
    schema = _output_schema(df.schema[id_column].dataType, kind)
    frame = df.mapInPandas(lambda it: _score_batches(it, spec, id_column, text_column), schema)
    return frame.withColumnRenamed("id", id_column) if id_column != "id" else frame


def spark_signals(df, model, config: SignalConfig | None = None, *, id_column: str = "id",
                  text_column: str = "text", store: str | None = None, waves: int | None = None,
                  device: str | None = None,
                  check_ids: bool = True, spec: Mapping | None = None, stats: bool = True) -> SignalJob:
    """Masked energy (or PLL) of every text of a Spark DataFrame, computed on the executors.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        One row per text, with a unique id column and a string text column.
    model : str or ResolvedModel
        Model URI (``models:/...``, ``runs:/...``) or a folder on storage every
        executor reads; resolved once on the driver (see :func:`model_spec`).
    config : SignalConfig, optional
        Signal settings (default: energy, K = 10 masks at 15 %, seed 0). The Arrow
        batch of each UDF call is ``spark.sql.execution.arrow.maxRecordsPerBatch``
        rows; ``config.token_budget`` sets the padded tokens of each forward pass.
    id_column, text_column : str
    store : str, optional
        Root of a Parquet store (any path Spark writes: local, HDFS, S3, DBFS):
        only texts missing there are computed, then appended, each row signed with
        a key derived from the store key (``$MLFLOW_MIA_STORE_KEY_FILE``, kept
        outside the store) and verified when read.
    waves : int, optional
        Separate append jobs the missing texts are split into (by text hash), so a
        failure loses at most one wave's work; default one per 250 texts to
        compute, 1 to 8. Store only.
    device : str, optional
        Torch device on the executors; default the task's Spark GPU, else CUDA when
        available, else CPU.
    check_ids : bool
        Fail on duplicate ids (one extra aggregation over the ids).
    spec : mapping, optional
        A :func:`model_spec` result to reuse (skips resolving ``model`` again).
    stats : bool
        Also compute Min-K%++'s per-token ``token_mu`` and ``token_sigma`` (default
        True), as :func:`~mlflow_mia.signals.energy.compute_signals` does; without them
        those columns are null and the vocabulary head runs about 1.6x faster. With a
        store, a job without ``stats`` reads any stored row of the text; a job with
        ``stats`` reads only rows that hold them and recomputes the others (a superset
        row is appended beside the row without them; reads keep the superset).

    Returns
    -------
    SignalJob

    Raises
    ------
    SparkSignalError
        A missing column, a non-string text column, duplicate ids; on an action,
        what an executor raised: null or empty texts (with the id), a model that
        cannot be loaded there or differs from the driver's (tokenizer, weights or
        config). With a store, the message says what the waves before the failure kept.
    CacheCorruptError
        A store row whose MAC does not verify (changed without the store key, or
        written under another key) or a store file Spark cannot read: the message
        names the file and the fix.
    SparkJobError
        Another failure of a store wave (e.g. executors lost after every retry), with
        what the waves before it kept.
    ValueError
        ``waves`` is not a positive int, or the store key file is unusable.
    """
    config = config or SignalConfig()
    if waves is not None and (not isinstance(waves, int) or isinstance(waves, bool) or waves < 1):
        raise ValueError(f"waves must be a positive int or None (one wave per 250 texts), got {waves!r}")
    spec = dict(spec or model_spec(model, config, role="target"))
    if spec["config"] != _config_dict(config):
        raise ValueError("spec was made for other signal settings than config; build it with model_spec(model, config)")
    spec["device"] = device
    spec["stats"] = bool(stats)
    checked = _checked_input(df, id_column, text_column, check_ids=check_ids)
    if store is None:
        return SignalJob(frame=_compute(checked, spec, id_column, text_column), computed=None, store=None,
                         model_key=spec["model_key"], settings=spec["settings"])
    key_hex = partition_mac_key(spec, store=store)
    computed = fill_store(checked, spec, lambda part: _compute(part, spec, id_column, text_column), store, waves,
                          key_hex, executor_errors)
    with executor_errors():
        stored = read_store(df.sparkSession, store, spec, key_hex)
    if stored is None:  # no rows in the input and none stored: an empty frame of the right schema
        return SignalJob(frame=_compute(checked, spec, id_column, text_column), computed=computed, store=store,
                         model_key=spec["model_key"], settings=spec["settings"])
    with executor_errors():
        frame = checked.select(id_column, "text_hash").join(stored, on="text_hash", how="left")
    frame = frame.select(id_column, "text_hash", *[c for c in stored.columns if c != "text_hash"])
    return SignalJob(frame=frame, computed=computed, store=store, model_key=spec["model_key"],
                     settings=spec["settings"])


def collect_signals(frame, ids: Sequence, *, id_column: str = "id", kind: str = "energy") -> SignalResult:
    """Bring a signals DataFrame to the driver as a :class:`SignalResult` in the order of ``ids``.

    Parameters
    ----------
    frame : pyspark.sql.DataFrame
        A :attr:`SignalJob.frame`.
    ids : sequence, length n_samples
        The ids in the order wanted (each must occur in ``frame``).

    Returns
    -------
    SignalResult
        ``energy`` float64 (the ``kind`` column), ``n_tokens`` int64, ``truncated``
        bool, ``token_logprobs`` (and ``token_mu``, ``token_sigma`` when every row of
        the frame has them) float32 arrays; row i belongs to ``ids[i]``.

    Raises
    ------
    SparkSignalError
        An id of ``ids`` has no row in ``frame``.
    """
    with executor_errors():
        stats = [c for c in ("token_mu", "token_sigma") if c in frame.columns]
        pdf = frame.select(id_column, kind, "n_tokens", "truncated", "token_logprobs", *stats).toPandas()
    if stats and pdf[stats].isna().to_numpy().any():  # a job without stats: its rows lack them
        stats = []
    pos = pd.Index(pdf[id_column]).get_indexer(pd.Index(list(ids)))
    if (pos < 0).any():
        missing = list(ids)[int(np.flatnonzero(pos < 0)[0])]
        raise SparkSignalError(f"id {missing!r} has no signals in the Spark result ({int((pos < 0).sum())} missing)")
    return SignalResult(values=pdf[kind].to_numpy(dtype=np.float64)[pos], kind=kind,
                        token_logprobs=tuple(np.asarray(pdf["token_logprobs"].iat[i], dtype=np.float32) for i in pos),
                        n_tokens=pdf["n_tokens"].to_numpy(dtype=np.int64)[pos],
                        truncated=pdf["truncated"].to_numpy(dtype=bool)[pos],
                        **{c: tuple(np.asarray(pdf[c].iat[i], dtype=np.float32) for i in pos) for c in stats})
