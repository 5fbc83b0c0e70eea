"""A new audit kind is one folder and one registration: a throwaway kind, declared here as its folder would
declare it, reaches the CLI, the evaluator, the MLproject file and the options reference with no other module
edited, and gives the same metrics through each.

The kind ("toy"): stage 1 reads each text's length in characters; stage 2 scores ``toy_scale * length`` and
reports its AUC against the membership labels (sklearn's ``roc_auc_score`` is the oracle).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import mlflow
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from mlflow_mia.audits.base import Audit, Settings
from mlflow_mia.option import option
from mlflow_mia.options.families import FAMILIES, register_family
from mlflow_mia.options.schema import CommonOptions, build, parse_values
from mlflow_mia.options.values import mia_section
from mlflow_mia.pipeline import AUDITS, register_audit

#: What every subcommand's --help description ends with (entrypoints/commands.py).
OPTIONS_POINTER = "Every option in full: docs/reference/options.md."

TEXTS = ["a", "bbbb", "cc", "dddddd", "eee", "ffffffff", "g", "hhhhh"]
LABELS = [0, 1, 0, 1, 1, 1, 0, 0]


# --- what audits/toy/ would hold -----------------------------------------------------------------------------

@dataclass(frozen=True)
class ToyConfig:
    """What the toy audit computes."""

    scale: float = option(1.0, "multiplies each text's length", key="toy_scale", gt=0)


@dataclass(frozen=True)
class ToyOptions(CommonOptions):
    """The toy audit's options: the common ones."""


def _parse(flat, *, targets=None) -> Settings:
    values = parse_values("toy", mia_section(flat))
    return Settings(build(ToyConfig, values),
                    build(ToyOptions, values, label_column=values.get("label_column") or targets or "is_member"))


def _load_inputs(frame, settings):
    return frame["text"].tolist(), frame[settings.options.label_column].astype(int).to_numpy()


def _signals(target, inputs, settings):
    texts, labels = inputs
    return np.array([len(t) for t in texts], dtype=float), labels


def _score(signals, settings):
    lengths, labels = signals
    return {"toy/auc": float(roc_auc_score(labels, settings.config.scale * lengths)), "toy/n": float(len(labels))}


TOY = Audit(name="toy", command="toy-audit", target_flag="--target", help="toy audit: text length as the score",
            description="Score each text by its length.", parse=_parse, load_inputs=_load_inputs,
            resolve=lambda uri, settings: {"uri": uri}, signals=_signals, score=_score)


# --- what pipeline/ would register ---------------------------------------------------------------------------

def _run(target, inputs, settings, *, run_id=None, log_metrics=True, notes=()):
    result = TOY.score(TOY.signals(target, inputs, settings), settings)
    if log_metrics:
        _log(result, run_id, settings=settings)
    return result, {}


def _log(result, run_id, *, settings):
    client = mlflow.MlflowClient()
    for key, value in result.items():
        client.log_metric(run_id, settings.options.metric_prefix + key, value)


@pytest.fixture
def toy_kind():
    """The toy kind registered for one test: its option family (as its folder would) and its ``Audit``."""
    register_family("toy", (ToyConfig, ToyOptions), {"toy-audit", "toy"}, command="toy-audit",
                    summary="Toy audit: each text's length as its score.")
    try:
        yield register_audit(TOY, run=_run, log=_log, metrics=lambda result, settings: dict(result))
    finally:
        AUDITS.pop("toy", None)
        FAMILIES.pop("toy", None)


@pytest.fixture
def local_store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    old = mlflow.get_tracking_uri()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)  # an experiment of another test's store
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("toy")
    (tmp_path / "pool.csv").write_text(pd.DataFrame({"text": TEXTS, "is_member": LABELS}).to_csv(index=False))
    try:
        yield tmp_path
    finally:
        while mlflow.active_run() is not None:
            mlflow.end_run()
        mlflow.set_tracking_uri(old)


