"""log_audit: params, one batch of metrics, figures, tables, report, tags; no raw text by default."""

from __future__ import annotations

import json
import math
import os
import re

import mlflow
import pandas as pd
import pytest
from mlflow import MlflowClient

from mlflow_mia.hashing import HashKey, resolve_hash_key
from mlflow_mia.options.audit import Gate
from mlflow_mia.tracking.artifacts import check_metric_names, dataset_digest
from mlflow_mia.tracking.audit_log import log_audit
from mlflow_mia.tracking.headline import full_metrics
from mlflow_mia.tracking import audit_log
from mlflow_mia.tracking.log_settings import LogSettings

#: The key the options parser would resolve (every logger requires one).
KEY = HashKey.from_bytes(b"test-audit-log-key-" * 2, source="tests")

NAME = re.compile(r"^[\w.\-/ ]+$")


@pytest.fixture(scope="module")
def audit(store):
    """A small audit of in-memory tiny models (no registry)."""
    from mlflow_mia.audits.membership import run_audit
    from mlflow_mia.config import AuditConfig
    from mlflow_mia.data import AuditDataset, PopulationSet
    from mlflow_mia.signals import MaskedLM
    from mlflow_mia.signals.testing import tiny_bert

    pool = AuditDataset.from_frame(store.pool, id_column="sample_id", group_column="article_id")
    population = PopulationSet.from_frame(store.population, group_column="article_id")
    model, tok = tiny_bert(seed=1)
    config = AuditConfig.from_dict({"signal": {"num_masks": 2},
                                    "metrics": {"fprs": [0.1, 0.05], "bootstrap_rounds": 20}})
    result = run_audit(MaskedLM(model, tok), pool, population, references=[MaskedLM(tiny_bert(tok, seed=2)[0], tok)],
                       config=config, cache=str(store.cache_dir), progress=False)
    return result, pool, population


def _artifacts(run_id):
    client, out, todo = MlflowClient(), set(), [None]
    while todo:
        for f in client.list_artifacts(run_id, todo.pop()):
            (todo.append(f.path) if f.is_dir else out.add(f.path))
    return out


