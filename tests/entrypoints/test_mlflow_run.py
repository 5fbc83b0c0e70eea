"""Every entry point under ``mlflow run``, with and without ``--experiment-name``.

``mlflow run`` (``mlflow/projects/utils.py``) creates the project run, then starts the
command with ``MLFLOW_RUN_ID``, ``MLFLOW_TRACKING_URI`` and ``MLFLOW_EXPERIMENT_ID`` set;
without ``--experiment-name`` the run is in experiment 0 ("Default"). MLflow resumes that
run only while the active experiment is the run's own, so a demo build that switches to
``mlflow-mia`` (as the canary demo does) must not leave it switched. The demo builders
are replaced by fakes that switch experiments as the real ones may; the models are the
session's tiny registered ones.
"""

from __future__ import annotations

import re
import sys
import types

import mlflow
import pytest
from mlflow import MlflowClient

from mlflow_mia.entrypoints.cli import main
from mlflow_mia.tracking.descriptions import name_without_verdict


@pytest.fixture(params=["without --experiment-name", "with --experiment-name"])
def project_run(request, tracking, monkeypatch):
    """The run ``mlflow run`` creates: in experiment 0, or in a named one; the environment it sets."""
    client = MlflowClient()
    if request.param.startswith("without"):
        experiment_id = "0"
    else:
        found = client.get_experiment_by_name("project-experiment")
        experiment_id = found.experiment_id if found else client.create_experiment("project-experiment")
    run = client.create_run(experiment_id, run_name="bouncy-cat-123")
    monkeypatch.setenv("MLFLOW_RUN_ID", run.info.run_id)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", experiment_id)
    yield run
    while mlflow.active_run() is not None:
        mlflow.end_run()


def _switching(spec):
    """A demo builder that records into ``mlflow-mia`` (its own run there) and returns ``spec``."""

    def build(**kwargs):
        mlflow.set_experiment("mlflow-mia")
        with mlflow.start_run(run_name="build (fake)"):
            pass
        return spec

    return build


def _log_project_params(run, entry_point: str, given: dict) -> dict:
    """Log the params ``mlflow run`` logs before the command starts: every declared parameter and each given one."""
    from pathlib import Path

    from mlflow.entities import Param
    from mlflow.projects._project_spec import load_project

    entry = load_project(str(Path(__file__).resolve().parents[2])).get_entry_point(entry_point)
    declared, extra = entry.compute_parameters(given, storage_dir=None)
    params = {**declared, **extra}
    MlflowClient().log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()])
    return params


def _membership_demo(tracking, size="small"):
    return types.SimpleNamespace(
        target_uri="models:/tgt@candidate", reference_uri="models:/ref@champion", ood_reference_uri=None,
        pool_path=tracking.pool_path, population_path=tracking.population_path, text_column="text",
        label_column="is_member", group_column="article_id", id_column="sample_id", size=size)


def _finished_in_place(project_run, name):
    run = MlflowClient().get_run(project_run.info.run_id)
    assert run.info.experiment_id == project_run.info.experiment_id
    assert name_without_verdict(run.info.run_name).startswith(name), run.info.run_name
    assert run.info.run_name.startswith(f"[{run.data.tags['mia.verdict']}] ")  # the verdict first
    assert run.info.status == "FINISHED"
    assert run.data.tags["mia.run_kind"] == "audit"
    return run


def test_audit_demo_under_mlflow_run(project_run, tracking, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mlflow_mia.demo.build",
                        types.SimpleNamespace(build_demo=_switching(_membership_demo(tracking))))
    logged = _log_project_params(project_run, "audit", {"demo_size": "small", "num_masks": "2.0",
                                                         "bootstrap_rounds": "0"})
    code = main(["audit", "--demo-size", "small", "--num-masks", "2", "--fprs", "0.1,0.05", "--bootstrap-rounds",
                 "0", "--cache-dir", str(tracking.cache_dir), "--quiet", "--no-tag-model-version"])
    assert code == 0, capsys.readouterr().err
    run = _finished_in_place(project_run, "tgt v2")
    assert run.data.params["target_model"] == "models:/tgt/2"
    # What mlflow run logged stands, logged once (num_masks as given); the audit adds the settings it lacks.
    assert {k: run.data.params[k] for k in logged} == logged and run.data.params["num_masks"] == "2.0"
    assert run.data.params["signal"] == "energy" and not [k for k in run.data.params if k.startswith("effective.")]


