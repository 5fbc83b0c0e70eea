"""Exposure (Carlini et al. 2019, Sec. 4): exact rank, sampled estimate, skew-normal extrapolation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mlflow_mia.metrics.exposure import exposure, exposure_from_rank, extrapolated_exposure


def test_exact_exposure_is_the_brute_force_rank_with_ties_in_the_secrets_favour():
    rng = np.random.default_rng(0)
    space = rng.integers(0, 50, size=200).astype(float)  # many ties
    secrets = space[[3, 17, 150]]
    res = exposure(secrets, space, space_size=200, exact=True)
    brute = [1 + sum(1 for c in space if c < s) for s in secrets]
    assert res.rank.tolist() == brute
    assert res.exposure.tolist() == pytest.approx([math.log2(200) - math.log2(b) for b in brute])
    assert res.resolution == pytest.approx(math.log2(200))


def test_sampled_exposure_estimates_the_fraction_likelier():
    cand = np.arange(100.0)
    res = exposure([25.0], cand, space_size=10**6, exact=False)
    assert res.rank[0] == pytest.approx(1 + (10**6 - 1) * 0.25)
    assert not res.exact and res.n_candidates == 100


def test_extrapolated_exposure_follows_the_fitted_tail():
    rng = np.random.default_rng(1)
    cand = rng.normal(loc=10.0, scale=1.0, size=5000)
    far = 10.0 - 5.0  # 5 standard deviations: beyond what 5,000 samples resolve
    got = extrapolated_exposure([far], cand, space_size=10**9)[0]
    assert got == pytest.approx(-stats.norm.logcdf(-5.0) / math.log(2), rel=0.1)
    assert exposure([far], cand, space_size=10**9, exact=False).exposure[0] == pytest.approx(math.log2(10**9))
    capped = extrapolated_exposure([-100.0], cand, space_size=1000)[0]
    assert capped == pytest.approx(math.log2(1000))


def test_bad_input():
    with pytest.raises(ValueError, match="every one of the 10 secrets"):
        exposure([1.0], np.arange(5.0), space_size=10, exact=True)
    with pytest.raises(ValueError, match="NaN"):
        exposure([np.nan], np.arange(5.0), space_size=10, exact=False)
    with pytest.raises(ValueError, match=r"ranks must be in \[1, 10\]"):
        exposure_from_rank([0], 10)
