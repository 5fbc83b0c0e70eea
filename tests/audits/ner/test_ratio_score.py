"""The reference tagger as a per-name reference: metrics/prompts.py ratio scores and ner_audit(reference=...)."""

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from mlflow_mia.audits.ner.run import ner_audit
from mlflow_mia.config import NerAuditConfig
from mlflow_mia.metrics import prompts as pm
from mlflow_mia.signals.entity_confidence import TokenClassifier, entity_confidence
from mlflow_mia.signals.ner_testing import tiny_token_classifier

from ner_tables import HAND, PROMPTS, names_table

CFG = NerAuditConfig(bootstrap_rounds=30, fprs=(0.1,), token_removal=False)


def test_log_ratio_by_hand():
    ratios = pm.confidence_log_ratio([[0.5, 0.2, 0.0], [0.1, 1.0, 0.3]], [[0.25, 0.4, 0.5], [0.1, 0.5, 0.0]])
    expected = [[np.log(2.0), np.log(0.5), np.log(1e-12) - np.log(0.5)],
                [0.0, np.log(2.0), np.log(0.3) - np.log(1e-12)]]
    np.testing.assert_allclose(ratios, expected, rtol=1e-12)
    np.testing.assert_allclose(pm.ratio_scores([[0.5, 0.2], [0.1, 1.0]], [[0.25, 0.4], [0.1, 0.5]]),
                               [np.log(2.0) / 2, 0.0], atol=1e-12)


def test_log_ratio_rejects_bad_input():
    with pytest.raises(ValueError, match=r"must have one shape, got \(2,\) and \(3,\)"):
        pm.confidence_log_ratio([0.1, 0.2], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"reference confidences must be finite and in \[0, 1\]"):
        pm.confidence_log_ratio([0.1], [1.5])
    with pytest.raises(ValueError, match="target confidences must be finite"):
        pm.confidence_log_ratio([np.nan], [0.5])
    with pytest.raises(ValueError, match=r"floor must be in \(0, 1\)"):
        pm.confidence_log_ratio([0.1], [0.1], floor=0.0)
    with pytest.raises(ValueError, match=r"needs \(n_prompts, n_names\) matrices"):
        pm.ratio_scores([0.1, 0.2], [0.3, 0.4])


@pytest.fixture(scope="module")
def pair(hash_key):
    target = TokenClassifier(*tiny_token_classifier(seed=0))
    reference = TokenClassifier(*tiny_token_classifier(seed=1))
    names = names_table()
    result = ner_audit(target, names, prompts=PROMPTS, handwritten=HAND, config=CFG, progress=False,
                       reference=reference, hash_key=hash_key)
    return target, reference, names, result


def _direct(clf, prompts, names):
    return np.stack([entity_confidence(clf, [p] * len(names), list(names.name), ["PER"] * len(names),
                                       progress=False) for p in prompts])


def test_ratio_metrics_equal_a_hand_computation(pair, hash_key):
    target, reference, names, result = pair
    m = result.metrics
    prompts = list(PROMPTS.prompt)
    ct, cr = _direct(target, prompts, names), _direct(reference, prompts, names)
    y = names.is_member.to_numpy()
    test = (result.names.split == "test").to_numpy()
    dev = ~test
    score = (np.log(ct) - np.log(cr)).mean(axis=0)
    np.testing.assert_allclose(result.names.ratio_avg, score, rtol=1e-6)
    assert m["ner/PER/ratio_avg_mmem"] == pytest.approx(roc_auc_score(y[test], score[test]))
    assert m["ner/PER/ratio_avg_mmem_dev"] == pytest.approx(roc_auc_score(y[dev], score[dev]))
    assert m["ner/PER/ratio_avg_mmem_all"] == pytest.approx(roc_auc_score(y, score))
    per_prompt = np.log(ct) - np.log(cr)
    dev_auc = [roc_auc_score(y[dev], row[dev]) for row in per_prompt]
    best = int(np.argmax(dev_auc))
    assert result.summaries["PER"]["ratio_best_prompt"] == prompts[best]
    assert m["ner/PER/ratio_best_prompt_mmem_dev"] == pytest.approx(dev_auc[best])
    assert m["ner/PER/ratio_best_prompt_mmem"] == pytest.approx(roc_auc_score(y[test], per_prompt[best, test]))
    nt, nr = _direct(target, ["{name}"], names)[0], _direct(reference, ["{name}"], names)[0]
    assert m["ner/PER/ratio_no_pt_mmem"] == pytest.approx(roc_auc_score(y[test], np.log(nt[test] / nr[test])))
    # intervals resample names, stratified by label: the same call on the hand-computed scores
    assert (m["ner/PER/ratio_avg_mmem_ci_low"], m["ner/PER/ratio_avg_mmem_ci_high"]) == pytest.approx(
        pm.mmem_ci(y[test], score[test], rounds=30, seed=0))
    assert m["ner/PER/ratio_avg_mmem_ci_low"] <= m["ner/PER/ratio_avg_mmem"] <= m["ner/PER/ratio_avg_mmem_ci_high"]
    assert "ner/PER/ratio_avg_tpr_at_fpr_0.1" in m
    # next to the target's own M-MEM, unchanged by the reference
    alone = ner_audit(target, names, prompts=PROMPTS, handwritten=HAND, config=CFG, progress=False, hash_key=hash_key)
    assert not any("ratio" in k for k in alone.metrics) and alone.reference_id is None
    assert {k: v for k, v in m.items() if "ratio" not in k} == pytest.approx(alone.metrics, nan_ok=True)
    assert result.reference_id == reference.model_id


