"""The ``mia`` evaluator plugin through ``mlflow.models.evaluate`` and ``mlflow.evaluate``."""

from __future__ import annotations

import re
import warnings

import mlflow
import pytest
from mlflow import MlflowClient

from mlflow_mia.options.audit import CONFIG_KEYS
from mlflow_mia.entrypoints.evaluator import MiaEvaluator
from mlflow_mia.tracking.headline import full_metrics

# Every metric is "[user/]<attack>/<name>" or a "[user/]n_..." count; alphas are written 0.1, 0.05.
METRIC_RE = re.compile(r"^(user/)?(loss|likelihood_ratio)/[a-z_]+(_0\.(1|05))?(_[a-z_]+)?$"
                       r"|^(user/)?(loss|likelihood_ratio)/auc_len_\d+-\d+$|^(user/)?n_[a-z_]+$|^mia_verdict_code$")


def _evaluate(store, model, *, evaluate=None, **overrides):
    evaluate = evaluate or mlflow.models.evaluate
    with mlflow.start_run() as run:
        result = evaluate(model=model, data=store.pool, targets="is_member", model_type="mia",
                          evaluators=["mia"], evaluator_config={"mia": store.config(**overrides)})
    return run.info.run_id, result


def _assert_single_history(run_id, metrics):
    client = MlflowClient()
    logged = client.get_run(run_id).data.metrics
    assert set(metrics) <= set(logged)
    for key in metrics:
        history = client.get_metric_history(run_id, key)
        assert len(history) == 1, f"{key} has {len(history)} history entries"


def test_plugin_is_listed():
    assert "mia" in mlflow.models.list_evaluators()
    assert MiaEvaluator.name == "mia"
    assert MiaEvaluator.can_evaluate(model_type="mia", evaluator_config={})
    assert not MiaEvaluator.can_evaluate(model_type="classifier", evaluator_config={})


def test_evaluate_alias_logs_stable_metrics_once(tracking):
    run_id, result = _evaluate(tracking, "models:/tgt@candidate")
    metrics = result.metrics
    # The result holds the headline set the run logged, the verdict code among it; the run's table holds the rest.
    assert set(metrics) == set(MlflowClient().get_run(run_id).data.metrics)
    assert {f"{a}/{n}" for a in ("loss", "likelihood_ratio") for n in ("auc", "tpr_at_fpr_0.1", "tpr_at_fpr_0.05",
                                                                       "tpr_at_fpr_0.1_upper")} <= set(metrics)
    table = full_metrics(MlflowClient(), run_id)
    for level, names in (("", ("auc", "auc_ci_low", "auc_ci_high", "tpr_at_fpr_0.1", "tpr_at_fpr_0.05",
                                "precision_at_pop_fpr_0.1", "recall_at_pop_fpr_0.05")),
                         ("user/", ("auc", "auc_ci_low", "auc_ci_high", "tpr_at_fpr_0.1", "tpr_at_fpr_0.05",
                                    "precision_at_pop_fpr_0.1"))):
        for attack in ("loss", "likelihood_ratio"):
            for name in names:  # 40 non-member users resolve FPR 0.05 (it needs 20)
                assert f"{level}{attack}/{name}" in table
    tags = MlflowClient().get_run(run_id).data.tags
    verdict = result.artifacts["verdict"].content
    assert (verdict["verdict"], verdict["reason"]) == (tags["mia.verdict"], tags["mia.verdict.reason"])
    assert metrics["mia_verdict_code"] == verdict["code"] == verdict["codes"][tags["mia.verdict"]]
    assert not [k for k in metrics if not METRIC_RE.match(k)]
    assert metrics["likelihood_ratio/auc"] > 0.8  # v2 was trained on the members
    _assert_single_history(run_id, metrics)
    assert result.run_id == run_id
    assert {"report", "samples", "riskiest", "audit_summary", "audit_config", "roc", "roc_loglog",
            "hist_likelihood_ratio", "user_roc", "verdict"} <= set(result.artifacts)

    client = MlflowClient()
    run = client.get_run(run_id)
    params = run.data.params
    assert params["target_model"] == "models:/tgt/2"
    assert params["reference_model"] == "models:/ref/1"
    assert params["reference_model_requested"] == "models:/ref@champion"
    assert params["target_model_version"] == "2"
    assert params["pool.n_samples"] == "160" and params["population.n_samples"] == "100"
    assert len(run.data.tags["mia.pool.digest"]) == 64 and len(run.data.tags["mia.population.digest"]) == 64
    assert params["num_masks"] == "2" and params["fprs"] == "0.1,0.05"
    tags = client.get_model_version("tgt", "2").tags
    assert tags["mia.audit_run_id"] == run_id
    assert float(tags["mia.likelihood_ratio.auc"]) == pytest.approx(metrics["likelihood_ratio/auc"], abs=1e-4)
    assert "mia.likelihood_ratio.tpr_at_fpr_0.05" in tags