def test_log_audit_writes_everything_once(tracking, audit, tmp_path):
    result, pool, population = audit
    with mlflow.start_run() as run:
        artifacts = log_audit(result, settings=LogSettings(hash_key=KEY, population=population, texts=pool.texts))
    run_id = run.info.run_id
    client = MlflowClient()
    data = client.get_run(run_id).data
    undefined = {k for k, v in result.metrics.items() if not math.isfinite(v)}
    assert "loss/auc_len_20-60" in undefined  # an empty length bin: in the table as null, not a metric
    # The headline set: every attack's AUC and TPRs with their bounds, the headline AUC interval, the verdict code.
    tprs = [f"{a}/tpr_at_fpr_{f}{s}" for a in ("likelihood_ratio", "loss") for f in ("0.1", "0.05")
            for s in ("", "_lower", "_upper")]
    assert set(data.metrics) == {
        "likelihood_ratio/auc", "loss/auc", *tprs, "likelihood_ratio/auc_ci_low", "likelihood_ratio/auc_ci_high",
        "mia_verdict_code"}
    for key, value in data.metrics.items():
        if key != "mia_verdict_code":
            assert value == float(f"{result.metrics[key]:.4g}")  # 4 significant digits
    assert data.metrics["mia_verdict_code"] == ["within budget", "no evidence of leakage", "inconclusive",
                                                "leaks"].index(data.tags["mia.verdict"])
    assert all(NAME.match(k) for k in data.metrics)
    for key in ("loss/auc", "likelihood_ratio/tpr_at_fpr_0.1"):
        assert len(client.get_metric_history(run_id, key)) == 1
    # Every metric (less the score thresholds) in the metrics table, to 10 decimals (mlflow.log_table's JSON).
    table = full_metrics(client, run_id)
    assert table == pytest.approx({k: v for k, v in result.metrics.items()
                                   if "/threshold_at_pop_fpr_" not in k and k not in undefined}
                                  | {"mia_verdict_code": data.metrics["mia_verdict_code"]}, abs=1e-10, rel=0)
    shown = mlflow.load_table("tables/metrics.json", run_ids=[run_id])
    assert set(shown["level"]) == {"sample", "user", "pool"} and shown["value"].isna().sum() == len(undefined)
    # Digests are tags; each setting is one param, under its option's name.
    assert len(data.tags["mia.pool.digest"]) == 64 and len(data.tags["mia.population.digest"]) == 64
    assert data.tags["mia.pool.digest"] != dataset_digest(pool.text_hashes, key=b"another key, 16+ bytes long")
    assert not [k for k in data.params if "digest" in k or k.startswith(("audit.", "signal.", "metrics."))]
    assert data.params["log_texts"] == "False" and data.params["target_model"].startswith("sha256:")
    assert (data.params["attacks"], data.params["signal"], data.params["num_masks"], data.params["seed"]) == (
        "loss,likelihood_ratio", "energy", "2", "0")
    assert "num_neighbours" not in data.params and "min_k_fraction" not in data.params  # attacks that did not run
    assert data.tags["mia.headline_attack"] == "likelihood_ratio" and "mia.gate" not in data.tags
    verdict = artifacts["verdict"].content
    assert (verdict["verdict"], verdict["reason"]) == (data.tags["mia.verdict"], data.tags["mia.verdict.reason"])
    assert verdict["code"] == data.metrics["mia_verdict_code"] and verdict["gate"] is None
    assert verdict["deciding"] == {k: result.metrics[k] for k in ("likelihood_ratio/auc", "likelihood_ratio/auc_ci_low",
                                                                  "likelihood_ratio/auc_ci_high")}
    files = _artifacts(run_id)
    exposure = {"tables/memorization_features.csv"} if result.memorization_features is not None else set()
    assert {"plots/roc.png", "plots/roc_loglog.png", "plots/user_roc.png", "plots/hist_loss.png",
            "plots/hist_likelihood_ratio.png", "tables/samples.csv", "tables/riskiest.csv", "audit_summary.json",
            "audit_config.json", "report.md", "verdict.json", "tables/metrics.json"} | exposure == files
    assert set(artifacts) == {"roc", "roc_loglog", "user_roc", "hist_loss", "hist_likelihood_ratio", "samples",
                              "riskiest", "audit_summary", "audit_config", "report", "verdict"} | {
                                  os.path.splitext(os.path.basename(f))[0] for f in exposure}
    if exposure:
        assert list(artifacts["memorization_features"].content["features"])[-1] == "all"
    assert isinstance(artifacts["samples"].content, pd.DataFrame)
    assert "text" not in artifacts["samples"].content.columns
    summary = json.loads(open(mlflow.artifacts.download_artifacts(
        run_id=run_id, artifact_path="audit_summary.json", dst_path=str(tmp_path))).read())
    assert summary["log_texts"] is False and summary["metrics"]["loss/auc"] == pytest.approx(result.metrics["loss/auc"])
    record = json.loads(open(mlflow.artifacts.download_artifacts(
        run_id=run_id, artifact_path="audit_config.json", dst_path=str(tmp_path))).read())
    info = result.info
    weights = {role: result.models[role]["weights"] for role in ("target", "reference")}
    assert all(w.startswith("sha256:") and len(w) == 71 for w in weights.values())
    assert record["models"] == {
        "target": {"identity": info["target_model"], "name": info["target_name"], "weights": weights["target"]},
        "reference": {"identity": info["reference_model"], "name": info["reference_name"],
                      "weights": weights["reference"]}}
    assert info["target_model"] != info["reference_model"]
    assert record["attacks"] == ["loss", "likelihood_ratio"] and record["signal"]["num_masks"] == 2


