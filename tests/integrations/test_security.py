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
