"""``lira_online`` (attacks/lira_online.py) against a hand computation of the IN/OUT Gaussian likelihood ratio."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.metrics import roc_auc_score

from mlflow_mia.attacks import INPUTS, AttackInputs, get_attack, required_roles
from mlflow_mia.attacks.lira_online import LiraOnlineSettings, lira_online_scores, pooled_spread
from mlflow_mia.signals.types import SignalResult


def _sig(values):
    return SignalResult.from_arrays(values, n_tokens=np.full(len(values), 5))


def _balanced(n, k, rng):
    """Each text IN for exactly k/2 of the k shadows (the LiRA design)."""
    return rng.uniform(size=(n, k)).argsort(axis=1) < k // 2


def _shadows(n=120, k=6, seed=0, gap=1.5):
    """Energies: OUT shadows ~ N(mu_x, 1), IN shadows and member targets ``gap`` nats lower, IN spread 0.7."""
    rng = np.random.default_rng(seed)
    mu = rng.normal(30.0, 5.0, size=n)
    member = _balanced(n, k, rng)
    out = mu + rng.normal(0.0, 1.0, size=(k, n))
    inside = mu - gap + rng.normal(0.0, 0.7, size=(k, n))
    shadows = np.where(member.T, inside, out)
    labels = rng.integers(0, 2, size=n)
    target = mu + rng.normal(0.0, 1.0, size=n) - gap * labels
    return target, shadows, member, labels


def _by_hand(target, shadows, member, *, sigma_in=None, sigma_out=None):
    """The paper's Lambda per text, one text at a time, with scipy's normal log density."""
    out = []
    for i in range(len(target)):
        s = -target[i]
        s_in, s_out = -shadows[member[i], i], -shadows[~member[i], i]
        sd_in = s_in.std(ddof=1) if sigma_in is None else sigma_in
        sd_out = s_out.std(ddof=1) if sigma_out is None else sigma_out
        out.append(norm.logpdf(s, s_in.mean(), sd_in) - norm.logpdf(s, s_out.mean(), sd_out))
    return np.array(out)


def _pooled_by_hand(shadows, member, side):
    """sqrt(sum of squared deviations from each text's mean / sum of (count - 1)), texts one at a time."""
    ss, dof = 0.0, 0
    for i in range(shadows.shape[1]):
        v = shadows[member[i] == side, i]
        ss += np.sum((v - v.mean()) ** 2)
        dof += len(v) - 1
    return np.sqrt(ss / dof)


def test_global_variance_below_the_setting_equals_the_hand_computation_on_the_population():
    target, shadows, member, labels = _shadows(k=6)
    pop_target, pop_shadows, pop_member, _ = _shadows(k=6, seed=1)
    population = AttackInputs(["p"] * len(pop_target), population="self", target=_sig(pop_target),
                              references=[_sig(r) for r in pop_shadows], shadow_membership=pop_member)
    pool = AttackInputs(["x"] * len(target), population=population, target=_sig(target),
                        references=[_sig(r) for r in shadows], shadow_membership=member)
    sigma_in = _pooled_by_hand(pop_shadows, pop_member, True)
    sigma_out = _pooled_by_hand(pop_shadows, pop_member, False)
    assert 0.5 < sigma_in < 0.9 and 0.8 < sigma_out < 1.2  # the simulation's 0.7 and 1.0
    attack = get_attack("lira_online")
    np.testing.assert_allclose(attack(pool), _by_hand(target, shadows, member, sigma_in=sigma_in,
                                                      sigma_out=sigma_out), rtol=1e-10)
    np.testing.assert_allclose(attack(population), _by_hand(pop_target, pop_shadows, pop_member,
                                                             sigma_in=sigma_in, sigma_out=sigma_out), rtol=1e-10)
    assert attack.record(pool) == {"n_shadows": 6, "spread": "global", "global_spread_in": pytest.approx(sigma_in),
                                   "global_spread_out": pytest.approx(sigma_out), "per_text_variance_min": 64,
                                   "min_in_per_text": 3, "min_out_per_text": 3}
    assert roc_auc_score(labels, attack(pool)) > 0.8  # members (lower energies) score higher


def test_per_text_variance_from_the_setting_on_equals_the_hand_computation():
    target, shadows, member, _ = _shadows(n=40, k=8, seed=2)
    inputs = AttackInputs(["x"] * len(target), target=_sig(target), references=[_sig(r) for r in shadows],
                          shadow_membership=member)
    attack = get_attack("lira_online", per_text_variance_min=8)
    np.testing.assert_allclose(attack(inputs), _by_hand(target, shadows, member), rtol=1e-10)
    assert attack.record(inputs)["spread"] == "per_text"
    # one shadow fewer than the setting: global spreads, estimated on the rows scored (no population given)
    attack = get_attack("lira_online", per_text_variance_min=9)
    np.testing.assert_allclose(attack(inputs), _by_hand(
        target, shadows, member, sigma_in=_pooled_by_hand(shadows, member, True),
        sigma_out=_pooled_by_hand(shadows, member, False)), rtol=1e-10)


def test_pooled_spread_equals_the_root_mean_variance_when_every_text_has_as_many_values():
    rng = np.random.default_rng(3)
    values = rng.normal(size=(4, 10))
    assert pooled_spread(values) == pytest.approx(np.sqrt(np.mean(np.var(values, axis=0, ddof=1))))
    with pytest.raises(ValueError, match="no text has two OUT shadow models"):
        pooled_spread(np.array([[1.0, np.nan], [np.nan, 2.0]]), which="OUT")


def test_a_text_without_in_shadows_or_a_membership_of_the_wrong_width_is_an_error_naming_the_fix():
    target, shadows, member, _ = _shadows(n=10, k=4)
    member = member.copy()
    member[3] = False
    with pytest.raises(ValueError, match=r"1 of 10 texts have no IN shadow model; .* put every audited text"):
        lira_online_scores(target, shadows, member, spread_in=1.0, spread_out=1.0)
    inputs = AttackInputs(["x"] * 10, target=_sig(target), references=[_sig(r) for r in shadows[:3]],
                          shadow_membership=member)
    with pytest.raises(ValueError, match="the shadow membership has 4 columns but the audit has 3 reference models"):
        get_attack("lira_online")(inputs)
    with pytest.raises(ValueError, match=r"must be a 0/1 or bool matrix of shape \(n_rows, k\)"):
        AttackInputs(["x"] * 10, shadow_membership=np.full((10, 4), 0.5))


def test_the_attack_needs_the_membership_input_and_the_reference_role():
    target, shadows, member, _ = _shadows(n=10, k=4)
    inputs = AttackInputs(["x"] * 10, target=_sig(target), references=[_sig(r) for r in shadows])
    with pytest.raises(ValueError, match=r"needs \['shadow_membership'\]; the shadows' training record: give "
                                         r"the shadows as the references and their record \(option shadow_record"):
        get_attack("lira_online")(inputs)
    assert required_roles(["lira_online"]) == {"target": ("lira_online",), "reference": ("lira_online",)}
    assert INPUTS["shadow_membership"].take(member, np.array([2, 0])).tolist() == member[[2, 0]].tolist()
    with pytest.raises(ValueError, match="per_text_variance_min must be an int >= 4"):
        LiraOnlineSettings(per_text_variance_min=3)


def test_an_audit_scores_lira_online_from_signals_with_the_shadow_membership():
    from mlflow_mia.audits.membership import score_audit
    from mlflow_mia.config import AuditConfig, MetricConfig
    from mlflow_mia.data import AuditDataset, PopulationSet
    from mlflow_mia.audits.membership.signals import AuditSignals

    target, shadows, member, labels = _shadows(n=100, k=6, seed=4)
    texts = [f"text {i}" for i in range(100)]
    pool = AuditDataset(texts=texts[:40], labels=labels[:40])
    population = PopulationSet(texts=texts[40:])
    signals = AuditSignals({"target": _sig(target), "references": [_sig(r) for r in shadows],
                            "shadow_membership": member})
    config = AuditConfig(attacks=("lira_online",), metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=20))
    result = score_audit(signals, pool, population, config)
    sigma_in = _pooled_by_hand(shadows[:, 40:], member[40:], True)  # spreads from the population rows
    sigma_out = _pooled_by_hand(shadows[:, 40:], member[40:], False)
    np.testing.assert_allclose(result.samples["score_lira_online"], _by_hand(
        target[:40], shadows[:, :40], member[:40], sigma_in=sigma_in, sigma_out=sigma_out), rtol=1e-10)
    assert result.info["attack_settings"]["lira_online"]["global_spread_in"] == pytest.approx(sigma_in)
    assert result.metrics["lira_online/auc"] == pytest.approx(roc_auc_score(labels[:40], result.samples[
        "score_lira_online"]))


