"""mlflow.models.evaluate(method="ner_prompts") and `mlflow-mia ner-audit` on a tiny registered tagger."""

import os
import re

import pandas as pd
import pytest

from ner_tables import HAND, PROMPTS, names_table


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    import mlflow
    from mlflow import MlflowClient

    from mlflow_mia.signals.ner_testing import tiny_token_classifier
    from mlflow_mia.signals.testing import tiny_bert

    root = tmp_path_factory.mktemp("ner_store")
    old_uri, old_cwd = mlflow.get_tracking_uri(), os.getcwd()
    old_env = os.environ.get("MLFLOW_TRACKING_URI")
    uri = f"sqlite:///{root}/mlflow.db"
    os.chdir(root)
    os.environ["MLFLOW_TRACKING_URI"] = uri
    mlflow.set_tracking_uri(uri)
    try:
        mlflow.set_experiment("ner-tests")
        model, tok = tiny_token_classifier()
        with mlflow.start_run(run_name="log tagger"):
            mlflow.transformers.log_model(transformers_model={"model": model, "tokenizer": tok}, name="model",
                                          task="token-classification", registered_model_name="tiny-ner",
                                          pip_requirements=["torch", "transformers"])
            mlm, mtok = tiny_bert()
            mlflow.transformers.log_model(transformers_model={"model": mlm, "tokenizer": mtok}, name="mlm",
                                          task="fill-mask", registered_model_name="tiny-mlm",
                                          pip_requirements=["torch", "transformers"])
        MlflowClient().set_registered_model_alias("tiny-ner", "candidate", "1")
        prompts_path, hand_path = root / "prompts.csv", root / "hand.csv"
        PROMPTS.to_csv(prompts_path, index=False)
        HAND.to_csv(hand_path, index=False)
        yield {"root": root, "prompts": str(prompts_path), "hand": str(hand_path)}
    finally:
        os.chdir(old_cwd)
        mlflow.set_tracking_uri(old_uri)
        if old_env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = old_env


def _config(reg, **kw):
    cfg = {"method": "ner_prompts", "prompts": reg["prompts"], "handwritten_prompts": reg["hand"],
           "bootstrap_rounds": 20, "fprs": [0.2], "cache_dir": str(reg["root"] / "cache"), "progress": False,
           "seed": 0}
    cfg.update(kw)
    return {"mia": cfg}


def _artifact_text(run_id):
    import mlflow

    path = mlflow.artifacts.download_artifacts(run_id=run_id)
    out = {}
    for dirpath, _, files in os.walk(path):
        for f in files:
            if f.endswith((".csv", ".json", ".md")):
                out[os.path.relpath(os.path.join(dirpath, f), path)] = open(os.path.join(dirpath, f)).read()
    return out


def test_evaluate_end_to_end(registry):
    import mlflow

    names = names_table().rename(columns={"is_member": "member"})
    with mlflow.start_run() as run:
        res = mlflow.models.evaluate(model="models:/tiny-ner@candidate", data=names, targets="member",
                                     model_type="mia", evaluators=["mia"], evaluator_config=_config(registry))
    m = res.metrics
    for key in ("best_prompt_mmem", "worst_prompt_mmem", "prompt_gap", "prompt_std", "avg_c_mmem",
                "best_prompt_tpr_at_fpr_0.2"):
        assert 0.0 <= m[f"ner/PER/{key}"] <= 1.0
    logged = mlflow.get_run(run.info.run_id)
    assert logged.data.metrics["ner/PER/best_prompt_mmem"] == pytest.approx(m["ner/PER/best_prompt_mmem"])
    assert logged.data.params["ner.model"] == "models:/tiny-ner/1"
    files = _artifact_text(run.info.run_id)
    table = pd.read_csv(os.path.join(mlflow.artifacts.download_artifacts(run_id=run.info.run_id),
                                     "tables/ner_prompts.csv"))
    assert list(table.columns) == ["prompt_id", "prompt", "entity_type", "sentence_type", "slot_position", "n_words",
                                   "mmem_dev", "mmem_test", "mmem_all"] and len(table) == 4
    assert {"tables/ner_names.csv", "ner_summary.json", "report.md"} <= set(files)
    everything = "\n".join(files.values()) + str(logged.data.params) + str(logged.data.tags)
    assert not any(n in everything for n in names.name)  # names are hashed
    assert "NER prompt memorization audit" in files["report.md"]


