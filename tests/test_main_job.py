"""The README's main job, end to end: `mlflow run . -e audit` on the small BBC News demo."""

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient

from mlflow_mia.tracking.headline import full_metrics

REPO = Path(__file__).resolve().parents[1]


def test_mlflow_run_audit_on_small_demo(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    # No MLFLOW_* variables inherited from other tests (an experiment id of another store).
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env = {**inherited, "MLFLOW_TRACKING_URI": uri, "MLFLOW_MIA_DEMO_DIR": str(tmp_path / "demo"),
           "MLFLOW_MIA_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1",
           # the entry point calls the `mlflow-mia` console script installed beside this interpreter
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [sys.executable, "-m", "mlflow", "run", str(REPO), "-e", "audit", "--env-manager", "local",
           "-P", "demo_size=small", "-P", "bootstrap_rounds=100"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]

    mlflow.set_tracking_uri(uri)
    client = MlflowClient()
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    audit = next(r for r in runs if r.data.tags.get("mlflow.project.entryPoint") == "audit")
    m = full_metrics(client, audit.info.run_id)  # the run logs the headline set; the table holds the rest
    # The small demo's target memorizes its members; the reference calibrates the loss.
    assert m["likelihood_ratio/auc"] > 0.75 and m["likelihood_ratio/auc"] > m["loss/auc"]
    assert m["user/likelihood_ratio/auc"] >= m["likelihood_ratio/auc"]
    files = {f.path for f in client.list_artifacts(audit.info.run_id)} | {
        f.path for d in ("plots", "tables") for f in client.list_artifacts(audit.info.run_id, d)}
    assert {"report.md", "plots/roc.png", "plots/roc_loglog.png", "tables/samples.csv"} <= files
    version = client.get_model_version_by_alias("bbc-small-target", "candidate")
    assert float(version.tags["mia.likelihood_ratio.auc"]) == pytest.approx(m["likelihood_ratio/auc"], abs=1e-3)
    assert (tmp_path / "demo" / "small" / "pool.jsonl").exists()  # MLFLOW_MIA_DEMO_DIR, not the checkout


def test_mlflow_run_failure_keeps_the_tools_exit_code_and_names_the_failed_run(tmp_path):
    """`mlflow run` exits 1 for every failure; the tool's code (2 here) is on stderr and in the failed run's
    description, and the run is named (issue 32, low)."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env = {**inherited, "MLFLOW_TRACKING_URI": uri, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [sys.executable, "-m", "mlflow", "run", str(REPO), "-e", "audit", "--env-manager", "local",
           "-P", "target=models:/x/1", "-P", f"data={tmp_path / 'pool.csv'}", "-P", "fprs=1e-300"]
    (tmp_path / "pool.csv").write_text("text,is_member\na,1\nb,0\n")  # exists: the option error comes first
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert ("mlflow-mia audit: error: argument --fprs: fprs must be a non-empty list (or comma-separated string) of "
            "numbers in [1e-09, 1), got '1e-300'") in proc.stderr
    assert ("mlflow-mia audit: exit code 2 (usage or input error); mlflow run reports every failure as exit code 1"
            in proc.stderr)
    mlflow.set_tracking_uri(uri)
    client = MlflowClient()
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    run = next(r for r in runs if r.data.tags.get("mlflow.project.entryPoint") == "audit")
    assert run.info.status == "FAILED" and run.info.run_name == "mlflow-mia audit failed (exit 2)"
    note = run.data.tags["mlflow.note.content"]
    assert note.startswith("**Failed: exit code 2** (usage or input error).") and "got '1e-300'" in note
    assert "`mlflow run` itself exits with 1 for every failure" in note
