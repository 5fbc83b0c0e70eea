"""Attacks on the audit itself (issue: security and reliability), one test per finding.

Each test reproduces what an attacker or a careless user did and asserts the audit
now refuses or records it correctly.
"""

from __future__ import annotations

import json
import re
import os
import shutil
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml

from mlflow_mia.models.resolve import resolve_model

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


def test_auditing_a_model_never_runs_code_shipped_in_it(tracking, tmp_path):
    marker = tmp_path / "pwned"
    folder = _evil_folder("models:/tgt/1", tmp_path / "evil", marker)
    with pytest.raises(ValueError, match="trust_remote_code"):
        resolve_model(str(folder))
    assert not marker.exists()


def test_a_hugging_face_folder_with_remote_code_is_refused(tmp_path):
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


def test_the_cli_refuses_remote_code_without_the_flag(tracking, tmp_path, capsys):
    from mlflow_mia.entrypoints.cli import main

    marker = tmp_path / "pwned"
    folder = _evil_folder("models:/tgt/1", tmp_path / "evil", marker)
    code = main(["audit", "--target", str(folder), *tracking.cli_args("--attacks", "loss")])
    assert code == 2
    assert "--trust-remote-code" in capsys.readouterr().err
    assert not marker.exists()


def _version_tags(name, version):
    return dict(mlflow.MlflowClient().get_model_version(name, str(version)).tags or {})


def test_a_folder_cannot_claim_a_registry_identity(tracking, tmp_path, capsys):
    from mlflow_mia.entrypoints.cli import main

    fake = Path(mlflow.artifacts.download_artifacts("models:/tgt/2", dst_path=str(tmp_path / "fake")))
    random_weights = Path(mlflow.artifacts.download_artifacts("models:/tgt/1", dst_path=str(tmp_path / "v1")))
    shutil.copy(random_weights / "model" / "model.safetensors", fake / "model" / "model.safetensors")
    resolved = resolve_model(str(fake))
    assert resolved.registry is None and resolved.resolved_uri.startswith("sha256:")

    before = _version_tags("tgt", "2")
    code = main(["audit", "--target", str(fake), *tracking.cli_args("--max-tpr-at-fpr", "0.1:0.9",
                                                                     "--allow-loose-budget",
                                                                     "--run-name", "fake-folder")])
    assert code == 0  # the random weights pass
    assert "audit of models:/tgt/2" not in capsys.readouterr().out
    assert {k: v for k, v in _version_tags("tgt", "2").items() if k != "mia.weights_sha256"} == \
        {k: v for k, v in before.items() if k != "mia.weights_sha256"}


def test_a_folder_with_the_registered_weights_keeps_its_identity(tracking, tmp_path):
    from mlflow_mia.signals.identity import weights_digest

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
    from mlflow_mia.entrypoints.cli import main

    return main(["audit", "--target", f"models:/{name}/{version}", *tracking.cli_args(*extra)])


def test_a_re_audit_without_a_gate_keeps_the_fail(tracking, gated_version):
    name, version = gated_version
    assert _audit(tracking, name, version, "--max-tpr-at-fpr", "0.1:0.5") == 3
    assert _version_tags(name, version)["mia.gate"] == "fail"
    assert _audit(tracking, name, version) == 0
    assert _version_tags(name, version)["mia.gate"] == "fail"


def test_a_weaker_passing_audit_does_not_flip_a_fail(tracking, gated_version):
    name, version = gated_version
    assert _audit(tracking, name, version, "--attacks", "loss,likelihood_ratio", "--max-tpr-at-fpr", "0.1:0.5") == 3
    # Naming one attack cannot choose a pass: the gate still runs every attack the reference allows.
    assert _audit(tracking, name, version, "--attacks", "loss", "--max-tpr-at-fpr", "0.1:0.99",
                  "--allow-loose-budget") == 3
    tags = _version_tags(name, version)
    assert tags["mia.gate"] == "fail"
    history = {k: v for k, v in tags.items() if k.startswith("mia.gate.run.")}
    assert all(not v.startswith("pass") for v in history.values())
    assert all("likelihood_ratio" in v.split("; attacks ")[1].split(";")[0] for v in history.values())
    assert _audit(tracking, name, version, "--attacks", "loss", "--max-tpr-at-fpr", "0.1:0.99",
                  "--allow-loose-budget", "--clear-gate-fail") == 3
    assert _version_tags(name, version)["mia.gate"] == "fail"


