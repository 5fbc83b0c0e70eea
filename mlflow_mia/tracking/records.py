"""MLflow-native records of an audit: its tables as MLflow datasets, the audited model as a run input.

:func:`dataset_inputs` logs the pool and the population set through ``mlflow.data``
(name, digest, schema, row count; shown under "Datasets" on the run page). MLflow keeps
only that description and a source, never the rows; the frames described hold keyed
sample ids, keyed hashes (:mod:`mlflow_mia.hashing`), keyed groups and labels, plus the raw
text and the ids as given only with ``log_texts``, so the schema lists what ``tables/samples.csv`` holds.
:func:`model_inputs` links the registry versions' logged models (MLflow 3) to the
audit run as its model inputs.
"""

from __future__ import annotations

import logging
import re
import warnings
import pandas as pd
from mlflow_mia.data import text_hash
from mlflow_mia.hashing import keyed_hash
from mlflow_mia.tracking.artifacts import SAMPLE_COLUMNS, keyed_table, dataset_digest

__all__: list[str] = []

log = logging.getLogger(__name__)

#: MLflow's SQL store keeps a dataset digest in 36 characters: the keyed digest is cut to 32 hex digits.
DIGEST_LENGTH = 32


def _pool_frame(result, hash_key, *, texts=None):
    samples = keyed_table(result.samples, hash_key, raw_ids=texts is not None)
    frame = samples[[c for c in SAMPLE_COLUMNS if c in samples]].copy()
    if "group" in frame and frame["group"].isna().all():
        frame = frame.drop(columns="group")
    if texts is not None:
        frame.insert(1, "text", list(texts))
    return frame


def _population_frame(population, hash_key, *, with_texts: bool):
    frame = pd.DataFrame({"text_hmac": [keyed_hash(h, hash_key) for h in population.text_hashes]})
    if population.groups is not None:
        frame["group"] = [keyed_hash(text_hash(str(g)), hash_key) for g in population.groups]
    if with_texts:
        frame.insert(0, "text", list(population.texts))
    return frame


def dataset_inputs(client, run_id: str, result, *, hash_key, population=None, texts=None, prefix: str = "",
                   sources: dict | None = None) -> dict[str, str]:
    """Log the pool (and the population set) as MLflow datasets of the run; returns ``{name: digest}``.

    Parameters
    ----------
    client : MlflowClient
    run_id : str
    result : AuditResult
    hash_key : HashKey
        Key of the hashes and of the digests (the digests equal the ``pool.digest`` and
        ``population.digest`` params, cut to :data:`DIGEST_LENGTH`).
    population : PopulationSet, optional
    texts : sequence of str, optional
        The pool texts, given only with ``log_texts``: the schemas then list a ``text`` column.
    prefix : str
        Prepended to the dataset names (``pool``, ``population``).
    sources : dict, optional
        ``{"pool": path, "population": path}``: where the tables came from (their file names).

    Notes
    -----
    The context tag (``mlflow.data.context``) is ``pool`` or ``population``; the pool's
    targets column is ``label`` (1 = member).
    """
    import mlflow.data
    from mlflow.entities import DatasetInput, InputTag

    frames = {"pool": (_pool_frame(result, hash_key, texts=texts), "label",
                       dataset_digest(result.samples["text_hash"].tolist(), key=hash_key))}
    if population is not None:
        frames["population"] = (_population_frame(population, hash_key, with_texts=texts is not None), None,
                                dataset_digest(population.text_hashes, key=hash_key))
    inputs, digests = [], {}
    for context, (frame, targets, digest) in frames.items():
        source = (sources or {}).get(context)
        with warnings.catch_warnings():  # MLflow's hints on integer columns and on a file name two sources read
            warnings.simplefilter("ignore", UserWarning)
            dataset = mlflow.data.from_pandas(frame, source=source, name=f"{prefix}{context}", targets=targets,
                                              digest=digest[:DIGEST_LENGTH])
        inputs.append(DatasetInput(dataset._to_mlflow_entity(),
                                   tags=[InputTag("mlflow.data.context", f"{prefix}{context}")]))
        digests[f"{prefix}{context}"] = digest[:DIGEST_LENGTH]
    client.log_inputs(run_id, datasets=inputs)
    return digests


def _logged_model_id(version) -> str | None:
    """The logged model behind a registry version: its ``model_id``, else the ``models:/<model_id>`` source.

    MLflow 3 registers a logged model with source ``models:/m-<hex>``; a SQL registry
    does not keep ``model_id`` on the version, so the source is read.
    """
    model_id = getattr(version, "model_id", None)
    if model_id:
        return model_id
    match = re.fullmatch(r"models:/(m-[0-9a-f]+)/?", str(getattr(version, "source", "") or ""))
    return match.group(1) if match else None


def model_inputs(client, run_id: str, versions) -> list[str]:
    """Link the logged models of registry versions to the run as its model inputs (MLflow 3).

    Parameters
    ----------
    versions : iterable of (str, str)
        ``(name, version)`` pairs of the audited model.

    Returns
    -------
    list of str
        The model ids linked; a version without a logged model (registered from a plain
        artifact path) is skipped with an INFO message.
    """
    from mlflow.entities import LoggedModelInput
    from mlflow.exceptions import MlflowException

    ids = []
    for name, version in versions:
        try:
            model_id = _logged_model_id(client.get_model_version(name, str(version)))
        except MlflowException as exc:
            log.info("models:/%s/%s not linked to run %s: %s", name, version, run_id, exc.message)
            continue
        if model_id:
            ids.append(model_id)
        else:
            log.info("models:/%s/%s has no logged model to link to run %s", name, version, run_id)
    if ids:
        client.log_inputs(run_id, models=[LoggedModelInput(model_id=m) for m in dict.fromkeys(ids)])
    return ids
