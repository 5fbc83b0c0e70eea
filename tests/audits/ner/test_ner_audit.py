import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from mlflow_mia.audits.ner.run import ner_audit
from mlflow_mia.audits.ner.scoring import compare_models
from mlflow_mia.config import NerAuditConfig
from mlflow_mia.signals.entity_confidence import ConfidenceCache, TokenClassifier, entity_confidence
from mlflow_mia.signals.ner_testing import tiny_token_classifier
from ner_tables import HAND, PROMPTS, names_table


@pytest.fixture(scope="module")
def audited(tmp_path_factory, hash_key):
    clf = TokenClassifier(*tiny_token_classifier())
    cache = ConfidenceCache(tmp_path_factory.mktemp("cache"))
    cfg = NerAuditConfig(bootstrap_rounds=20, fprs=(0.1,))
    return clf, names_table(), ner_audit(clf, names_table(), prompts=PROMPTS, handwritten=HAND, config=cfg,
                                         cache=cache, progress=False, hash_key=hash_key)


def test_prompt_table_matches_direct_confidences(audited):
    clf, names, result = audited
    t = result.prompts_table
    assert list(t.columns) == ["prompt_id", "prompt", "entity_type", "sentence_type", "slot_position", "n_words",
                               "mmem_dev", "mmem_test", "mmem_all"]
    y = names["is_member"].to_numpy()
    for _, row in t.iterrows():
        c = entity_confidence(clf, [row.prompt] * len(names), list(names.name), ["PER"] * len(names), progress=False)
        assert row.mmem_all == pytest.approx(roc_auc_score(y, c))
    m = result.metrics
    dev_best = t.mmem_dev.idxmax()
    assert m["ner/PER/best_prompt_mmem"] == pytest.approx(t.mmem_test[dev_best])
    assert m["ner/PER/best_prompt_mmem_dev"] == pytest.approx(t.mmem_dev.max())
    assert m["ner/PER/worst_prompt_mmem_dev"] == pytest.approx(t.mmem_dev.min())
    assert m["ner/PER/prompt_gap"] == pytest.approx(t.mmem_dev.max() - t.mmem_dev.min())
    assert m["ner/PER/prompt_std"] == pytest.approx(np.std(t.mmem_dev))
    nc = entity_confidence(clf, ["{name}"] * len(names), list(names.name), ["PER"] * len(names), progress=False)
    test = (result.names.split == "test").to_numpy()
    assert m["ner/PER/no_pt_mmem"] == pytest.approx(roc_auc_score(y[test], nc[test]))
    for key in ("mv_mmem", "avg_c_mmem", "wed_c_mmem", "max_c_mmem", "min_c_mmem", "one_pt_mmem", "mix_pt_mmem",
                "best_modified_mmem", "worst_modified_mmem", "best_prompt_tpr_at_fpr_0.1", "kendall_tau_dev_test"):
        assert f"ner/PER/{key}" in m
    assert m["ner/PER/best_modified_mmem_dev"] >= m["ner/PER/worst_modified_mmem_dev"]
    for part in ("", "_dev"):
        assert 0.0 <= m[f"ner/PER/best_prompt_mmem{part}_ci_low"] < m[f"ner/PER/best_prompt_mmem{part}_ci_high"] <= 1
    y_dev = names.is_member.to_numpy()[(result.names.split == "dev").to_numpy()]
    c_dev = result.names.c_best.to_numpy()[(result.names.split == "dev").to_numpy()]
    from mlflow_mia.metrics.prompts import mmem_ci

    assert (m["ner/PER/best_prompt_mmem_dev_ci_low"], m["ner/PER/best_prompt_mmem_dev_ci_high"]) == \
        pytest.approx(mmem_ci(y_dev, c_dev, rounds=20, seed=0))
    assert m["ner/PER/mmem_by_sentence_type/declarative"] == pytest.approx(t.mmem_all[:2].mean())
    assert m["ner/PER/mmem_by_slot_position/start"] == pytest.approx(t.mmem_all[1])
    from scipy.stats import kendalltau

    assert m["ner/PER/kendall_tau_length"] == pytest.approx(kendalltau(t.n_words, t.mmem_all).statistic)


def test_no_raw_names_in_result_tables(audited):
    _, names, result = audited
    text = result.names.to_csv() + result.prompts_table.to_csv()
    assert not any(n in text for n in names.name)


def test_model_missing_the_type_fails_before_scoring(hash_key):
    clf = TokenClassifier(*tiny_token_classifier())
    calls = []
    clf.model.register_forward_hook(lambda *a: calls.append(1))
    with pytest.raises(ValueError, match="no tag B-person"):
        ner_audit(clf, names_table().assign(entity_type="person"),
                  prompts=PROMPTS.assign(entity_type="person"), handwritten=HAND.assign(entity_type="person"),
                  progress=False, hash_key=hash_key)
    assert calls == []