def test_a_failing_audit_without_version_tags_still_records_the_fail(tracking, gated_version):
    name, version = gated_version
    assert _audit(tracking, name, version) == 0
    assert "mia.gate" not in _version_tags(name, version)
    auc_before = _version_tags(name, version)["mia.likelihood_ratio.auc"]
    assert _audit(tracking, name, version, "--max-tpr-at-fpr", "0.1:0.5", "--no-tag-model-version") == 3
    tags = _version_tags(name, version)
    assert tags["mia.gate"] == "fail" and tags["mia.likelihood_ratio.auc"] == auc_before


def test_a_failed_gate_and_a_broken_audit_exit_differently(tracking, gated_version, tmp_path, monkeypatch):
    from mlflow_mia.entrypoints.cli import EXIT_GATE_FAILED, main
    from mlflow_mia.signals.cache import SignalCache

    name, version = gated_version
    assert _audit(tracking, name, version, "--max-tpr-at-fpr", "0.1:0.5") == EXIT_GATE_FAILED == 3

    def disk_fault(self, path=None):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(SignalCache, "__init__", disk_fault)  # an environment fault mid-audit (a bad cache folder
    with pytest.raises(OSError):  # is an input error now, exit 2); uncaught: Python's 1, never 3
        main(["audit", "--target", f"models:/{name}/{version}", *tracking.cli_args()])


def test_canary_member_text_reaches_no_store_cache_or_log(tracking, tmp_path, monkeypatch, capsys, caplog):
    """A unique string in a member text is nowhere but in the input table after a default audit."""
    import logging

    from mlflow_mia.entrypoints.cli import main

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


# --- Weights are what they claim (issue 21, High 5 and item 3) --------------------------------------------------


def _saved(uri: str, dst: Path) -> Path:
    return Path(mlflow.artifacts.download_artifacts(uri, dst_path=str(dst)))


def _set_model_binary(folder: Path, value: str) -> None:
    mlmodel = yaml.safe_load((folder / "MLmodel").read_text())
    mlmodel["flavors"]["transformers"]["model_binary"] = value
    (folder / "MLmodel").write_text(yaml.safe_dump(mlmodel))


@pytest.fixture
def no_weights_loaded(monkeypatch):
    """Record every from_pretrained call of the model class: a refusal must come before any."""
    import transformers

    calls = []
    original = transformers.BertForMaskedLM.from_pretrained.__func__

    def spy(cls, *args, **kwargs):
        calls.append(args[0] if args else kwargs)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(transformers.BertForMaskedLM, "from_pretrained", classmethod(spy))
    return calls


@pytest.mark.parametrize("form", ["absolute", "dotdot"])
def test_model_binary_outside_the_artifact_is_refused_before_loading(tracking, tmp_path, form,
                                                                          no_weights_loaded):
    folder = _saved("models:/tgt/2", tmp_path / "leaky")
    elsewhere = _saved("models:/tgt/1", tmp_path / "benign")
    _set_model_binary(folder, str(elsewhere / "model") if form == "absolute" else "../benign/model")
    with pytest.raises(ValueError, match="model_binary path .* points outside the model's folder"):
        resolve_model(str(folder))
    assert no_weights_loaded == []


