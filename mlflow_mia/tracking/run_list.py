"""The experiment's run list, opened on the audits with their verdicts: a view MLflow's UI shares by address.

MLflow 3.17's run list shows, by default, the run name, creation time, dataset, duration,
source and models; a tag column appears only once someone picks it under "Columns". Its
"share view" feature keeps a view (the search filter, the sort order, the columns) as the
experiment tag ``mlflow.sharedViewState.<key>`` (JSON) and opens it from the address
``#/experiments/<id>/runs?viewStateShareKey=<key>``. :func:`publish_audit_view` writes such
a view, :data:`AUDIT_VIEW`: only the audit runs (``mia.run_kind = 'audit'``: no demo build,
training or failed command), newest first, with the ``mia.verdict`` and
``mia.verdict.reason`` columns (they replace the default source, models and dataset columns);
:func:`run_list_url` is its address, the one the commands print.
"""

from __future__ import annotations

import json

from mlflow_mia.tracking.verdict import MODEL_TRAINING_VIEW, RUN_KIND_TAG, VERDICT_TAG

__all__ = ["run_list_url"]

#: The share key of the audits' view of the run list.
AUDIT_VIEW = "mia-audits"
#: Prefix of the experiment tags that hold the UI's shared views (MLflow 3.17, ``mlflow.sharedViewState.<key>``).
SHARED_VIEW_TAG = "mlflow.sharedViewState."


def _column(kind: str, key: str) -> str:
    """A run-list column as the UI names it (``makeCanonicalSortKey``): ``tags.`mia.verdict```."""
    return f"{kind}.`{key}`"


def audit_view_state() -> dict:
    """The audits' view: search filter, sort order and columns, as the UI's shared-view state holds them.

    Returns
    -------
    dict
        ``searchFilter`` (audit runs only), ``orderByKey`` / ``orderByAsc`` (newest first) and
        ``selectedColumns`` (the verdict and its reason; no other column pushes them off the screen).

    >>> audit_view_state()["selectedColumns"][:2]
    ['tags.`mia.verdict`', 'tags.`mia.verdict.reason`']
    """
    return {"searchFilter": f"tags.`{RUN_KIND_TAG}` = 'audit'", "orderByKey": "attributes.start_time",
            "orderByAsc": False,
            "selectedColumns": [_column("tags", VERDICT_TAG), _column("tags", f"{VERDICT_TAG}.reason")]}


def publish_audit_view(client, experiment_id: str) -> str:
    """Keep :func:`audit_view_state` on the experiment (tag ``mlflow.sharedViewState.mia-audits``).

    Written only when missing or different, so a view the UI overrode is put back.

    Parameters
    ----------
    client : mlflow.MlflowClient
    experiment_id : str

    Returns
    -------
    str
        The tag's key.
    """
    key, value = f"{SHARED_VIEW_TAG}{AUDIT_VIEW}", json.dumps(audit_view_state())
    if client.get_experiment(experiment_id).tags.get(key) != value:
        client.set_experiment_tag(experiment_id, key, value)
    return key


def run_list_url(experiment_id: str, *, tracking_uri: str) -> str:
    """The address of the experiment's run list in the audits' view (:func:`publish_audit_view`).

    An ``http(s)`` tracking URI is the UI's own address; for a local store, ``mlflow ui``'s
    default ``http://127.0.0.1:5000``. ``workflowType=machine_learning`` opens the "Model
    training" side (MLflow 3.17 opens an experiment on its GenAI overview otherwise).

    >>> run_list_url("3", tracking_uri="sqlite:///mlflow.db")
    'http://127.0.0.1:5000/#/experiments/3/runs?workflowType=machine_learning&viewStateShareKey=mia-audits'
    """
    local = not str(tracking_uri).startswith(("http://", "https://"))
    base = "http://127.0.0.1:5000" if local else str(tracking_uri).rstrip("/")
    return f"{base}/#/experiments/{experiment_id}/runs?{MODEL_TRAINING_VIEW}&viewStateShareKey={AUDIT_VIEW}"
