"""Tests of mlflow_mia/analyze/canary_finding.py on constructed canary-audit metrics."""

from __future__ import annotations

import math

import pytest

from mlflow_mia.analyze import select_findings
from mlflow_mia.analyze.canary_finding import CANARY_FINDING_SPEC, canary_rows, canary_verdict
from mlflow_mia.analyze.output import render_findings


def _metrics(bound: float, exposures: dict, *, r1_upper: float, ceiling: float = 4.0) -> dict:
    """Logged metrics of one canary audit: per-r exposure means and bounds, the record-level bound."""
    out = {"canary/epsilon_lower_bound": bound, "canary/epsilon_max": ceiling,
           "canary/r1/exposure_upper": r1_upper}
    for r, mean in exposures.items():
        out.update({f"canary/r{r}/auc": 0.5 + 0.01 * r, f"canary/r{r}/exposure_mean": mean,
                    f"canary/r{r}/exposure_excluded_mean": 1.4, f"canary/r{r}/epsilon_lower_bound": bound * r,
                    f"canary/r{r}/epsilon_max": ceiling})
    return out


GROWING = {1: 1.8, 2: 2.1, 4: 2.9, 8: 4.0, 16: 6.5}
FLAT = {1: 1.8, 2: 1.5, 4: 1.7, 8: 1.6, 16: 1.7}
DP = _metrics(0.0, {1: 1.4, 2: 1.5, 4: 1.4, 8: 1.6, 16: 1.5}, r1_upper=1.7, ceiling=12.0)


def test_reproduced_when_the_bound_is_above_zero_exposure_grows_and_dp_stays_under():
    verdict, why = canary_verdict(_metrics(0.4, GROWING, r1_upper=2.2), DP, 7.99)
    assert verdict == "reproduced"
    assert "record-level bound 0.400" in why and "accountant's epsilon 7.99" in why
    assert "r1 1.80, r2 2.10, r4 2.90, r8 4.00, r16 6.50" in why


def test_a_zero_bound_is_not_resolved_not_a_refutation():
    assert canary_verdict(_metrics(0.0, GROWING, r1_upper=2.2), DP, 7.99)[0] == "not resolved"


def test_growth_inside_the_r1_interval_is_not_resolved():
    small = {1: 1.8, 2: 1.9, 4: 1.9, 8: 2.0, 16: 2.1}  # 2.1 is within the r1 upper bound 2.3
    assert canary_verdict(_metrics(0.4, small, r1_upper=2.3), DP, 7.99)[0] == "not resolved"


def test_no_growth_with_repetitions_is_not_reproduced():
    assert canary_verdict(_metrics(0.4, FLAT, r1_upper=2.2), DP, 7.99)[0] == "not reproduced"


def test_a_dp_bound_above_the_accountant_is_an_inconsistency():
    dp = _metrics(9.0, {1: 5.0, 16: 9.0}, r1_upper=6.0, ceiling=12.0)
    verdict, why = canary_verdict(_metrics(0.4, GROWING, r1_upper=2.2), dp, 7.99)
    assert verdict == "not reproduced" and why.startswith("INCONSISTENT")


def test_vacuous_dp_comparison_is_named_and_missing_runs_are_not_run():
    _, why = canary_verdict(_metrics(0.4, GROWING, r1_upper=2.2), _metrics(0.0, {1: 1.4}, r1_upper=1.6,
                                                                            ceiling=3.7), 7.99)
    assert "VACUOUS: its canaries certify at most 3.70" in why
    assert canary_verdict({}, DP, 7.99) == ("not run", "a canary audit of this finding has no finished run")


def test_rows_carry_each_target_and_repetition_with_the_accountant_beside_dp_only():
    table = canary_rows(_metrics(0.4, GROWING, r1_upper=2.2), DP, 7.99, run_ids=("aaaa1111", "bbbb2222"))
    assert list(table["setting"]) == [f"{t} r{r}" for t in ("non-private", "dp-sgd") for r in (1, 2, 4, 8, 16)]
    assert set(table["reproduced"]) == {"reproduced"}
    np_rows, dp_rows = table[table["setting"].str.startswith("non")], table[table["setting"].str.startswith("dp")]
    assert np_rows["dp_epsilon"].isna().all() and (dp_rows["dp_epsilon"] == 7.99).all()
    assert (dp_rows["epsilon_check"] == "informative").all() and (np_rows["epsilon_check"] == "").all()
    row = np_rows[np_rows["repetitions"] == 16].iloc[0]
    assert row["exposure_mean"] == 6.5 and row["epsilon_lower_bound"] == pytest.approx(6.4)
    assert math.isnan(row["auc_ci_low"])
    text = render_findings(table, [CANARY_FINDING_SPEC])
    assert "## canaries:" in text and "Verdict: **reproduced**" in text and "| non-private r16 | loss |" in text


def test_the_canary_finding_runs_only_when_named():
    assert "canaries" not in [f.name for f in select_findings(None)]
    assert [f.name for f in select_findings(["canaries", "signal"])] == ["signal", "canaries"]
    assert CANARY_FINDING_SPEC.settings(None) == ()
