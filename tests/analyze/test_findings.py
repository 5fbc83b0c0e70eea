"""The findings' checks and table (mlflow_mia/analyze/findings.py), on hand-made metrics: no models."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from mlflow_mia.analyze import ANALYSIS_SIZES, FINDINGS, findings_table, select_findings
from mlflow_mia.analyze.findings import setting_values
from mlflow_mia.analyze.output import render_findings
from mlflow_mia.analyze.plan import experiments, experiments_for
from mlflow_mia.plots import plot_finding

SIZE = ANALYSIS_SIZES["quick"]


def _metrics(loss_auc, lr_auc, *, prefix="", eps_lb=0.5, dp=None, tpr=0.1, width=0.03, ceiling=5.32):
    out = {}
    for attack, auc in (("loss", loss_auc), ("likelihood_ratio", lr_auc)):
        base = f"{prefix}{attack}/"
        out.update({base + "auc": auc, base + "auc_ci_low": auc - width, base + "auc_ci_high": auc + width,
                    base + "tpr_at_fpr_0.01": tpr, base + "epsilon_lower_bound": eps_lb})
        if ceiling is not None:
            out[base + "epsilon_lower_bound_max_certifiable"] = ceiling
    if dp is not None:
        out["dp/epsilon"] = dp
    return out


def _runs(**overrides):
    """Metrics of every experiment, each finding holding unless overridden."""
    base = {**_metrics(0.55, 0.85), **_metrics(0.50, 0.80, prefix="len_short/"),
            **_metrics(0.58, 0.88, prefix="len_long/"), **_metrics(0.60, 0.97, prefix="user/")}
    runs = {
        "baseline": base,
        "reference-ood": _metrics(0.55, 0.75),
        "reference-general": _metrics(0.55, 0.78),
        "pll": _metrics(0.56, 0.87),
        "short-training": _metrics(0.54, 0.84),
        "name-insertion": _metrics(0.45, 0.95),
        "larger-model": _metrics(0.56, 0.86),
        "dp-sgd-eps8": _metrics(0.50, 0.52, eps_lb=0.3, dp=7.9, tpr=0.01),
        "dp-sgd-eps1": _metrics(0.50, 0.50, eps_lb=0.0, dp=0.99, tpr=0.01),
    }
    runs.update(overrides)
    return {name: (f"run-{name}", metrics) for name, metrics in runs.items()}


def _verdicts(table) -> dict:
    return dict(zip(table["finding"], table["reproduced"]))


def test_every_finding_holds_on_metrics_built_to_hold():
    table = findings_table(_runs(), SIZE)
    assert set(_verdicts(table).values()) == {"yes"}
    assert set(table["finding"]) == {f.name for f in FINDINGS}


def test_each_check_fails_when_its_claim_is_broken():
    broken = {
        "reference_choice": {"reference-ood": _metrics(0.55, 0.90)},
        "training_length": {"short-training": _metrics(0.54, 0.60)},  # intervals no longer overlap
        "model_size": {"larger-model": _metrics(0.56, 0.84)},
        "name_insertion": {"name-insertion": _metrics(0.60, 0.95)},  # the loss attack got stronger
        "signal": {"pll": _metrics(0.56, 0.80)},
        "dp_sgd": {"dp-sgd-eps1": _metrics(0.50, 0.90, dp=0.99)},  # DP did not lower the AUC
    }
    for finding, override in broken.items():
        verdicts = _verdicts(findings_table(_runs(**override), SIZE))
        assert verdicts[finding] == "no", finding
        assert [v for f, v in verdicts.items() if f != finding] == ["yes"] * (len(verdicts) - 1)


def test_a_lower_bound_above_the_accountants_epsilon_is_flagged_inconsistent():
    table = findings_table(_runs(**{"dp-sgd-eps1": _metrics(0.5, 0.5, eps_lb=1.5, dp=0.99, tpr=0.0)}), SIZE)
    row = table[table["finding"] == "dp_sgd"].iloc[0]
    assert row["reproduced"] == "no"
    assert row["why"].startswith("INCONSISTENT")


def test_a_bound_check_that_cannot_fail_is_flagged_vacuous():
    # 985 trials per class certify at most 5.32: a bound can never exceed the accountant's 7.9 at eps 8.
    table = findings_table(_runs(), SIZE)
    dp = table[table["finding"] == "dp_sgd"].set_index(["setting", "attack"])
    assert dp.loc[("eps 8", "likelihood_ratio"), "epsilon_check"] == "vacuous"
    assert dp.loc[("eps 1", "likelihood_ratio"), "epsilon_check"] == "informative"
    assert dp.loc[("non-private", "likelihood_ratio"), "epsilon_check"] == ""  # no accountant's epsilon
    why = dp.iloc[0]["why"]
    assert ("eps 8: AUC 0.520, TPR@1% 0.010, epsilon lower bound 0.30 <= accountant's 7.90 (VACUOUS: these trial "
            "counts certify at most 5.32, so the bound cannot exceed the accountant's epsilon)") in why
    assert "eps 1: AUC 0.500, TPR@1% 0.010, epsilon lower bound 0.00 <= accountant's 0.99;" in why + ";"
    assert _verdicts(table)["dp_sgd"] == "yes"  # the claim still holds; the flag says what the check shows
    # Runs logged before the ceiling existed: nothing to compare, no flag.
    old = {name: _metrics(0.5, a, eps_lb=e, dp=d, tpr=0.01, ceiling=None)
           for name, a, e, d in (("dp-sgd-eps8", 0.52, 0.3, 7.9), ("dp-sgd-eps1", 0.50, 0.0, 0.99))}
    table = findings_table(_runs(**old), SIZE)
    assert set(table[table["finding"] == "dp_sgd"]["epsilon_check"]) == {""}
    assert "VACUOUS" not in table[table["finding"] == "dp_sgd"].iloc[0]["why"]


def test_rows_carry_the_logged_values_paper_figures_and_run_ids():
    table = findings_table(_runs(), SIZE)
    row = table[(table["finding"] == "sample_length") & (table["setting"] == "long")
                & (table["attack"] == "likelihood_ratio")].iloc[0]
    assert (row["auc"], row["auc_ci_low"], row["run_id"]) == (0.88, 0.88 - 0.03, "run-baseline")
    assert row["paper"] == "AUC 0.900"
    dp = table[(table["finding"] == "dp_sgd") & (table["setting"] == "eps 8")
               & (table["attack"] == "likelihood_ratio")].iloc[0]
    assert dp["dp_epsilon"] == 7.9 and dp["paper"] == "TPR@1% 0.0152 (eps 10)"
    assert math.isnan(table[(table["finding"] == "dp_sgd") & (table["setting"] == "non-private")]
                      .iloc[0]["dp_epsilon"])


def test_a_missing_experiment_leaves_its_finding_not_run():
    runs = _runs()
    del runs["dp-sgd-eps1"]
    table = findings_table(runs, SIZE)
    assert _verdicts(table)["dp_sgd"] == "not run"
    assert table[(table["finding"] == "dp_sgd") & (table["setting"] == "eps 1")]["auc"].isna().all()
    assert _verdicts(table)["signal"] == "yes"


def test_setting_values_reads_prefixed_metrics_and_nan_for_absent():
    values = setting_values({"user/loss/auc": 0.7, "dp/epsilon": 2.0}, "user/", "loss")
    assert values["auc"] == 0.7 and values["dp_epsilon"] == 2.0
    assert math.isnan(values["auc_ci_low"]) and math.isnan(values["tpr_at_fpr_0.01"])


def test_select_findings_keeps_the_suite_order_and_names_unknown_ones():
    assert [f.name for f in select_findings(["dp_sgd", "signal"])] == ["signal", "dp_sgd"]
    assert select_findings(None) == FINDINGS
    with pytest.raises(ValueError, match=r"unknown finding\(s\) \['dpsgd'\]; choose from"):
        select_findings(["dpsgd"])


def test_experiments_for_runs_only_what_the_findings_read():
    names = [e.name for e in experiments_for(select_findings(["sample_length", "dp_sgd"]), SIZE)]
    assert names == ["baseline", "dp-sgd-eps8", "dp-sgd-eps1"]
    assert len(experiments_for(FINDINGS, SIZE)) == len(experiments(SIZE))


def test_render_and_plot_show_every_setting():
    table = findings_table(_runs(), SIZE)
    text = render_findings(table, FINDINGS)
    assert text.count("## ") == len(FINDINGS)
    assert "| in-domain | likelihood_ratio | 0.850 [0.820, 0.880] |" in text
    rows = table[table["finding"] == "dp_sgd"]
    fig = plot_finding(rows, title="dp")
    assert len(fig.axes) == 3  # AUC, TPR and the epsilon panel
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["non-private", "eps 8", "eps 1"]
    assert len(plot_finding(table[table["finding"] == "signal"], title="s").axes) == 2
    assert isinstance(table, pd.DataFrame)
