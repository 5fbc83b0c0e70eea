"""MLflow runs of the commands: the tracking URI and experiment, and starting (or resuming) a run."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os

from mlflow_mia.naming import DEFAULT_EXPERIMENT
from mlflow_mia.options.values import blank
from mlflow_mia.tracking.descriptions import DESCRIPTION_START, FAILURE_START, with_own_text
from mlflow_mia.tracking.run_list import publish_audit_view
from mlflow_mia.tracking.verdict import NOTE_TAG, RUN_KIND_TAG, RUN_NAME_TAG, VERDICT_TAG

__all__ = ["setup_tracking", "mlflow_run", "use_experiment", "finished_run", "record_project_failure",
           "outside_project_run"]

log = logging.getLogger(__name__)

#: The experiment tag the MLflow 3 UI reads to open an experiment as "Model training" (not the GenAI overview).
EXPERIMENT_KIND_TAG, MODEL_TRAINING = "mlflow.experimentKind", "custom_model_development"


@contextlib.contextmanager
def outside_project_run():
    """Hide ``$MLFLOW_RUN_ID`` (the ``mlflow run`` project run) for the block, then put it back.

    A demo build or a training run started inside the block starts its own run instead of
    resuming the project run. The variable is restored even when the block raises, and the
    active experiment goes back to the project run's (a build that switched to
    ``mlflow-mia`` would otherwise make MLflow refuse to resume a project run of another
    experiment: "active experiment ID does not match environment run ID").

    Yields
    ------
    str or None
        The project run id that was hidden (None outside ``mlflow run``).

    Examples
    --------
    >>> _ = os.environ.pop("MLFLOW_RUN_ID", None)
    >>> with outside_project_run() as project_run:
    ...     (project_run, os.environ.get("MLFLOW_RUN_ID"))
    (None, None)
    """
    project_run = os.environ.pop("MLFLOW_RUN_ID", None)
    try:
        yield project_run
    finally:
        if project_run is not None:
            os.environ["MLFLOW_RUN_ID"] = project_run
            _back_to_project_experiment(project_run)


def _back_to_project_experiment(run_id: str) -> None:
    """Make the project run's experiment active again; a run id this store does not hold leaves it as it is."""
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        mlflow.get_run(run_id)
    except MlflowException:
        return
    use_experiment()


def use_experiment(name: str | None = None) -> str:
    """Make ``name`` (else ``$MLFLOW_EXPERIMENT_NAME`` / ``_ID``, else ``mlflow-mia``) the active experiment.

    The experiment is tagged ``mlflow.experimentKind=custom_model_development`` unless it
    already has a kind, so the MLflow UI opens it on its runs ("Model training"), and carries the
    audits' view of its run list (:func:`~mlflow_mia.tracking.run_list.publish_audit_view`).
    Under ``mlflow run`` (``$MLFLOW_RUN_ID``) the project run's experiment is made the active
    one, whatever ``name`` says: MLflow resumes that run only in its own experiment (without
    ``--experiment-name`` that is experiment 0, "Default").

    Returns
    -------
    str
        The experiment id.
    """
    import mlflow

    if os.environ.get("MLFLOW_RUN_ID"):
        experiment_id = mlflow.get_run(os.environ["MLFLOW_RUN_ID"]).info.experiment_id
        mlflow.set_experiment(experiment_id=experiment_id)
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
    publish_audit_view(client, experiment_id)
    return experiment_id


def setup_tracking(tracking_uri: str | None = None, experiment: str | None = None) -> str:
    """The tracking URI (``--tracking-uri``; blank: MLflow's own), then the experiment (:func:`use_experiment`
    with ``--experiment``); returns its id."""
    import mlflow

    uri = blank(tracking_uri)
    if uri:
        mlflow.set_tracking_uri(uri)
    return use_experiment(blank(experiment))


#: MLflow's own switch of system metrics (``false`` turns them off for the commands' runs too).
SYSTEM_METRICS_ENV = "MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING"


def system_metrics_enabled() -> bool:
    """Whether the runs the commands start log MLflow's system metrics (CPU, memory, disk, network, and GPU with
    ``pynvml``; ``system/...``, sampled every ``$MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL`` seconds, default 10).

    Yes, unless ``$MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING`` says ``false`` (or ``0``, ``no``) or ``psutil``,
    which MLflow samples with, is not installed.

    >>> os.environ[SYSTEM_METRICS_ENV] = "false"; system_metrics_enabled()
    False
    >>> _ = os.environ.pop(SYSTEM_METRICS_ENV)
    """
    if os.environ.get(SYSTEM_METRICS_ENV, "").strip().lower() in ("false", "0", "no"):
        return False
    return importlib.util.find_spec("psutil") is not None