def test_deprecated_alias_and_model_id_path_log_once(tracking):
    # models:/<logged model id> gives evaluate() a model_id, so it logs the returned metrics itself.
    logged_uri = f"models:/{tracking.model_ids['tgt/2']}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_id, result = _evaluate(tracking, logged_uri, evaluate=mlflow.evaluate)
    _assert_single_history(run_id, result.metrics)
    run_alias, alias = _evaluate(tracking, "models:/tgt@candidate")
    # Same weights, same cache key (resolved to models:/tgt/2): identical numbers.
    assert MlflowClient().get_run(run_id).data.params["target_model"] == "models:/tgt/2"
    assert result.metrics == alias.metrics  # the headline set, verdict code included
    for key in ("loss/auc", "user/likelihood_ratio/tpr_at_fpr_0.1"):  # and the full table
        assert full_metrics(MlflowClient(), run_id)[key] == pytest.approx(full_metrics(MlflowClient(), run_alias)[key])


@pytest.mark.parametrize("form", ["version", "runs", "local"])
def test_every_uri_form_for_both_models(tracking, form, tmp_path):
    if form == "version":
        model, reference = "models:/tgt/1", "models:/ref/1"
        expect = {"target_model": "models:/tgt/1", "reference_model": "models:/ref/1"}
    elif form == "runs":
        model, reference = (f"runs:/{tracking.run_ids['tgt/1']}/model", f"runs:/{tracking.run_ids['ref/1']}/model")
        expect = {"target_model": "models:/tgt/1", "reference_model": "models:/ref/1"}
    else:  # a saved MLflow model folder as target, a saved Hugging Face folder as reference
        model = mlflow.artifacts.download_artifacts("models:/tgt/1", dst_path=str(tmp_path / "mlflow_model"))
        parts = mlflow.transformers.load_model("models:/ref/1", return_type="components")
        reference = str(tmp_path / "hf_reference")
        parts["model"].save_pretrained(reference)
        parts["tokenizer"].save_pretrained(reference)
        expect = {"target_model": "models:/tgt/1"}  # the MLmodel's logged model id is found in the registry
    run_id, result = _evaluate(tracking, model, reference_model=reference, bootstrap_rounds=0)
    params = MlflowClient().get_run(run_id).data.params
    assert {k: params[k] for k in expect} == expect
    if form == "local":
        assert params["reference_model"].startswith("sha256:")  # keyed by its weights
    assert 0.0 <= result.metrics["likelihood_ratio/auc"] <= 1.0
    _assert_single_history(run_id, result.metrics)


def test_no_raw_text_by_default(tracking, tmp_path):
    run_id, result = _evaluate(tracking, "models:/tgt@candidate", bootstrap_rounds=0)
    root = mlflow.artifacts.download_artifacts(run_id=run_id, dst_path=str(tmp_path / "art"))
    import pathlib

    texts = tracking.pool["text"].tolist() + tracking.population["text"].tolist()
    blobs = [p.read_bytes().decode("utf-8", "ignore") for p in pathlib.Path(root).rglob("*")
             if p.is_file() and p.suffix in (".csv", ".json", ".md")]
    run = MlflowClient().get_run(run_id)
    blobs += list(run.data.params.values()) + list(run.data.tags.values())
    assert not [t for t in texts if any(t in b for b in blobs)]
    import pandas as pd

    samples = pd.read_csv(pathlib.Path(root) / "tables" / "samples.csv")
    assert list(samples.columns) == ["sample_id", "label", "group", "text_hmac"]  # no score beside a label


