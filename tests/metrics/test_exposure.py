"""Exposure (Carlini et al. 2019, Sec. 4): exact rank, sampled estimate capped at its resolution, skew-normal
extrapolation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mlflow_mia.metrics.exposure import exposure, exposure_from_rank, extrapolated_exposure, sampled_resolution


def test_ties_count_against_the_secret():
    res = exposure([0.0], [0.0, 0.0, 0.0, 1.0], space_size=4, exact=True)
    assert res.rank.tolist() == [3.0]  # the Secret Sharer's rank: candidates scored <= the secret
    assert res.exposure[0] == pytest.approx(math.log2(4) - math.log2(3))
    assert round(float(res.exposure[0]), 3) == 0.415  # not 2 bits (rank 1, ties in the secret's favour)
    flat = exposure([2.0], np.full(8, 2.0), space_size=8, exact=True)
    assert flat.exposure.tolist() == [0.0]  # a model that tells no secret apart shows no exposure


def test_exact_exposure_is_the_brute_force_rank_with_ties_against_the_secret():
    rng = np.random.default_rng(0)
    space = rng.integers(0, 50, size=200).astype(float)  # many ties
    secrets = space[[3, 17, 150]]
    res = exposure(secrets, space, space_size=200, exact=True)
    brute = [sum(1 for c in space if c <= s) for s in secrets]
    assert res.rank.tolist() == brute
    assert res.exposure.tolist() == pytest.approx([math.log2(200) - math.log2(b) for b in brute])
    assert res.resolution == pytest.approx(math.log2(200))
    assert not res.capped.any()
    np.testing.assert_array_equal(res.headline, res.exposure)  # exact: the rank is the headline


def test_sampled_exposure_estimates_the_fraction_at_least_as_likely():
    cand = np.arange(100.0)
    res = exposure([25.0, 24.5], cand, space_size=10**6, exact=False)
    # 26 of 100 candidates score <= 25 (ties against the secret), 25 score <= 24.5
    assert res.rank.tolist() == pytest.approx([1 + (10**6 - 1) * 0.26, 1 + (10**6 - 1) * 0.25])
    assert res.exposure.tolist() == pytest.approx([math.log2(10**6) - math.log2(r) for r in res.rank])
    assert not res.exact and res.n_candidates == 100 and not res.capped.any()


def test_sampled_exposure_is_capped_at_its_resolution_and_flagged():
    cand = np.arange(1000.0)
    res = exposure([-1.0, 0.0, 0.5], cand, space_size=10**9, exact=False)
    assert res.resolution == pytest.approx(math.log2(1001)) == sampled_resolution(1000)
    # ahead of all 1,000 candidates: log2 |R| = 29.9 bits uncapped; 1,000 candidates resolve log2(1001) = 9.97
    assert res.exposure[0] == pytest.approx(math.log2(1001)) and res.capped.tolist() == [True, False, False]
    assert res.rank[0] == 1.0  # the estimate before the cap
    # one candidate at least as likely (a tie): below the cap, not flagged
    assert res.exposure[1] == pytest.approx(math.log2(10**9) - math.log2(1 + (10**9 - 1) / 1000))
    assert res.exposure[1] < res.resolution and res.exposure[2] == res.exposure[1]


def test_extrapolated_exposure_follows_the_fitted_tail_and_is_the_sampled_headline():
    rng = np.random.default_rng(1)
    cand = rng.normal(loc=10.0, scale=1.0, size=5000)
    far = 10.0 - 5.0  # 5 standard deviations: beyond what 5,000 samples resolve
    got = extrapolated_exposure([far], cand, space_size=10**9)[0]
    assert got == pytest.approx(-stats.norm.logcdf(-5.0) / math.log(2), rel=0.1)
    res = exposure([far], cand, space_size=10**9, exact=False)
    assert res.exposure[0] == pytest.approx(math.log2(5001)) and res.capped[0]  # ">= 12.3 bits"
    assert res.headline[0] == res.extrapolated[0] == pytest.approx(got) and res.headline[0] > res.exposure[0]
    assert res.headline_is_extrapolated.tolist() == [True]
    capped = extrapolated_exposure([-100.0], cand, space_size=1000)[0]
    assert capped == pytest.approx(math.log2(1000))


def test_sampled_headline_falls_back_to_the_capped_rank_when_no_fit():
    res = exposure([-1.0], np.arange(5.0), space_size=10**6, exact=False)  # 5 candidates: no skew-normal fit
    assert math.isnan(res.extrapolated[0]) and not res.headline_is_extrapolated[0]
    assert res.headline[0] == res.exposure[0] == pytest.approx(math.log2(6)) and res.capped[0]


def test_bad_input():
    with pytest.raises(ValueError, match="every one of the 10 secrets"):
        exposure([1.0], np.arange(5.0), space_size=10, exact=True)
    with pytest.raises(ValueError, match="NaN"):
        exposure([np.nan], np.arange(5.0), space_size=10, exact=False)
    with pytest.raises(ValueError, match=r"ranks must be in \[1, 10\]"):
        exposure_from_rank([0], 10)
    with pytest.raises(ValueError, match="n_candidates must be >= 1"):
        sampled_resolution(0)
