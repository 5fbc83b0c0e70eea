"""MLflow runs of the commands: the tracking URI and experiment, and starting (or resuming) a run."""

from __future__ import annotations

import contextlib
import logging
import os

from mlflow_mia.naming import DEFAULT_EXPERIMENT
from mlflow_mia.options.values import blank

__all__ = ["setup_tracking", "mlflow_run", "use_experiment", "finished_run", "EXPERIMENT_KIND_TAG", "MODEL_TRAINING"]

log = logging.getLogger(__name__)

#: The experiment tag the MLflow 3 UI reads to open an experiment as "Model training" (not the GenAI overview).
EXPERIMENT_KIND_TAG, MODEL_TRAINING = "mlflow.experimentKind", "custom_model_development"


def use_experiment(name: str | None = None) -> str:
    """Make ``name`` (else ``$MLFLOW_EXPERIMENT_NAME`` / ``_ID``, else ``mlflow-mia``) the active experiment.

    The experiment is tagged ``mlflow.experimentKind=custom_model_development`` unless it
    already has a kind, so the MLflow UI opens it on its runs ("Model training").
    Under ``mlflow run`` (``$MLFLOW_RUN_ID``) the project run's experiment is kept.

    Returns
    -------
    str
        The experiment id.
    """
    import mlflow

    if os.environ.get("MLFLOW_RUN_ID"):
        experiment_id = mlflow.get_run(os.environ["MLFLOW_RUN_ID"]).info.experiment_id
    elif name:
        experiment_id = mlflow.set_experiment(name).experiment_id
    elif os.environ.get("MLFLOW_EXPERIMENT_ID"):
        experiment_id = mlflow.set_experiment(experiment_id=os.environ["MLFLOW_EXPERIMENT_ID"]).experiment_id
    else:
        experiment_id = mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
                                              ).experiment_id
    client = mlflow.MlflowClient()
    if EXPERIMENT_KIND_TAG not in client.get_experiment(experiment_id).tags:
        client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
    return experiment_id


def setup_tracking(args) -> str:
    """``--tracking-uri``, then the experiment (:func:`use_experiment` with ``--experiment``); returns its id."""
    import mlflow

    uri = blank(getattr(args, "tracking_uri", None))
    if uri:
        mlflow.set_tracking_uri(uri)
    return use_experiment(blank(getattr(args, "experiment", None)))


@contextlib.contextmanager
def mlflow_run(name: str | None, *, nested: bool = False):
    """Start (or, under ``mlflow run``, resume and rename) a run."""
    import mlflow

    if nested:
        with mlflow.start_run(run_name=name, nested=True) as run:
            yield run
        return
    active = mlflow.active_run()
    if active is not None:
        yield active
        return
    with mlflow.start_run(run_name=name) as run:
        yield run


def finished_run(client, tag: str, value: str):
    """The newest FINISHED run, in any experiment of the store, whose tag ``tag`` equals ``value``; else None.

    How resumable commands (``analyze``, the canary finding) find a run they already made.
    """
    experiment_ids = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiment_ids, filter_string=f"tags.`{tag}` = '{value}' and "
                              "attributes.status = 'FINISHED'", max_results=1, order_by=["attributes.start_time DESC"])
    return runs[0] if runs else None
