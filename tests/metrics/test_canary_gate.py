"""The canary gate's three verdicts on exposure and on the record-level epsilon bound."""

from __future__ import annotations

import math

import pytest

from mlflow_mia.metrics.canary_gate import NULL_EXPOSURE, CanaryGate


def _expo(value, upper, r=1):
    return {"metric": f"canary/r{r}/exposure_mean", "value": value, "upper": upper}


def _eps(value, ceiling, m=200):
    return {"metric": "canary/epsilon_lower_bound", "value": value, "ceiling": ceiling, "m": m}


def test_exposure_verdicts():
    gate = CanaryGate(max_exposure=4.0)
    assert gate.check([_expo(2.0, 3.5), _expo(3.0, 3.9, r=2)], None, confidence=0.95).status == "pass"
    assert gate.check([_expo(2.0, 3.5), _expo(4.5, 6.0, r=2)], None, confidence=0.95).status == "fail"
    res = gate.check([_expo(3.0, 4.2)], None, confidence=0.95)
    assert res.status == "inconclusive" and "upper bound 4.2" in res.message()
    assert gate.check([_expo(math.nan, math.nan)], None, confidence=0.95).status == "inconclusive"
    nothing = gate.check([], None, confidence=0.95)  # no included secret-format canary: never a pass
    assert nothing.status == "inconclusive" and "no included secret-format canary" in nothing.message()


def test_epsilon_verdicts_and_the_audits_reach():
    gate = CanaryGate(max_epsilon=1.0)
    assert gate.check([], _eps(0.3, 3.0), confidence=0.95).status == "pass"
    failed = gate.check([], _eps(1.4, 3.0), confidence=0.95)
    assert failed.status == "fail" and "exceeds its budget 1" in failed.message()
    small = gate.check([], _eps(0.0, 0.8, m=20), confidence=0.95)
    assert small.status == "inconclusive" and "20 canaries cannot certify an epsilon above 0.8" in small.message()
    assert small.verdict().startswith("mia.gate=inconclusive: canary/epsilon_lower_bound = 0")


def test_the_worst_budget_decides_and_the_record_names_the_gated_metrics():
    gate = CanaryGate(max_exposure=4.0, max_epsilon=1.0)
    res = gate.check([_expo(5.0, 6.0)], _eps(0.2, 3.0), confidence=0.95)
    assert res.status == "fail" and not res.passed
    record = res.record(n_included=100, n_excluded=98)
    assert record.attacks == ("canary_exposure", "canary_epsilon") and record.members == 100
    assert record.to_tag().startswith("fail; attacks canary_exposure,canary_epsilon;")


def test_bad_budgets():
    with pytest.raises(ValueError, match="needs max_exposure and/or max_epsilon_lower_bound"):
        CanaryGate()
    with pytest.raises(ValueError, match=f"at or below {NULL_EXPOSURE:.3f} bits"):
        CanaryGate(max_exposure=1.0)
    with pytest.raises(ValueError, match="needs canaries inserted once"):
        CanaryGate(max_epsilon=1.0).check([], None, confidence=0.95)


def _sampled(value, upper, rank_value, rank_upper, n_capped, r=16):
    return {**_expo(value, upper, r=r), "rank_metric": f"canary/r{r}/exposure_rank_mean", "rank_value": rank_value,
            "rank_upper": rank_upper, "n_capped": n_capped}


def test_exposure_gate_decides_on_the_larger_of_the_headline_and_the_capped_rank_mean():
    gate = CanaryGate(max_exposure=8.0)
    # the extrapolation undershoots the capped ranks (a lower bound): the ranks alone prove the excess
    res = gate.check([_sampled(7.0, 7.5, 9.2, 9.6, n_capped=30)], None, confidence=0.95)
    assert res.status == "fail" and res.checks[0]["metric"] == "canary/r16/exposure_rank_mean"
    assert res.checks[0]["value"] == 9.2 and res.checks[0]["headline"] == 7.0
    assert "rank-based >= 9.200" in res.verdict() and "canary/r16/exposure_rank_mean = 9.200 exceeds" in res.message()
    # the extrapolation above the budget fails, though the ranks (capped) are within it
    res = gate.check([_sampled(12.4, 13.0, 7.9, 7.95, n_capped=40)], None, confidence=0.95)
    assert res.status == "fail" and res.checks[0]["metric"] == "canary/r16/exposure_mean"
    # a pass needs both upper bounds within the budget
    assert gate.check([_sampled(6.0, 7.0, 6.5, 8.5, n_capped=0)], None, confidence=0.95).status == "inconclusive"
    res = gate.check([_sampled(6.0, 7.0, 6.5, 7.5, n_capped=0)], None, confidence=0.95)
    assert res.status == "pass" and res.checks[0]["bound"] == 7.5 and "rank-based 6.500" in res.verdict()


def test_exposure_gate_text_prints_n_a_never_nan():
    res = CanaryGate(max_exposure=4.0).check([_sampled(math.nan, math.nan, math.nan, math.nan, 0)], None,
                                             confidence=0.95)
    assert res.status == "inconclusive" and "nan" not in res.verdict() + res.message()
    assert "= n/a bits" in res.verdict() and "no included secret-format canary" in res.message()
