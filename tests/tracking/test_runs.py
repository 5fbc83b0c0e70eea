"""Runs of the commands (``tracking/runs.py``): under ``mlflow run`` a failure is recorded on the project run."""

from __future__ import annotations

import mlflow
import pytest
from mlflow import MlflowClient

from mlflow_mia.entrypoints.cli import main
from mlflow_mia.tracking.runs import record_project_failure
from mlflow_mia.tracking.descriptions import OWN_TEXT_HEADING

LINE = ("`mlflow-mia audit` exited with code {code} ({meaning}); `mlflow run` itself exits with 1 for every failure, "
        "so this code is the one to read.")


@pytest.fixture
def project_run(tmp_path, monkeypatch):
    """A RUNNING run standing for the one ``mlflow run`` creates (its id in ``$MLFLOW_RUN_ID``)."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.set_experiment("project")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", experiment.experiment_id)
    run = MlflowClient().create_run(experiment.experiment_id, run_name="bouncy-cat-123")
    monkeypatch.setenv("MLFLOW_RUN_ID", run.info.run_id)
    yield run.info.run_id
    while mlflow.active_run() is not None:
        mlflow.end_run()


def test_a_usage_error_ends_the_project_run_failed_with_a_name_and_the_error(project_run, capsys):
    assert main(["audit", "--rmia-gamma", "inf"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-2] == "mlflow-mia audit: error: argument --rmia-gamma: rmia_gamma must be a finite number > 0, got 'inf'"
    assert err[-1] == ("mlflow-mia audit: exit code 2 (usage or input error); mlflow run reports every failure as "
                       "exit code 1")
    run = MlflowClient().get_run(project_run)
    assert run.info.status == "FAILED" and run.info.run_name == "mlflow-mia audit failed (exit 2)"
    assert run.data.tags["mlflow.note.content"] == (
        "**Failed: exit code 2** (usage or input error).\n\n```\nmlflow-mia audit: error: argument --rmia-gamma: "
        "rmia_gamma must be a finite number > 0, got 'inf'\n```\n\n" + LINE.format(code=2, meaning="usage or input error"))


def test_an_input_error_and_a_crash_keep_their_codes(project_run, tmp_path, monkeypatch, capsys):
    from mlflow_mia.entrypoints import commands

    client = MlflowClient()
    client.set_tag(project_run, "mlflow.note.content", "Verdict: within budget (written before the audit)")
    population = tmp_path / "population.csv"
    population.write_text("text\n" + "".join(f"text {i}\n" for i in range(20)))
    assert main(["audit", "--target", "models:/x/1", "--data", str(tmp_path / "missing.csv"), "--population",
                 str(population)]) == 2
    note = client.get_run(project_run).data.tags["mlflow.note.content"]
    assert note.startswith(f"**Failed: exit code 2** (usage or input error).\n\n```\nthe target pool file "
                           f"'{tmp_path / 'missing.csv'}' does not exist (-P data=)\n```")
    assert note.endswith(f"\n\n---\n\n{OWN_TEXT_HEADING}\n\n> Verdict: within budget (written before the audit)")

    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(commands, "_command", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["audit"])
    run = client.get_run(project_run)
    assert run.info.status == "FAILED" and run.info.run_name == "mlflow-mia audit failed (exit 1)"
    assert run.data.tags["mlflow.note.content"].startswith(
        "**Failed: exit code 1** (the audit broke: a bug or an environment fault).\n\n```\nRuntimeError: a bug\n```")
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("mlflow-mia audit: exit code 1 (the audit broke")


def test_a_gate_that_did_not_pass_keeps_the_audits_name_and_verdict_and_adds_the_code(project_run):
    client = MlflowClient()
    verdict = "**Verdict: leaks** (release gate failed: ...).\n\nThe full report is the run's `report.md` artifact."
    for key, value in {"mia.verdict": "leaks", "mlflow.note.content": verdict,
                       "mlflow.runName": "tgt v2 / ref v1"}.items():
        client.set_tag(project_run, key, value)
    client.set_terminated(project_run, "FINISHED")  # the audit's run context ended it
    for _ in range(2):  # recorded once
        assert record_project_failure("audit", 3, None, meaning="the release gate did not pass") == project_run
    run = client.get_run(project_run)
    assert run.info.status == "FAILED" and run.info.run_name == "tgt v2 / ref v1"
    assert run.data.tags["mlflow.note.content"] == (
        verdict + "\n\n" + LINE.format(code=3, meaning="the release gate did not pass"))


def test_nothing_is_recorded_outside_mlflow_run(project_run, monkeypatch):
    monkeypatch.delenv("MLFLOW_RUN_ID")
    assert record_project_failure("audit", 2, "x", meaning="usage or input error") is None
    assert main(["audit", "--rmia-gamma", "inf"]) == 2
    assert MlflowClient().get_run(project_run).info.status == "RUNNING"


def test_named_with_verdict_puts_the_verdict_first_once():
    from mlflow_mia.tracking.descriptions import VERDICTS, named_with_verdict

    assert named_with_verdict("tgt v2 / ref v1", "leaks") == "[leaks] tgt v2 / ref v1"
    for old in VERDICTS:  # any verdict in front is replaced by the new one
        assert named_with_verdict(f"[{old}] cmp", "inconclusive") == "[inconclusive] cmp"
    assert named_with_verdict("[draft] cmp", "leaks") == "[leaks] [draft] cmp"  # a user's bracket is kept
    with pytest.raises(ValueError, match=r"verdict must be one of \['within budget', 'no evidence of leakage', "
                                         r"'inconclusive', 'leaks'\], not 'leaky'"):
        named_with_verdict("cmp", "leaky")


def test_the_experiment_carries_the_audits_view_of_its_run_list(tracking):
    import json

    from mlflow_mia.tracking.run_list import publish_audit_view, run_list_url
    from mlflow_mia.tracking.runs import use_experiment

    client = MlflowClient()
    experiment_id = use_experiment()
    key = "mlflow.sharedViewState.mia-audits"
    state = json.loads(client.get_experiment(experiment_id).tags[key])
    assert state == {"searchFilter": "tags.`mia.run_kind` = 'audit'", "orderByKey": "attributes.start_time",
                     "orderByAsc": False, "selectedColumns": ["tags.`mia.verdict`", "tags.`mia.verdict.reason`"]}
    # The filter is one MLflow's search accepts, and it keeps audits only.
    audit = client.create_run(experiment_id, tags={"mia.run_kind": "audit"})
    client.create_run(experiment_id, run_name="build canary demo (small)")
    client.create_run(experiment_id, tags={"mia.run_kind": "failed"})
    found = client.search_runs([experiment_id], filter_string=state["searchFilter"])
    assert [r.info.run_id for r in found] == [audit.info.run_id]
    client.set_experiment_tag(experiment_id, key, "{}")  # a view overridden in the UI is put back
    assert publish_audit_view(client, experiment_id) == key
    assert json.loads(client.get_experiment(experiment_id).tags[key]) == state
    assert run_list_url(experiment_id, tracking_uri="http://srv:5000/") == (
        f"http://srv:5000/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
        "&viewStateShareKey=mia-audits")


def test_command_runs_log_system_metrics_unless_mlflow_is_told_not_to(tracking, monkeypatch):
    import time

    from mlflow_mia.tracking.runs import mlflow_run

    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")  # MLflow's default is 10 s
    found = {}
    for switch in ("true", "false"):
        monkeypatch.setenv("MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING", switch)
        with mlflow_run(f"system {switch}") as run:
            time.sleep(1.0)
        found[switch] = set(MlflowClient().get_run(run.info.run_id).data.metrics)
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= found["true"]
    assert found["false"] == set()
