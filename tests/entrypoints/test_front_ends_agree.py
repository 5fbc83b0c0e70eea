"""The three front ends of the membership audit give the same metrics for the same inputs.

``mlflow.models.evaluate(..., evaluators=["mia"])``, ``mlflow-mia audit`` (the entry point's ``main``, in
process) and the generated MLproject entry point ``audit`` (its command computed by MLflow's project loader,
run as ``mlflow run`` runs it: ``MLFLOW_RUN_ID`` set to the project run) audit the session's tiny leaking
target against the tiny reference on the same pool and population; the logged metrics dicts are equal.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient

from mlflow_mia.entrypoints.cli import main

REPO = Path(__file__).resolve().parents[2]

#: One small audit: two attacks, two masks, two FPRs, a few bootstrap rounds (seeded: the CIs agree too).
SETTINGS = {"attacks": "loss,likelihood_ratio", "num_masks": "2", "fprs": "0.1,0.05", "bootstrap_rounds": "20",
            "seed": "0", "signal": "energy", "text_column": "text", "group_column": "article_id",
            "id_column": "sample_id"}


def test_evaluator_cli_and_mlproject_entry_point_log_the_same_metrics(tracking, monkeypatch, capsys):
    from mlflow.projects._project_spec import load_project

    client = MlflowClient()
    with mlflow.start_run(run_name="evaluator") as run:
        config = tracking.config(**{k: v for k, v in SETTINGS.items()}, tag_model_version=False)
        result = mlflow.models.evaluate(model=None, data=tracking.pool, targets="is_member", model_type="mia",
                                        evaluators=["mia"], evaluator_config={"mia": {
                                            **config, "target_model": "models:/tgt@candidate",
                                            "population_data": str(tracking.population_path)}})
    evaluator = client.get_run(run.info.run_id).data.metrics
    assert result.metrics and set(result.metrics) <= set(evaluator)

    flags = [f"--{k.replace('_', '-')}={v}" for k, v in SETTINGS.items()]
    assert main(["audit", "--target", "models:/tgt@candidate", "--reference", "models:/ref@champion",
                 "--data", str(tracking.pool_path), "--population", str(tracking.population_path),
                 "--cache-dir", str(tracking.cache_dir), "--run-name", "cli", "--quiet",
                 "--no-tag-model-version", *flags]) == 0, capsys.readouterr().err
    cli = mlflow.search_runs(filter_string="run_name LIKE '%] cli'", output_format="list")[0].data.metrics  # verdict first

    entry = load_project(str(REPO)).get_entry_point("audit")
    params = {**SETTINGS, "target": "models:/tgt@candidate", "reference": "models:/ref@champion",
              "data": str(tracking.pool_path), "population": str(tracking.population_path),
              "cache_dir": str(tracking.cache_dir), "quiet": "true"}
    argv = shlex.split(entry.compute_command(params, storage_dir=None))
    assert argv[:2] == ["mlflow-mia", "audit"]
    project = client.create_run(mlflow.get_experiment_by_name(f"test-{Path.cwd().name}").experiment_id,
                                run_name="project")
    monkeypatch.setenv("MLFLOW_RUN_ID", project.info.run_id)  # what mlflow run hands the command
    assert main(argv[1:]) == 0, capsys.readouterr().err
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    mlproject = client.get_run(project.info.run_id).data.metrics

    assert {"loss/auc", "likelihood_ratio/auc", "likelihood_ratio/tpr_at_fpr_0.05"} <= set(evaluator)
    assert cli == pytest.approx(evaluator, rel=1e-9, abs=0)
    assert mlproject == pytest.approx(evaluator, rel=1e-9, abs=0)
    assert result.metrics == pytest.approx({k: evaluator[k] for k in result.metrics}, rel=1e-9, abs=0)
