import numpy as np
import pytest
from scipy.stats import kendalltau
from sklearn.metrics import roc_auc_score

from mlflow_mia.metrics.prompts import (ensemble_mmem, ensemble_scores, greedy_token_removal, kendall_tau,
                                        majority_vote_mmem, mmem, prompt_mmem, prompt_spread, tpr_at_dev_fpr)


def test_prompt_mmem_equals_sklearn_with_ties():
    rng = np.random.default_rng(0)
    y = np.repeat([1, 0], 30)
    conf = np.round(rng.random((7, 60)) + 0.2 * y, 1)  # rounding makes ties
    want = [roc_auc_score(y, row) for row in conf]
    np.testing.assert_allclose(prompt_mmem(y, conf), want, rtol=1e-12)
    assert mmem(y, conf[3]) == pytest.approx(want[3])


def test_prompt_mmem_one_class_is_an_error():
    with pytest.raises(ValueError, match="one class only"):
        prompt_mmem([1, 1], [[0.1, 0.2]])


def test_spread():
    s = prompt_spread([0.5, 0.7, 0.9])
    assert s["gap"] == pytest.approx(0.4)
    assert s["std"] == pytest.approx(np.sqrt(((0.2 ** 2) * 2) / 3))


# Hand-made case: 3 prompts, in-sample names a, b; out-of-sample names c, d.
Y = np.array([1, 1, 0, 0])
CONF = np.array([[0.9, 0.2, 0.5, 0.1],   # ranks (a,c) right, (a,d) right, (b,c) wrong, (b,d) right
                 [0.3, 0.8, 0.4, 0.6],   # (a,c) wrong, (a,d) wrong, (b,c) right, (b,d) right
                 [0.7, 0.6, 0.6, 0.2]])  # (a,c) right, (a,d) right, (b,c) tie, (b,d) right


def test_majority_vote_by_hand():
    # pair votes: (a,c) 2/3 -> 1; (a,d) 2/3 -> 1; (b,c) (0 + 1 + 0.5)/3 = 1/2 -> 1/2; (b,d) 3/3 -> 1
    assert majority_vote_mmem(Y, CONF) == pytest.approx((1 + 1 + 0.5 + 1) / 4)


def test_confidence_ensembles_by_hand():
    w = np.array([0.75, 0.5, 0.875])
    s = ensemble_scores(CONF, weights=w)
    np.testing.assert_allclose(s["avg_c"], CONF.mean(axis=0))
    np.testing.assert_allclose(s["max_c"], [0.9, 0.8, 0.6, 0.6])
    np.testing.assert_allclose(s["min_c"], [0.3, 0.2, 0.4, 0.1])
    np.testing.assert_allclose(s["wed_c"], (0.75 * CONF[0] + 0.5 * CONF[1] + 0.875 * CONF[2]) / 2.125)
    m = ensemble_mmem(Y, CONF, weights=w)
    assert list(m) == ["mv", "avg_c", "wed_c", "max_c", "min_c"]
    # max_c: a=.9, b=.8 vs c=.6, d=.6 -> all pairs right
    assert m["max_c"] == 1.0
    # min_c: a=.3, b=.2 vs c=.4, d=.1 -> (a,c) wrong, (a,d) right, (b,c) wrong, (b,d) right
    assert m["min_c"] == 0.5
    assert m["avg_c"] == pytest.approx(roc_auc_score(Y, CONF.mean(axis=0)))


def test_wed_c_rejects_bad_weights():
    with pytest.raises(ValueError, match="positive sum"):
        ensemble_scores(CONF, weights=[0, 0, 0])


def _score_by_length_and_letters(prompts):
    # a deterministic stand-in for dev M-MEM: prompts keeping the word "art" score high
    return np.array([0.5 + 0.3 * ("art" in p.split()) + 0.01 * len(p.split()) for p in prompts])


def test_token_removal_stops_at_one_word_and_is_deterministic():
    prompt = "Are you going to {name}'s art gallery opening tonight?"
    chain = greedy_token_removal(prompt, _score_by_length_and_letters, maximize=True)
    assert [s.prompt for s in chain] == [s.prompt for s in
                                         greedy_token_removal(prompt, _score_by_length_and_letters, maximize=True)]
    assert len(chain) == 7  # 8 words besides the slot word -> 7 removals
    assert chain[-1].prompt == "{name}'s art"  # "art" is kept to the end when maximizing
    assert len(chain[-1].prompt.split()) == 2
    worst = greedy_token_removal(prompt, _score_by_length_and_letters, maximize=False)
    assert worst[0].removed == "art" and worst[0].prompt == "Are you going to {name}'s gallery opening tonight?"
    # ties go to the leftmost word
    assert worst[1].removed == "Are"


def test_token_removal_short_prompt_and_bad_slot():
    assert greedy_token_removal("Hi {name}", _score_by_length_and_letters, maximize=True) == []
    with pytest.raises(ValueError, match="exactly one"):
        greedy_token_removal("no slot here", _score_by_length_and_letters, maximize=True)


def test_kendall_tau_equals_scipy():
    rng = np.random.default_rng(1)
    a, b = rng.random(50), rng.random(50)
    b[:10] = a[:10]
    tau, p = kendall_tau(a, b)
    ref = kendalltau(a, b)
    assert tau == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue)


def test_tpr_at_dev_fpr():
    dev_y = np.array([0] * 10 + [1] * 10)
    dev_s = np.concatenate([np.arange(10.0), np.arange(10.0)])
    test_y = np.array([1, 1, 1, 0, 0])
    test_s = np.array([9.5, 8.5, 7.0, 8.6, 1.0])
    r = tpr_at_dev_fpr(dev_y, dev_s, test_y, test_s, alpha=0.1)
    assert r["threshold"] == 8.0  # one of ten dev out-of-sample names above it
    assert r["tpr"] == pytest.approx(2 / 3) and r["fpr"] == pytest.approx(0.5)
    assert np.isnan(tpr_at_dev_fpr(dev_y, dev_s, test_y, test_s, alpha=0.01)["tpr"])  # 10 < 100 names