def test_the_same_model_as_its_own_reference_detects_nothing(hash_key):
    clf = TokenClassifier(*tiny_token_classifier(seed=0))
    result = ner_audit(clf, names_table(), prompts=PROMPTS, handwritten=HAND, config=CFG, progress=False,
                       reference=clf, hash_key=hash_key)
    assert (result.names.ratio_avg == 0).all()
    assert result.metrics["ner/PER/ratio_avg_mmem"] == 0.5
    assert result.metrics["ner/PER/ratio_no_pt_mmem"] == 0.5


def test_two_taggers_on_swapped_labels_give_one_ratio_auc(pair, hash_key):
    """The WNUT demo's setting: A against B on A's labels equals B against A on the swapped labels."""
    target, reference, names, a = pair
    swapped = a.names[["split"]].assign(name=names.name, entity_type="PER", is_member=1 - names.is_member)
    b = ner_audit(reference, swapped, prompts=PROMPTS, handwritten=HAND, config=CFG, progress=False,
                  reference=target, hash_key=hash_key)
    for key in ("ratio_avg_mmem", "ratio_avg_mmem_dev", "ratio_no_pt_mmem"):
        assert b.metrics[f"ner/PER/{key}"] == pytest.approx(a.metrics[f"ner/PER/{key}"])


def test_reference_without_the_type_fails_before_scoring(hash_key):
    clf = TokenClassifier(*tiny_token_classifier())
    other = TokenClassifier(*tiny_token_classifier(labels=("O", "B-LOC", "I-LOC")))
    calls = []
    clf.model.register_forward_hook(lambda *a: calls.append(1))
    with pytest.raises(ValueError, match="no tag B-PER"):
        ner_audit(clf, names_table(), prompts=PROMPTS, handwritten=HAND, progress=False, reference=other,
                  hash_key=hash_key)
    assert calls == []


def test_logged_run_has_the_ratio_plot_param_and_report_but_no_scores(pair, tmp_path, hash_key):
    import mlflow
    from mlflow import MlflowClient

    from mlflow_mia.tracking.log_settings import LogSettings
    from mlflow_mia.tracking.ner_log import log_ner_audit

    _, reference, _, result = pair
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    try:
        client = MlflowClient()
        with mlflow.start_run(experiment_id=client.create_experiment("ratio")) as run:
            log_ner_audit(result, run_id=run.info.run_id, settings=LogSettings(hash_key=hash_key))
        files = {f.path for f in client.list_artifacts(run.info.run_id, "plots")}
        params = client.get_run(run.info.run_id).data.params
        folder = client.download_artifacts(run.info.run_id, "", str(tmp_path / "out"))
    finally:
        mlflow.set_tracking_uri(previous)
    assert "plots/ner_roc_ratio.png" in files
    assert params["ner.reference_model_id"] == reference.model_id
    table = pd.read_csv(f"{folder}/tables/ner_names.csv")
    assert "ratio_avg" not in table.columns
    report = open(f"{folder}/report.md", encoding="utf-8").read()
    assert "ratio, mean over prompts [95% CI]" in report and reference.model_id in report


def test_unk_names_are_reported_for_the_reference_tagger_too(hash_key):
    clf = TokenClassifier(*tiny_token_classifier(seed=0))
    names = names_table(8)
    names.loc[0, "name"] = "zyxw qqq"
    result = ner_audit(clf, names, prompts=PROMPTS, handwritten=HAND, progress=False, reference=clf,
                       config=NerAuditConfig(bootstrap_rounds=0, fprs=(0.1,), token_removal=False), hash_key=hash_key)
    assert len(result.warnings) == 2
    assert result.warnings[1] == f"reference tagger: {result.warnings[0]}"