def _exact(metrics: dict) -> dict:
    """``metrics`` with every TPR's bounds at the TPR itself: a gate decided on the values."""
    out = dict(metrics)
    for key in [k for k in metrics if "/tpr_at_fpr_" in k and k.rsplit("_", 1)[-1][0].isdigit()]:
        for part in ("upper_binomial", "lower_binomial", "upper_bootstrap", "lower_bootstrap"):
            out[f"{key}_{part}"] = 0.0 if metrics[key] != metrics[key] else metrics[key]
    return out


def test_prefix_gate_and_no_metrics(tracking, audit):
    result, pool, population = audit
    gate = Gate.parse("0.1:0.99").check(_exact(result.metrics))
    with mlflow.start_run() as run:
        artifacts = log_audit(result, settings=LogSettings(hash_key=KEY, prefix="v1_", log_metrics=False, gate=gate))
    data = MlflowClient().get_run(run.info.run_id).data
    assert data.metrics == {}
    assert data.tags["v1_mia.gate"] == "pass" and data.params["v1_max_tpr_at_fpr"] == "0.1:0.99"
    assert len(data.tags["v1_mia.pool.digest"]) == 64 and "v1_attacks" in data.params
    assert "v1_report" in artifacts and {"v1_report.md", "v1_tables/metrics.json"} <= _artifacts(run.info.run_id)
    verdict = artifacts["v1_verdict"].content
    assert verdict["gate"] == "pass" and verdict["verdict"] == "within budget" and verdict["code"] == 0
    assert [(b["alpha"], b["max_tpr"], b["status"]) for b in verdict["budgets"]] == [(0.1, 0.99, "pass")]
    deciding = gate.checks[0]["metric"]
    assert set(verdict["deciding"]) == {deciding, f"{deciding}_lower", f"{deciding}_upper"}
    assert "Release gate: PASS" in artifacts["v1_report"].content


def test_log_texts(tracking, audit):
    result, pool, population = audit
    with mlflow.start_run():
        with pytest.raises(ValueError, match="texts"):
            log_audit(result, settings=LogSettings(hash_key=KEY, log_texts=True))
        artifacts = log_audit(result, settings=LogSettings(hash_key=KEY, log_texts=True, texts=pool.texts))
    samples = artifacts["samples"].content
    assert samples["text"].tolist() == list(pool.texts)


def test_neighbour_examples_only_with_log_texts(tracking, audit):
    import dataclasses

    result, pool, _ = audit
    examples = pd.DataFrame({"sample_id": ["s000"], "text_hash": ["h"], "kind": ["sample"], "text": ["secret"],
                             "energy": [1.0], "score_neighbourhood": [0.5]})
    result = dataclasses.replace(result, neighbour_examples=examples)
    with mlflow.start_run() as quiet:
        log_audit(result, settings=LogSettings(hash_key=KEY, log_metrics=False))
    assert not any("neighbour" in f for f in _artifacts(quiet.info.run_id))
    with mlflow.start_run() as loud:
        artifacts = log_audit(result,
                              settings=LogSettings(hash_key=KEY, log_metrics=False, log_texts=True, texts=pool.texts))
    assert "tables/neighbour_examples.csv" in _artifacts(loud.info.run_id)
    assert artifacts["neighbour_examples"].content["text"].tolist() == ["secret"]


