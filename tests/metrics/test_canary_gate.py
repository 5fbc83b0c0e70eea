"""The canary gate's three verdicts on exposure and on the record-level epsilon bound."""

from __future__ import annotations

import math

import pytest

from mlflow_mia.metrics.canary_gate import NULL_EXPOSURE, CanaryGate


def _expo(value, upper, r=1, lower=math.nan):
    return {"metric": f"canary/r{r}/exposure_mean", "value": value, "upper": upper, "lower": lower}


def _eps(value, ceiling, m=200):
    return {"metric": "canary/epsilon_lower_bound", "value": value, "ceiling": ceiling, "m": m}


def test_exposure_verdicts():
    gate = CanaryGate(max_exposure=4.0)
    assert gate.check([_expo(2.0, 3.5), _expo(3.0, 3.9, r=2)], None, confidence=0.95).status == "pass"
    assert gate.check([_expo(2.0, 3.5), _expo(4.5, 6.0, r=2, lower=4.1)], None, confidence=0.95).status == "fail"
    # a mean over the budget whose lower bound is not: the audit shows neither
    assert gate.check([_expo(2.0, 3.5), _expo(4.5, 6.0, r=2, lower=3.9)], None, confidence=0.95).status == \
        "inconclusive"
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
    res = gate.check([_expo(5.0, 6.0, lower=4.5)], _eps(0.2, 3.0), confidence=0.95)
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
    """Lower bounds 0.3 bits under each mean."""
    return {**_expo(value, upper, r=r, lower=value - 0.3), "rank_metric": f"canary/r{r}/exposure_rank_mean",
            "rank_value": rank_value, "rank_upper": rank_upper, "rank_lower": rank_value - 0.3,
            "n_capped": n_capped}


def test_exposure_gate_decides_on_the_larger_of_the_headline_and_the_capped_rank_mean():
    gate = CanaryGate(max_exposure=8.0)
    # the extrapolation undershoots the capped ranks (a lower bound): the ranks alone prove the excess
    res = gate.check([_sampled(7.0, 7.5, 9.2, 9.6, n_capped=30)], None, confidence=0.95)
    assert res.status == "fail" and res.checks[0]["metric"] == "canary/r16/exposure_rank_mean"
    assert res.checks[0]["value"] == 9.2 and res.checks[0]["headline"] == 7.0
    assert "rank-based >= 9.200" in res.verdict()
    assert "canary/r16/exposure_rank_mean = 9.200, its 95% lower bound 8.900 exceeds" in res.message()
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


# ---------------------------------------------------------------------------------------------------------------
# Item 3: the record names the canary set, the budgets, the confidence and where the set was planted
# ---------------------------------------------------------------------------------------------------------------

SET_A, SET_B = "0123456789abcdef@aaaaaaaaaaaaaaaa", "fedcba9876543210@aaaaaaaaaaaaaaaa"
PLANTED = "sha256:" + "5" * 64


def _record(value, *, budget=0.5, canary_set=SET_A, planted_in=PLANTED, delta=1e-5, score="loss/pll",
            candidates=1000, confidence=0.95, max_exposure=None):
    gate = CanaryGate(max_epsilon=budget, max_exposure=max_exposure)
    res = gate.check([_expo(2.0, 2.5)] if max_exposure else [], _eps(value, 3.0), confidence=confidence)
    return res.record(n_included=100, n_excluded=100, canary_set=canary_set, planted_in=planted_in, delta=delta,
                      score=score, candidates=candidates)


def test_the_record_holds_the_budgets_confidence_set_and_planting_and_round_trips():
    from mlflow_mia.metrics.gate_record import GateRecord

    record = _record(1.57, max_exposure=4.0)
    assert record.status == "fail" and record.confidence == 0.95
    assert record.canary_budgets == (("canary_exposure", 4.0), ("canary_epsilon", 0.5))
    tag = record.to_tag()
    assert (f"canary_sets {SET_A}; planted_in {PLANTED}; canary_scores loss/pll; canary_budgets "
            "canary_exposure:4.0,canary_epsilon:0.5; delta 1e-05; candidates 1000") in tag
    assert "confidence 0.95" in tag
    assert GateRecord.from_tag(tag) == record
    odd = _record(0.1, budget=0.123456789, delta=3.3e-7)  # budgets and delta read back exactly
    assert GateRecord.from_tag(odd.to_tag()) == odd
    # a membership record is written as before: none of the canary fields
    plain = GateRecord("fail", attacks=("loss",), budgets=((0.01, 0.05),), confidence=0.95, members=10)
    assert plain.to_tag() == "fail; attacks loss; budgets 0.01:0.05; confidence 0.95; members 10"
    assert GateRecord.from_tag(plain.to_tag()) == plain and not plain.is_canary