def test_log_samples_adds_scores_flags_and_lengths(tracking, tmp_path):
    import pandas as pd

    run_id, _ = _evaluate(tracking, None, target_model="models:/tgt@candidate", bootstrap_rounds=0,
                          log_samples=True, tag_model_version=False)
    path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="tables/samples.csv",
                                               dst_path=str(tmp_path))
    samples = pd.read_csv(path)
    assert "text" not in samples.columns
    assert {"sample_id", "text_hmac", "label", "group", "n_tokens", "score_loss", "score_likelihood_ratio",
            "flagged_likelihood_ratio_fpr_0.05"} <= set(samples.columns)
    assert MlflowClient().get_run(run_id).data.params["log_samples"] == "True"


def test_log_texts_true_includes_texts(tracking, tmp_path):
    run_id, _ = _evaluate(tracking, "models:/tgt@candidate", bootstrap_rounds=0, log_texts=True,
                          tag_model_version=False, metric_prefix="with_text_")
    import pandas as pd

    path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="with_text_tables/samples.csv",
                                               dst_path=str(tmp_path))
    samples = pd.read_csv(path)
    assert samples["text"].tolist() == tracking.pool["text"].tolist()
    assert "with_text_loss/auc" in MlflowClient().get_run(run_id).data.metrics


def test_missing_population_says_how_to_provide(tracking):
    with pytest.raises(ValueError, match="population_data"):
        _evaluate(tracking, "models:/tgt/1", population_data=None)


def test_unknown_key_lists_valid_keys(tracking):
    with pytest.raises(ValueError, match=r"unknown evaluator_config\['mia'\] key\(s\) \['num_mask'\].*num_masks"):
        _evaluate(tracking, "models:/tgt/1", num_mask=3)


def test_every_config_key_is_documented():
    import mlflow_mia.entrypoints.evaluator as ev

    for key in CONFIG_KEYS:
        assert f"``{key}``" in ev.__doc__, key


def _report(run_id, tmp_path) -> str:
    path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="report.md", dst_path=str(tmp_path))
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def test_model_none_with_target_model_audits_the_registry_model(tracking, tmp_path, caplog):
    with caplog.at_level("WARNING"):
        run_id, result = _evaluate(tracking, None, target_model="models:/tgt@candidate", bootstrap_rounds=0,
                                   tag_model_version=False)
    params = MlflowClient().get_run(run_id).data.params
    assert params["target_model"] == "models:/tgt/2" and params["target_model_requested"] == "models:/tgt@candidate"
    assert result.metrics["likelihood_ratio/auc"] > 0.8
    _assert_single_history(run_id, result.metrics)
    assert "pyfunc loader" not in caplog.text and "pyfunc loader" not in _report(run_id, tmp_path)


def test_a_model_loaded_by_mlflow_gets_a_loud_warning(tracking, tmp_path, caplog):
    from mlflow_mia.entrypoints.evaluator import PYFUNC_WARNING

    warning = PYFUNC_WARNING.format(command="audit --target")
    with caplog.at_level("WARNING", logger="mlflow_mia.entrypoints.evaluator"):
        run_id, _ = _evaluate(tracking, "models:/tgt@candidate", bootstrap_rounds=0, tag_model_version=False)
    assert warning in caplog.text
    assert f"- {warning}" in _report(run_id, tmp_path)


def test_the_model_must_be_given_exactly_once(tracking):
    with pytest.raises(ValueError, match=r"pass model=None with evaluator_config=\{'mia': \{'target_model'"):
        _evaluate(tracking, None)
    with pytest.raises(ValueError, match=r"the model is given twice \(model= and target_model='models:/tgt/1'\)"):
        _evaluate(tracking, "models:/tgt/1", target_model="models:/tgt/1")


def test_neighbourhood_local_with_a_registry_generator_uri(tracking):
    """The generator URI is resolved for every attack that needs the generator role, not only 'neighbourhood'."""
    run_id, result = _evaluate(tracking, "models:/tgt@candidate", reference_model=None, bootstrap_rounds=0,
                               attacks=["loss", "neighbourhood_local"], neighbour_generator="models:/tgt@champion",
                               num_neighbours=3)
    assert 0.0 <= result.metrics["neighbourhood_local/auc"] <= 1.0
    assert "neighbourhood/generator_accuracy" in full_metrics(MlflowClient(), run_id)  # the table, not the headline
    params = MlflowClient().get_run(run_id).data.params
    assert params["neighbourhood.generator"] == "models:/tgt/1"  # the registry version, resolved and pinned
    assert "reference_model" not in params