def test_model_version_tags(tracking, audit, fresh_weights):
    """On a version of its own: the session's tgt/1 holds other tests' verdicts (an inconclusive stays until an audit
    at least as strong lifts it)."""
    result, _, _ = audit
    name, version = "audit-log-tags", fresh_weights("tgt/1", "audit-log-tags")
    gate = Gate.parse("0.05:0.5").check(result.metrics)
    with mlflow.start_run() as run:
        log_audit(result, settings=LogSettings(hash_key=KEY, model_version=(name, version), gate=gate,
                                               log_metrics=False))
    tags = MlflowClient().get_model_version(name, version).tags
    assert tags["mia.audit_run_id"] == run.info.run_id
    assert tags["mia.gate"] == gate.status
    assert float(tags["mia.likelihood_ratio.auc"]) == pytest.approx(result.metrics["likelihood_ratio/auc"], abs=1e-4)
    assert {"mia.loss.tpr_at_fpr_0.05", "mia.likelihood_ratio.tpr_at_fpr_0.1", "mia.user.loss.auc"} <= set(tags)
    with mlflow.start_run() as later:  # a later audit without a gate replaces the numbers, never the verdict
        log_audit(result, settings=LogSettings(hash_key=KEY, model_version=(name, version), log_metrics=False))
    tags = MlflowClient().get_model_version(name, version).tags
    assert tags["mia.gate"] == gate.status and tags["mia.gate.run_id"] == run.info.run_id
    assert tags["mia.audit_run_id"] == later.info.run_id


def test_needs_a_run(audit):
    with pytest.raises(ValueError, match="active run"):
        log_audit(audit[0], settings=LogSettings(hash_key=KEY))


def test_metric_names_and_digest():
    check_metric_names(["loss/auc", "user/likelihood_ratio/tpr_at_fpr_0.001", "a b-c.d_e"])
    for bad in ("loss@auc", "a=b", "x%"):
        with pytest.raises(ValueError):
            check_metric_names([bad])
    key = b"0123456789abcdef"
    assert dataset_digest(["b", "a"], key=key) == dataset_digest(["a", "b"], key=key) != dataset_digest(["a"], key=key)
    assert dataset_digest(["a", "b"], key=key) != dataset_digest(["a", "b"], key=b"fedcba9876543210")


def _logged_text(run_id, tmp_path) -> str:
    """Every logged artifact (text files), param and tag of a run, concatenated."""
    import pathlib

    root = pathlib.Path(mlflow.artifacts.download_artifacts(run_id=run_id, dst_path=str(tmp_path)))
    data = MlflowClient().get_run(run_id).data
    blobs = [p.read_bytes().decode("utf-8", "ignore") for p in root.rglob("*") if p.suffix in (".csv", ".json", ".md")]
    return "\n".join(blobs + [f"{k}={v}" for k, v in {**data.params, **data.tags}.items()])


def test_samples_table_is_not_a_membership_oracle(tracking, audit, tmp_path, monkeypatch):
    import hashlib

    result, pool, population = audit
    key = "a key only the auditor holds, 32+"
    monkeypatch.setenv("MLFLOW_MIA_HASH_KEY", key)
    with mlflow.start_run() as run:
        artifacts = log_audit(result, settings=LogSettings(hash_key=resolve_hash_key(),
                                                           population=population, log_metrics=False))
    logged = _logged_text(run.info.run_id, tmp_path / "user_key")
    # An attacker who reads the run hashes candidate texts and group ids: nothing matches.
    for value in list(pool.texts) + list(population.texts) + list(pool.groups):
        assert hashlib.sha256(value.encode()).hexdigest() not in logged
    assert key not in logged
    # The auditor looks samples up with the key.
    from mlflow_mia import lookup_hash

    samples = artifacts["samples"].content
    assert "text_hash" not in samples.columns and not set(pool.groups) & set(samples["group"])
    assert samples["text_hmac"].tolist() == [lookup_hash(t, key) for t in pool.texts]
    assert samples["group"].tolist() == [lookup_hash(g, key) for g in pool.groups]
    riskiest = artifacts["riskiest"].content
    members = {lookup_hash(t, key) for t, y in zip(pool.texts, pool.labels) if y == 1}
    assert len(riskiest) and set(riskiest["text_hmac"]) <= members and "sample_id" not in riskiest
    params = MlflowClient().get_run(run.info.run_id).data.params
    tags = MlflowClient().get_run(run.info.run_id).data.tags
    assert params["hash_key"] == "env" and len(tags["mia.hash_key_check"]) == 16 and "hash_key_check" not in params
    assert "your key (env" in artifacts["report"].content


