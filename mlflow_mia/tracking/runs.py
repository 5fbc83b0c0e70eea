"""MLflow runs of the commands: the tracking URI and experiment, and starting (or resuming) a run."""

from __future__ import annotations

import contextlib
import os

from mlflow_mia.options.values import blank

__all__ = ["setup_tracking", "mlflow_run"]


def setup_tracking(args) -> None:
    """``--tracking-uri`` and ``--experiment`` (the experiment only outside ``mlflow run``)."""
    import mlflow

    uri = blank(getattr(args, "tracking_uri", None))
    if uri:
        mlflow.set_tracking_uri(uri)
    experiment = blank(getattr(args, "experiment", None))
    if experiment and not os.environ.get("MLFLOW_RUN_ID"):
        mlflow.set_experiment(experiment)


@contextlib.contextmanager
def mlflow_run(name: str | None, *, nested: bool = False):
    """Start (or, under ``mlflow run``, resume) a run."""
    import mlflow

    if nested:
        with mlflow.start_run(run_name=name, nested=True) as run:
            yield run
        return
    active = mlflow.active_run()
    if active is not None:
        yield active
        return
    with mlflow.start_run(run_name=None if os.environ.get("MLFLOW_RUN_ID") else name) as run:
        yield run
