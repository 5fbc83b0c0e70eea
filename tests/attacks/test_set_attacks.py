"""``lira_offline`` and ``rmia`` (attacks/lira_offline.py, attacks/rmia.py) against closed forms and brute force."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.metrics import roc_auc_score

from mlflow_mia.attacks import ATTACKS, AttackInputs, ReferenceSignals, get_attack, required_roles
from mlflow_mia.attacks.lira_offline import LiraOfflineSettings, global_spread, lira_offline_scores
from mlflow_mia.attacks.rmia import (RmiaSettings, choose_offline_a, log_likelihood_ratio, per_token_loglik,
                                     rmia_scores, rmia_tie_break)
from mlflow_mia.config import AuditConfig
from mlflow_mia.metrics.roc import roc, tpr_at_fpr_from_roc
from mlflow_mia.signals.types import SignalResult


def _pll(values):
    return SignalResult.from_arrays(values, n_tokens=np.full(len(values), 5), kind="pll")


def _gaussians(n=200, k=3, seed=0):
    """Synthetic energies: references ~ N(mu_x, 1), members' target 1.5 nats lower than their OUT mean."""
    rng = np.random.default_rng(seed)
    mu = rng.normal(30.0, 5.0, size=n)
    refs = mu + rng.normal(0.0, 1.0, size=(k, n))
    labels = rng.integers(0, 2, size=n)
    target = mu + rng.normal(0.0, 1.0, size=n) - 1.5 * labels
    return target, refs, labels


def test_lira_offline_equals_the_one_sided_gaussian_test_with_a_per_sample_spread():
    target, refs, _ = _gaussians(k=5)
    got = lira_offline_scores(target, refs)
    for i in range(len(target)):
        # The offline test of Carlini et al.: p = Pr[S >= s_t] for S ~ N(mu_out, sigma_out^2), with s = -energy.
        s_out = -refs[:, i]
        p = norm.sf(-target[i], loc=s_out.mean(), scale=s_out.std(ddof=1))
        assert norm.sf(got[i]) == pytest.approx(p, rel=1e-9, abs=1e-12)  # the score is the p-value's z


def test_lira_offline_with_few_references_uses_one_global_spread_from_the_population():
    target, refs, labels = _gaussians(k=3)
    pop_target, pop_refs, _ = _gaussians(k=3, seed=1)
    pooled = np.sqrt(np.mean([np.var(pop_refs[:, j], ddof=1) for j in range(pop_refs.shape[1])]))
    assert global_spread(pop_refs) == pytest.approx(pooled)
    sig = lambda v: SignalResult.from_arrays(v, n_tokens=np.full(len(v), 5))  # noqa: E731
    population = AttackInputs(["p"] * len(pop_target), population="self", target=sig(pop_target),
                              references=[sig(r) for r in pop_refs])
    pool = AttackInputs(["x"] * len(target), population=population, target=sig(target),
                        references=[sig(r) for r in refs])
    attack = get_attack("lira_offline")
    np.testing.assert_allclose(attack(pool), (refs.mean(axis=0) - target) / pooled)
    np.testing.assert_allclose(attack(population), (pop_refs.mean(axis=0) - pop_target) / pooled)
    assert attack.record(pool) == {"n_references": 3, "spread": "global", "global_spread": pytest.approx(pooled),
                                   "per_sample_spread_min": 64}
    assert roc_auc_score(labels, attack(pool)) > 0.75  # members (lower energies) score higher


def test_lira_offline_per_sample_spread_from_the_threshold_on():
    target, refs, _ = _gaussians(k=4)
    sig = lambda v: SignalResult.from_arrays(v, n_tokens=np.full(len(v), 5))  # noqa: E731
    inputs = AttackInputs(["x"] * len(target), target=sig(target), references=[sig(r) for r in refs])
    got = get_attack("lira_offline", per_sample_spread_min=4)(inputs)
    np.testing.assert_allclose(got, (refs.mean(axis=0) - target) / refs.std(axis=0, ddof=1))
    with pytest.raises(ValueError, match="per_sample_spread_min must be an int >= 2"):
        LiraOfflineSettings(per_sample_spread_min=1)


def test_lira_offline_with_one_reference_ranks_like_the_likelihood_ratio():
    target, refs, labels = _gaussians(k=1)
    inputs = AttackInputs(["x"] * len(target), target=_pll(target), reference=_pll(refs[0]),
                          references=[_pll(refs[0])])
    lira, lr = get_attack("lira_offline")(inputs), get_attack("likelihood_ratio")(inputs)
    assert roc_auc_score(labels, lira) == pytest.approx(roc_auc_score(labels, lr))
    np.testing.assert_allclose(lira * np.std(refs[0], ddof=1), lr)


