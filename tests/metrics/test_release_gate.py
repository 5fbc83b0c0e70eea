"""The release gate decided on bounds (mlflow_mia.metrics.gate): simulations of known truth and constructed audits."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from mlflow_mia.audits.membership.scoring import attack_report
from mlflow_mia.config import AuditConfig, MetricConfig
from mlflow_mia.metrics.binomial import clopper_pearson_upper, per_side_confidence, tpr_bounds_at_fpr
from mlflow_mia.metrics.gate import FAIL, INCONCLUSIVE, PASS, Gate, check_gate_confidence
from mlflow_mia.metrics.aggregate import group_scores

BUDGET = 0.2
MU_AT_BUDGET = norm.ppf(0.99) - norm.ppf(1 - BUDGET)  # Gaussian scores whose TPR at 1 % FPR is the budget


def _audit_metrics(y, s, pop, *, groups=None, rounds=200, seed=0) -> dict:
    """Flat metrics of one attack as an audit logs them (sample level, and user level with groups)."""
    config = AuditConfig(metrics=MetricConfig(fprs=(0.01,), bootstrap_rounds=rounds, seed=seed))
    report = attack_report("loss", y, s, pop, config, groups=groups)
    metrics = {**report.metrics("loss/"), "n_members": int(y.sum()), "n_non_members": int((y == 0).sum())}
    if groups is not None:
        users = group_scores(y, s, groups)
        metrics.update({"user/n_members": int(users.y_true.sum()), "user/n_non_members": int((users.y_true == 0).sum())})
    return metrics


def _simulate(n_members, mu, rng, *, grouped, rounds=200, n_non_members=500):
    """One audit of Gaussian scores (TPR at 1 % FPR = 1 - Phi(z_0.99 - mu)); with groups of 5 sharing an effect."""
    if grouped:  # group effect N(0, 0.5) + noise N(0, 0.5): marginals N(0, 1) and N(mu, 1) as without groups
        sizes = (n_members, n_non_members)
        groups = np.r_[np.repeat(np.arange(sizes[0]), 5), sizes[0] + np.repeat(np.arange(sizes[1] // 5), 5)]
        effect = rng.normal(scale=math.sqrt(0.5), size=groups.max() + 1)[groups]
        y = np.r_[np.ones(5 * sizes[0], dtype=int), np.zeros(sizes[1], dtype=int)]
        s = effect + rng.normal(scale=math.sqrt(0.5), size=y.size) + mu * y
    else:
        groups = None
        y = np.r_[np.ones(n_members, dtype=int), np.zeros(n_non_members, dtype=int)]
        s = rng.normal(size=y.size) + mu * y
    return _audit_metrics(y, s, rng.normal(size=500), groups=groups, rounds=rounds, seed=int(rng.integers(1 << 30)))


def _skewed_articles(mu, rng, *, icc, n_articles=300, n_non_members=20_000, sigma=1.5, median=5):
    """Member articles of log-normal sizes sharing an effect (intra-class correlation ``icc``), independent non-members.

    Article sizes: ``round(median * exp(N(0, sigma)))``, at least 1 (sigma 1.5: Kish's effective number of 300
    articles is about 50). A member sample scores ``mu + sqrt(icc) * article effect + sqrt(1 - icc) * noise``, a
    non-member N(0, 1), so the sample-level TPR at 1 % FPR is ``1 - Phi(z_0.99 - mu)`` at any ICC. Returns
    ``(y, scores, groups, sizes)``.
    """
    sizes = np.maximum(1, np.round(median * np.exp(rng.normal(scale=sigma, size=n_articles)))).astype(int)
    article = np.repeat(np.arange(n_articles), sizes)
    members = (mu + math.sqrt(icc) * rng.normal(size=n_articles)[article]
               + math.sqrt(1.0 - icc) * rng.normal(size=article.size))
    y = np.r_[np.ones(article.size, dtype=int), np.zeros(n_non_members, dtype=int)]
    groups = np.r_[article, n_articles + np.arange(n_non_members)]
    return y, np.r_[members, rng.normal(size=n_non_members)], groups, sizes


def _simulate_skewed(mu, rng, *, icc, rounds=200, **sizes):
    """One audit's metrics (:func:`_audit_metrics`) of :func:`_skewed_articles`."""
    y, s, groups, _ = _skewed_articles(mu, rng, icc=icc, **sizes)
    return _audit_metrics(y, s, rng.normal(size=500), groups=groups, rounds=rounds, seed=int(rng.integers(1 << 30)))


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("n_members", [1, 3, 10, 30, 300])
def test_at_the_budget_the_gate_passes_and_fails_at_most_5_percent(n_members, grouped):
    """TPR at 1 % FPR equal to the budget, 500 non-members: a valid gate passes (and fails) at most 5 % of audits."""
    rng = np.random.default_rng(1000 * n_members + grouped)
    n_sims = 60 if grouped else 100
    gate = Gate.parse(f"0.01:{BUDGET}")
    status = [gate.check(_simulate(n_members, MU_AT_BUDGET, rng, grouped=grouped)).status for _ in range(n_sims)]
    limit = 0.05 + 3 * math.sqrt(0.05 * 0.95 / n_sims)  # plus three Monte-Carlo standard errors
    assert status.count(PASS) / n_sims <= limit and status.count(FAIL) / n_sims <= limit


