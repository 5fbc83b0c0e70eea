"""``mlflow-mia canary-audit`` and ``method="canaries"`` end to end on the session's tiny registered models."""

from __future__ import annotations

import logging
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient

from mlflow_mia.canaries import make_canaries
from mlflow_mia.entrypoints.cli import main

# A rare prefix makes a secret searchable as a string (eight digits alone turn up in hashes and timestamps).
TEMPLATES = ["the patient record is zq{digits:8}", "the doctor saw {name} on {phone}"]


@pytest.fixture
def canary_file(tmp_path):
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    cs = make_canaries(40, TEMPLATES, repetitions=(1, 4), seed=2)
    return cs, cs.save(secret_dir / "canaries.json")


def _args(tracking, path, *extra):
    return ["--canaries", str(path), "--n-candidates", "50", "--bootstrap-rounds", "20", "--cache-dir",
            str(tracking.cache_dir), "--quiet", *extra]


def test_canary_audit_logs_metrics_and_gates_with_the_membership_exit_codes(tracking, fresh_weights, canary_file,
                                                                           capsys):
    cs, path = canary_file
    version = fresh_weights("tgt/2", "canary-tgt")
    target = f"models:/canary-tgt/{version}"
    assert main(["canary-audit", "--target", target, *_args(tracking, path, "--run-name", "plain")]) == 0
    out = capsys.readouterr().out
    assert "record-level epsilon lower bound" in out
    run = mlflow.search_runs(filter_string="attributes.run_name = 'plain'", output_format="list")[0]
    assert run.data.tags["mia.method"] == "canaries"
    assert 0.0 <= run.data.metrics["canary/r1/auc"] <= 1.0
    assert run.data.metrics["canary/n_canaries"] == 40
    assert run.data.params["canary.set_digest"] and run.data.params["canary.n_included"] == str(cs.included.sum())
    arts = {a.path for a in MlflowClient().list_artifacts(run.info.run_id)}
    assert {"report.md", "canary_audit.json", "plots", "tables"} <= arts
    tags = MlflowClient().get_model_version("canary-tgt", version).tags
    assert "mia.canary.auc" in tags and "mia.gate" not in tags
    # 20 canaries inserted once cannot certify epsilon 5: the gate is inconclusive, which blocks (exit 3)
    assert main(["canary-audit", "--target", target,
                 *_args(tracking, path, "--max-epsilon-lower-bound", "5")]) == 3
    out = capsys.readouterr().out
    assert "mia.gate=inconclusive" in out and "cannot certify an epsilon above" in out
    assert MlflowClient().get_model_version("canary-tgt", version).tags["mia.gate"] == "inconclusive"
    # bad input: exit 2, before any model loads
    assert main(["canary-audit", "--target", target, *_args(tracking, Path(path).parent / "missing.json")]) == 2
    assert main(["canary-audit", "--target", target, *_args(tracking, path, "--max-exposure", "1")]) == 2


def test_no_canary_text_or_secret_reaches_the_store_caches_or_logs(tracking, canary_file, tmp_path, monkeypatch,
                                                                  capsys, caplog):
    cs, path = canary_file
    hf_home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(hf_home))
    cache = tmp_path / "cache"
    caplog.set_level(logging.DEBUG)
    args = ["--canaries", str(path), "--n-candidates", "50", "--bootstrap-rounds", "20", "--cache-dir", str(cache),
            "--quiet", "--max-epsilon-lower-bound", "5", "--no-tag-model-version"]
    assert main(["canary-audit", "--target", "models:/tgt@champion", "--reference", "models:/ref@champion",
                 *args]) in (0, 3)
    needles = [t.encode() for t in cs.texts] + [f"zq{s}".encode() for s in cs.secrets if s]
    out = capsys.readouterr()
    assert not any(n.decode() in out.out + out.err + caplog.text for n in needles)
    searched = 0
    for root in (tracking.root, cache, hf_home, tmp_path):
        for file in Path(root).rglob("*"):
            if file.is_file() and file != Path(path):
                searched += 1
                data = file.read_bytes()
                assert not any(n in data for n in needles), file
    assert searched > 10


def test_the_evaluator_method_canaries(tracking, canary_file):
    cs, path = canary_file
    with mlflow.start_run() as run:
        result = mlflow.models.evaluate(
            model=None, data=cs.id_frame(), model_type="mia", evaluators=["mia"],
            evaluator_config={"mia": {"method": "canaries", "target_model": "models:/tgt@champion",
                                      "canaries": str(path), "n_candidates": 50, "bootstrap_rounds": 20,
                                      "cache_dir": str(tracking.cache_dir), "progress": False,
                                      "tag_model_version": False}})
    assert result.metrics["canary/n_canaries"] == 40
    assert "canary/r1/epsilon_lower_bound" in result.metrics
    with pytest.raises(ValueError, match="data=canary_set.id_frame"):
        mlflow.models.evaluate(model=None, data=cs.id_frame().iloc[:5], model_type="mia", evaluators=["mia"],
                               evaluator_config={"mia": {"method": "canaries", "target_model": "models:/tgt@champion",
                                                         "canaries": str(path)}})
    with pytest.raises(ValueError, match="unknown evaluator_config"):
        mlflow.models.evaluate(model=None, data=cs.id_frame(), model_type="mia", evaluators=["mia"],
                               evaluator_config={"mia": {"method": "canaries", "canaries": str(path), "attacks": "x"}})
    assert run.info.run_id
