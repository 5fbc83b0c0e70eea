"""Tests of mlflow_mia/metrics/permutation.py: the label-permutation null of prompt M-MEM spread."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from mlflow_mia.metrics.permutation import permuted_prompt_mmem, prompt_spread_null
from mlflow_mia.metrics.prompts import prompt_mmem, prompt_spread

Y = np.r_[np.ones(12, dtype=int), np.zeros(10, dtype=int)]


def _conf(seed=0, n_prompts=6):
    rng = np.random.default_rng(seed)
    return np.round(rng.random((n_prompts, Y.size)), 1)  # rounded: many ties


def test_permuted_mmem_equals_sklearn_for_every_row_and_prompt_ties_included():
    conf = _conf()
    rng = np.random.default_rng(1)
    labels = rng.permuted(np.tile(Y, (7, 1)), axis=1)
    got = permuted_prompt_mmem(Y, conf, labels)
    expected = np.array([[roc_auc_score(lab, c) for c in conf] for lab in labels])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(permuted_prompt_mmem(Y, conf, Y[None]), prompt_mmem(Y, conf)[None], atol=1e-12)


def test_null_equals_a_brute_force_loop_over_the_same_permutations():
    conf = _conf(2)
    null = prompt_spread_null(Y, conf, rounds=45, seed=3, chunk=20)
    rng = np.random.default_rng(3)
    gaps, stds = [], []
    for size in (20, 20, 5):
        for lab in rng.permuted(np.tile(Y, (size, 1)), axis=1):
            s = prompt_spread([roc_auc_score(lab, c) for c in conf])
            gaps.append(s["gap"])
            stds.append(s["std"])
    observed = prompt_spread(prompt_mmem(Y, conf))
    assert null.gap == pytest.approx(observed["gap"]) and null.std == pytest.approx(observed["std"])
    assert null.gap_null_quantile == pytest.approx(np.quantile(gaps, 0.95))
    assert null.std_null_quantile == pytest.approx(np.quantile(stds, 0.95))
    assert null.gap_pvalue == pytest.approx((1 + sum(g >= observed["gap"] - 1e-12 for g in gaps)) / 46)
    assert null.rounds == 45 and null.quantile == 0.95


def test_prompts_that_truly_differ_beat_the_null_and_equal_prompts_do_not():
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(40, dtype=int), np.zeros(40, dtype=int)]
    signal = np.linspace(0, 3, 10)[:, None] * y[None, :]  # prompt k shifts in-sample names by 3k/9
    real = prompt_spread_null(y, signal + rng.normal(size=(10, 80)), rounds=300)
    assert real.gap > real.gap_null_quantile and real.gap_pvalue < 0.01 and real.std_pvalue < 0.01
    same = prompt_spread_null(y, 0.5 * y[None, :] + rng.normal(size=(10, 80)), rounds=300)
    assert same.gap_pvalue > 0.05  # every prompt equally good: the spread is chance


@pytest.mark.parametrize("kwargs, match", [
    ({"rounds": 0}, "rounds must be an int >= 1, got 0"), ({"quantile": 1.0}, r"quantile must be in \(0, 1\)"),
])
def test_bad_settings_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        prompt_spread_null(Y, _conf(), **kwargs)


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match=r"n_prompts >= 2"):
        prompt_spread_null(Y, _conf()[:1])
    with pytest.raises(ValueError, match="one class only"):
        prompt_spread_null(np.ones(Y.size, dtype=int), _conf())
    with pytest.raises(ValueError, match=r"labels must have shape \(rounds, 22\)"):
        permuted_prompt_mmem(Y, _conf(), np.ones((2, 3)))
    bad = _conf()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        prompt_spread_null(Y, bad)


# ---- group_permutation_auc: an AUC against article-label permutations ------------------------------------------

from mlflow_mia.metrics.permutation import group_permutation_auc  # noqa: E402

GROUPS = np.repeat(np.arange(20), 10)  # 20 articles of 10 sentences; the first 10 are members
YG = (GROUPS < 10).astype(int)


def test_group_permutation_auc_is_sklearns_auc_and_matches_a_brute_force_loop():
    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 6, size=14)  # unequal articles: the member count changes per permutation
    groups = np.repeat(np.arange(14), sizes)
    y = (groups % 2 == 0).astype(int)
    score = np.round(rng.normal(size=groups.size) + 0.5 * y, 1)  # rounded: ties
    out = group_permutation_auc(y, score, groups=groups, rounds=300, seed=5, chunk=70)
    assert out.auc == pytest.approx(roc_auc_score(y, score), abs=1e-12)
    assert (out.n_member_groups, out.n_non_member_groups, out.rounds) == (7, 7, 300)
    # The same permutations, one at a time: shuffle the article labels, give each sentence its article's label.
    labels = np.array([1 if g % 2 == 0 else 0 for g in range(14)])
    gen, extreme = np.random.default_rng(5), 0
    for start in range(0, 300, 70):
        for row in gen.permuted(np.tile(labels, (min(70, 300 - start), 1)), axis=1):
            extreme += abs(roc_auc_score(row[groups], score) - 0.5) >= abs(out.auc - 0.5) - 1e-12
    assert out.pvalue == (1 + extreme) / 301


def test_article_labels_keep_the_dependence_that_sentence_labels_ignore():
    # Articles differ (a shared effect per article), membership does nothing: the AUC 0.683 is what a random
    # article split gives (p 0.19), though sentence-label shuffling would call it significant (p 0.002).
    rng = np.random.default_rng(0)
    score = rng.normal(size=20)[GROUPS] + 0.3 * rng.normal(size=200)
    by_article = group_permutation_auc(YG, score, groups=GROUPS, rounds=500)
    by_sentence = group_permutation_auc(YG, score, rounds=500)
    assert by_article.auc == by_sentence.auc == pytest.approx(0.683, abs=1e-3)
    assert by_article.pvalue > 0.1 and by_sentence.pvalue < 0.01


def test_group_permutation_auc_is_two_sided_and_floored():
    rng = np.random.default_rng(1)
    signal = rng.normal(size=200) + 4.0 * YG
    high = group_permutation_auc(YG, signal, groups=GROUPS, rounds=99, seed=2)
    low = group_permutation_auc(YG, -signal, groups=GROUPS, rounds=99, seed=2)  # as far below 0.5: as unlikely
    assert high.auc > 0.99 and low.auc == pytest.approx(1 - high.auc)
    assert high.pvalue == low.pvalue == 1 / 100  # no permutation as extreme; never 0 (Phipson and Smyth)


@pytest.mark.parametrize("kwargs, msg", [
    ({"y_true": [1, 0, 1, 0], "y_score": [1.0, 2.0, np.nan, 0.0]}, "NaN or infinite"),
    ({"y_true": [1, 1, 0, 0], "y_score": [1.0, 2.0, 3.0, 0.0], "groups": [0, 1, 1, 2]}, "members and non-members"),
    ({"y_true": [1, 1], "y_score": [1.0, 2.0]}, "one class only"),
    ({"y_true": [1, 0], "y_score": [1.0, 2.0], "rounds": 0}, "rounds must be an int >= 1"),
    ({"y_true": [1, 0], "y_score": [1.0, 2.0, 3.0]}, "y_score must have shape"),
])
def test_group_permutation_auc_rejects_bad_input(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        group_permutation_auc(**kwargs)