def test_lira_offline_and_rmia_read_only_each_texts_out_shadows_when_the_membership_is_given():
    from mlflow_mia.attacks.rmia import log_likelihood_ratio

    target, shadows, member, _ = _shadows(n=30, k=6, seed=5)
    pop_target, pop_shadows, pop_member, _ = _shadows(n=50, k=6, seed=6)
    population = AttackInputs(["p"] * 50, population="self", target=_sig(pop_target),
                              references=[_sig(r) for r in pop_shadows], shadow_membership=pop_member)
    pool = AttackInputs(["x"] * 30, population=population, target=_sig(target),
                        references=[_sig(r) for r in shadows], shadow_membership=member)
    sigma = _pooled_by_hand(pop_shadows, pop_member, False)
    by_hand = [(shadows[~member[i], i].mean() - target[i]) / sigma for i in range(30)]
    attack = get_attack("lira_offline")
    np.testing.assert_allclose(attack(pool), by_hand, rtol=1e-10)
    assert attack.record(pool)["global_spread"] == pytest.approx(sigma)
    assert attack.record(pool)["references_used"] == "OUT halves (shadow_membership)"
    # RMIA's Pr_OUT(x): the mean probability over the OUT shadows of x only (per-token log-likelihoods)
    logliks = -shadows / 10.0
    got = log_likelihood_ratio(-target / 10.0, logliks, a=1.0, membership=member)
    expected = [-target[i] / 10.0 - np.log(np.mean(np.exp(logliks[~member[i], i]))) for i in range(30)]
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    all_in = member.copy()
    all_in[0] = True
    with pytest.raises(ValueError, match="1 samples have no OUT reference model"):
        log_likelihood_ratio(-target, logliks, a=1.0, membership=all_in)


