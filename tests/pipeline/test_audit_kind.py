"""A new audit kind is one folder and one registration: a throwaway kind, declared here as its folder would
declare it, reaches the CLI, the evaluator, the MLproject file and the options reference with no other module
edited, gives the same metrics through each, and its release gate decides a verdict that reaches the audited
registry version through the writer every kind shares, with the same protection (a sealed record; an ungated
audit does not lift a fail).

The kind ("toy"): stage 1 reads each text's length in characters; stage 2 scores ``toy_scale * length`` and
reports its AUC against the membership labels (sklearn's ``roc_auc_score`` is the oracle) and its TPR at FPR
0.25 with one-sided 95 % Clopper-Pearson bounds over the members (scipy's ``binomtest``); its gate is the
membership audit's ``max_tpr_at_fpr`` budget (the same declaration, :func:`~mlflow_mia.option.shared_option`).
With the fixed texts every member (lengths 3, 4, 6, 8) scores above the non-member with the second largest
length (2 of 1, 1, 2, 5), so the TPR at FPR 0.25 is 4/4, with lower bound 0.05 ** (1/4) = 0.473 and upper 1.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from types import SimpleNamespace

import mlflow
import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest
from sklearn.metrics import roc_auc_score, roc_curve

from mlflow_mia.audits.base import Audit, Settings
from mlflow_mia.hashing import resolve_hash_key
from mlflow_mia.metrics.gate_record import GateRecord
from mlflow_mia.option import option, shared_option
from mlflow_mia.options.audit import MiaOptions
from mlflow_mia.options.families import FAMILIES, register_family
from mlflow_mia.options.schema import CommonOptions, build, parse_values
from mlflow_mia.options.values import mia_section
from mlflow_mia.pipeline import AUDITS, register_audit
from mlflow_mia.tracking.log_settings import LogSettings
from mlflow_mia.tracking.scopes import KIND_SCOPES
from mlflow_mia.tracking.verdict import verdict_of
from mlflow_mia.tracking.version_verdict import record_verdict

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
    """The toy audit's options: the common ones and the membership audit's release budget."""

    gate: object = shared_option(MiaOptions, "gate")


def _parse(flat, *, targets=None) -> Settings:
    values = parse_values("toy", mia_section(flat))
    return Settings(build(ToyConfig, values),
                    build(ToyOptions, values, label_column=values.get("label_column") or targets or "is_member",
                          hash_key=values.get("hash_key_file") or resolve_hash_key()))


def _load_inputs(frame, settings):
    return frame["text"].tolist(), frame[settings.options.label_column].astype(int).to_numpy()


def _signals(target, inputs, settings):
    texts, labels = inputs
    return np.array([len(t) for t in texts], dtype=float), labels


def _score(signals, settings):
    lengths, labels = signals
    scores = settings.config.scale * lengths
    fpr, tpr, _ = roc_curve(labels, scores)
    members = int(labels.sum())
    hits = round(float(tpr[fpr <= 0.25].max()) * members)
    interval = binomtest(hits, members).proportion_ci(confidence_level=0.90, method="exact")  # one-sided 95 % each
    return {"toy/auc": float(roc_auc_score(labels, scores)), "toy/n": float(len(labels)),
            "n_members": float(members), "n_non_members": float(len(labels) - members),
            "toy/tpr_at_fpr_0.25": hits / members, "toy/tpr_at_fpr_0.25_lower_binomial": float(interval.low),
            "toy/tpr_at_fpr_0.25_upper_binomial": float(interval.high)}


def _gate(settings, inputs):
    return settings.options.gate  # a Gate: its check reads the flat metrics the score returns


def _resolve(uri, settings):
    name, _, version = uri.removeprefix("models:/").partition("/")
    return SimpleNamespace(uri=uri, registry_versions=[(name, version)] if uri.startswith("models:/") else [])


TOY = Audit(name="toy", command="toy-audit", target_flag="--target", help="toy audit: text length as the score",
            description="Score each text by its length.", parse=_parse, load_inputs=_load_inputs,
            resolve=_resolve, signals=_signals, score=_score, gate=_gate)


# --- what pipeline/ would register ---------------------------------------------------------------------------

def _run(target, inputs, settings, *, run_id=None, log_metrics=True, notes=()):
    result = TOY.score(TOY.signals(target, inputs, settings), settings)
    budgets = TOY.gate(settings, inputs)
    verdict = budgets.check(result) if budgets is not None else None
    _log(result, run_id, settings=LogSettings.from_options(settings.options, log_metrics=log_metrics, gate=verdict,
                                                           model_version=target.registry_versions or None,
                                                           weights_id="sha256:" + "0" * 64))
    return result, {}


def _log(result, run_id, *, settings):
    client = mlflow.MlflowClient()
    for key, value in (result.items() if settings.log_metrics else ()):
        client.log_metric(run_id, settings.prefix + key, value)
    gate = settings.gate
    if gate is not None:
        client.set_tag(run_id, "mia.gate", gate.status)
    verdict = verdict_of(gate_status=gate.status) if gate is not None else verdict_of(auc=result["toy/auc"])
    record = None if gate is None else GateRecord.of(gate, ("toy",), result)
    record_verdict(client, result, run_id=run_id, settings=settings, verdict=verdict, brief="Toy audit.",
                   record=record, headline_tags={"mia.toy.auc": f"{result['toy/auc']:.3f}"}, scope="mia.toy.")


@pytest.fixture
def toy_kind():
    """The toy kind registered for one test: its option family (as its folder would) and its ``Audit``."""
    register_family("toy", (ToyConfig, ToyOptions), {"toy-audit", "toy"}, command="toy-audit",
                    summary="Toy audit: each text's length as its score.")
    try:
        yield register_audit(TOY, run=_run, log=_log, metrics=lambda result, settings: dict(result),
                             scope="mia.toy.")
    finally:
        AUDITS.pop("toy", None)
        FAMILIES.pop("toy", None)
        KIND_SCOPES.discard("mia.toy.")


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
    return {"toy/auc": roc_auc_score(LABELS, [scale * len(t) for t in TEXTS]), "toy/n": 8.0, "n_members": 4.0,
            "n_non_members": 4.0, "toy/tpr_at_fpr_0.25": 1.0, "toy/tpr_at_fpr_0.25_lower_binomial": 0.05 ** 0.25,
            "toy/tpr_at_fpr_0.25_upper_binomial": 1.0}


def test_an_audit_kind_without_a_family_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"audit 'toy' has no option family: register one in its folder with "
                                         r"register_family\('toy'"):
        register_audit(TOY, run=_run, log=_log, metrics=dict, scope="mia.toy.")


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


def test_a_registered_kinds_gate_decides_its_verdict_and_the_shared_writer_puts_it_on_the_version(
        toy_kind, local_store, capsys):
    from mlflow_mia.entrypoints.cli import main
    from mlflow_mia.tracking.gate_history import RECORD_PREFIX

    client = mlflow.MlflowClient()
    client.create_registered_model("toy")
    client.create_model_version("toy", source=str(local_store))
    pool = str(local_store / "pool.csv")
    # the shared declaration's parser refuses a budget at or below its FPR: a usage error, exit 2
    assert main(["toy-audit", "--target", "models:/toy/1", "--data", pool, "--max-tpr-at-fpr", "0.25:0.2"]) == 2
    assert "gate budget 0.25:0.2 is at or below its FPR" in capsys.readouterr().err

    # lower bound 0.473 > 0.4: fail, exit 3 (the generic front end decides the kind's gate on its result)
    assert main(["toy-audit", "--target", "models:/toy/1", "--data", pool, "--max-tpr-at-fpr", "0.25:0.4",
                 "--run-name", "gated"]) == 3
    gated = mlflow.search_runs(search_all_experiments=True, filter_string="run_name = 'gated'",
                               output_format="list")[0].info.run_id
    tags = client.get_model_version("toy", "1").tags
    assert (tags["mia.gate"], tags["mia.verdict"], tags["mia.toy.auc"]) == ("fail", "leaks", f"{roc_auc_score(LABELS, [len(t) for t in TEXTS]):.3f}")
    record = GateRecord.from_tag(tags[f"{RECORD_PREFIX}{gated}"])
    assert (record.status, record.attacks, record.budgets, record.members) == ("fail", ("toy",), ((0.25, 0.4),), 4)
    assert record.mac  # sealed into the version's chain like every kind's record

    # an ungated audit of the same kind writes its headline but does not lift the fail
    assert main(["toy-audit", "--target", "models:/toy/1", "--data", pool, "--toy-scale", "2"]) == 0
    tags = client.get_model_version("toy", "1").tags
    assert (tags["mia.gate"], tags["mia.verdict"]) == ("fail", "leaks")
    assert tags["mia.gate.run_id"] == gated

    # an audit of the membership scope ("mia.") replaces its own stale headline tags but keeps the kind's:
    # its scope was registered with the kind
    client.set_model_version_tag("toy", "1", "mia.stale_headline", "x")
    with mlflow.start_run(run_name="membership-scope") as run:
        record_verdict(client, {}, run_id=run.info.run_id, verdict=verdict_of(auc=0.5), brief="", record=None,
                       settings=LogSettings(model_version=[("toy", "1")], hash_key=resolve_hash_key()),
                       headline_tags={"mia.auc": "0.5"})
    tags = client.get_model_version("toy", "1").tags
    assert "mia.stale_headline" not in tags and tags["mia.auc"] == "0.5"
    assert tags["mia.toy.auc"] == "0.875" and tags["mia.gate"] == "fail"
