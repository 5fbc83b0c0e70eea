import numpy as np
import pytest
import torch

from mlflow_mia.signals import MaskedLM
from mlflow_mia.signals.neighbour_local import changed_region, local_differences, local_scores
from mlflow_mia.signals.testing import tiny_bert


@pytest.fixture(scope="module")
def lm():
    model, tok = tiny_bert(seed=1)
    return MaskedLM(model, tok, name="tiny")


def nll(lm, text, position):
    """-log p(token at position | the text with that one token masked), by one forward pass."""
    ids = torch.tensor(lm.tokenizer(text)["input_ids"])[None]
    original = int(ids[0, position])
    ids[0, position] = lm.tokenizer.mask_token_id
    with torch.no_grad():
        logits = lm.model(input_ids=ids).logits[0, position]
    return -float(torch.log_softmax(logits, -1)[original])


def test_changed_region_on_insertions_and_equal_sequences():
    assert changed_region(np.array([5, 6, 7]), np.array([5, 6, 7])) == (3, 0)
    assert changed_region(np.array([1, 2, 3]), np.array([1, 4, 5, 3])) == (1, 1)
    assert changed_region(np.array([1, 2, 2]), np.array([1, 2])) == (2, 0)


def test_one_word_swap_is_the_log_ratio_at_that_position(lm):
    text, nb = "the cat sat on the mat", "the dog sat on the mat"
    # [CLS] the cat ... : the swapped word is token 2; both masked inputs are the same
    expected = nll(lm, nb, 2) - nll(lm, text, 2)
    got = local_differences(lm, [text], [[nb]])
    assert got[0].shape == (1,)
    assert got[0][0] == pytest.approx(expected, abs=1e-5)


def test_word_of_two_pieces_sums_both_pieces(lm):
    text, nb = "the cat sat", "the cats sat"
    assert lm.tokenizer.tokenize(nb) == ["the", "cat", "##s", "sat"]
    # changed region: "cat" (position 2) in the text; "cat ##s" (positions 2, 3) in the neighbour
    # (common prefix [CLS] the cat would stop at ##s vs sat: prefix 3, suffix sat [SEP] 2 -> text region empty)
    p, s = changed_region(np.array(lm.tokenizer(text)["input_ids"]), np.array(lm.tokenizer(nb)["input_ids"]))
    assert (p, s) == (3, 2)
    expected = nll(lm, nb, 3)  # only ##s differs; nothing of the text is in the region
    assert local_differences(lm, [text], [[nb]])[0][0] == pytest.approx(expected, abs=1e-5)


def test_scores_average_over_neighbours_and_nan_without_any(lm):
    texts = ["the cat sat on the mat", "a dog ran"]
    nbs = [["the dog sat on the mat", "the cat ran on the mat"], []]
    d = local_differences(lm, texts, nbs)
    expected = [nll(lm, nbs[0][0], 2) - nll(lm, texts[0], 2), nll(lm, nbs[0][1], 3) - nll(lm, texts[0], 3)]
    np.testing.assert_allclose(d[0], expected, atol=1e-5)
    assert d[1].shape == (0,)
    s = local_scores(lm, texts, nbs)
    assert s[0] == pytest.approx(np.mean(expected), abs=1e-5) and np.isnan(s[1])


def test_audit_runs_neighbourhood_local_beside_the_paper_variant(lm):
    import random

    from mlflow_mia.attacks import ATTACKS
    from mlflow_mia.audits.membership import run_audit
    from mlflow_mia.config import AuditConfig, MetricConfig, NeighbourhoodConfig, SignalConfig
    from mlflow_mia.data import AuditDataset, PopulationSet
    from mlflow_mia.signals.neighbours import generate_neighbours
    from mlflow_mia.signals.testing import WORDS

    words = [w for w in WORDS if w.isalpha()]
    rng = random.Random(0)
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 9))) for _ in range(40)]
    pool = AuditDataset(texts=texts[:20], labels=[1] * 10 + [0] * 10)
    cfg = AuditConfig(attacks=("loss", "neighbourhood", "neighbourhood_local"), signal=SignalConfig(num_masks=2),
                      neighbourhood=NeighbourhoodConfig(num_neighbours=3),
                      metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=0))
    res = run_audit(lm, pool, PopulationSet(texts=texts[20:]), generator=lm, config=cfg, progress=False)
    assert "neighbourhood_local" in ATTACKS and "neighbourhood_local/auc" in res.metrics
    nbs = generate_neighbours(lm, list(pool.texts), config=cfg.neighbourhood, progress=False)
    np.testing.assert_allclose(res.samples["score_neighbourhood_local"], local_scores(lm, list(pool.texts), nbs),
                               atol=1e-6)


def test_docstring_examples():
    import doctest

    from mlflow_mia.attacks import neighbourhood_local
    from mlflow_mia.signals import neighbour_local

    assert doctest.testmod(neighbour_local).failed == 0
    assert doctest.testmod(neighbourhood_local).failed == 0