def test_without_a_key_hashes_cannot_be_looked_up(tracking, audit, monkeypatch, caplog):
    from mlflow_mia import lookup_hash

    result, pool, population = audit
    monkeypatch.delenv("MLFLOW_MIA_HASH_KEY", raising=False)
    monkeypatch.setattr(audit_log, "_RANDOM_KEY_EXPLAINED", [])  # as in a fresh process
    runs = []
    for _ in range(2):
        with mlflow.start_run() as run, caplog.at_level("WARNING"):
            artifacts = log_audit(result, settings=LogSettings(hash_key=resolve_hash_key(),
                                                               population=population, log_metrics=False))
        runs.append((run.info.run_id, artifacts))
    first, second = (a["samples"].content["text_hmac"].tolist() for _, a in runs)
    assert all(a != b for a, b in zip(first, second))  # a fresh random key per audit
    assert "random key that is not kept" in caplog.text
    warned = [r.getMessage() for r in caplog.records if "no hash key set" in r.getMessage()]
    assert len(warned) == 1  # one short line per process (and per experiment: a second process says nothing)
    assert warned[0] == ("no hash key set: the logged hashes use a random key that is not kept, so no later run can "
                         "look a sample up; keep one with --hash-key-file or MLFLOW_MIA_HASH_KEY "
                         "(docs/guides/inputs.md; said once)")
    monkeypatch.setattr(audit_log, "_RANDOM_KEY_EXPLAINED", [])  # a new process, the same store
    caplog.clear()
    with mlflow.start_run(), caplog.at_level("WARNING"):
        log_audit(result, settings=LogSettings(hash_key=resolve_hash_key(), population=population, log_metrics=False))
    assert "no hash key set" not in caplog.text
    assert "random per-audit key" in runs[0][1]["report"].content
    params = MlflowClient().get_run(runs[0][0]).data.params
    tags = MlflowClient().get_run(runs[0][0]).data.tags
    assert params["hash_key"] == "random (not kept)" and "mia.hash_key_check" not in tags
    assert lookup_hash(pool.texts[0], "any key of sixteen bytes") not in first


def test_hash_key_file_beats_the_env_key_and_short_keys_are_refused(tmp_path, monkeypatch):
    from mlflow_mia.hashing import HashKey, lookup_hash, resolve_hash_key
    from mlflow_mia.options.audit import parse_options

    path = tmp_path / "mia.key"
    path.write_text("file key of at least sixteen bytes\n")
    path.chmod(0o600)  # a key file only its owner can read
    monkeypatch.setenv("MLFLOW_MIA_HASH_KEY", "the env key, also long enough: 32+")
    _, options = parse_options({"hash_key_file": str(path)})
    assert options.hash_key.source == "file" and "sixteen" not in repr(options)
    assert lookup_hash("x", options.hash_key) == lookup_hash("x", "file key of at least sixteen bytes")
    assert resolve_hash_key().source == "env"
    with pytest.raises(ValueError, match="at least 32"):
        HashKey.from_bytes("short", source="env")


def test_a_weak_hash_key_under_32_bytes_is_refused(tmp_path, monkeypatch):
    from mlflow_mia.hashing import MIN_KEY_BYTES, resolve_hash_key
    from mlflow_mia.options.audit import parse_options

    assert MIN_KEY_BYTES == 32
    weak, strong = "a sixteen byte k" + "x" * 15, "a sixteen byte k" + "x" * 16
    path = tmp_path / "weak.key"
    path.write_text(weak + "\n")
    path.chmod(0o600)  # a key file only its owner can read
    with pytest.raises(ValueError, match=r"the hash key \(file\) has 31 bytes; use at least 32"):
        parse_options({"hash_key_file": str(path)})
    monkeypatch.setenv("MLFLOW_MIA_HASH_KEY", "sixteen byte key")
    with pytest.raises(ValueError, match=r"the hash key \(env\) has 16 bytes; use at least 32"):
        resolve_hash_key()
    monkeypatch.setenv("MLFLOW_MIA_HASH_KEY", strong)
    assert resolve_hash_key().key == strong.encode()
    with pytest.raises(FileNotFoundError, match="hash key file"):
        parse_options({"hash_key_file": str(tmp_path / "missing.key")})


