"""The Parquet signal store of the Spark engine: signed rows, written in waves, read with suspicion.

Layout: ``<store>/model_key=<digest>/settings=<digest>/part-*.parquet``, one row per
text hash (no ids, no raw text) with the signal, ``n_tokens``, ``truncated``, the
masked-token log-probs and their Min-K%++ statistics (``token_mu``, ``token_sigma``;
null in a row computed by a job that did not need them), the display ``model_id`` and
``mac``. A job that needs the statistics reads only the rows that hold them and
appends a superset row for each other text; one that does not reads any row (the
values of both are equal: the statistics come from the same logits). The ``settings`` digest covers the row layout
(:data:`ROW_LAYOUT`) besides the signal settings: partitions written before the
statistics existed are not read (their texts are recomputed into a new partition,
with a line at INFO).

``mac`` is ``HMAC-SHA256`` of the row (partition, text hash, values) under a key
derived from the store key (:mod:`mlflow_mia.signals.store_key`, kept outside the
store) and the partition, so the executors, which sign and verify rows, receive
only the key of the partition they work on. A Parquet store is plain files: anyone
who can write them can change values (Hadoop's ``.crc`` files are deleted as easily).
A row whose MAC does not verify, and a file Spark cannot read, stop the job with a
:class:`~mlflow_mia.signals.cache.CacheCorruptError` naming the file and the fix;
such a row is never used.

The missing texts are written in waves (separate jobs, each committed on its own:
a failure loses at most the wave that was running, and the error says what was
kept), each wave in as many files as the session has default parallelism.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Callable, Iterator, Mapping

import numpy as np

from mlflow_mia.config import record_digest
from mlflow_mia.engines.spark_errors import STORE_TAG, SparkJobError, SparkSignalError, damaged_file_error
from mlflow_mia.signals.cache import CacheCorruptError
from mlflow_mia.signals.store_key import derive_key, load_store_key, mac_matches, row_mac

__all__: list[str] = []

log = logging.getLogger(__name__)

MAX_AUTO_WAVES = 8
TEXTS_PER_WAVE = 250
_COLUMNS = ("text_hash", "signal", "n_tokens", "truncated", "token_logprobs", "token_mu", "token_sigma")
#: The per-token columns of a row beyond the log-probs; part of the partition's settings digest.
ROW_LAYOUT = ("token_mu", "token_sigma")


def auto_waves(n_texts: int) -> int:
    """Default number of waves for ``n_texts`` texts to compute: one per 250 texts, 1 to 8.

    >>> auto_waves(100), auto_waves(1000), auto_waves(10**6)
    (1, 4, 8)
    """
    return max(1, min(MAX_AUTO_WAVES, math.ceil(n_texts / TEXTS_PER_WAVE)))


def settings_digests(settings: Mapping) -> tuple[str, str]:
    """The partition digest of ``settings`` with :data:`ROW_LAYOUT`, and the one written before it existed."""
    return record_digest({**settings, "row_layout": list(ROW_LAYOUT)}), record_digest(dict(settings))


def partition_mac_key(spec: Mapping, *, store: str) -> str:
    """Hex key that signs the rows of ``spec``'s partition: derived from the store key, never the key itself.

    Raises
    ------
    ValueError
        The store key file is unusable (:func:`~mlflow_mia.signals.store_key.load_store_key`),
        or lies inside a local ``store``.
    """
    local = None if "://" in store and not store.startswith("file:") else store.removeprefix("file:")
    key = load_store_key(store_dir=local)
    return derive_key(key, f"spark-store/{spec['model_key']}/{spec['settings']}").hex()


def _row_macs(pdf, key: bytes, spec: Mapping) -> list[str]:
    return [row_mac(key, ["spark-store", spec["model_key"], spec["settings"], h, float(v), int(n), bool(t),
                          *(None if x is None else np.asarray(x, dtype="<f4").tobytes() for x in (lp, mu, sd))])
            for h, v, n, t, lp, mu, sd in zip(pdf["text_hash"], pdf["signal"], pdf["n_tokens"], pdf["truncated"],
                                              pdf["token_logprobs"], pdf["token_mu"], pdf["token_sigma"])]


def _sign_batches(batches: Iterator, spec: Mapping, key_hex: str) -> Iterator:
    """mapInPandas body: each computed row with its ``mac``."""
    key = bytes.fromhex(key_hex)
    for pdf in batches:
        yield pdf.assign(mac=_row_macs(pdf, key, spec))


def _verify_batches(batches: Iterator, spec: Mapping, key_hex: str) -> Iterator:
    """mapInPandas body: the stored rows whose MAC verifies; any other row stops the job naming its file."""
    key = bytes.fromhex(key_hex)
    for pdf in batches:
        expected = _row_macs(pdf, key, spec)
        bad = [i for i, (got, want) in enumerate(zip(pdf["mac"], expected))
               if not mac_matches(got, want)]
        if bad:
            raise CacheCorruptError(
                f"{STORE_TAG} the Spark store file {pdf['_file'].iloc[bad[0]]} holds {len(bad)} row(s) whose MAC does "
                "not verify: changed by someone without the store key, or written under another key. Delete the "
                "file (its rows are recomputed) or use another store; to share a store, share the key file "
                "($MLFLOW_MIA_STORE_KEY_FILE)")
        yield pdf[list(_COLUMNS)]


def _schema(kind: str | None = None, *, mac: bool = False):
    from pyspark.sql.types import (ArrayType, BooleanType, DoubleType, FloatType, LongType, StringType, StructField,
                                   StructType)

    fields = [StructField("text_hash", StringType(), False), StructField(kind or "signal", DoubleType(), False),
              StructField("n_tokens", LongType(), False), StructField("truncated", BooleanType(), False),
              StructField("token_logprobs", ArrayType(FloatType(), False), False),
              StructField("token_mu", ArrayType(FloatType(), False), True),
              StructField("token_sigma", ArrayType(FloatType(), False), True)]
    return StructType(fields + ([StructField("mac", StringType(), False)] if mac else []))


def _partition(store: str, spec: Mapping) -> str:
    return os.path.join(store, f"model_key={spec['model_key']}", f"settings={spec['settings']}")


def read_store(spark, store: str, spec: Mapping, key_hex: str):
    """This model's and settings' verified rows (one per text hash), or None when there are none.

    The rows are verified lazily, on the executors, by the action that reads them.
    With ``spec["stats"]`` (the default) only rows holding Min-K%++'s statistics are read.

    Raises
    ------
    CacheCorruptError
        The partition has no ``mac`` column (written by an mlflow-mia without row
        MACs); on an action, a row that does not verify or a damaged file.
    """
    from pyspark.sql import functions as F

    part = _partition(store, spec)
    if not _exists(spark, part):
        return None
    rows = spark.read.option("basePath", store).parquet(part)
    if "mac" not in rows.columns:
        raise CacheCorruptError(f"the Spark store partition {part} has rows without a MAC (written before rows were "
                                "signed); delete that folder (its rows are recomputed) or use another store")
    if spec.get("stats", True):
        rows = rows.where(F.col("token_mu").isNotNull())
    signed = rows.select(*_COLUMNS, "mac", F.col("_metadata.file_path").alias("_file"))
    verified = signed.mapInPandas(lambda it: _verify_batches(it, spec, key_hex), _schema())
    # Two runs racing on the same texts may both append a row; the values are equal, keep one.
    return verified.withColumnRenamed("signal", spec["config"]["kind"]).dropDuplicates(["text_hash"])


def _exists(spark, path: str) -> bool:
    jvm = spark._jvm  # noqa: SLF001 - Hadoop FileSystem is the portable way to test a path (HDFS, S3, DBFS)
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark._jsc.hadoopConfiguration()).exists(hpath)  # noqa: SLF001


def fill_store(checked, spec: Mapping, compute: Callable, store: str, waves: int | None, key_hex: str,
               errors: Callable) -> int:
    """Compute and append the texts of ``checked`` missing from the store, in waves; returns how many.

    Parameters
    ----------
    checked : pyspark.sql.DataFrame
        Id, text and ``text_hash`` columns.
    compute : callable
        ``compute(frame) -> DataFrame`` of signals (``text_hash``, the signal,
        ``n_tokens``, ``truncated``, ``token_logprobs``, ``token_mu``, ``token_sigma``).
    waves : int or None
        Append jobs; None: :func:`auto_waves` of the number of texts to compute.
    errors : callable
        A context manager turning executor errors into clear ones.

    Raises
    ------
    SparkSignalError, CacheCorruptError, SparkJobError
        What a wave raised, with what the waves before it kept in the store.
    """
    from pyspark.sql import functions as F

    kind = spec["config"]["kind"]
    spark = checked.sparkSession
    todo = checked.dropDuplicates(["text_hash"])
    with errors():
        stored = read_store(spark, store, spec, key_hex)
        before = spec.get("settings_before_token_stats")
        if stored is None and before and _exists(spark, _partition(store, {**spec, "settings": before})):
            log.info("%s model: the store's rows of these settings were written without Min-K%%++'s per-token "
                     "statistics (partition settings=%s) and are not read; their texts are recomputed",
                     spec["role"], before)
        if stored is not None:
            todo = todo.join(stored.select("text_hash"), on="text_hash", how="left_anti")
        # round-robin over the default parallelism: every core busy, and each wave writes that many files at most
        todo = todo.repartition(max(1, spark.sparkContext.defaultParallelism)).cache()
    try:
        with errors():
            n = todo.count()
        waves = min(waves or auto_waves(n), max(n, 1))
        wave_of = F.pmod(F.xxhash64("text_hash"), F.lit(waves))
        sizes = ({int(r[0]): int(r[1]) for r in todo.groupBy(wave_of).count().collect()} if waves > 1 and n
                 else {0: n})
        log.info("%s model: %d text(s) to compute in %d wave(s), the rest is in %s", spec["role"], n, waves, store)
        for wave in range(waves if n else 0):
            part = todo if waves == 1 else todo.where(wave_of == wave)
            out = compute(part).select("text_hash", F.col(kind).alias("signal"), "n_tokens", "truncated",
                                       "token_logprobs", *ROW_LAYOUT)
            out = out.mapInPandas(lambda it: _sign_batches(it, spec, key_hex), _schema(mac=True)).select(
                *_COLUMNS, "mac", F.lit(spec["model_id"]).alias("model_id"),
                F.lit(spec["model_key"]).alias("model_key"), F.lit(spec["settings"]).alias("settings"))
            try:
                with errors():
                    out.write.mode("append").partitionBy("model_key", "settings").parquet(store)
            except Exception as exc:
                kept = sum(sizes.get(w, 0) for w in range(wave))
                raise _wave_failed(exc, wave, waves, kept, n, store) from exc
    finally:
        todo.unpersist()
    return n


def _wave_failed(exc: Exception, wave: int, waves: int, kept: int, n: int, store: str) -> Exception:
    """``exc`` as the same kind of error, saying which wave failed and what the store kept."""
    done = "wave 1" if wave == 1 else f"waves 1-{wave}"
    note = (f"wave {wave + 1} of {waves} failed; {kept} of the {n} text(s) to compute were kept in the store "
            f"{store} ({done} committed) and a re-run computes only the rest" if wave else
            f"wave 1 of {waves} failed; none of the {n} text(s) to compute was kept in the store {store}")
    if isinstance(exc, (SparkSignalError, CacheCorruptError)):
        return type(exc)(f"{exc} ({note})")
    return SparkJobError(f"the Spark job failed on the executors ({_first_line(exc)}); {note}")


def _first_line(exc: Exception) -> str:
    lines = [x.strip(" :") for x in str(exc).splitlines() if "Exception" in x or "Error" in x]
    text = lines[0] if lines else str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:400]