def test_compare_demo_under_mlflow_run(project_run, tracking, monkeypatch, capsys):
    import mlflow_mia.demo.build as build_module

    monkeypatch.setattr(build_module, "build_demo", _switching(_membership_demo(tracking)))

    def short_target(**kwargs):  # the demo's second version (trained on first use): here tgt v1 as @short
        MlflowClient().set_registered_model_alias("tgt", "short", "1")
        return _switching("models:/tgt@short")(**kwargs)

    monkeypatch.setattr("mlflow_mia.entrypoints.compare.build_short_target", short_target)
    _log_project_params(project_run, "compare", {"demo_size": "small", "reference": "models:/ref@champion",
                                                 "num_masks": "2", "bootstrap_rounds": "0"})
    code = main(["compare", "--demo-size", "small", "--reference", "models:/ref@champion", "--num-masks", "2",
                 "--fprs", "0.1,0.05", "--bootstrap-rounds", "0", "--cache-dir", str(tracking.cache_dir), "--quiet",
                 "--no-tag-model-version"])
    assert code == 0, capsys.readouterr().err
    run = _finished_in_place(project_run, "compare tgt")
    assert run.data.params["compared_aliases"] == "candidate,short"  # the demo compares two versions
    children = MlflowClient().search_runs([run.info.experiment_id],
                                          f"tags.mlflow.parentRunId = '{run.info.run_id}'")
    assert sorted(c.data.params["target_model"] for c in children) == ["models:/tgt/1", "models:/tgt/2"]


def test_canary_demo_under_mlflow_run(project_run, tracking, monkeypatch, capsys, tmp_path):
    import mlflow_mia.demo.canary as demo_module
    from mlflow_mia.canaries.canary_set import make_canaries
    from mlflow_mia.demo.canary import CanaryDemoSpec

    path = tmp_path / "canaries.json"
    make_canaries(40, ["the patient record is zq{digits:8}"], repetitions=(1, 4), seed=2).save(path)
    spec = CanaryDemoSpec(target_uri="models:/tgt@champion", dp_target_uri="models:/tgt@candidate",
                          canaries_path=str(path), dp_epsilon=8.0, dp_delta=1e-5)
    monkeypatch.setattr(demo_module, "build_canary_demo", _switching(spec))
    code = main(["canary-audit", "--demo-size", "small", "--n-candidates", "20", "--bootstrap-rounds", "0",
                 "--cache-dir", str(tracking.cache_dir), "--quiet", "--no-tag-model-version"])
    assert code == 0, capsys.readouterr().err
    _finished_in_place(project_run, "canary-audit demo-small")
    children = MlflowClient().search_runs([project_run.info.experiment_id],
                                          filter_string=f"tags.mlflow.parentRunId = '{project_run.info.run_id}'")
    assert sorted(name_without_verdict(c.info.run_name) for c in children) == ["canary-audit tgt v1",
                                                                              "canary-audit tgt v2"]


def test_build_demo_under_mlflow_run_records_into_the_project_run(project_run, tracking, monkeypatch, capsys):
    def build_demo(**kwargs):  # the real build resumes the project run (demo/build.py:build_run)
        with mlflow.start_run() as run:
            mlflow.log_param("demo.size", kwargs["size"])
            assert run.info.run_id == project_run.info.run_id
        return types.SimpleNamespace(to_dict=lambda: {"target_uri": "models:/tgt@candidate"})

    monkeypatch.setitem(sys.modules, "mlflow_mia.demo.build", types.SimpleNamespace(build_demo=build_demo))
    assert main(["build-demo", "--size", "small", "--quiet"]) == 0, capsys.readouterr().err
    assert MlflowClient().get_run(project_run.info.run_id).data.params["demo.size"] == "small"


def test_a_failure_under_mlflow_run_names_the_run_in_its_own_experiment(project_run, tracking, capsys):
    assert main(["audit", "--target", "models:/no-such-model/1", "--data", str(tracking.pool_path),
                 "--population", str(tracking.population_path), "--quiet"]) == 2
    run = MlflowClient().get_run(project_run.info.run_id)
    assert run.info.experiment_id == project_run.info.experiment_id
    assert run.info.status == "FAILED"
    assert run.info.run_name == "mlflow-mia audit failed (exit 2)"
    assert run.data.tags["mia.run_kind"] == "failed"
    assert "no-such-model" in run.data.tags["mlflow.note.content"]