def test_rmia_fits_its_offline_a_on_the_first_shadow_as_a_stand_in_target_with_its_known_half():
    from mlflow_mia.attacks.rmia import choose_offline_a, log_likelihood_ratio, rmia_scores

    def pll(values):
        return SignalResult.from_arrays(values, n_tokens=np.full(len(values), 5), kind="pll")

    target, shadows, member, _ = _shadows(n=30, k=4, seed=7)
    pop_target, pop_shadows, pop_member, _ = _shadows(n=80, k=4, seed=8)
    target, shadows, pop_target, pop_shadows = target / 10, shadows / 10, pop_target / 10, pop_shadows / 10
    population = AttackInputs(["p"] * 80, population="self", target=pll(pop_target),
                              references=[pll(r) for r in pop_shadows], shadow_membership=pop_member)
    pool = AttackInputs(["x"] * 30, population=population, target=pll(target),
                        references=[pll(r) for r in shadows], shadow_membership=member)
    # by hand: samples = population rows with an OUT model among shadows 2..4; z = those the stand-in did not see
    ll = -pop_shadows
    usable = (~pop_member[:, 1:]).any(axis=1)
    z = usable & ~pop_member[:, 0]
    a = choose_offline_a(ll[0, usable], ll[1:, usable], pop_member[usable, 0].astype(int),
                         population_stand_in=ll[0, z], population_others=ll[1:, z],
                         others_membership=pop_member[usable, 1:], population_others_membership=pop_member[z, 1:])
    attack = get_attack("rmia")
    record = attack.record(pool)
    assert record["offline_a"] == a and record["offline_a_source"].startswith("fitted: reference 1 as a stand-in")
    x = log_likelihood_ratio(-target, -shadows, a=a, membership=member)
    zs = log_likelihood_ratio(-pop_target, -pop_shadows, a=a, membership=pop_member)
    np.testing.assert_allclose(attack(pool), rmia_scores(x, zs))
    assert get_attack("rmia", offline_a=0.3).record(pool)["offline_a"] == 0.3  # a setting still wins


def test_the_gate_runs_lira_online_only_with_four_or_more_shadows_of_known_halves():
    from mlflow_mia.attacks import gate_attacks

    assert "lira_online" not in gate_attacks(8)
    assert "lira_online" not in gate_attacks(2, shadow_membership=True)  # one IN, one OUT: no spread
    assert gate_attacks(4, shadow_membership=True) == gate_attacks(4) + ("lira_online",)
