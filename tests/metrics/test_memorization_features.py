import numpy as np
import pytest

from mlflow_mia.metrics.memorization_features import (memorization_feature_analysis, sample_features,
                                                      token_frequencies)


def test_token_frequencies_counts_and_rejects_out_of_vocab():
    assert token_frequencies([[0, 0, 4]], vocab_size=5).tolist() == [2, 0, 0, 0, 1]
    with pytest.raises(ValueError, match="len\\(tokenizer\\)"):
        token_frequencies([[5]], vocab_size=5)


def test_sample_features_match_hand_counts():
    freq = np.array([10, 1, 2, 3, 4])
    f = sample_features(["a1 b22 - c!", "xyz"], [[4, 3, 2, 1], [2]], freq)
    assert f["A_digits"].ravel().tolist() == [3, 0]
    assert f["B_length"].ravel().tolist() == [4, 1]
    assert f["C_non_alnum"].ravel().tolist() == [2, 0]
    assert f["D_rare_tokens"].tolist() == [[1, 2, 3], [2, 2, 2]]


def test_memorization_feature_analysis_finds_the_informative_feature():
    rng = np.random.default_rng(0)
    n = 400
    punct = rng.poisson(3, n).astype(float)
    exposed = punct + rng.normal(0, 0.5, n) > 4  # exposure driven by punctuation only
    feats = {"C_non_alnum": punct[:, None], "noise": rng.normal(size=(n, 2))}
    table = memorization_feature_analysis(feats, exposed, seed=0).set_index("features")
    assert list(table.index) == ["C_non_alnum", "noise", "all"]
    assert table.loc["C_non_alnum", "test_recall"] > 0.8
    assert table.loc["C_non_alnum", "test_precision"] > table.loc["noise", "test_precision"] + 0.2
    assert table.loc["C_non_alnum", "n_test"] == 120
    assert table.loc["C_non_alnum", "exposed_rate"] == pytest.approx(exposed.mean())


def test_memorization_feature_analysis_needs_both_classes():
    with pytest.raises(ValueError, match="1 of 10 members are exposed"):
        memorization_feature_analysis({"x": np.zeros((10, 1))}, [True] + [False] * 9)