def test_a_large_pool_table_is_logged_as_parquet(tracking, audit, monkeypatch):
    from mlflow_mia.tracking import audit_log as logging_module

    result, pool, _ = audit
    monkeypatch.setattr(logging_module, "LARGE_TABLE_ROWS", len(pool) - 1)
    with mlflow.start_run() as run:
        artifacts = log_audit(result, settings=LogSettings(hash_key=KEY, log_metrics=False))
    files = _artifacts(run.info.run_id)
    assert "tables/samples.parquet" in files and "tables/samples.csv" not in files
    table = artifacts["samples"].content
    assert len(table) == len(pool) and "text_hmac" in table and "text" not in table
    assert table["label"].tolist() == result.samples["label"].tolist()


def test_sample_ids_are_keyed_like_groups_unless_log_texts(tracking, audit, monkeypatch):
    """Issue 32, low: samples.csv logged the raw sample_id (``s000``) beside the label; it is keyed now, as groups
    are, and given as-is only with log_texts (the raw texts are beside the labels then)."""
    from mlflow_mia import lookup_hash

    result, pool, population = audit
    key = "a key only the auditor holds, 32+"
    monkeypatch.setenv("MLFLOW_MIA_HASH_KEY", key)
    with mlflow.start_run():
        artifacts = log_audit(result, settings=LogSettings(hash_key=resolve_hash_key(), population=population,
                                                           log_metrics=False))
    samples = artifacts["samples"].content
    assert not set(pool.sample_ids) & set(samples["sample_id"])
    assert samples["sample_id"].tolist() == [lookup_hash(i, key) for i in pool.sample_ids]
    with mlflow.start_run():
        scored = log_audit(result,
                           settings=LogSettings(hash_key=resolve_hash_key(),
                                                population=population, log_metrics=False, log_samples=True))
    assert scored["samples"].content["sample_id"].tolist() == samples["sample_id"].tolist()
    assert not set(pool.sample_ids) & set(scored["riskiest"].content["sample_id"])
    with mlflow.start_run():
        texts = log_audit(result, settings=LogSettings(hash_key=resolve_hash_key(),
                                                       population=population, log_metrics=False, log_texts=True,
                                                       texts=pool.texts))
    assert texts["samples"].content["sample_id"].tolist() == list(pool.sample_ids)


def test_every_logger_requires_the_parsers_hash_key(audit):
    result, _, _ = audit
    with pytest.raises(TypeError, match="log_audit needs hash_key=HashKey \\(got bytes\\): resolve one with "
                                        "mlflow_mia.hashing.resolve_hash_key"):
        log_audit(result, run_id="unused", settings=LogSettings(hash_key=b"a raw key of 32 bytes or more...."))
    with pytest.raises(TypeError, match="hash_key"):
        LogSettings(log_samples=True)


def test_params_mlflow_run_logged_are_not_logged_again(tracking, audit):
    """``mlflow run`` logs the MLproject parameters first: a setting it holds with the same value (``0.0`` for
    ``0``) is not logged again; one the audit changed is logged as ``effective.<name>``, not refused."""
    result, _, _ = audit
    with mlflow.start_run() as run:
        mlflow.log_params({"attacks": "loss", "seed": "0.0", "demo_size": "small"})
        log_audit(result, settings=LogSettings(hash_key=KEY, log_metrics=False))
    params = MlflowClient().get_run(run.info.run_id).data.params
    assert params["seed"] == "0.0" and "effective.seed" not in params
    assert params["attacks"] == "loss" and params["effective.attacks"] == "loss,likelihood_ratio"
    assert params["num_masks"] == "2" and params["demo_size"] == "small"