def test_compare_models_control_mean_and_tau(audited, tmp_path, hash_key):
    clf, names, a = audited
    other = TokenClassifier(*tiny_token_classifier(seed=1))
    b = ner_audit(other, names.assign(is_member=1 - names.is_member), prompts=PROMPTS, handwritten=HAND,
                  config=NerAuditConfig(bootstrap_rounds=0, token_removal=False, fprs=(0.1,)), progress=False,
                  hash_key=hash_key)
    metrics, taus = compare_models({"A": a, "B": b}, controls={"A": "B"})
    assert metrics["ner/PER/controlled/best_prompt_mmem"] == pytest.approx(
        (a.metrics["ner/PER/best_prompt_mmem"] + b.metrics["ner/PER/best_prompt_mmem"]) / 2)
    from scipy.stats import kendalltau

    row = taus[(taus.scores == "mmem_all")].iloc[0]
    assert row.tau == pytest.approx(kendalltau(a.prompts_table.mmem_all, b.prompts_table.mmem_all).statistic)


def test_unk_names_warning_reaches_the_result_and_the_report(hash_key):
    from mlflow_mia.audits.ner.report import render_ner_report

    clf = TokenClassifier(*tiny_token_classifier())
    names = names_table(8)
    names.loc[0, "name"] = "zyxw qqq"
    result = ner_audit(clf, names, prompts=PROMPTS, handwritten=HAND, progress=False,
                       config=NerAuditConfig(bootstrap_rounds=0, fprs=(0.1,), token_removal=False), hash_key=hash_key)
    assert len(result.warnings) == 1 and result.warnings[0].startswith("1 of 8 PER name(s) contain characters")
    assert f"- {result.warnings[0]}" in render_ner_report(result)


def test_prompt_gap_and_sigma_come_with_their_label_permutation_null(audited):
    from mlflow_mia.audits.ner.report import render_ner_report
    from mlflow_mia.metrics.permutation import prompt_spread_null

    clf, names, result = audited
    dev = (result.names.split == "dev").to_numpy()
    dev_names = list(names.name[dev])
    conf = np.stack([entity_confidence(clf, [p] * len(dev_names), dev_names, ["PER"] * len(dev_names), progress=False)
                     for p in result.prompts_table.prompt])
    null = prompt_spread_null(names.is_member.to_numpy()[dev], conf, seed=0)
    m = result.metrics
    assert m["ner/PER/prompt_gap_null_q95"] == pytest.approx(null.gap_null_quantile)
    assert m["ner/PER/prompt_std_null_q95"] == pytest.approx(null.std_null_quantile)
    assert m["ner/PER/prompt_gap_null_pvalue"] == pytest.approx(null.gap_pvalue)
    assert null.gap == pytest.approx(m["ner/PER/prompt_gap"])
    report = render_ner_report(result)
    assert "| gap (pp) | gap null 95% (pp) | sigma (pp) | sigma null 95% (pp) |" in report
    assert f"| {100 * m['ner/PER/prompt_gap']:.1f} | {100 * m['ner/PER/prompt_gap_null_q95']:.1f} |" in report


def test_scoring_runs_no_model_and_gives_the_audits_metrics(audited, tmp_path, monkeypatch):
    """Stage 2 reads only the signals: with entity_confidence broken it still gives ner_audit's metrics."""
    import mlflow_mia.signals.entity_confidence as ec
    from mlflow_mia.audits.ner.scoring import score_ner
    from mlflow_mia.audits.ner.signals import ner_signals

    clf, names, result = audited
    cfg = NerAuditConfig(bootstrap_rounds=20, fprs=(0.1,))
    signals = ner_signals(clf, names, prompts=PROMPTS, handwritten=HAND, config=cfg, progress=False)
    assert signals.confidences["PER"].shape == (len(PROMPTS) + 1 + len(HAND), len(names))

    def no_model(*args, **kwargs):
        raise AssertionError("stage 2 ran a model")

    monkeypatch.setattr(ec, "entity_confidence", no_model)
    monkeypatch.setattr("mlflow_mia.audits.ner.signals.entity_confidence", no_model)
    scored = score_ner(signals, config=cfg, hash_key=result.hash_key)
    with pytest.raises(TypeError, match=r"score_ner needs hash_key=HashKey \(got bytes\): resolve one with "
                                        r"mlflow_mia.hashing.resolve_hash_key"):
        score_ner(signals, config=cfg, hash_key=b"a raw key")
    assert scored.metrics.keys() == result.metrics.keys()
    for key, value in result.metrics.items():
        assert scored.metrics[key] == pytest.approx(value, nan_ok=True), key
