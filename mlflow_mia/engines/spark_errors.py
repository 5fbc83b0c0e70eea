"""Errors of the Spark engine, and how an executor's error reaches the driver.

An executor marks its own errors with :data:`EXECUTOR_TAG` (a bad text, a model it
cannot load or that differs from the driver's) and a store row whose MAC does not
verify with :data:`STORE_TAG`; :func:`executor_errors` turns the Python trace Spark
sends back into one :class:`SparkSignalError` or
:class:`~mlflow_mia.signals.cache.CacheCorruptError` on the driver. Used by
:mod:`mlflow_mia.engines.spark_executors` and :mod:`mlflow_mia.engines.spark_store`.
"""

from __future__ import annotations

import contextlib
import re

from mlflow_mia.signals.cache import CacheCorruptError

__all__: list[str] = []

EXECUTOR_TAG = "[mlflow-mia]"  # marks our executor errors so the driver can pull them out of the Python trace
STORE_TAG = "[mlflow-mia:store]"  # marks an executor's "this store row does not verify" error
_READ_ERROR = re.compile(r"\[FAILED_READ_FILE[.\w]*\][^\n]*?reading file (\S+?)\.?(?:\s|$)")


class SparkSignalError(ValueError):
    """An error raised on an executor (or about the input), with the text id when it concerns one text."""


class SparkJobError(RuntimeError):
    """A Spark job that failed for a reason other than the input (e.g. executors lost after every retry)."""


@contextlib.contextmanager
def executor_errors():
    """Re-raise an executor's error on the driver as one clear error.

    The Python trace of the failed task arrives inside a ``PythonException``; its
    ``[mlflow-mia]`` line becomes the message of a :class:`SparkSignalError` (the full
    exception stays chained as its cause), its ``[mlflow-mia:store]`` line (a store
    row whose MAC does not verify) a :class:`CacheCorruptError`. Spark failing to
    read a store file (a Java error) becomes a :class:`CacheCorruptError` naming
    the file, without the Java trace.
    """
    from pyspark.errors import PythonException

    try:
        yield
    except PythonException as exc:
        store = re.search(re.escape(STORE_TAG) + r" (.*)", str(exc))
        if store is not None:
            raise CacheCorruptError(store.group(1).strip()) from exc
        found = re.search(re.escape(EXECUTOR_TAG) + r" (.*)", str(exc))
        if found is None:
            raise
        raise SparkSignalError(found.group(1).strip()) from exc
    except Exception as exc:
        damaged = None if isinstance(exc, (SparkSignalError, CacheCorruptError)) else damaged_file_error(exc)
        if damaged is None:
            raise
        raise damaged from None


def damaged_file_error(exc: Exception) -> CacheCorruptError | None:
    """A :class:`CacheCorruptError` naming the file when ``exc`` is Spark failing to read a store file."""
    found = _READ_ERROR.search(str(exc))
    if found is None:
        return None
    reason = "not a readable Parquet file"
    cause = re.search(r"is not a Parquet file[^\n]*|Could not read footer[^\n.]*", str(exc))
    if cause is not None:
        reason = cause.group(0).strip()
    return CacheCorruptError(f"the Spark store file {found.group(1)} is damaged ({reason}); delete it (its rows are "
                             "recomputed) or use another store")