def test_a_looser_budget_does_not_clear_a_canary_fail():
    failed = _record(1.57)
    assert failed.status == "fail"
    looser = _record(1.57, budget=1.9)
    assert looser.status == "pass"
    assert looser.shortfalls(failed) == ["--max-epsilon-lower-bound 1.9 is looser than the failed audit's 0.5"]
    assert _record(0.3).shortfalls(failed) == []  # the same set, the same budget: clears
    assert _record(0.3, budget=0.4, confidence=0.99, candidates=2000).shortfalls(failed) == []  # stronger
    exposure_fail = _record(0.1, max_exposure=4.0)
    no_exposure = _record(0.1)
    assert no_exposure.shortfalls(exposure_fail) == [
        "attack(s) canary_exposure did not run (the failed audit ran canary_exposure,canary_epsilon)"]
    assert _record(0.1, max_exposure=5.0).shortfalls(exposure_fail) == [
        "--max-exposure 5 is looser than the failed audit's 4"]


def test_another_canary_set_does_not_clear_a_canary_fail():
    failed = _record(1.57)
    fresh = _record(0.1, canary_set=SET_B)  # 120 canaries never used in training pass budget 0.5
    assert fresh.status == "pass"
    assert fresh.shortfalls(failed) == [
        "another canary set (digest fedcba9876543210) than the failed audit's (0123456789abcdef): a canary fail is "
        "cleared only by an audit of the set it was found with (a set never planted in training passes any budget)"]
    other_key = _record(0.1, canary_set="0123456789abcdef@bbbbbbbbbbbbbbbb")
    assert other_key.shortfalls(failed)[0].startswith(
        "this audit's hash key (check bbbbbbbbbbbbbbbb) is not the failed audit's (check aaaaaaaaaaaaaaaa)")
    random_failed = _record(1.57, canary_set="0123456789abcdef@random")
    assert "random hash key that was not kept" in _record(0.1, canary_set="0123456789abcdef@random").shortfalls(
        random_failed)[0]
    # a fail recorded before records named their set cannot be shown to be the same set
    from mlflow_mia.metrics.gate_record import GateRecord

    legacy = GateRecord.from_tag("fail; attacks canary_epsilon; budgets ; confidence 0.95; members 100")
    assert _record(0.1).shortfalls(legacy) == [
        "the failed canary audit's record names no canary set (recorded by an earlier release): no audit can show "
        "that it used the same canaries"]


def test_a_clearing_canary_audit_needs_planting_delta_score_and_candidates_as_strong():
    failed = _record(1.57)
    assert _record(0.1, planted_in=None).shortfalls(failed) == [
        f"planted in not stated, not in {PLANTED} where the failed audit's canary set was planted (--planted-in, "
        "evaluator key planted_in)"]
    assert _record(0.1, planted_in=None).shortfalls(_record(1.57, planted_in=None)) == []
    assert _record(0.1, delta=1e-3).shortfalls(failed) == [
        "--delta 0.001 is larger than the failed audit's 1e-05 (a larger delta gives a smaller epsilon lower bound)"]
    ref = "likelihood_ratio/pll/ref=sha256:" + "1" * 64
    assert _record(0.1, score=ref).shortfalls(failed) == [
        f"the canaries were scored by {ref}, not by loss/pll as in the failed audit (--signal, --reference: the same "
        "reference weights)"]
    assert _record(0.1, candidates=50).shortfalls(failed) == [
        "50 candidate secrets per template, fewer than the failed audit's 1000 (--n-candidates)"]


def test_fails_on_two_canary_sets_merge_into_a_requirement_no_single_audit_meets():
    both = _record(1.57).merge(_record(2.0, canary_set=SET_B, budget=0.4))
    assert both.canary_sets == (SET_A, SET_B) and both.canary_budgets == (("canary_epsilon", 0.4),)
    assert len(_record(0.1, budget=0.4).shortfalls(both)) == 1
    assert len(_record(0.1, budget=0.4, canary_set=SET_B).shortfalls(both)) == 1


def test_a_seeded_set_and_a_loose_budget_accepted_are_carried_into_the_verdict_and_its_record():
    """What ``--allow-seeded-canaries`` and ``--allow-loose-budget`` accepted stays visible: message and record."""
    from mlflow_mia.metrics.gate_record import GateRecord

    gate = CanaryGate(max_exposure=1e308, loose=("canary_exposure:1e+308",), release=False)
    res = gate.check([_expo(2.0, 2.5)], None, confidence=0.95)
    assert res.status == "pass" and (res.loose, res.release) == (("canary_exposure:1e+308",), False)
    assert ("(loose budget(s) canary_exposure:1e+308 accepted with --allow-loose-budget: a pass shows almost nothing "
            "about the model; not a release audit: its canary set was drawn from an explicit seed "
            "(--allow-seeded-canaries)") in res.message()
    assert res.to_dict()["release"] is False and res.to_dict()["loose"] == ["canary_exposure:1e+308"]
    record = res.record(n_included=10, n_excluded=10, canary_set=SET_A)
    assert (record.release, record.loose) == (False, ("canary_exposure:1e+308",))
    assert "; release 0; loose canary_exposure:1e+308" in record.to_tag()
    assert GateRecord.from_tag(record.to_tag()) == record
    plain = CanaryGate(max_exposure=4.0).check([_expo(2.0, 2.5)], None, confidence=0.95)
    assert plain.caveats() == "" and plain.record(n_included=10, n_excluded=10).release is True
