"""The one-run bound (Steinke, Nasr, Jagielski 2023) against the paper's figures, brute force and Monte Carlo."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import expit

from mlflow_mia.metrics.one_run import (default_guess_grid, guesses_at, one_run_audit, one_run_epsilon,
                                        one_run_p_value, sparse_guess_grid)


@pytest.mark.parametrize(("m", "r", "v", "delta", "published"), [
    (1000, 100, 75, 1e-4, 0.673),       # Appendix D, the worked example under the code
    (100000, 1510, 1439, 1e-5, 2.675),  # Sec. 7, the best white-box DP-SGD audit (printed truncated)
])
def test_the_bound_reproduces_the_papers_figures(m, r, v, delta, published):
    assert one_run_epsilon(m, r, v, delta=delta, confidence=0.95) == pytest.approx(published, abs=1e-3)


def test_the_p_value_is_the_binomial_tail_plus_the_delta_term_by_brute_force():
    m, r, v, eps, delta = 500, 60, 41, 0.7, 1e-3
    q = math.exp(eps) / (1 + math.exp(eps))
    pmf = [math.comb(r, k) * q ** k * (1 - q) ** (r - k) for k in range(r + 1)]
    tail = sum(pmf[v:])
    worst = max(sum(pmf[v - i:v]) / i for i in range(1, v + 1))
    assert one_run_p_value(m, r, v, eps, delta=delta) == pytest.approx(tail + 2 * m * delta * worst, rel=1e-9)
    assert one_run_p_value(m, r, v, eps, delta=0.0) == pytest.approx(tail, rel=1e-9)


def test_the_bound_is_where_the_p_value_crosses_beta():
    eps = one_run_epsilon(2000, 300, 230, delta=1e-5, confidence=0.9)
    assert one_run_p_value(2000, 300, 230, eps, delta=1e-5) < 0.1
    assert one_run_p_value(2000, 300, 230, eps + 1e-6, delta=1e-5) >= 0.1


def test_no_evidence_gives_zero_and_bad_counts_are_refused():
    assert one_run_epsilon(100, 100, 50) == 0.0
    with pytest.raises(ValueError, match=r"0 <= v <= r <= m"):
        one_run_epsilon(100, 10, 11)
    with pytest.raises(ValueError, match=r"confidence must be in \(0, 1\)"):
        one_run_epsilon(100, 10, 9, confidence=1.0)


def _randomised_response_audits(m: int, eps: float, reps: int) -> np.ndarray:
    """Bounds of ``reps`` one-run audits of eps-DP randomised response on m canary bits.

    Each canary's bit is drawn fairly; the mechanism outputs it with probability
    e^eps / (1 + e^eps), else its flip (eps-DP per bit); the auditor scores each canary by
    the output and runs the audit as the package does (guess grid, Bonferroni split).
    """
    bounds = []
    for rep in range(reps):
        rng = np.random.default_rng([m, rep])
        bits = rng.integers(0, 2, size=m)
        output = np.where(rng.random(m) < expit(eps), bits, 1 - bits)
        bounds.append(one_run_audit(bits, output.astype(float), delta=1e-5, confidence=0.95, seed=rep).epsilon)
    return np.array(bounds)


def test_monte_carlo_randomised_response_bound_is_valid_and_approaches_the_true_epsilon():
    eps = 2.0
    medians = []
    for m in (100, 1000, 10000):
        bounds = _randomised_response_audits(m, eps, reps=200 if m < 10000 else 40)
        assert np.mean(bounds <= eps) >= 0.95, m
        medians.append(float(np.median(bounds)))
    assert medians[0] < medians[1] < medians[2] <= eps
    assert medians[2] > 0.9 * eps  # 10,000 canaries get within 10 % of the truth


def test_the_formula_alone_covers_at_its_level_over_many_draws():
    # Guessing on every canary (r = m): v ~ Bin(m, q) exactly, the bound's worst case.
    eps, m, reps = 1.5, 1000, 1000
    v = np.random.default_rng(7).binomial(m, expit(eps), size=reps)
    covered = np.mean([one_run_epsilon(m, m, int(k), delta=1e-5) <= eps for k in v])
    assert covered >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / reps)  # 95 % up to three standard errors


def test_guesses_take_the_top_and_bottom_scores_and_break_ties_at_random():
    s = np.array([0.1, 0.9, 0.5, 0.8, 0.2])
    assert guesses_at(s, 3).tolist() == [-1, 1, 0, 1, 0]
    ties = np.zeros(1000)
    picked = [np.flatnonzero(guesses_at(ties, 1, seed=k) == 1)[0] for k in range(50)]
    assert len(set(picked)) > 30  # not the first row every time


def test_the_audit_splits_the_level_over_the_grid_and_records_the_choice():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, size=1000)
    s = y + rng.normal(scale=0.5, size=1000)
    one = one_run_audit(y, s, grid=[100])
    assert one.epsilon == pytest.approx(one_run_epsilon(1000, 100, one.n_correct, delta=1e-5))
    full = one_run_audit(y, s)
    assert full.grid == default_guess_grid(1000) == (10, 20, 50, 100, 200, 500, 1000)
    i = full.grid.index(full.n_guesses)
    level = 1 - 0.05 / len(full.grid)
    assert full.epsilon == max(full.epsilons) == pytest.approx(
        one_run_epsilon(1000, full.n_guesses, full.correct[i], delta=1e-5, confidence=level))
    assert full.epsilon <= full.max_epsilon


def test_the_audit_refuses_bad_input():
    with pytest.raises(ValueError, match="inclusion bits 0/1"):
        one_run_audit([0, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="NaN or inf"):
        one_run_audit([0, 1], [0.1, np.nan])
    with pytest.raises(ValueError, match="equal length"):
        one_run_audit([0, 1, 1], [0.1, 0.2])


def test_scipy_binomial_tail_agrees():
    assert one_run_p_value(50, 40, 30, 0.5, delta=0.0) == pytest.approx(stats.binom.sf(29, 40, expit(0.5)))


def test_the_sparse_grid_is_three_fractions_of_m_with_at_least_ten_guesses():
    assert sparse_guess_grid(500) == (25, 100, 500)
    assert sparse_guess_grid(1000) == (50, 200, 1000)
    assert sparse_guess_grid(60) == (10, 12, 60)
    assert sparse_guess_grid(8) == (8,)
    with pytest.raises(ValueError, match="m must be >= 1"):
        sparse_guess_grid(0)
