"""The findings' rule, paired differences and tables (mlflow_mia/analyze/findings.py, paired.py, output.py), on
hand-made metrics: no models."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm, t

from mlflow_mia.analyze import ANALYSIS_SIZES, FINDINGS, findings_table, select_findings
from mlflow_mia.analyze.findings import combine_verdicts, comparison_verdict, setting_values
from mlflow_mia.analyze.output import differences_table, render_findings
from mlflow_mia.analyze.paired import paired_difference, seed_summary
from mlflow_mia.analyze.plan import experiments, experiments_for, run_name
from mlflow_mia.metrics.epsilon import epsilon_lower_bound_from_counts
from mlflow_mia.plots import plot_finding

FULL, QUICK = ANALYSIS_SIZES["full"], ANALYSIS_SIZES["quick"]
JITTER = (0.0, 0.004, -0.004)  # per-seed offsets: a small seed spread


def _group(n=10 ** 8, *, tp=None, fp=None, alphas=(0.1, 0.01), delta=1e-5):
    """Article-level (``user/``) metrics of both attacks as an audit logs them, from counts at the population thresholds.

    Default: ``n`` member and ``n`` non-member articles and an attack that flags members no more often than
    non-members (``tp = fp = alpha n``): a bound of 0 whose ceiling is large enough for any test epsilon.
    """
    tp = [round(a * n) for a in alphas] if tp is None else list(tp)
    fp = [round(a * n) for a in alphas] if fp is None else list(fp)
    bound = epsilon_lower_bound_from_counts(tp, fp, n_members=n, n_non_members=n, delta=delta)
    out = {"user/n_members": n, "user/n_non_members": n}
    for attack in ("loss", "likelihood_ratio"):
        base = f"user/{attack}/"
        out.update({base + "epsilon_lower_bound": bound.epsilon,
                    base + "epsilon_lower_bound_max_certifiable": bound.max_certifiable})
        for a, t, f in zip(alphas, tp, fp):
            out.update({f"{base}recall_at_pop_fpr_{a:g}": t / n, f"{base}recall_at_pop_fpr_{a:g}_ci_low": 0.0,
                        f"{base}achieved_fpr_at_pop_fpr_{a:g}": f / n})
    return out


def _dp(loss_auc, lr_auc, *, dp, k=2, group=None, **kw):
    """A DP target's audit: sample-level metrics, the accountant's epsilon and delta, the largest article's size
    and the article-level metrics (``_group()`` by default)."""
    return {**_metrics(loss_auc, lr_auc, dp=dp, **kw), "dp/delta": 1e-5, "dp/max_group_size": k,
            **(_group() if group is None else group)}


def _metrics(loss_auc, lr_auc, *, prefix="", eps_lb=0.5, dp=None, tpr=0.1, width=0.008, ceiling=5.32, heldout=5.0):
    out = {}
    for attack, auc in (("loss", loss_auc), ("likelihood_ratio", lr_auc)):
        base = f"{prefix}{attack}/"
        out.update({base + "auc": auc, base + "auc_ci_low": auc - width, base + "auc_ci_high": auc + width,
                    base + "tpr_at_fpr_0.01": tpr, base + "tpr_at_fpr_0.01_ci_low": tpr - width,
                    base + "tpr_at_fpr_0.01_ci_high": tpr + width, base + "epsilon_lower_bound": eps_lb})
        if ceiling is not None:
            out[base + "epsilon_lower_bound_max_certifiable"] = ceiling
    if dp is not None:
        out["dp/epsilon"] = dp
    if heldout is not None and not prefix:
        out["heldout/loss"] = heldout
    return out


def _baseline(shift=0.0):
    return {**_metrics(0.55 + shift, 0.85 + shift, tpr=0.2), **_metrics(0.50, 0.80, prefix="len_short/"),
            **_metrics(0.58, 0.88, prefix="len_long/"), **_metrics(0.60, 0.97, prefix="user/")}


SETTINGS = {  # experiment -> metrics at seed 0 (later seeds are shifted by JITTER); every finding reproduced
    "baseline": lambda j: _baseline(j),
    "reference-ood": lambda j: _metrics(0.55 + j, 0.75 + j),
    "reference-general": lambda j: _metrics(0.55 + j, 0.78 + j),
    "energy-mean": lambda j: _metrics(0.56 + j, 0.86 + j),
    "pll": lambda j: _metrics(0.56 + j, 0.92 + j),
    "short-training": lambda j: _metrics(0.55 + j, 0.855 + j),
    "name-insertion": lambda j: _metrics(0.45 + j, 0.95 + j),
    "larger-model": lambda j: _metrics(0.56 + j, 0.92 + j, heldout=4.9),
    "dp-sgd-sigma0": lambda j: _metrics(0.55 + j, 0.80 + j, tpr=0.15, heldout=5.2),
    "dp-sgd-eps8": lambda j: _dp(0.50, 0.52 + j, eps_lb=0.3, dp=7.9, tpr=0.01, heldout=5.4),
    "dp-sgd-eps1": lambda j: _dp(0.50, 0.50 + j, eps_lb=0.0, dp=0.99, tpr=0.01, heldout=5.5),
}
NULL = {**_metrics(0.5, 0.5, tpr=0.01, heldout=6.0), **_metrics(0.5, 0.5, prefix="len_short/"),
        **_metrics(0.5, 0.5, prefix="len_long/"), **_metrics(0.5, 0.49, prefix="user/"),
        "likelihood_ratio/auc_permutation_p": 0.91, "loss/auc_permutation_p": 0.97}


def _runs(size=FULL, **overrides):
    """Runs of every experiment (each seed) and null; ``overrides`` maps an experiment to a metrics function."""
    out = {}
    for name, make in {**SETTINGS, **overrides}.items():
        for seed in size.seeds:
            out[run_name(name, seed)] = (f"run-{name}-{seed}", make(JITTER[seed]))
    for name, exp in experiments(size).items():
        if not exp.seeded:
            out[name] = (f"run-{name}", NULL)
    return out


def _verdicts(table) -> dict:
    return dict(zip(table["finding"], table["reproduced"]))


# ---- paired differences --------------------------------------------------------------------------------------

def test_paired_difference_combines_seed_spread_and_the_shared_pool_error():
    a, b = np.array([0.80, 0.82, 0.81]), np.array([0.85, 0.86, 0.88])
    a_ci, b_ci = np.c_[a - 0.02, a + 0.02], np.c_[b - 0.04, b + 0.04]
    d = paired_difference(a, b, a_ci=a_ci, b_ci=b_ci)
    diff = b - a
    se_a, se_b = 0.02 / norm.ppf(0.975), 0.04 / norm.ppf(0.975)
    half_seed = t.ppf(0.975, 2) * diff.std(ddof=1) / math.sqrt(3)
    half_pool = norm.ppf(0.975) * math.sqrt(se_a ** 2 + se_b ** 2)  # shared pool: not divided by n
    half = math.hypot(half_seed, half_pool)
    assert d.mean == pytest.approx(diff.mean(), abs=1e-15) and d.n_seeds == 3
    assert d.seed_sd == pytest.approx(diff.std(ddof=1)) and d.pool_se == pytest.approx(math.hypot(se_a, se_b))
    assert (d.low, d.high) == (pytest.approx(diff.mean() - half), pytest.approx(diff.mean() + half))
    assert d.text() == f"{diff.mean():+.3f} [{diff.mean() - half:+.3f}, {diff.mean() + half:+.3f}] (3 seeds)"


def test_one_seed_uses_the_pool_error_only_and_nan_seeds_are_dropped_in_pairs():
    d = paired_difference([0.8, math.nan], [0.9, 0.7], a_ci=[[0.78, 0.82], [0, 1]], b_ci=[[0.88, 0.92], [0, 1]])
    assert d.n_seeds == 1 and math.isnan(d.seed_sd)
    assert d.high - d.low == pytest.approx(2 * 0.02 * math.sqrt(2))  # z * se of each side, in quadrature
    assert not d.covers_zero()
    none = paired_difference([0.8], [0.9], b_ci=[[math.nan, math.nan]])  # one seed, no interval: nothing
    assert math.isnan(none.low) and none.covers_zero()                    # measures the error
    # One side exact (None): a single run's interval of its own value is its bootstrap interval.
    one = paired_difference([0.0], [0.9], b_ci=[[0.85, 0.95]])
    assert (one.low, one.high) == (pytest.approx(0.85), pytest.approx(0.95))
    # Without intervals, the seeds alone: the t interval of the mean difference.
    seeds = paired_difference([0.5, 0.5, 0.5], [0.51, 0.53, 0.52], a_ci=np.full((3, 2), np.nan),
                              b_ci=np.full((3, 2), np.nan))
    assert math.isnan(seeds.pool_se)
    assert seeds.high - seeds.low == pytest.approx(2 * t.ppf(0.975, 2) * 0.01 / math.sqrt(3))
    assert paired_difference([math.nan], [0.1]).n_seeds == 0


def test_paired_difference_rejects_unpaired_input():
    with pytest.raises(ValueError, match="one value per seed each, got 2 and 3"):
        paired_difference([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match=r"b_ci needs one \(low, high\) row per seed \(2\), got 1"):
        paired_difference([1, 2], [1, 2], b_ci=[[0, 1]])
    with pytest.raises(ValueError, match="level must be in"):
        paired_difference([1], [1], level=1.0)


def test_seed_summary():
    assert seed_summary([0.8, 0.9, math.nan])[2] == 2
    assert seed_summary([0.8, 0.9])[1] == pytest.approx(np.std([0.8, 0.9], ddof=1))
    assert math.isnan(seed_summary([0.8])[1]) and seed_summary([])[2] == 0


# ---- the rule ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("low, high, expect, margin, verdict", [
    (0.01, 0.05, "increase", 0, "reproduced"), (-0.05, -0.01, "increase", 0, "not reproduced"),
    (-0.01, 0.05, "increase", 0, "not resolved"), (-0.05, -0.01, "decrease", 0, "reproduced"),
    (0.01, 0.05, "decrease", 0, "not reproduced"), (-0.05, 0.0, "decrease", 0, "not resolved"),
    (-0.01, 0.015, "equal", 0.02, "reproduced"), (0.03, 0.08, "equal", 0.02, "not reproduced"),
    (-0.08, -0.021, "equal", 0.02, "not reproduced"), (0.01, 0.05, "equal", 0.02, "not resolved"),
    (math.nan, math.nan, "increase", 0, "not resolved"),
])
def test_comparison_verdict(low, high, expect, margin, verdict):
    assert comparison_verdict(low, high, expect, margin) == verdict


def test_combine_verdicts_and_bad_expectation():
    assert combine_verdicts(["reproduced", "reproduced"]) == "reproduced"
    assert combine_verdicts(["reproduced", "not resolved"]) == "not resolved"
    assert combine_verdicts(["not resolved", "not reproduced"]) == "not reproduced"
    assert combine_verdicts([]) == "not resolved"
    with pytest.raises(ValueError, match="expect must be 'increase', 'decrease' or 'equal', got 'more'"):
        comparison_verdict(0, 1, "more")


# ---- findings from constructed runs: each outcome --------------------------------------------------------------

@pytest.mark.parametrize("size", [FULL, QUICK])
def test_every_finding_reproduced_on_metrics_built_to_hold(size):
    table = findings_table(_runs(size), size)
    assert set(_verdicts(table).values()) == {"reproduced"}, table.drop_duplicates("finding")["why"].tolist()
    assert set(table["finding"]) == {f.name for f in FINDINGS}
    assert set(table["n_seeds"]) == {len(size.seeds)}


def test_each_finding_is_not_reproduced_when_its_claim_is_broken():
    broken = {
        "reference_choice": {"reference-ood": lambda j: _metrics(0.55, 0.95 + j)},
        "training_length": {"short-training": lambda j: _metrics(0.54, 0.70 + j)},
        "model_size": {"larger-model": lambda j: _metrics(0.56, 0.75 + j, heldout=4.9)},
        "name_insertion": {"name-insertion": lambda j: _metrics(0.70 + j, 0.95 + j)},  # the loss attack got stronger
        "signal": {"pll": lambda j: _metrics(0.56, 0.70 + j)},
        "dp_sgd": {"dp-sgd-eps1": lambda j: _metrics(0.5, 0.95 + j, dp=0.99, heldout=5.5)},  # DP raised the AUC
    }
    for finding, override in broken.items():
        verdicts = _verdicts(findings_table(_runs(**override), FULL))
        assert verdicts[finding] == "not reproduced", finding
        assert [v for f, v in verdicts.items() if f != finding] == ["reproduced"] * (len(verdicts) - 1)


def test_a_difference_whose_interval_covers_zero_is_not_resolved():
    # PLL 0.01 above the energy with +-0.03 run intervals: the interval of the difference covers 0.
    wide = _runs(pll=lambda j: _metrics(0.56, 0.86 + j, width=0.03),
                 baseline=lambda j: {**_baseline(j), **_metrics(0.55 + j, 0.85 + j, tpr=0.2, width=0.03)})
    assert _verdicts(findings_table(wide, FULL))["signal"] == "not resolved"
    diffs = differences_table(wide, FULL)
    row = diffs[(diffs["finding"] == "signal") & (diffs["a"] == "energy") & (diffs["b"] == "pll")].iloc[0]
    assert row["mean"] == pytest.approx(0.01) and row["low"] < 0 < row["high"] and row["verdict"] == "not resolved"
    # The same difference with tight run intervals is resolved.
    assert _verdicts(findings_table(_runs(pll=lambda j: _metrics(0.56, 0.86 + j, width=0.002)), FULL))[
        "signal"] == "reproduced"
    # "About as much": a difference whose interval straddles the margin is not resolved.
    assert _verdicts(findings_table(_runs(**{"short-training": lambda j: _metrics(0.55, 0.835 + j)}), FULL))[
        "training_length"] == "not resolved"


def test_differences_table_pairs_seeds_and_marks_explanatory_rows():
    diffs = differences_table(_runs(), FULL)
    signal = diffs[diffs["finding"] == "signal"].set_index(["a", "b"])
    assert list(signal["decides"]) == [True, False, False]
    # Jitter moves both settings alike, so the paired differences have no seed spread at all.
    assert signal.loc[("energy", "pll"), "mean"] == pytest.approx(0.07) and signal["seed_sd"].max() < 1e-12
    assert set(diffs["n_seeds"]) == {3}
    dp = diffs[diffs["finding"] == "dp_sgd"]
    assert list(zip(dp["a"], dp["b"], dp["metric"])) == [
        ("non-private", "sigma 0", "auc"), ("sigma 0", "eps 8", "auc"), ("sigma 0", "eps 8", "tpr_at_fpr_0.01"),
        ("sigma 0", "eps 1", "auc"), ("sigma 0", "eps 1", "tpr_at_fpr_0.01")]


def test_sizes_trained_to_different_held_out_losses_are_not_resolved():
    worse = _runs(**{"larger-model": lambda j: _metrics(0.56, 0.92 + j, heldout=5.2)})
    table = findings_table(worse, FULL)
    assert _verdicts(table)["model_size"] == "not resolved"
    assert "held-out loss 5.000 (default) vs 5.200 (larger) nats/token: the larger target is a worse LM" in (
        table[table["finding"] == "model_size"].iloc[0]["why"])


def _dp_row(**overrides):
    table = findings_table(_runs(**overrides), FULL)
    return table[table["finding"] == "dp_sgd"].iloc[0], table[table["finding"] == "dp_sgd"].set_index(
        ["setting", "attack"])


def test_a_sentence_trial_bound_above_the_per_sentence_epsilon_is_not_inconsistent():
    # The sample-level (sentence-trial) bound 1.5 exceeds the accountant's 0.99 per sentence, but membership was
    # randomised per article: the article-level bound (0) against 2 x 0.99 per article decides, and holds.
    row, _ = _dp_row(**{"dp-sgd-eps1": lambda j: _dp(0.5, 0.5 + j, eps_lb=1.5, dp=0.99, tpr=0.01, heldout=5.5)})
    assert row["reproduced"] == "reproduced" and "INCONSISTENT" not in row["why"]
    assert ("eps 1: article-level bound 0.00 (ceiling 16.94) vs accountant's 0.99 per sentence is (1.98, delta 5.4e-05) "
            "per article of up to 2 sentences: holds; sentence-trial bound 1.50 (descriptive: sentences of one article "
            "are not independent trials, not a DP check)") in row["why"]


def test_an_article_level_bound_above_the_epsilon_per_article_is_inconsistent():
    # 100 articles a side; 95 and 90 of the members flagged, no non-member: the bound (about 3.0 at the converted
    # delta) exceeds 2 x 0.99 = 1.98, which these counts could certify (ceiling 3.11).
    leaky = _group(100, tp=[95, 90], fp=[0, 0])
    row, _ = _dp_row(**{"dp-sgd-eps1": lambda j: _dp(0.5, 0.5 + j, eps_lb=0.0, dp=0.99, tpr=0.01, heldout=5.5,
                                                    group=leaky)})
    assert row["reproduced"] == "not reproduced"
    assert row["why"].count("INCONSISTENT: an article-level epsilon lower bound exceeds the accountant's epsilon "
                            "converted to articles") == 1
    assert "eps 1: article-level bound 3.0" in row["why"] and ": the bound exceeds 1.98" in row["why"]
    # A DP model that did not learn leaves a comparison unresolved, but not a contradiction.
    row, _ = _dp_row(**{"dp-sgd-eps1": lambda j: _dp(0.5, 0.5 + j, eps_lb=0.0, dp=0.99, tpr=0.01, heldout=6.1,
                                                    group=leaky)})
    assert row["reproduced"] == "not reproduced" and "INCONSISTENT" in row["why"]


def test_a_check_no_audit_of_this_size_can_fail_is_vacuous_never_holds():
    # eps 8, 2 sentences per article: 15.8 per article, far above what 100 articles a side certify (about 3.1).
    row, dp = _dp_row(**{"dp-sgd-eps8": lambda j: _dp(0.5, 0.52 + j, eps_lb=0.3, dp=7.9, tpr=0.01, heldout=5.4,
                                                     group=_group(100))})
    assert row["reproduced"] == "not resolved"
    assert ("eps 8: article-level bound 0.00 (ceiling 3.05) vs accountant's 7.90 per sentence is (15.80, delta 0.054) "
            "per article of up to 2 sentences: VACUOUS (not resolved): this audit certifies at most 3.05 per article"
            ) in row["why"]
    assert dp.loc[("eps 8", "likelihood_ratio"), "epsilon_check"] == "vacuous"
    assert dp.loc[("eps 1", "likelihood_ratio"), "epsilon_check"] == "informative"
    assert dp.loc[("non-private", "likelihood_ratio"), "epsilon_check"] == ""
    assert dp.loc[("eps 8", "likelihood_ratio"), "dp_group_epsilon"] == pytest.approx(15.8)


@pytest.mark.parametrize("k, delta_text", [(10, "0.81"), (251, ">= 1")])
def test_group_privacy_with_large_articles_guarantees_little_or_nothing(k, delta_text):
    # eps 1 per sentence, 10 sentences per article: (10, 0.81)-DP per article, which 100 articles cannot test;
    # 251 sentences (the default demo's largest member article): delta >= 1, no guarantee per article at all.
    row, dp = _dp_row(**{"dp-sgd-eps1": lambda j: _dp(0.5, 0.5 + j, eps_lb=0.0, dp=1.0, tpr=0.01, heldout=5.5, k=k,
                                                     group=_group(100))})
    eps1 = row["guard"].split("; eps 8:")[0]  # the check's note on eps 1
    assert row["reproduced"] == "not resolved" and eps1.startswith("eps 1: ") and "holds" not in eps1
    assert f"accountant's 1.00 per sentence is ({k:.2f}, delta {delta_text}) per article of up to {k} sentences" \
        in eps1
    assert "VACUOUS (not resolved)" in eps1 and eps1 in row["why"]
    if k == 251:
        assert "which guarantees nothing per article, so no audit can contradict it" in row["why"]
        rows = dp.reset_index()
        texts = [t.get_text() for t in plot_finding(rows, title="dp").axes[2].texts]
        assert texts == ["251 per article, delta >= 1"]  # off the scale: written, not drawn
    assert dp.loc[("eps 1", "likelihood_ratio"), "epsilon_check"] == "vacuous"


def test_without_article_level_numbers_there_is_no_dp_check():
    row, _ = _dp_row(**{"dp-sgd-eps1": lambda j: _metrics(0.5, 0.5 + j, eps_lb=0.0, dp=0.99, tpr=0.01,
                                                         heldout=5.5)})
    assert row["reproduced"] == "not resolved"
    assert "eps 1: no article-level bound, group size or accountant's epsilon logged: no DP check" in row["why"]


def test_dp_guard_models_that_did_not_learn():
    idle = findings_table(_runs(**{"dp-sgd-eps8": lambda j: _dp(0.5, 0.52 + j, eps_lb=0.3, dp=7.9, tpr=0.01,
                                                                heldout=6.1)}), FULL)
    row = idle[idle["finding"] == "dp_sgd"].iloc[0]
    assert row["reproduced"] == "not resolved"
    assert "a DP-SGD model did not learn (eps 8 held-out loss 6.100 >= base 6.000)" in row["why"]


@pytest.mark.parametrize("delta", [1e-5, 0.1])
def test_group_bound_recomputes_the_logged_article_level_bound_from_the_logged_rates(delta):
    from mlflow_mia.analyze.findings import group_bound
    from mlflow_mia.audits.membership.scoring import attack_report
    from mlflow_mia.config import AuditConfig, MetricConfig
    from mlflow_mia.metrics.epsilon import max_certifiable_epsilon

    rng = np.random.default_rng(3)
    y = np.r_[np.ones(120, dtype=int), np.zeros(110, dtype=int)]
    scores = rng.normal(size=230) + 3.0 * y
    config = AuditConfig(metrics=MetricConfig(fprs=(0.1, 0.01), bootstrap_rounds=0, delta=delta))
    report = attack_report("loss", y, scores, rng.normal(size=300), config, level="user")
    metrics = {**report.metrics("user/loss/"), "user/n_members": 120, "user/n_non_members": 110}
    bound, ceiling = group_bound(metrics, "loss", delta=delta)
    assert report.epsilon.epsilon > 0 and bound == pytest.approx(report.epsilon.epsilon, rel=1e-12)
    assert ceiling == pytest.approx(max_certifiable_epsilon(120, 110, delta=delta, n_thresholds=2), rel=1e-12)
    assert group_bound(metrics, "likelihood_ratio", delta=delta) != group_bound(metrics, "loss", delta=delta)
    assert np.isnan(group_bound(metrics, "loss", delta=1.0)).all()


def test_rows_carry_seed_means_spreads_nulls_and_no_paper_figure_from_another_attack():
    table = findings_table(_runs(), FULL)
    row = table[(table["finding"] == "sample_length") & (table["setting"] == "long")
                & (table["attack"] == "likelihood_ratio")].iloc[0]
    assert row["auc"] == pytest.approx(0.88) and row["paper"] == "AUC 0.900"
    assert row["run_id"] == "run-baseline-0,run-baseline-1,run-baseline-2"
    assert (row["null_auc"], row["null_tpr_at_fpr_0.01"]) == (0.5, 0.1)  # the null's len_long/ metrics
    base = table[(table["finding"] == "user_level") & (table["setting"] == "sample")
                 & (table["attack"] == "likelihood_ratio")].iloc[0]
    assert base["auc"] == pytest.approx(0.85) and base["auc_sd"] == pytest.approx(0.004)
    assert base["auc_runs"] == "0.850 [0.842, 0.858]; 0.854 [0.846, 0.862]; 0.846 [0.838, 0.854]"
    assert base["auc_ci_low"] < 0.85 - 0.008 < 0.85 + 0.008 < base["auc_ci_high"]  # seed and pool error
    dp = table[table["finding"] == "dp_sgd"]
    assert list(dict.fromkeys(dp["setting"])) == ["non-private", "sigma 0", "eps 8", "eps 1"]
    assert not dp["paper"].str.contains("TPR@1%").any()
    assert set(dp[dp["setting"].str.startswith("eps")]["paper"]) == {
        "none: Mattern et al. Table 6 reports the neighbourhood attack only"}
    assert dp.set_index("setting").loc["sigma 0"].iloc[0]["heldout_loss"] == pytest.approx(5.2)
    assert (dp["null_heldout_loss"] == 6.0).all()


def test_a_missing_experiment_leaves_its_finding_not_run():
    runs = {k: v for k, v in _runs().items() if not k.startswith("dp-sgd-eps1")}
    table = findings_table(runs, FULL)
    assert _verdicts(table)["dp_sgd"] == "not run"
    assert table[(table["finding"] == "dp_sgd") & (table["setting"] == "eps 1")]["auc"].isna().all()
    assert _verdicts(table)["signal"] == "reproduced"
    assert differences_table(runs, FULL, [f for f in FINDINGS if f.name == "dp_sgd"]).empty


def test_setting_values_reads_prefixed_metrics_per_seed():
    values = setting_values([{"user/loss/auc": 0.7, "dp/epsilon": 2.0}, {}], "user/", "loss",
                            {"user/loss/auc": 0.5, "heldout/loss": 6.0})
    assert values["auc"][0] == 0.7 and math.isnan(values["auc"][1]) and values["dp_epsilon"][0] == 2.0
    assert values["null_auc"][0] == 0.5 and values["null_heldout_loss"][0] == 6.0
    assert math.isnan(values["auc_ci_low"][0])


def test_select_findings_keeps_the_suite_order_and_names_unknown_ones():
    assert [f.name for f in select_findings(["dp_sgd", "signal"])] == ["signal", "dp_sgd"]
    assert select_findings(None) == FINDINGS
    with pytest.raises(ValueError, match=r"unknown finding\(s\) \['dpsgd'\]; choose from"):
        select_findings(["dpsgd"])


def test_experiments_for_runs_only_what_the_findings_read_and_their_nulls():
    names = [e.name for e in experiments_for(select_findings(["sample_length", "dp_sgd"]), QUICK)]
    assert names == ["baseline", "dp-sgd-sigma0", "dp-sgd-eps8", "dp-sgd-eps1", "null"]
    assert len(experiments_for(FINDINGS, QUICK)) == len(experiments(QUICK))
    assert run_name("baseline", 2) == "baseline-seed2" and run_name("null", None) == "null"


def test_render_and_plot_show_every_setting_its_null_and_differences():
    runs = _runs()
    table, diffs = findings_table(runs, FULL), differences_table(runs, FULL)
    text = render_findings(table, FINDINGS, diffs)
    assert text.count("## ") == len(FINDINGS)
    assert text.splitlines()[:3] == ["# Findings of the BBC News demo target and its variants", "",
                                     f"**Verdict: {len(FINDINGS)} of {len(FINDINGS)} findings reproduced** (every one)."]
    mixed = table.assign(reproduced=table["reproduced"].where(table["finding"] != "signal", "not resolved"))
    assert render_findings(mixed, FINDINGS).splitlines()[2] == (
        f"**Verdict: {len(FINDINGS) - 1} of {len(FINDINGS)} findings reproduced** (not resolved: signal).")
    assert "| in-domain | likelihood_ratio | 0.850 ± 0.004 [" in text
    assert "| energy -> pll | likelihood_ratio auc | +0.070 [" in text
    assert "(reproduced; not deciding)" in text
    summary = text[:text.index("## ")]  # the verdicts come first, each with the differences it was decided on
    assert summary.count("| **reproduced** |") == len(FINDINGS)
    assert ("| signal | Mireshghallah et al. 2022, Tables 9 and 11 | **reproduced** | "
            "likelihood_ratio auc energy -> pll: +0.070 [") in summary
    assert "held-out loss 5.000 (default) vs 4.900 (larger) nats/token |" in summary  # the guard's note
    assert "non-private -> sigma 0" not in summary  # shown in its finding's table, not deciding
    assert "| 5.200 (6.000) |" in text  # the sigma = 0 control's held-out loss beside its null's
    # The null's own interval and its article-label permutation p-value; the bounds per sentence and per article.
    assert "| 0.500 [0.492, 0.508] p 0.910 / 0.010 |" in text
    assert "| eps 8 | likelihood_ratio | 0.520 ± 0.004 [" in text
    assert "| 0.30; 0.00 [" in text and "| 7.90; 15.80 (k 2, delta 0.054) |" in text
    assert "| 0.99; 1.98 (k 2, delta 5.4e-05) |" in text
    rows = table[table["finding"] == "dp_sgd"]
    fig = plot_finding(rows, title="dp")
    assert len(fig.axes) == 3  # AUC, TPR and the epsilon panel: per article, where membership was randomised
    assert fig.axes[2].get_title() == "article-level bound vs DP epsilon per article"
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["non-private", "sigma 0", "eps 8", "eps 1"]
    assert "null target" in [h.get_label() for h in fig.axes[0].get_legend().legend_handles]
    assert len(plot_finding(table[table["finding"] == "signal"], title="s").axes) == 2
    assert isinstance(table, pd.DataFrame)


def test_with_one_seed_a_rows_interval_is_its_runs_bootstrap_interval():
    table = findings_table(_runs(QUICK), QUICK)
    row = table[(table["finding"] == "signal") & (table["setting"] == "pll")
                & (table["attack"] == "likelihood_ratio")].iloc[0]
    assert (row["auc_ci_low"], row["auc_ci_high"]) == (pytest.approx(0.92 - 0.008), pytest.approx(0.92 + 0.008))
    assert math.isnan(row["auc_sd"]) and row["n_seeds"] == 1
    assert "**One seed per setting** (the quick size)" in render_findings(table, FINDINGS)
    assert "One seed per setting" not in render_findings(findings_table(_runs(), FULL), FINDINGS)
