"""Tests of mlflow_mia.metrics.aggregate."""

import math
import warnings

import numpy as np
import pytest
from sklearn.exceptions import UndefinedMetricWarning

from mlflow_mia.metrics import GroupScores, group_scores, length_breakdown, riskiest_records


def python_group_scores(y, s, g):
    """Reference aggregation with a plain dict, independent of order."""
    acc = {}
    for label, score, gid in zip(y, s, g):
        labels, scores = acc.setdefault(gid, ([], []))
        labels.append(int(label))
        scores.append(float(score))
    return {gid: (labels[0], sum(scores) / len(scores), len(scores)) for gid, (labels, scores) in acc.items()}


@pytest.mark.parametrize("string_ids", [False, True])
def test_group_scores_matches_python_loop_with_unsorted_groups(string_ids):
    for seed in range(40):
        rng = np.random.default_rng(seed)
        n_groups = int(rng.integers(1, 30))
        group_label = rng.integers(0, 2, size=n_groups)
        g = rng.integers(0, n_groups, size=int(rng.integers(1, 120)))
        g = np.concatenate([g, [n_groups + 5]])  # singleton group as the very last row
        labels = np.concatenate([group_label[g[:-1]], [1]])
        s = rng.normal(size=g.size)
        ids = np.array([f"user-{i}" for i in g]) if string_ids else g
        out = group_scores(labels, s, ids)
        expected = python_group_scores(labels, s, ids.tolist())
        assert isinstance(out, GroupScores)
        assert sorted(expected) == out.groups.tolist()
        for gid, lab, score, size in zip(out.groups.tolist(), out.y_true, out.y_score, out.sizes):
            e_lab, e_score, e_size = expected[gid]
            assert (lab, size) == (e_lab, e_size)
            assert score == pytest.approx(e_score, rel=1e-12, abs=1e-12)


def test_last_group_is_not_dropped():
    out = group_scores([1, 1, 0, 0, 1], [1.0, 3.0, 0.0, 2.0, 7.0], [2, 2, 9, 9, 4])
    assert out.groups.tolist() == [2, 4, 9]
    assert out.y_true.tolist() == [1, 1, 0]
    assert out.y_score.tolist() == [2.0, 7.0, 1.0]
    assert out.sizes.tolist() == [2, 1, 2]


def test_interleaved_groups_are_not_assumed_sorted():
    out = group_scores([1, 0, 1, 0], [1.0, 10.0, 3.0, 20.0], ["a", "b", "a", "b"])
    assert out.y_score.tolist() == [2.0, 15.0]
    assert out.sizes.tolist() == [2, 2]


def test_mixed_label_group_raises_naming_it():
    with pytest.raises(ValueError, match="'patient-7'"):
        group_scores([1, 0, 1], [0.1, 0.2, 0.3], ["patient-7", "patient-7", "patient-2"])


def test_group_scores_input_errors():
    with pytest.raises(ValueError, match="groups"):
        group_scores([1, 0], [0.1, 0.2], [1])
    with pytest.raises(ValueError, match="groups"):
        group_scores([1, 0], [0.1, 0.2], [1.0, np.nan])
    with pytest.raises(ValueError, match="groups"):
        group_scores([1, 0], [0.1, 0.2], np.array(["a", None], dtype=object))
    with pytest.raises(ValueError, match="y_score"):
        group_scores([1, 0], [0.1, np.inf], [1, 2])


def test_length_breakdown_half_open_bins_and_auc():
    y = [1, 0, 1, 0, 1, 0, 1, 0]
    s = [0.9, 0.1, 0.8, 0.2, 0.3, 0.7, 0.5, 0.5]
    lengths = [10, 19, 12, 20, 20, 59, 45, 60]  # 20 is in [20, 60), 60 is in no bin
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = length_breakdown(y, s, lengths, bins=[(10, 20), (20, 60)])
    assert [r["bin"] for r in rows] == ["10-20", "20-60"]
    assert [(r["lo"], r["hi"]) for r in rows] == [(10, 20), (20, 60)]
    short, long_ = rows
    assert (short["n_members"], short["n_non_members"], short["auc"]) == (2, 1, 1.0)
    assert (long_["n_members"], long_["n_non_members"]) == (2, 2)
    # members 0.3, 0.5 vs non-members 0.2, 0.7: pairs 1 + 0 + 1 + 0 = 2 of 4
    assert long_["auc"] == 0.5
    assert set(short) == {"bin", "lo", "hi", "n_members", "n_non_members", "auc"}


def test_length_breakdown_one_class_bin_is_nan_without_crash():
    with pytest.warns(UndefinedMetricWarning) as record:
        rows = length_breakdown([1, 1, 0], [0.1, 0.2, 0.3], [30, 35, 5], bins=[(0, 10), (30, 40), (50, 60)])
    messages = [str(w.message) for w in record]
    assert len(messages) == 3
    assert all(f"length bin {b} " in m for b, m in zip(["0-10", "30-40", "50-60"], messages))
    assert math.isnan(rows[0]["auc"]) and math.isnan(rows[1]["auc"]) and math.isnan(rows[2]["auc"])
    assert (rows[1]["n_members"], rows[1]["n_non_members"]) == (2, 0)
    assert (rows[2]["n_members"], rows[2]["n_non_members"]) == (0, 0)


def test_length_breakdown_errors():
    with pytest.raises(ValueError, match="lengths"):
        length_breakdown([1, 0], [0.1, 0.2], [1], bins=[(0, 10)])
    with pytest.raises(ValueError, match="lengths"):
        length_breakdown([1, 0], [0.1, 0.2], [1, -3], bins=[(0, 10)])
    with pytest.raises(ValueError, match="bins"):
        length_breakdown([1, 0], [0.1, 0.2], [1, 2], bins=[])
    with pytest.raises(ValueError, match="lo < hi"):
        length_breakdown([1, 0], [0.1, 0.2], [1, 2], bins=[(10, 10)])


def test_riskiest_records_members_above_threshold_sorted_stably():
    y = np.array([1, 0, 1, 1, 1, 1, 1])
    s = np.array([0.5, 9.0, 0.7, 0.7, 0.2, 0.9, 0.7])
    out = riskiest_records(y, s, threshold=0.2, top=10)
    # non-member 1 excluded; member 4 at the threshold excluded (ties are not flagged)
    assert out.tolist() == [5, 2, 3, 6, 0]
    assert riskiest_records(y, s, threshold=0.2, top=2).tolist() == [5, 2]
    assert riskiest_records(y, s, threshold=0.2, top=0).tolist() == []
    assert riskiest_records(y, s, threshold=10.0, top=5).tolist() == []
    assert out.dtype == np.intp


def test_riskiest_records_matches_python_sort():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, size=300)
    s = rng.integers(0, 20, size=300).astype(float)
    expected = sorted((i for i in range(300) if y[i] == 1 and s[i] > 7.0), key=lambda i: -s[i])[:25]
    assert riskiest_records(y, s, threshold=7.0, top=25).tolist() == expected


def test_riskiest_records_rejects_bad_top():
    with pytest.raises(ValueError, match="top"):
        riskiest_records([1, 0], [1.0, 0.0], threshold=0.0, top=-1)
    with pytest.raises(ValueError, match="threshold"):
        riskiest_records([1, 0], [1.0, 0.0], threshold=float("nan"), top=1)