def test_evaluate_log_texts_writes_names(registry):
    import mlflow

    names = names_table()
    with mlflow.start_run() as run:
        mlflow.models.evaluate(model="models:/tiny-ner@candidate", data=names, targets="is_member",
                               model_type="mia", evaluators=["mia"],
                               evaluator_config=_config(registry, log_texts=True, token_removal=False))
    files = _artifact_text(run.info.run_id)
    assert set(pd.read_csv(pd.io.common.StringIO(files["tables/ner_names.csv"]))["name"]) == set(names.name)


def test_evaluate_errors(registry):
    import mlflow

    names = names_table()
    with mlflow.start_run(), pytest.raises(ValueError, match="not a token-classification model"):
        mlflow.models.evaluate(model="models:/tiny-mlm/1", data=names, targets="is_member", model_type="mia",
                               evaluators=["mia"], evaluator_config=_config(registry))
    with mlflow.start_run(), pytest.raises(ValueError, match="unknown evaluator_config"):
        mlflow.models.evaluate(model="models:/tiny-ner@candidate", data=names, targets="is_member",
                               model_type="mia", evaluators=["mia"], evaluator_config=_config(registry, attacks="x"))
    with mlflow.start_run(), pytest.raises(ValueError, match="one class only"):
        mlflow.models.evaluate(model="models:/tiny-ner@candidate", data=names.assign(is_member=1),
                               targets="is_member", model_type="mia", evaluators=["mia"],
                               evaluator_config=_config(registry))