def test_settings_that_do_not_apply_are_not_params():
    from mlflow_mia.config import AuditConfig
    from mlflow_mia.tracking.run_params import new_params, setting_params

    causal = setting_params(AuditConfig.from_dict({"signal": {"kind": "causal"}, "attacks": ["loss", "min_k"]}))
    assert causal["signal"] == "causal" and causal["seed"] == "0" and causal["fprs"] == "0.1,0.01,0.001"
    assert not {"num_masks", "mask_rate", "energy_reduction", "num_neighbours", "rmia_gamma"} & set(causal)
    assert causal["min_k_fraction"] == "0.2"  # min_k runs
    masked = setting_params(AuditConfig.from_dict({"attacks": ["loss", "neighbourhood"]}))
    assert (masked["num_masks"], masked["mask_rate"], masked["energy_reduction"], masked["num_neighbours"]) == (
        "10", "0.15", "sum", "25")
    assert "max_length" not in masked  # unset: the model's limit
    pll = setting_params(AuditConfig.from_dict({"signal": {"kind": "pll"}}))
    assert "num_masks" not in pll and "mask_rate" not in pll and pll["signal"] == "pll"
    assert new_params({"fprs": "0.1,0.01", "mask_rate": "0.15"}, {"fprs": "0.1, 0.01", "mask_rate": "0.2"}) == {
        "effective.mask_rate": "0.15"}


def test_headline_set_keeps_its_size_with_many_attacks():
    from types import SimpleNamespace

    from mlflow_mia.tracking.headline import headline_keys, headline_metrics

    attacks = ["loss", "zlib", "min_k", "likelihood_ratio", "rmia"]
    metrics = {f"{a}/{m}": 0.123456 for a in attacks
               for m in ["auc", "auc_ci_low", "auc_ci_high"] + [f"tpr_at_fpr_{f}{s}" for f in ("0.1", "0.01")
                                                                 for s in ("", "_lower", "_upper", "_ci_low")]}
    result = SimpleNamespace(headline_attack="likelihood_ratio", attacks=dict.fromkeys(attacks), metrics=metrics,
                             config=SimpleNamespace(metrics=SimpleNamespace(fprs=(0.1, 0.01))))
    keys = headline_keys(result)
    assert keys[:7] == ["likelihood_ratio/auc"] + [f"likelihood_ratio/tpr_at_fpr_{f}{s}" for f in ("0.1", "0.01")
                                                   for s in ("", "_lower", "_upper")]
    assert keys[7:] == [f"{a}/{m}" for a in ("loss", "zlib", "min_k", "rmia")
                        for m in ("auc", "tpr_at_fpr_0.1", "tpr_at_fpr_0.01")]  # the others without bounds
    two = SimpleNamespace(**{**vars(result), "attacks": {"loss": None, "likelihood_ratio": None}})
    assert len(headline_keys(two)) == 14  # 2 x (AUC + 2 x (TPR, lower, upper)): all bounds fit
    many = [f"a{i}" for i in range(12)]  # every attack of the field: the others' TPRs, then AUCs, give way
    wide = {f"{a}/{m}": 0.5 for a in many for m in ("auc", "tpr_at_fpr_0.1", "tpr_at_fpr_0.01")}
    twelve = SimpleNamespace(**{**vars(result), "attacks": dict.fromkeys(["likelihood_ratio", *many]),
                                "metrics": {**metrics, **wide}})
    keys12 = headline_keys(twelve)
    assert keys12[:7] == keys[:7] and keys12[7:] == [f"{a}/auc" for a in many] and len(keys12) == 19
    keys20 = headline_keys(twelve, limit=10)
    assert keys20[:7] == keys[:7] and keys20[7:] == ["a0/auc", "a1/auc", "a2/auc"]  # as many AUCs as fit
    logged = headline_metrics(result)
    assert list(logged)[0] == "likelihood_ratio/auc" and set(logged.values()) == {0.1235}
    assert len(logged) == len(keys) + 2  # and the headline attack's AUC interval