def _expected(scale):
    return {"toy/auc": roc_auc_score(LABELS, [scale * len(t) for t in TEXTS]), "toy/n": 8.0}


def test_an_audit_kind_without_a_family_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"audit 'toy' has no option family: register one in its folder with "
                                         r"register_family\('toy'"):
        register_audit(TOY, run=_run, log=_log, metrics=dict)


def test_a_registered_kind_gets_its_subcommand_flags_and_help_group(toy_kind):
    from mlflow_mia.entrypoints.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert "toy-audit" in sub.choices and sub.choices["toy-audit"].description == f"{TOY.description} {OPTIONS_POINTER}"
    text = sub.choices["toy-audit"].format_help()
    for flag in ("--toy-scale", "--target", "--data", "--label-column", "--hash-key-file", "--tracking-uri"):
        assert flag in text, flag
    assert "toy audit:" in text  # the kind's own --help group
    assert "--reference" not in text and "--num-masks" not in text  # no other audit's options


def test_a_registered_kind_gets_its_mlproject_entry_point_and_reference_rows(toy_kind):
    from mlflow_mia.options.generate import mlproject_text, options_reference

    text = mlproject_text()
    block = text[text.index("  toy-audit:"):text.index("  analyze:")]
    assert "# Toy audit: each text's length as its score." in block
    assert "toy_scale: {type: float, default: 1}" in block and "--toy-scale {toy_scale}" in block
    # target and data have no default: no parameter, named in the comment (-P target=... passes --target ...)
    assert "target: {type" not in block and "{data}" not in block
    assert "passed on as --name value): target, data" in " ".join(block.split())
    assert text.index("  canary-audit:") < text.index("  toy-audit:")
    row = next(line for line in options_reference().splitlines() if line.startswith("| `toy_scale` |"))
    assert "`toy-audit`, `toy`" in row and "multiplies each text's length (> 0)" in row


def test_the_cli_the_mlproject_entry_point_and_the_evaluator_give_the_same_metrics(toy_kind, local_store, capsys):
    from mlflow.projects._project_spec import load_project

    from mlflow_mia.entrypoints.cli import main
    from mlflow_mia.options.generate import mlproject_text

    expected = _expected(2.0)
    client = mlflow.MlflowClient()
    pool = str(local_store / "pool.csv")

    assert main(["toy-audit", "--target", "toy://a", "--data", pool, "--toy-scale", "2", "--run-name", "cli"]) == 0
    assert "toy/auc" in capsys.readouterr().out
    cli_run = mlflow.search_runs(search_all_experiments=True, filter_string="run_name = 'cli'",
                                 output_format="list")[0]
    assert cli_run.data.metrics == pytest.approx(expected)

    (local_store / "project").mkdir()
    (local_store / "project" / "MLproject").write_text(mlproject_text())
    (local_store / "project" / "conda.yaml").write_text("name: mlflow-mia\n")
    entry = load_project(str(local_store / "project")).get_entry_point("toy-audit")
    argv = shlex.split(entry.compute_command({"target": "toy://a", "data": pool, "toy_scale": 2}, storage_dir=None))
    assert argv[:2] == ["mlflow-mia", "toy-audit"]
    with mlflow.start_run(run_name="project") as project_run:  # the run mlflow run opens
        assert main(argv[1:]) == 0
    assert client.get_run(project_run.info.run_id).data.metrics == pytest.approx(expected)

    frame = pd.DataFrame({"text": TEXTS, "is_member": LABELS})
    with mlflow.start_run(run_name="evaluator") as run:
        result = mlflow.models.evaluate(model=None, data=frame, targets="is_member", model_type="mia",
                                        evaluators=["mia"], evaluator_config={"mia": {
                                            "method": "toy", "target_model": "toy://a", "toy_scale": 2}})
    assert result.metrics == pytest.approx(expected)
    assert client.get_run(run.info.run_id).data.metrics == pytest.approx(expected)