def _direct_rmia(target_ll, ref_ll, pop_target_ll, pop_ref_ll, *, a, gamma):
    """The paper's definition, one (x, z) pair at a time, in probabilities."""
    def pr_x(ref_col):
        p_out = np.mean(np.exp(ref_col))
        return ((1 + a) * p_out + (1 - a)) / 2

    out = []
    for i in range(len(target_ll)):
        ratio_x = np.exp(target_ll[i]) / pr_x(ref_ll[:, i])
        hits = 0
        for j in range(len(pop_target_ll)):
            ratio_z = np.exp(pop_target_ll[j]) / pr_x(pop_ref_ll[:, j])
            hits += (ratio_x / ratio_z) >= gamma
        out.append(hits / len(pop_target_ll))
    return np.array(out)


@pytest.mark.parametrize("a, gamma", [(1.0, 1.0), (0.3, 1.0), (0.5, 1.5), (0.0, 0.8)])
def test_rmia_equals_the_direct_loop_over_pairs(a, gamma):
    rng = np.random.default_rng(3)
    n, m, k = 25, 40, 3
    target, refs = rng.normal(-3, 0.7, n), rng.normal(-3, 0.7, (k, n))
    pop_target, pop_refs = rng.normal(-3, 0.7, m), rng.normal(-3, 0.7, (k, m))
    x = log_likelihood_ratio(target, refs, a=a)
    z = log_likelihood_ratio(pop_target, pop_refs, a=a)
    direct = _direct_rmia(target, refs, pop_target, pop_refs, a=a, gamma=gamma)
    np.testing.assert_allclose(rmia_scores(x, z, gamma=gamma, tie_break=False), direct)
    np.testing.assert_allclose(rmia_scores(x, z, gamma=gamma), direct + rmia_tie_break(x, m))
    order = rng.permutation(m)
    np.testing.assert_array_equal(rmia_scores(x, z[order], gamma=gamma), rmia_scores(x, z, gamma=gamma))


def test_rmia_attack_compares_pool_rows_with_the_population_and_population_rows_with_the_others():
    rng = np.random.default_rng(4)
    n, m = 12, 20
    t, r = rng.uniform(1, 4, n), rng.uniform(1, 4, (2, n))
    pt, pr = rng.uniform(1, 4, m), rng.uniform(1, 4, (2, m))
    population = AttackInputs(["p"] * m, population="self", target=_pll(pt), references=[_pll(v) for v in pr])
    pool = AttackInputs(["x"] * n, population=population, target=_pll(t), references=[_pll(v) for v in r])
    attack = get_attack("rmia", offline_a=0.4)
    x, z = log_likelihood_ratio(-t, -r, a=0.4), log_likelihood_ratio(-pt, -pr, a=0.4)
    np.testing.assert_allclose(attack(pool), _direct_rmia(-t, -r, -pt, -pr, a=0.4, gamma=1.0) + rmia_tie_break(x, m))
    loo = [_direct_rmia(-pt[[j]], -pr[:, [j]], np.delete(-pt, j), np.delete(-pr, j, axis=1), a=0.4, gamma=1.0)[0]
           for j in range(m)]
    np.testing.assert_allclose(attack(population), np.array(loo) + rmia_tie_break(z, m - 1))
    assert attack.record(pool)["offline_a"] == 0.4 and "arctan(log ratio)" in attack.record(pool)["tie_break"]