def test_a_registered_version_with_model_binary_outside_is_refused_and_left_untagged(tracking, tmp_path,
                                                                                           capsys):
    """The attack of the issue: a version whose MLmodel loads another model's weights gets no verdict."""
    folder = _saved("models:/tgt/2", tmp_path / "leaky")
    elsewhere = _saved("models:/tgt/1", tmp_path / "benign")
    _set_model_binary(folder, str(elsewhere / "model"))
    with mlflow.start_run() as run:
        mlflow.log_artifacts(str(folder), "model")
    name = f"leaky-binary-{tmp_path.name[-12:]}"
    version = mlflow.register_model(f"runs:/{run.info.run_id}/model", name).version
    code = _audit(tracking, name, version, "--max-tpr-at-fpr", "0.1:0.9", "--allow-loose-budget")
    assert code == 2
    assert "model_binary path" in capsys.readouterr().err
    assert not any(k.startswith("mia.") for k in _version_tags(name, version))


def test_a_symlinked_model_folder_is_refused_by_name(tracking, tmp_path, no_weights_loaded):
    folder = _saved("models:/tgt/2", tmp_path / "linked")
    elsewhere = _saved("models:/tgt/1", tmp_path / "benign")
    shutil.rmtree(folder / "model")
    os.symlink(elsewhere / "model", folder / "model")
    with pytest.raises(ValueError, match=r"the model_binary folder 'model' is a symbolic link"):
        resolve_model(str(folder))
    assert no_weights_loaded == []


def test_a_weights_file_linked_outside_the_artifact_is_refused(tracking, tmp_path, no_weights_loaded):
    folder = _saved("models:/tgt/2", tmp_path / "linked")
    elsewhere = _saved("models:/tgt/1", tmp_path / "benign")
    (folder / "model" / "model.safetensors").unlink()
    os.symlink(elsewhere / "model" / "model.safetensors", folder / "model" / "model.safetensors")
    with pytest.raises(ValueError, match=r"'model/model.safetensors' is a symbolic link to .*outside the model's"):
        resolve_model(str(folder))
    assert no_weights_loaded == []
    # A Hugging Face folder is held to the same rule.
    hf = tmp_path / "hf"
    shutil.copytree(elsewhere / "model", hf)
    for f in (elsewhere / "components" / "tokenizer").iterdir():
        shutil.copy(f, hf / f.name)
    (hf / "model.safetensors").unlink()
    os.symlink(folder.parent / "benign" / "model" / "model.safetensors", hf / "model.safetensors")
    with pytest.raises(ValueError, match="outside the model's folder"):
        resolve_model(hf)


def test_an_uploaded_empty_symlink_folder_is_refused_by_name_exit_2(tracking, tmp_path, no_weights_loaded, capsys):
    """A ``model/`` folder that was a symbolic link to an empty folder is logged as an empty folder: named, exit 2
    (it was a bare OSError from transformers, exit 1)."""
    from mlflow_mia.entrypoints.cli import main

    folder = _saved("models:/tgt/1", tmp_path / "src")
    shutil.rmtree(folder / "model")
    (tmp_path / "empty").mkdir()
    os.symlink(tmp_path / "empty", folder / "model")
    with mlflow.start_run() as run:
        mlflow.log_artifacts(str(folder), "uploaded")
    uri = f"runs:/{run.info.run_id}/uploaded"
    message = (f"{uri}: the model folder 'model' is empty (a symbolic link uploaded as an empty folder, or an "
               "interrupted copy?); log the model again with its files (mlflow.transformers.log_model)")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        resolve_model(uri)
    assert main(["audit", "--target", uri, *tracking.cli_args()]) == 2
    assert f"mlflow-mia audit: error: {message}" in capsys.readouterr().err
    assert no_weights_loaded == []
    weightless = _saved("models:/tgt/1", tmp_path / "weightless")
    (weightless / "model" / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"the model folder 'model' holds no weights file \(.safetensors\)"):
        resolve_model(str(weightless))


