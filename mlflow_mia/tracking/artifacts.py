"""Writing to an MLflow run, for every audit: artifacts, metric names, keyed tables, the active run.

Shared by :mod:`.audit_log` (membership audits) and :mod:`.ner_log` (NER audits):
figures and files logged in one folder and returned as evaluation artifacts, metric
names checked before MLflow sees them, keyed digests and keyed hashes of the texts.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import tempfile
import pandas as pd

from mlflow_mia.naming import nan_to_none
from mlflow_mia.data import text_hash
from mlflow_mia.hashing import as_bytes, keyed_hash

__all__ = ["to_json"]

_METRIC_NAME = re.compile(r"^[\w.\-/ ]+$")


def dataset_digest(text_hashes, *, key) -> str:
    """``HMAC-SHA256(key, sorted per-text sha256 hashes)``: the identity of a text set, independent of order.

    Keyed like the per-sample hashes. An unkeyed digest of a whole set is no per-sample
    oracle, but someone who knows all texts of a pool but one could still test the
    candidates for the last; keyed, two runs show the same digest exactly when they
    audited the same set with the same (user) key.
    """
    return hmac.new(as_bytes(key), "\n".join(sorted(text_hashes)).encode(), "sha256").hexdigest()


#: Columns of the per-sample table by default: none is recomputable from the model (no score, rank or length);
#: ``sample_id``, ``group`` and ``text_hmac`` hold keyed hashes (``mlflow_mia.lookup_hash`` of the id, group, text).
#: What a reader looks at comes first, the 64-character keyed hashes last (a CSV grid opens on the left).
SAMPLE_COLUMNS = ("sample_id", "label", "group", "text_hmac")


def keyed_table(table, key, *, raw_ids: bool = False):
    """A copy of a sample table with ``text_hash`` -> keyed ``text_hmac``, keyed ``group`` and keyed ``sample_id``.

    Parameters
    ----------
    table : pandas.DataFrame
        ``AuditResult.samples``, ``riskiest`` or ``neighbour_examples``; its
        ``text_hash`` column holds plain sha256 hashes, its ``group`` column group ids,
        its ``sample_id`` column the pool's ids (the id column, else row numbers).
    key : bytes, str or HashKey
    raw_ids : bool
        Keep ``sample_id`` as given (``log_texts``: the raw texts are logged beside the
        labels then, and an id tells no more). Default False: an id such as a record
        number names a person or a row of a file as plainly as the text would.

    Returns
    -------
    pandas.DataFrame
        Same rows and column order; ``text_hmac`` = ``keyed_hash(text_hash, key)``,
        ``group`` = ``lookup_hash(group, key)`` (missing groups stay missing) and, unless
        ``raw_ids``, ``sample_id`` = ``lookup_hash(sample_id, key)`` (look an id up as a group).
    """
    out = table.copy()
    if "text_hash" in out:
        out["text_hash"] = [keyed_hash(h, key) for h in out["text_hash"]]
        out = out.rename(columns={"text_hash": "text_hmac"})
    if "group" in out:
        out["group"] = [None if g is None or (not isinstance(g, str) and pd.isna(g))
                        else keyed_hash(text_hash(str(g)), key) for g in out["group"]]
    if "sample_id" in out and not raw_ids:
        out["sample_id"] = [keyed_hash(text_hash(str(i)), key) for i in out["sample_id"]]
    return out


# Score cut-offs in each attack's own units: kept in audit_summary.json, not logged as MLflow
# metrics, where a side-by-side of two versions would suggest they are comparable.
def check_metric_names(names) -> None:
    """Raise ``ValueError`` for a name MLflow would reject (allowed: alphanumerics, ``_ - . /`` and space)."""
    bad = [n for n in names if not _METRIC_NAME.match(n) or len(n) > 250]
    if bad:
        raise ValueError(f"metric names MLflow would reject: {bad[:5]}; use only letters, digits, _ - . / and spaces")


def _artifact_uri(run_id: str, path: str) -> str:
    from mlflow.tracking.artifact_utils import get_artifact_uri

    return get_artifact_uri(run_id=run_id, artifact_path=path)


def artifact(kind: str, run_id: str, path: str, content=None):
    from mlflow.models.evaluation.artifacts import (CsvEvaluationArtifact, ImageEvaluationArtifact,
                                                    JsonEvaluationArtifact, ParquetEvaluationArtifact,
                                                    TextEvaluationArtifact)

    cls = {"image": ImageEvaluationArtifact, "csv": CsvEvaluationArtifact, "json": JsonEvaluationArtifact,
           "text": TextEvaluationArtifact, "parquet": ParquetEvaluationArtifact}[kind]
    return cls(uri=_artifact_uri(run_id, path), content=content)


def _artifact_name(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def to_json(obj, *, sort_keys: bool = True) -> str:
    """``obj`` as indented JSON, NaN and infinity as null; ``sort_keys=False`` keeps the insertion order."""
    return json.dumps(nan_to_none(obj), indent=2, sort_keys=sort_keys, default=str)


def write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def active_run_id(run_id: str | None, caller: str) -> str:
    """``run_id``, else the active run's id.

    Raises
    ------
    ValueError
        Neither is there; the message names ``caller`` and the fix.
    """
    import mlflow

    if run_id is not None:
        return run_id
    active = mlflow.active_run()
    if active is None:
        raise ValueError(f"{caller} needs run_id=... or an active run (mlflow.start_run())")
    return active.info.run_id


def log_figures(client, run_id: str, figures: dict, *, prefix: str = "") -> dict:
    """Log ``{path: matplotlib Figure}`` (closing each) and return their evaluation artifacts by name."""
    from matplotlib import pyplot as plt

    artifacts = {}
    for path, fig in figures.items():
        try:
            client.log_figure(run_id, fig, prefix + path)
        finally:
            plt.close(fig)
        artifacts[prefix + _artifact_name(path)] = artifact("image", run_id, prefix + path)
    return artifacts


def log_files(client, run_id: str, files: dict, *, prefix: str = "") -> dict:
    """Write ``{path: (kind, name, writer)}`` into one temporary folder, log it, return the evaluation artifacts."""
    with tempfile.TemporaryDirectory() as tmp:
        for rel, (_, _, write) in files.items():
            path = os.path.join(tmp, prefix + rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write(path)
        client.log_artifacts(run_id, tmp)
    return {prefix + name: artifact(kind, run_id, prefix + rel) for rel, (kind, name, _) in files.items()}