def test_rmia_with_one_reference_a_1_gamma_1_has_the_per_token_likelihood_ratio_auc():
    rng = np.random.default_rng(5)
    n, m = 60, 80
    labels = np.repeat([1, 0], n // 2)
    ref, target = rng.normal(3.0, 0.5, n), None
    target = ref + rng.normal(0, 0.3, n) - 0.4 * labels
    pop_ref = rng.normal(3.0, 0.5, m)
    pop_target = pop_ref + rng.normal(0, 0.3, m)
    population = AttackInputs(["p"] * m, population="self", target=_pll(pop_target), references=[_pll(pop_ref)])
    pool = AttackInputs(["x"] * n, population=population, target=_pll(target), references=[_pll(ref)],
                        reference=_pll(ref))
    rmia, lr = get_attack("rmia")(pool), get_attack("likelihood_ratio")(pool)
    # The score is the population's empirical CDF of the ratio: ties may merge ranks, never reorder them.
    assert np.all(np.diff(rmia[np.argsort(lr, kind="stable")]) >= 0)
    assert roc_auc_score(labels, rmia) == pytest.approx(roc_auc_score(labels, lr), abs=0.02)
    # With the tie-break no two distinct ratios merge: the same order, hence the same AUC, exactly.
    assert np.all(np.diff(rmia[np.argsort(lr, kind="stable")]) > 0)
    assert roc_auc_score(labels, rmia) == pytest.approx(roc_auc_score(labels, lr), abs=1e-12)


def test_rmia_tie_break_stays_below_half_a_step_and_increases_with_the_log_ratio():
    ratios = np.array([-1e6, -30.0, -1.0, 0.0, 1e-9, 1.0, 30.0, 1e6])
    for m in (1, 7, 2000):
        term = rmia_tie_break(ratios, m)
        assert np.all(term >= 0) and np.all(term < 1 / (2 * m)) and np.all(np.diff(term) > 0)
    # equal fractions are ordered by the ratio; different fractions keep their order
    z = np.array([-1.0, 0.0, 1.0])
    x = np.array([-0.5, -0.4, 0.9, 5.0, 50.0])
    scores, fractions = rmia_scores(x, z), rmia_scores(x, z, tie_break=False)
    assert fractions.tolist() == [1 / 3, 1 / 3, 2 / 3, 1.0, 1.0] and np.all(np.diff(scores) > 0)
    np.testing.assert_array_equal(np.floor(scores * 3 + 1e-9), np.floor(fractions * 3 + 1e-9))
    with pytest.raises(ValueError, match="n_population must be >= 1"):
        rmia_tie_break(x, 0)


def test_rmia_tpr_at_a_low_fpr_equals_the_log_ratios_when_every_pool_row_ties_at_one():
    rng = np.random.default_rng(7)
    z = rng.normal(0.0, 0.3, 2000)  # |Z| = 2,000 population log ratios
    n = 1500
    labels = np.repeat([1, 0], n)
    x = z.max() + 0.1 + rng.exponential(1.0, 2 * n) + 0.5 * labels  # every pool row above the largest z
    fractions = rmia_scores(x, z, tie_break=False)
    assert np.all(fractions == 1.0)  # without the tie-break: one tie, no TPR at a low FPR to read
    assert tpr_at_fpr_from_roc(roc(labels, fractions), 0.001) == 0.0
    scores = rmia_scores(x, z)
    assert np.all(scores > fractions)  # still higher = member, and above every tied fraction
    for alpha in (0.001, 0.01, 0.1):
        want = tpr_at_fpr_from_roc(roc(labels, x), alpha)
        assert tpr_at_fpr_from_roc(roc(labels, scores), alpha) == want
    assert tpr_at_fpr_from_roc(roc(labels, x), 0.001) > 0.0
    assert roc_auc_score(labels, scores) == pytest.approx(roc_auc_score(labels, x), abs=1e-12)


def test_rmia_per_token_likelihood_reads_token_logprobs_for_the_energy():
    sig = SignalResult.from_arrays([6.0, 2.0], n_tokens=[4, 2], token_logprobs=[[-1.0, -2.0, -3.0], [-2.0]])
    np.testing.assert_allclose(per_token_loglik(sig), [-2.0, -2.0])
    with pytest.raises(ValueError, match="rmia needs each text's masked-token log-probs"):
        per_token_loglik(SignalResult.from_arrays([1.0], n_tokens=[3]))


def test_rmia_log_space_keeps_tiny_probabilities():
    x = log_likelihood_ratio(np.array([-800.0]), np.array([[-801.0], [-900.0]]), a=1.0)
    assert x[0] == pytest.approx(1.0 + np.log(2.0))


def test_choose_offline_a_is_the_grid_value_of_the_best_auc():
    rng = np.random.default_rng(6)
    n, m = 80, 60
    labels = np.repeat([1, 0], n // 2)
    others = rng.normal(-3, 0.5, (2, n))
    stand_in = others.mean(axis=0) + rng.normal(0, 0.2, n) + 0.3 * labels
    pop_others = rng.normal(-3, 0.5, (2, m))
    pop_stand_in = pop_others.mean(axis=0) + rng.normal(0, 0.2, m)
    grid = [0.0, 0.5, 1.0]
    aucs = [roc_auc_score(labels, rmia_scores(log_likelihood_ratio(stand_in, others, a=a),
                                              log_likelihood_ratio(pop_stand_in, pop_others, a=a))) for a in grid]
    best = max(a for a, auc in zip(grid, aucs) if auc == max(aucs))
    assert choose_offline_a(stand_in, others, labels, population_stand_in=pop_stand_in,
                            population_others=pop_others, grid=grid) == best
    with pytest.raises(ValueError, match=r"at least one candidate value in `grid`"):
        choose_offline_a(stand_in, others, labels, population_stand_in=pop_stand_in, population_others=pop_others,
                         grid=[])


def test_rmia_settings_are_read_from_the_audit_config_and_checked():
    attack = get_attack("rmia", AuditConfig(attack_settings={"rmia": {"offline_a": 0.25, "gamma": 2.0}}))
    assert attack.settings == RmiaSettings(offline_a=0.25, gamma=2.0)
    with pytest.raises(ValueError, match=r"rmia offline_a must be in \[0, 1\]"):
        RmiaSettings(offline_a=1.5)
    with pytest.raises(ValueError, match="gamma must be > 0"):
        RmiaSettings(gamma=0.0)


def test_set_attacks_need_the_reference_role_and_a_reference_set():
    assert required_roles(["lira_offline", "rmia"]) == {"target": ("lira_offline", "rmia"),
                                                        "reference": ("lira_offline", "rmia")}
    assert ATTACKS["lira_offline"].requires == ("target", "references")
    inputs = AttackInputs(["a"], target=_pll([1.0]))
    with pytest.raises(ValueError, match=r"attack 'rmia' needs \['references'\]; give one or more reference"):
        get_attack("rmia")(inputs)
    with pytest.raises(ValueError, match="different numbers of rows"):
        ReferenceSignals((_pll([1.0]), _pll([1.0, 2.0])))
