"""Attacks on the audit itself (issue: security and reliability), one test per finding.

Each test reproduces what an attacker or a careless user did and asserts the audit
now refuses or records it correctly.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import mlflow
import pytest
import yaml

from mlflow_mia.integrations.models import resolve_model

EVIL_CODE = '''
import pathlib
pathlib.Path({marker!r}).write_text("remote code ran")
from transformers import BertConfig, BertForMaskedLM


class EvilConfig(BertConfig):
    model_type = "evil"


class EvilForMaskedLM(BertForMaskedLM):
    config_class = EvilConfig
'''


def _evil_folder(store_model_uri: str, dst: Path, marker: Path) -> Path:
    """A saved MLflow model whose MLmodel and config.json point at Python code shipped in the folder."""
    path = Path(mlflow.artifacts.download_artifacts(store_model_uri, dst_path=str(dst)))
    mlmodel = yaml.safe_load((path / "MLmodel").read_text())
    mlmodel["flavors"]["transformers"]["pipeline_model_type"] = "EvilForMaskedLM"
    (path / "MLmodel").write_text(yaml.safe_dump(mlmodel))
    config_path = path / "model" / "config.json"
    config = json.loads(config_path.read_text())
    config.update(architectures=["EvilForMaskedLM"], model_type="evil",
                  auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForMaskedLM": "evil.EvilForMaskedLM"})
    config_path.write_text(json.dumps(config))
    (path / "model" / "evil.py").write_text(EVIL_CODE.format(marker=str(marker)))
    return path


def test_item1_auditing_a_model_never_runs_code_shipped_in_it(tracking, tmp_path):
    marker = tmp_path / "pwned"
    folder = _evil_folder("models:/tgt/1", tmp_path / "evil", marker)
    with pytest.raises(ValueError, match="trust_remote_code"):
        resolve_model(str(folder))
    assert not marker.exists()


def test_item1_a_hugging_face_folder_with_remote_code_is_refused(tmp_path):
    from mlflow_mia.signals.testing import tiny_bert

    marker = tmp_path / "pwned"
    model, tok = tiny_bert(seed=3)
    folder = tmp_path / "hf"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(architectures=["EvilForMaskedLM"], model_type="evil",
                  auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForMaskedLM": "evil.EvilForMaskedLM"})
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "evil.py").write_text(EVIL_CODE.format(marker=str(marker)))
    with pytest.raises(ValueError, match="trust_remote_code"):
        resolve_model(folder)
    assert not marker.exists()


def test_item1_the_cli_refuses_remote_code_without_the_flag(tracking, tmp_path, capsys):
    from mlflow_mia.integrations.cli import main

    marker = tmp_path / "pwned"
    folder = _evil_folder("models:/tgt/1", tmp_path / "evil", marker)
    code = main(["audit", "--target", str(folder), *tracking.cli_args("--attacks", "loss")])
    assert code == 2
    assert "--trust-remote-code" in capsys.readouterr().err
    assert not marker.exists()


def _version_tags(name, version):
    return dict(mlflow.MlflowClient().get_model_version(name, str(version)).tags or {})


def test_item3_a_folder_cannot_claim_a_registry_identity(tracking, tmp_path, capsys):
    from mlflow_mia.integrations.cli import main

    fake = Path(mlflow.artifacts.download_artifacts("models:/tgt/2", dst_path=str(tmp_path / "fake")))
    random_weights = Path(mlflow.artifacts.download_artifacts("models:/tgt/1", dst_path=str(tmp_path / "v1")))
    shutil.copy(random_weights / "model" / "model.safetensors", fake / "model" / "model.safetensors")
    resolved = resolve_model(str(fake))
    assert resolved.registry is None and resolved.resolved_uri.startswith("sha256:")

    before = _version_tags("tgt", "2")
    code = main(["audit", "--target", str(fake), *tracking.cli_args("--max-tpr-at-fpr", "0.1:1.0",
                                                                     "--run-name", "fake-folder")])
    assert code == 0
    assert "audit of models:/tgt/2" not in capsys.readouterr().out
    assert {k: v for k, v in _version_tags("tgt", "2").items() if k != "mia.weights_sha256"} == \
        {k: v for k, v in before.items() if k != "mia.weights_sha256"}


def test_item3_a_folder_with_the_registered_weights_keeps_its_identity(tracking, tmp_path):
    from mlflow_mia.signals.model import weights_digest

    real = Path(mlflow.artifacts.download_artifacts("models:/tgt/2", dst_path=str(tmp_path / "real")))
    resolved = resolve_model(str(real))
    assert resolved.registry == ("tgt", "2")
    assert _version_tags("tgt", "2")["mia.weights_sha256"] == "sha256:" + weights_digest(resolved.lm.model)


@pytest.fixture
def gated_version(tracking, fresh_weights, request):
    """A fresh registry name holding a copy of the leaking tgt v2 weights no other test audits (a fail
    belongs to the weights digest, so shared weights would carry other tests' verdicts)."""
    name = f"gate-{request.node.name[-40:]}".replace("[", "-").replace("]", "")
    return name, fresh_weights("tgt/2", name)


def _audit(tracking, name, version, *extra):
    from mlflow_mia.integrations.cli import main

    return main(["audit", "--target", f"models:/{name}/{version}", *tracking.cli_args(*extra)])


def test_item4_a_re_audit_without_a_gate_keeps_the_fail(tracking, gated_version):
    name, version = gated_version
    assert _audit(tracking, name, version, "--max-tpr-at-fpr", "0.1:0.5") == 3
    assert _version_tags(name, version)["mia.gate"] == "fail"
    assert _audit(tracking, name, version) == 0
    assert _version_tags(name, version)["mia.gate"] == "fail"


def test_item4_a_weaker_passing_audit_does_not_flip_a_fail(tracking, gated_version):
    name, version = gated_version
    assert _audit(tracking, name, version, "--max-tpr-at-fpr", "0.1:0.5") == 3
    assert _audit(tracking, name, version, "--attacks", "loss", "--max-tpr-at-fpr", "0.1:1.0") == 0
    tags = _version_tags(name, version)
    assert tags["mia.gate"] == "fail" and tags["mia.gate.attacks"] == "loss,likelihood_ratio"
    history = {k: v for k, v in tags.items() if k.startswith("mia.gate.run.")}
    assert sorted(v.split(";")[0] for v in history.values()) == ["fail", "pass"]
    # --clear-gate-fail does not let a weaker audit (one attack of two, a looser budget) wash the fail
    assert _audit(tracking, name, version, "--attacks", "loss", "--max-tpr-at-fpr", "0.1:1.0",
                  "--clear-gate-fail") == 0
    tags = _version_tags(name, version)
    assert tags["mia.gate"] == "fail" and tags["mia.gate.attacks"] == "loss,likelihood_ratio"
    assert len([k for k in tags if k.startswith("mia.gate.run.")]) == 3


def test_item4_a_failing_audit_without_version_tags_still_records_the_fail(tracking, gated_version):
    name, version = gated_version
    assert _audit(tracking, name, version, "--max-tpr-at-fpr", "0.1:1.0") == 0
    assert _version_tags(name, version)["mia.gate"] == "pass"
    auc_before = _version_tags(name, version)["mia.likelihood_ratio.auc"]
    assert _audit(tracking, name, version, "--max-tpr-at-fpr", "0.1:0.5", "--no-tag-model-version") == 3
    tags = _version_tags(name, version)
    assert tags["mia.gate"] == "fail" and tags["mia.likelihood_ratio.auc"] == auc_before


def test_item7_a_failed_gate_and_a_broken_audit_exit_differently(tracking, gated_version, tmp_path):
    from mlflow_mia.integrations.cli import EXIT_GATE_FAILED, main

    name, version = gated_version
    assert _audit(tracking, name, version, "--max-tpr-at-fpr", "0.1:0.5") == EXIT_GATE_FAILED == 3
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    with pytest.raises(OSError):  # uncaught: the process exits with Python's 1, never 3
        main(["audit", "--target", f"models:/{name}/{version}",
              *tracking.cli_args("--cache-dir", str(not_a_folder / "cache"))])


def test_canary_member_text_reaches_no_store_cache_or_log(tracking, tmp_path, monkeypatch, capsys, caplog):
    """A unique string in a member text is nowhere but in the input table after a default audit."""
    import logging

    from mlflow_mia.integrations.cli import main

    canary = "zqxcanary7731 veterinarian"
    pool = tracking.pool.copy()
    pool.loc[0, "text"] = f"the {canary} said the patient was well"
    data = tmp_path / "inputs"
    data.mkdir()
    pool.to_csv(data / "pool.csv", index=False)
    hf_home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(hf_home / "datasets"))
    cache = tmp_path / "cache"
    caplog.set_level(logging.DEBUG)
    args = [a if a != str(tracking.pool_path) else str(data / "pool.csv")
            for a in tracking.cli_args("--cache-dir", str(cache), "--run-name", "canary")]
    assert main(["audit", "--target", "models:/tgt@candidate", *args]) == 0
    out = capsys.readouterr()
    assert canary not in out.out + out.err + caplog.text
    searched = 0
    for root in (tracking.root, cache, hf_home, tmp_path):
        for path in Path(root).rglob("*"):
            if path.is_file() and data not in path.parents:
                searched += 1
                assert canary.encode() not in path.read_bytes(), path
    assert searched > 10