def test_without_a_bootstrap_the_binomial_bounds_alone_are_still_valid():
    rng = np.random.default_rng(5)
    gate = Gate.parse(f"0.01:{BUDGET}")
    for n_members in (100, 300):
        status = [gate.check(_simulate(n_members, MU_AT_BUDGET, rng, grouped=False, rounds=0)).status
                  for _ in range(100)]
        assert status.count(PASS) <= 12 and status.count(FAIL) <= 12


def test_skewed_article_sizes_at_high_icc_pass_at_most_5_percent_at_the_budget():
    """300 member articles of log-normal sizes (sigma 1.5), ICC 0.99, 5,000 non-members, true TPR at the budget.

    200 seeded audits (about 5 s). The member bound counts Kish's effective number of articles (about 50): it passes
    at most 10 of them (5 %; 0 here). Counting each article as one trial, as before, passes more than 10 of the same
    audits (about 10 %), so the simulation can tell the two apart.
    """
    rng = np.random.default_rng(66)
    n_sims, side = 200, per_side_confidence(0.95)
    kish = per_article = 0
    for _ in range(n_sims):
        y, s, groups, sizes = _skewed_articles(MU_AT_BUDGET, rng, icc=0.99, n_non_members=5_000)
        b = tpr_bounds_at_fpr(y, s, alpha=0.01, confidence=0.95, groups=groups)
        assert b.n_member_units == 300 and b.n_member_trials == sizes.sum() ** 2 // (sizes ** 2).sum()
        kish += b.upper <= BUDGET
        g1 = b.n_member_units
        per_article += clopper_pearson_upper(min(b.upper_tpr * g1, g1), g1, confidence=side, whole=False) <= BUDGET
    assert kish <= 0.05 * n_sims
    assert per_article > 0.05 * n_sims


def test_clearly_under_the_budget_with_300_members_it_passes_most_audits():
    """True TPR at 1 % FPR 0.05 against a budget of 0.2: the gate passes 20 of 20 seeded audits here."""
    rng = np.random.default_rng(3)
    mu = norm.ppf(0.99) - norm.ppf(0.95)
    status = [Gate.parse(f"0.01:{BUDGET}").check(_simulate(300, mu, rng, grouped=False)).status for _ in range(20)]
    assert status.count(PASS) >= 18


def test_clearly_over_the_budget_with_300_members_it_fails():
    rng = np.random.default_rng(4)
    mu = norm.ppf(0.99) - norm.ppf(0.3)  # TPR at 1 % FPR = 0.7
    status = [Gate.parse("0.01:0.2").check(_simulate(300, mu, rng, grouped=False)).status for _ in range(10)]
    assert status == [FAIL] * 10


@pytest.mark.parametrize("n_members,n_non_members,budget", [(3, 200, 0.5), (1, 100, 0.05)])
def test_a_handful_of_members_with_none_caught_is_inconclusive_and_says_how_many_would_do(n_members, n_non_members,
                                                                                          budget):
    y = np.r_[np.ones(n_members, dtype=int), np.zeros(n_non_members, dtype=int)]
    s = np.r_[np.zeros(n_members), np.arange(1.0, n_non_members + 1)]  # no member above any non-member: TPR 0
    metrics = _audit_metrics(y, s, np.arange(1000.0))
    result = Gate.parse(f"0.01:{budget}").check(metrics)
    check = result.checks[0]
    assert result.status == INCONCLUSIVE and check["value"] == 0.0
    assert metrics["loss/tpr_at_fpr_0.01_upper_bootstrap"] == 0.0  # the percentile bootstrap collapses
    assert check["bound"] == "binomial" and check["upper"] > budget
    # members needed: the smallest n with the 97.5 % Clopper-Pearson bound of 0 of n under the budget
    needed = check["members_needed"]
    assert clopper_pearson_upper(0, needed, confidence=0.975) <= budget
    assert clopper_pearson_upper(0, needed - 1, confidence=0.975) > budget
    assert f"{needed - n_members} more members ({needed} in all)" in result.message()