def test_cli_ner_audit(registry, tmp_path, capsys):
    from mlflow import MlflowClient

    from mlflow_mia.entrypoints.cli import main

    names_path = tmp_path / "names.csv"
    names_table().to_csv(names_path, index=False)
    code = main(["ner-audit", "--model", "models:/tiny-ner@candidate", "--names", str(names_path), "--prompts",
                 registry["prompts"], "--handwritten-prompts", registry["hand"], "--bootstrap-rounds", "0",
                 "--fprs", "0.1", "--no-token-removal", "--cache-dir", str(registry["root"] / "cache"), "-q"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "PER" in out.out and "best" in out.out
    run = MlflowClient().get_run(re.search(r"; run: .+ \(([0-9a-f]{32})\)$", out.out, re.M).group(1))
    assert run.info.run_name == f"[{run.data.tags['mia.verdict']}] ner-audit tiny-ner@candidate"  # the verdict first
    code = main(["ner-audit", "--model", "models:/tiny-ner@candidate", "--names", str(names_path), "--prompts",
                 registry["prompts"], "--entity-types", "person", "-q"])
    assert code == 2 and "not in the names table" in capsys.readouterr().err


def test_config_strings_are_read_as_their_values():
    """MLproject and CLI front ends pass strings: "false" must mean False (raw names stay out)."""
    from mlflow_mia.config import NerAuditConfig
    from mlflow_mia.audits.ner.kind import parse_ner_config

    cfg, options = parse_ner_config({"mia": {"method": "ner_prompts", "log_texts": "false", "progress": "0",
                                             "token_removal": "no", "seed": "3", "fprs": "0.1,0.01"}})
    assert options.log_texts is False and options.progress is False
    assert cfg.token_removal is False and cfg.seed == 3 and cfg.fprs == (0.1, 0.01)
    with pytest.raises(ValueError, match="log_texts must be true or false, got 'maybe'"):
        parse_ner_config({"method": "ner_prompts", "log_texts": "maybe"})
    assert parse_ner_config({"method": "ner_prompts", "fprs": ""})[0].fprs == NerAuditConfig().fprs  # "" = unset
    with pytest.raises(ValueError, match=r"fprs must be a non-empty list .* got \[\]"):
        parse_ner_config({"method": "ner_prompts", "fprs": []})
    with pytest.raises(ValueError, match=r"unknown evaluator_config\['mia'\] key\(s\) \['attacks'\] for method "
                                         r"'ner_prompts'; valid keys are \[.*'batch_size'"):
        parse_ner_config({"method": "ner_prompts", "attacks": "loss"})


def _names_file(tmp_path, table=None, name="names.csv"):
    path = tmp_path / name
    (names_table() if table is None else table).to_csv(path, index=False)
    return str(path)


@pytest.fixture
def no_model_load(monkeypatch):
    """Loading a tagger fails the test: the error must come first."""
    from mlflow_mia.models import ner as ner_models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the input error")

    monkeypatch.setattr(ner_models, "resolve_token_classifier", refuse)


def test_ner_an_unknown_device_fails_before_any_model_loads(registry, tmp_path, no_model_load, capsys):
    from mlflow_mia.entrypoints.cli import main
    from mlflow_mia.audits.ner.kind import parse_ner_config

    names = _names_file(tmp_path)
    assert main(["ner-audit", "--model", "models:/tiny-ner@candidate", "--names", names, "--device", "banana"]) == 2
    assert "device 'banana' is not a torch device" in capsys.readouterr().err
    with pytest.raises(ValueError, match="device 'banana' is not a torch device"):
        parse_ner_config({"method": "ner_prompts", "device": "banana"})


def test_ner_bootstrap_rounds_minus_one_is_refused(registry, tmp_path, no_model_load, capsys):
    from mlflow_mia.config import NerAuditConfig
    from mlflow_mia.entrypoints.cli import main
    from mlflow_mia.audits.ner.kind import parse_ner_config

    names = _names_file(tmp_path)
    assert main(["ner-audit", "--model", "models:/tiny-ner@candidate", "--names", names,
                 "--bootstrap-rounds", "-1"]) == 2
    assert "bootstrap_rounds must be an int >= 0, got '-1'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="bootstrap_rounds must be an int >= 0, got -1"):
        parse_ner_config({"method": "ner_prompts", "bootstrap_rounds": -1})
    with pytest.raises(ValueError, match="bootstrap_rounds must be an int >= 0, got -1"):
        NerAuditConfig(bootstrap_rounds=-1)


def test_ner_entity_types_with_odd_characters_or_absent_fail_before_compute(registry, tmp_path, no_model_load, capsys):
    from mlflow_mia.entrypoints.cli import main

    names = _names_file(tmp_path)
    assert main(["ner-audit", "--model", "models:/tiny-ner@candidate", "--names", names, "--entity-types",
                 "PER,x=y"]) == 2
    assert ("entity_types must be a non-empty list (or comma-separated string) of names made of letters, digits, "
            "_ - . and spaces or None, got 'PER,x=y'") in capsys.readouterr().err
    odd = _names_file(tmp_path, names_table().assign(entity_type="x=y"), name="odd.csv")
    assert main(["ner-audit", "--model", "models:/tiny-ner@candidate", "--names", odd]) == 2
    assert "entity type(s) ['x=y'] may only hold letters, digits, _ - . and spaces" in capsys.readouterr().err
    assert main(["ner-audit", "--model", "models:/tiny-ner@candidate", "--names", names, "--entity-types",
                 "person"]) == 2
    assert "not in the names table" in capsys.readouterr().err


def test_ner_a_long_prompt_in_an_error_is_shortened():
    from mlflow_mia.audits.ner.prompts import check_prompts, split_prompt

    prompt = "word " * 2000  # 10k characters, no slot
    for call in (lambda: split_prompt(prompt),
                 lambda: check_prompts(pd.DataFrame({"prompt": [prompt], "entity_type": ["PER"]}))):
        with pytest.raises(ValueError, match="exactly one {name} slot") as info:
            call()
        assert len(str(info.value)) < 300 and "..." in str(info.value)


def _logged_names(run_id):
    import mlflow

    return pd.read_csv(os.path.join(mlflow.artifacts.download_artifacts(run_id=run_id), "tables/ner_names.csv"))


def test_ner_audit_honours_hash_key_file(registry, tmp_path, monkeypatch, capsys):
    """The CLI flag and the evaluator key: the logged name hashes are found with that key (lookup_hash)."""
    import mlflow

    from mlflow_mia import lookup_hash
    from mlflow_mia.entrypoints.cli import main
    from mlflow_mia.tracking.artifacts import dataset_digest

    monkeypatch.setenv("MLFLOW_MIA_HASH_KEY", "an environment key that must not be used")
    key = "my NER audit key, a secret of 32+ bytes"
    key_file = tmp_path / "ner.key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)  # a key file only its owner can read
    names = names_table()
    expected = sorted(lookup_hash(" ".join(n.split()).lower(), key)[:16] for n in names.name)
    common = ["--model", "models:/tiny-ner@candidate", "--names", _names_file(tmp_path), "--prompts",
              registry["prompts"], "--handwritten-prompts", registry["hand"], "--bootstrap-rounds", "0", "--fprs",
              "0.2", "--no-token-removal", "--cache-dir", str(registry["root"] / "cache"), "-q", "--log-samples"]
    assert main(["ner-audit", *common, "--hash-key-file", str(key_file)]) == 0
    run_id = re.search(r"^experiment: .+; run: .+ \(([0-9a-f]{32})\)$", capsys.readouterr().out, re.M).group(1)
    assert sorted(_logged_names(run_id)["name_hash"]) == expected
    params = mlflow.get_run(run_id).data.params
    assert params["ner.names_digest"] == dataset_digest(expected, key=key.encode())
    with mlflow.start_run() as run:
        mlflow.models.evaluate(model="models:/tiny-ner@candidate", data=names, targets="is_member", model_type="mia",
                               evaluators=["mia"], evaluator_config=_config(
                                   registry, hash_key_file=str(key_file), token_removal=False, bootstrap_rounds=0,
                                   log_samples=True))
    assert sorted(_logged_names(run.info.run_id)["name_hash"]) == expected


def _evaluate_none(registry, names, **kw):
    """The recommended form: model=None, the tagger named in target_model."""
    import mlflow

    with mlflow.start_run() as run:
        res = mlflow.models.evaluate(model=None, data=names, targets="is_member", model_type="mia",
                                     evaluators=["mia"],
                                     evaluator_config=_config(registry, target_model="models:/tiny-ner@candidate",
                                                              token_removal=False, **kw))
    return run.info.run_id, res


def _labels_found_by_recomputing(run_id, names):
    """An attacker's look-up: each name's confidence under the logged best prompt, found in ner_names.csv."""
    import json

    import mlflow
    import numpy as np

    from mlflow_mia.models.ner import resolve_token_classifier
    from mlflow_mia.signals.entity_confidence import entity_confidence

    root = mlflow.artifacts.download_artifacts(run_id=run_id)
    best = json.load(open(os.path.join(root, "ner_summary.json")))["types"]["PER"]["best_prompt"]
    tagger = resolve_token_classifier(mlflow.get_run(run_id).data.params["ner.model"]).lm
    conf = entity_confidence(tagger, [best] * len(names), list(names.name), ["PER"] * len(names), progress=False)
    table = pd.read_csv(os.path.join(root, "tables", "ner_names.csv"))
    numbers = table.select_dtypes("number").drop(columns=["is_member"]).to_numpy(dtype=float)
    found = {}
    for name, c in zip(names.name, conf):
        # 1e-6: a recomputation batches the names differently from the audit (other shapes, thread counts), so
        # float32 values move by ~1e-8; a looser look-up also makes "no oracle by default" harder to pass.
        rows = np.flatnonzero(np.isclose(numbers, c, rtol=0, atol=1e-6).any(axis=1)) if numbers.size else []
        if len(rows) == 1:
            found[name] = int(table["is_member"].iloc[rows[0]])
    return found, table, open(os.path.join(root, "report.md")).read()


def test_ner_names_table_is_no_membership_oracle_by_default(registry):
    names = names_table()
    run_id, _ = _evaluate_none(registry, names)
    found, table, report = _labels_found_by_recomputing(run_id, names)
    assert found == {}
    assert list(table.columns) == ["name_hash", "entity_type", "is_member", "split"]
    assert "`log_samples` (`--log-samples`) logs the confidences" in report
    run_id, _ = _evaluate_none(registry, names, log_samples=True)
    found, table, report = _labels_found_by_recomputing(run_id, names)
    assert {"c_best", "c_worst", "c_no_prompt"} <= set(table.columns)
    assert found == dict(zip(names.name, names.is_member))  # the oracle the default leaves out
    assert "**This run logged per-name confidences**" in report


def test_ner_evaluate_with_model_none_and_a_pyfunc_warning(registry, caplog):
    import mlflow

    from mlflow_mia.entrypoints.evaluator import PYFUNC_WARNING

    names = names_table()
    with caplog.at_level("WARNING"):
        run_id, res = _evaluate_none(registry, names)
    assert mlflow.get_run(run_id).data.params["ner.model"] == "models:/tiny-ner/1"
    assert 0.0 <= res.metrics["ner/PER/best_prompt_mmem"] <= 1.0 and "pyfunc loader" not in caplog.text
    warning = PYFUNC_WARNING.format(command="ner-audit --model")
    with mlflow.start_run() as run:
        mlflow.models.evaluate(model="models:/tiny-ner@candidate", data=names, targets="is_member",
                               model_type="mia", evaluators=["mia"],
                               evaluator_config=_config(registry, token_removal=False))
    assert warning in caplog.text
    assert f"- {warning}" in _artifact_text(run.info.run_id)["report.md"]
