"""A reference set of registered models (``models:/`` URIs) through the CLI and the evaluator."""

from __future__ import annotations

import json
import os

import mlflow
import pytest
from mlflow import MlflowClient

from mlflow_mia.entrypoints.cli import main
from mlflow_mia.tracking.descriptions import name_without_verdict
from mlflow_mia.tracking.headline import full_metrics

REFS = "models:/ref@champion,models:/tgt@champion"  # two registered tiny BERTs of other seeds than the candidate
SET_ATTACKS = "loss,likelihood_ratio,lira_offline,rmia"


def _runs():
    return MlflowClient().search_runs([os.environ["MLFLOW_EXPERIMENT_ID"]], order_by=["attributes.start_time ASC"])


def _config_json(run_id):
    path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="audit_config.json")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def test_cli_audit_over_a_reference_set_names_each_reference(tracking, capsys):
    argv = ["audit", "--target", "models:/tgt@candidate", *tracking.cli_args("--reference", REFS, "--attacks",
                                                                             SET_ATTACKS, "--run-name", "set")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "against models:/ref/1, models:/tgt/1" in out
    (run,) = [r for r in _runs() if name_without_verdict(r.info.run_name) == "set"]
    params, metrics = run.data.params, full_metrics(MlflowClient(), run.info.run_id)  # the table holds them all
    assert (params["reference_model"], params["reference_2_model"]) == ("models:/ref/1", "models:/tgt/1")
    assert params["reference_2_model_requested"] == "models:/tgt@champion"
    for name in ("loss", "likelihood_ratio", "likelihood_ratio.reference_2", "lira_offline", "rmia"):
        assert f"{name}/auc" in metrics and f"user/{name}/auc" in metrics
    assert metrics["rmia/auc"] > 0.8 and metrics["lira_offline/auc"] > 0.8  # the candidate memorised the members
    models = _config_json(run.info.run_id)["models"]
    assert (models["reference"]["uri"], models["reference_2"]["uri"]) == ("models:/ref/1", "models:/tgt/1")
    summary = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="audit_summary.json")
    with open(summary, encoding="utf-8") as fh:
        assert json.load(fh)["info"]["attack_settings"]["rmia"]["offline_a"] == 1.0


def test_cli_reference_mode_each_runs_one_nested_audit_per_reference(tracking):
    argv = ["audit", "--target", "models:/tgt@candidate",
            *tracking.cli_args("--reference", REFS, "--reference-mode", "each", "--bootstrap-rounds", "0",
                               "--run-name", "each")]
    assert main(argv) == 0
    children = [r for r in _runs() if r.data.tags.get("mlflow.parentRunId")]
    assert sorted(r.data.params["reference_model"] for r in children) == ["models:/ref/1", "models:/tgt/1"]
    assert all("reference_2_model" not in r.data.params for r in children)


def test_evaluator_takes_a_list_of_references(tracking):
    with mlflow.start_run() as run:
        result = mlflow.models.evaluate(
            model=None, data=tracking.pool, targets="is_member", model_type="mia", evaluators=["mia"],
            evaluator_config={"mia": tracking.config(target_model="models:/tgt@candidate",
                                                     reference_model=REFS.split(","), bootstrap_rounds=0,
                                                     attacks=SET_ATTACKS.split(","), rmia_offline_a=0.5)})
    assert {"rmia/auc", "lira_offline/auc", "likelihood_ratio.reference_2/auc"} <= set(result.metrics)
    params = MlflowClient().get_run(run.info.run_id).data.params
    assert params["reference_2_model"] == "models:/tgt/1" and params["rmia_offline_a"] == "0.5"
    with pytest.raises(ValueError, match="reference_mode='each' runs one audit per reference"):
        mlflow.models.evaluate(model=None, data=tracking.pool, targets="is_member", model_type="mia",
                               evaluators=["mia"], evaluator_config={"mia": tracking.config(
                                   target_model="models:/tgt@candidate", reference_model=REFS,
                                   reference_mode="each")})


def test_compare_with_reference_mode_set_audits_each_version_over_the_set(tracking):
    argv = ["compare", "--models", "tgt", "--aliases", "candidate",
            *tracking.cli_args("--reference", REFS, "--reference-mode", "set", "--attacks", "loss,rmia",
                               "--bootstrap-rounds", "0", "--run-name", "cmp-set")]
    assert main(argv) == 0
    (child,) = [r for r in _runs() if r.data.tags.get("mlflow.parentRunId")]
    assert (child.data.params["reference_model"], child.data.params["reference_2_model"]) == (
        "models:/ref/1", "models:/tgt/1")
    assert "rmia/auc" in child.data.metrics