def test_a_point_estimate_over_the_budget_with_its_lower_bound_under_it_is_inconclusive():
    metrics = {"loss/tpr_at_fpr_0.01": 0.3, "loss/tpr_at_fpr_0.01_upper_binomial": 0.6,
               "loss/tpr_at_fpr_0.01_lower_binomial": 0.1, "loss/tpr_at_fpr_0.01_upper_bootstrap": 0.5,
               "loss/tpr_at_fpr_0.01_lower_bootstrap": 0.15, "loss/tpr_at_fpr_0.01_upper_at_tpr": 0.35,
               "n_members": 40, "n_non_members": 1000}
    result = Gate.parse("0.01:0.2").check(metrics)
    check = result.checks[0]
    assert result.status == INCONCLUSIVE and (check["upper"], check["bound"]) == (0.6, "binomial")
    assert (check["lower"], check["lower_bound"]) == (0.1, "binomial")
    assert "is over its budget, but its 95% lower bound 0.100 is not" in result.message()
    assert check["unbounded"] and "no number of members passes with 1000 non-members" in result.message()
    # The looser of the two bounds decides each side: a tighter lower bound over the budget fails.
    failing = {**metrics, "loss/tpr_at_fpr_0.01_lower_binomial": 0.25, "loss/tpr_at_fpr_0.01_lower_bootstrap": 0.22}
    result = Gate.parse("0.01:0.2").check(failing)
    assert result.status == FAIL and (result.checks[0]["lower"], result.checks[0]["lower_bound"]) == (0.22, "bootstrap")
    assert "its 95% lower bound 0.220 > 0.2" in result.message()


def test_metrics_without_the_binomial_bounds_can_neither_pass_nor_fail():
    for value in (0.0, 0.9):
        metrics = {"loss/tpr_at_fpr_0.01": value, "loss/tpr_at_fpr_0.01_upper": value, "n_members": 10_000,
                   "n_non_members": 10_000}
        result = Gate.parse("0.01:0.2").check(metrics)
        assert result.status == INCONCLUSIVE and "earlier release" in result.message()


@pytest.mark.parametrize("spec,match", [("0.1:1", r"\[0, 1\)"), ("0.01:inf", "finite"), ("0.01:nan", "finite"),
                                        ("0.01:1.5", r"\[0, 1\)")])
def test_budgets_that_every_model_passes_are_refused(spec, match):
    with pytest.raises(ValueError, match=match):
        Gate.parse(spec)


@pytest.mark.parametrize("confidence", [0.0001, 0.9, 1.0, "x"])
def test_a_gate_needs_confidence_of_at_least_95_percent(confidence):
    with pytest.raises(ValueError, match="confidence"):
        check_gate_confidence(confidence)
    with pytest.raises(ValueError, match="confidence"):
        Gate.parse("0.01:0.2").check({"loss/tpr_at_fpr_0.01": 0.0}, confidence=confidence)


def test_a_loose_tpr_budget_is_refused_unless_allowed_then_carried_by_the_verdict_and_its_record():
    """``0.01:0.9999`` passes a model whose attacks find nearly every member: it is accepted only when stated."""
    from mlflow_mia.metrics.gate_record import GateRecord

    gate = Gate.parse("0.01:0.9999,0.01:0.05")
    assert gate.loose == ("0.01:0.9999",) and Gate.parse("0.01:0.5").loose == ()
    with pytest.raises(ValueError, match=r"loose release budget\(s\) 0.01:0.9999: a TPR budget above 0.5 .* "
                                         r"--allow-loose-budget \(evaluator key allow_loose_budget\)"):
        gate.check_loose(allowed=False)
    assert gate.check_loose(allowed=True) == ("0.01:0.9999",)
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(300, dtype=int), np.zeros(300, dtype=int)]
    metrics = _audit_metrics(y, rng.normal(size=600), rng.normal(size=500), rounds=50)
    res = gate.check(metrics)
    assert res.loose == ("0.01:0.9999",) and res.release is True and res.to_dict()["loose"] == ["0.01:0.9999"]
    assert res.message().endswith("(loose budget(s) 0.01:0.9999 accepted with --allow-loose-budget: a pass shows "
                                  "almost nothing about the model)")
    assert Gate.parse("0.01:0.05").check(metrics).caveats() == ""  # a budget that says something: nothing added
    record = GateRecord.of(res, ("loss",), metrics, loose=res.loose, release=res.release)
    assert "; loose 0.01:0.9999" in record.to_tag() and GateRecord.from_tag(record.to_tag()).loose == res.loose