def _tiny_tagger() -> str:
    """``models:/mlflow-run-tagger/1``: a tiny random token classifier, registered once per session store."""
    from mlflow_mia.signals.ner_testing import tiny_token_classifier
    from mlflow_mia.tracking.runs import outside_project_run

    client = MlflowClient()
    if not client.search_model_versions("name='mlflow-run-tagger'"):
        model, tok = tiny_token_classifier()
        experiment = client.get_experiment_by_name("registered-test-models").experiment_id
        with outside_project_run(), mlflow.start_run(experiment_id=experiment, run_name="log tagger"):
            mlflow.transformers.log_model(transformers_model={"model": model, "tokenizer": tok}, name="model",
                                          task="token-classification", registered_model_name="mlflow-run-tagger",
                                          pip_requirements=["torch", "transformers"])
    return "models:/mlflow-run-tagger/1"


def test_ner_demo_under_mlflow_run(project_run, tracking, monkeypatch, capsys, tmp_path):
    import mlflow_mia.demo.wnut as wnut
    from ner_tables import HAND, PROMPTS, names_table

    uri = _tiny_tagger()
    paths = {k: tmp_path / f"{k}.csv" for k in ("names", "prompts", "hand")}
    names_table().to_csv(paths["names"], index=False)
    PROMPTS.to_csv(paths["prompts"], index=False)
    HAND.to_csv(paths["hand"], index=False)
    demo = wnut.WnutDemo(model_a_uri=uri, model_b_uri=uri, names_path=str(paths["names"]), entity_types=("PER",),
                         seconds=0.0)
    monkeypatch.setattr("mlflow_mia.entrypoints.ner_cli.build_wnut_demo", _switching(demo))  # where it is called
    code = main(["ner-audit", "--demo-size", "small", "--prompts", str(paths["prompts"]), "--handwritten-prompts",
                 str(paths["hand"]), "--bootstrap-rounds", "0", "--fprs", "0.1", "--no-token-removal",
                 "--cache-dir", str(tracking.cache_dir), "--quiet"])
    assert code == 0, capsys.readouterr().err
    run = _finished_in_place(project_run, "ner-audit wnut-small")
    with open(MlflowClient().download_artifacts(run.info.run_id, "report.md"), encoding="utf-8") as fh:
        report = fh.read().splitlines()
    assert report[0].startswith("# NER prompt memorization audit of mlflow-run-tagger v1 and mlflow-run-tagger v1")
    assert report[2] == f"**Verdict: {run.data.tags['mia.verdict']}** ({run.data.tags['mia.verdict.reason']})."
    assert not re.search(r"\bnan\b", "\n".join(report), re.IGNORECASE)


def test_analyze_under_mlflow_run(project_run, tracking, monkeypatch, capsys):
    """The suite itself is replaced by one that opens its parent run as the real one does (``mlflow_run``):
    what is checked is the command around it, after a demo build that switched experiments."""
    import pandas as pd

    import mlflow_mia.demo.build as build_module
    from mlflow_mia.analyze.suite import AnalysisResult
    from mlflow_mia.tracking.runs import mlflow_run

    def run_analysis(*, run_name=None, **kwargs):
        with mlflow_run(run_name or "analyze-quick") as parent:
            mlflow.log_param("analyze.size", "quick")
        table = pd.DataFrame({"finding": ["f1"], "reproduced": ["reproduced"], "why": ["as the paper"]})
        return AnalysisResult(run_id=parent.info.run_id, table=table)

    monkeypatch.setattr(build_module, "build_demo", _switching(_membership_demo(tracking)))
    monkeypatch.setattr("mlflow_mia.entrypoints.analyze_cli.run_analysis", run_analysis)  # where it is called
    assert main(["analyze", "--quick", "true", "--quiet", "true"]) == 0, capsys.readouterr().err
    run = MlflowClient().get_run(project_run.info.run_id)
    assert run.info.experiment_id == project_run.info.experiment_id and run.info.status == "FINISHED"
    assert run.info.run_name == "analyze quick" and run.data.params["analyze.size"] == "quick"