@contextlib.contextmanager
def mlflow_run(name: str | None, *, nested: bool = False):
    """Start (or, under ``mlflow run``, resume and rename) a run, logging system metrics
    (:func:`system_metrics_enabled`); an active run someone else started is used as it is."""
    import mlflow

    system = system_metrics_enabled()
    if system:  # MLflow says so at INFO on every start and stop
        logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
    if nested:
        with mlflow.start_run(run_name=name, nested=True, log_system_metrics=system) as run:
            yield run
        return
    active = mlflow.active_run()
    if active is not None:
        yield active
        return
    with mlflow.start_run(run_name=name, log_system_metrics=system) as run:
        yield run


def finished_run(client, tag: str, value: str):
    """The newest FINISHED run, in any experiment of the store, whose tag ``tag`` equals ``value``; else None.

    How resumable commands (``analyze``, the canary finding) find a run they already made.
    """
    experiment_ids = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiment_ids, filter_string=f"tags.`{tag}` = '{value}' and "
                              "attributes.status = 'FINISHED'", max_results=1, order_by=["attributes.start_time DESC"])
    return runs[0] if runs else None


def record_project_failure(command: str, code: int, error: str | None, *, meaning: str) -> str | None:
    """Under ``mlflow run``: end the project run FAILED, named, with a description holding the error and exit code.

    ``mlflow run`` marks a failed command's run FAILED but keeps no reason, leaves it the
    random name it drew, and exits with 1 whatever the command's own exit code was. This
    writes, on the run in ``$MLFLOW_RUN_ID``:

    - the description (``mlflow.note.content``): when the command wrote an audit verdict
      (the run has ``mia.verdict``: a release gate that did not pass, exit 3), that
      description with one line added, the exit code and its meaning; otherwise
      ``**Failed: exit code <code>** (<meaning>)``, the error in a code block and that
      line (a description someone else wrote before is kept after it, quoted);
    - the name, when the command did not name the run (no ``mia.verdict``):
      ``mlflow-mia <command> failed (exit <code>)``, and ``mia.run_kind=failed`` (an audit
      has ``mia.run_kind=audit``: the run list filters on it);
    - the status FAILED (also of a run the command had ended FINISHED).

    Nothing happens outside ``mlflow run`` or for exit code 0. A tracking store that cannot
    be written is logged and ignored: the command's own message and code stand.

    Parameters
    ----------
    command : str
        The subcommand (``audit``, ``compare``, ...).
    code : int
        The command's exit code (1, 2 or 3).
    error : str or None
        The error message the command printed (None for a gate that did not pass).
    meaning : str
        What ``code`` means, in words.

    Returns
    -------
    str or None
        The run id written to, or None.
    """
    import mlflow

    run_id = os.environ.get("MLFLOW_RUN_ID")
    if not run_id or not code:
        return None
    line = (f"`mlflow-mia {command}` exited with code {code} ({meaning}); `mlflow run` itself exits with 1 for "
            "every failure, so this code is the one to read.")
    try:
        client = mlflow.MlflowClient()
        tags = client.get_run(run_id).data.tags
        note = tags.get(NOTE_TAG) or ""
        if VERDICT_TAG in tags and note.startswith(DESCRIPTION_START):
            description = note if line in note else f"{note}\n\n{line}"
        else:
            shown = (error or "").replace("`", "'")  # no fence of its own can close the code block
            description = with_own_text(f"{FAILURE_START} exit code {code}** ({meaning}).\n\n```\n{shown}\n```\n\n"
                                        f"{line}", note)
            client.set_tag(run_id, RUN_NAME_TAG, f"mlflow-mia {command} failed (exit {code})")
            client.set_tag(run_id, RUN_KIND_TAG, "failed")  # an audit gated to exit 3 stays an audit
        client.set_tag(run_id, NOTE_TAG, description)
        client.set_terminated(run_id, "FAILED")
    except Exception as exc:  # noqa: BLE001 - the command's own message and exit code must still reach the user
        log.warning("could not record the failure on the mlflow run %s: %s", run_id, exc)
        return None
    return run_id