def _hf_folder(path: Path, *, seed: int = 3) -> Path:
    from mlflow_mia.signals.testing import tiny_bert

    model, tok = tiny_bert(seed=seed)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_pickle_weights_get_a_named_refusal_unless_trusted(tracking, tmp_path):
    import torch
    from safetensors.torch import load_file

    hf = _hf_folder(tmp_path / "hf")
    torch.save(load_file(hf / "model.safetensors"), hf / "pytorch_model.bin")
    (hf / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"the weights are pickle files \(pytorch_model.bin\).*--trust-remote-code"):
        resolve_model(hf)
    assert resolve_model(hf, trust_remote_code=True).resolved_uri.startswith("sha256:")
    saved = _saved("models:/tgt/1", tmp_path / "saved")
    weights = saved / "model" / "model.safetensors"
    torch.save(load_file(weights), saved / "model" / "pytorch_model.bin")
    weights.unlink()
    with pytest.raises(ValueError, match="the weights are pickle files"):
        resolve_model(str(saved))


def test_a_forged_weights_tag_does_not_lend_a_registry_identity(tracking, tmp_path, caplog):
    """A folder with other weights claims a version whose mia.weights_sha256 tag was forged to match it."""
    from mlflow_mia.signals.identity import weights_digest

    name = f"forged-{tmp_path.name[-12:]}"
    version = mlflow.register_model(f"runs:/{tracking.run_ids['tgt/2']}/model", name).version
    fake = _saved("models:/tgt/2", tmp_path / "fake")
    shutil.copy(_saved("models:/tgt/1", tmp_path / "v1") / "model" / "model.safetensors",
                fake / "model" / "model.safetensors")
    fake_digest = "sha256:" + weights_digest(resolve_model(str(fake)).lm.model)
    client = mlflow.MlflowClient()
    for n, v in ((name, version), ("tgt", "2")):
        client.set_model_version_tag(n, str(v), "mia.weights_sha256", fake_digest)
    with caplog.at_level("WARNING"):
        resolved = resolve_model(str(fake))
    assert resolved.registry is None and resolved.resolved_uri == fake_digest
    assert "was not written by an audit of these weights" in caplog.text
    real = "sha256:" + weights_digest(resolve_model(f"models:/{name}/{version}").lm.model)
    assert real != fake_digest
    assert _version_tags(name, version)["mia.weights_sha256"] == real  # the forged cache entry is replaced
    assert _version_tags("tgt", "2")["mia.weights_sha256"] == real


def test_a_tracking_server_that_is_down_exits_1(tracking, monkeypatch, capsys):
    import socket

    from mlflow_mia.entrypoints.cli import EXIT_ERROR, main

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    code = main(["audit", "--target", "models:/tgt/1", "--tracking-uri", f"http://127.0.0.1:{port}",
                 *tracking.cli_args("--attacks", "loss")])
    assert code == EXIT_ERROR == 1
    assert f"the tracking server at http://127.0.0.1:{port} cannot be reached" in capsys.readouterr().err


# --- No membership oracle by default (issue 21, High 1 and item 1) -----------------------------------------------


def _logged_run(tracking, tmp_path, *extra):
    """Run a CLI audit of tgt v2 and return (run id, local artifact folder)."""
    from mlflow_mia.entrypoints.cli import main

    assert main(["audit", "--target", "models:/tgt@candidate", *tracking.cli_args("--no-tag-model-version",
                                                                                   *extra)]) == 0
    run = mlflow.search_runs(order_by=["attributes.start_time DESC"], max_results=1, output_format="list")[0]
    dst = tmp_path / f"artifacts-{run.info.run_id}"
    return run, Path(mlflow.artifacts.download_artifacts(run_id=run.info.run_id, dst_path=str(dst)))


def _labels_found_by_recomputing(run, root: Path, texts) -> dict:
    """What an attacker learns: each pool text's score recomputed from the logged settings and the model,
    looked up in every logged table; a match beside a label (or in the members-only riskiest table) gives it."""
    import numpy as np
    import pandas as pd

    from mlflow_mia.config import SignalConfig
    from mlflow_mia.signals import compute_signals

    settings = json.loads((root / "audit_config.json").read_text())["signal"]
    lm = resolve_model(run.data.params["target_model"]).lm  # anyone who can read the registry loads it
    scores = -compute_signals(lm, texts, SignalConfig.from_dict(settings), progress=False).values  # the loss attack
    found = {}
    for path in root.rglob("*.csv"):
        table = pd.read_csv(path)
        label = table["label"] if "label" in table else (pd.Series(1, index=table.index)
                                                         if path.name == "riskiest.csv" else None)
        numbers = table.select_dtypes("number").drop(columns=["label"], errors="ignore")
        for i, score in enumerate(scores):
            rows = np.flatnonzero(np.isclose(numbers.to_numpy(dtype=float), score, rtol=0, atol=1e-5).any(axis=1))
            if len(rows) and label is not None:
                found[texts[i]] = int(label.iloc[rows[0]])
    return found


def test_no_membership_oracle_in_the_logged_tables_by_default(tracking, tmp_path):
    from mlflow_mia.tracking.audit_log import RISKY_COLUMNS, SAMPLE_COLUMNS

    texts, labels = tracking.pool["text"].tolist(), tracking.pool["is_member"].tolist()
    run, root = _logged_run(tracking, tmp_path)
    assert _labels_found_by_recomputing(run, root, texts) == {}
    import pandas as pd

    assert tuple(pd.read_csv(root / "tables" / "samples.csv").columns) == SAMPLE_COLUMNS
    riskiest = pd.read_csv(root / "tables" / "riskiest.csv")
    assert tuple(riskiest.columns) == RISKY_COLUMNS and len(riskiest) > 0
    for _, part in riskiest.groupby("attack"):  # identified by keyed hash, in hash order: no score rank
        assert part["text_hmac"].tolist() == sorted(part["text_hmac"])
    assert run.data.params["log_samples"] == "False"
    assert "`log_samples` (`--log-samples`) logs them" in (root / "report.md").read_text()
    # With log_samples the oracle is there, as the report says: every pool text's row and label.
    run, root = _logged_run(tracking, tmp_path, "--log-samples")
    assert _labels_found_by_recomputing(run, root, texts) == dict(zip(texts, labels))
    assert "**This run logged per-sample scores**" in (root / "report.md").read_text()


# --- The evaluate path made safe (issue 21, High 6 and item 5) ---------------------------------------------------


def test_evaluate_with_model_none_never_runs_code_of_a_registered_model(tracking, tmp_path):
    """mlflow.models.evaluate(model=None, target_model=...) loads the registry model with the audit's loader."""
    marker = tmp_path / "pwned"
    folder = _evil_folder("models:/tgt/1", tmp_path / "evil", marker)
    with mlflow.start_run() as run:
        mlflow.log_artifacts(str(folder), "model")
    name = f"evil-{tmp_path.name[-12:]}"
    version = mlflow.register_model(f"runs:/{run.info.run_id}/model", name).version
    names = pd.DataFrame({"name": ["Ann Lee", "Bo Ray"], "entity_type": ["PER", "PER"], "is_member": [1, 0]})
    for config, data in ((tracking.config(target_model=f"models:/{name}/{version}"), tracking.pool),
                         ({"method": "ner_prompts", "target_model": f"models:/{name}/{version}", "progress": False},
                          names)):
        with mlflow.start_run(), pytest.raises(ValueError, match="trust_remote_code"):
            mlflow.models.evaluate(model=None, data=data, targets="is_member", model_type="mia",
                                   evaluators=["mia"], evaluator_config={"mia": config})
        assert not marker.exists()


def test_trust_remote_code_docs_say_it_cannot_protect_a_loaded_model():
    from mlflow_mia.options.audit import CONFIG_KEYS

    text = CONFIG_KEYS["trust_remote_code"]
    assert "It cannot protect model=" in text and "target_model" in text
    security = (Path(__file__).parents[2] / "docs" / "explanations" / "security.md").read_text()
    assert "model=None" in security and "target_model" in security
