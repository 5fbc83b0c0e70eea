"""The NER release gate (metrics/ner_gate.py) and the one gate contract (metrics/verdicts.py).

Each verdict is reached on constructed per-name scores, and every bound is checked against a
brute-force reading of the rule with scipy's Clopper-Pearson bounds (Beta quantiles), the unit being
the name.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from scipy.stats import beta

from mlflow_mia.metrics import verdicts
from mlflow_mia.metrics.canary_gate import CanaryGate
from mlflow_mia.metrics.gate import Gate
from mlflow_mia.metrics.ner_gate import NerGate, gate_point_metrics, ner_gate_metrics, ner_gate_record
from mlflow_mia.tracking import gate_history


def _cp_upper(k, n, c):
    return 1.0 if k == n else float(beta.ppf(c, k + 1, n - k))


def _cp_lower(k, n, c):
    return 0.0 if k == 0 else float(beta.ppf(1 - c, k, n - k + 1))


def _brute_bounds(y, s, alpha, confidence):
    """The rule by hand: thresholds from the highest score down, each side at 1 - (1 - confidence) / 2."""
    y, s = np.asarray(y), np.asarray(s, dtype=float)
    side = 1 - (1 - confidence) / 2
    s1, s0 = s[y == 1], s[y == 0]
    n1, n0 = s1.size, s0.size
    upper, lower = 1.0, 0.0
    for t in sorted(set(s), reverse=True):  # the highest threshold whose FPR is >= alpha with confidence
        if _cp_lower(int((s0 >= t).sum()), n0, side) >= alpha:
            upper = _cp_upper(int((s1 >= t).sum()), n1, side)
            break
    for t in sorted(set(s), reverse=True):  # the lowest threshold whose FPR is <= alpha with confidence
        if _cp_upper(int((s0 >= t).sum()), n0, side) <= alpha:
            lower = _cp_lower(int((s1 >= t).sum()), n1, side)
    return upper, lower


def _names(member_scores, non_member_scores, *, kind="PER", column="c_best", split="test"):
    n1, n0 = len(member_scores), len(non_member_scores)
    return pd.DataFrame({"name_hash": [f"h{i}" for i in range(n1 + n0)], "entity_type": kind,
                         "is_member": [1] * n1 + [0] * n0, "split": split,
                         column: np.concatenate([member_scores, non_member_scores])})


def _result(names):
    return SimpleNamespace(names=names)


RNG = np.random.default_rng(7)
CASES = {  # 60 member and 60 non-member test names; budget 0.1:0.2
    "pass": (np.linspace(0.0, 0.2, 60), np.linspace(0.3, 1.0, 60)),  # no member above any non-member
    "fail": (np.linspace(0.8, 1.0, 60), np.linspace(0.0, 0.7, 60)),  # every member above every non-member
    "inconclusive": (RNG.normal(0.8, 1.0, 60), RNG.normal(0.0, 1.0, 60)),
}


@pytest.mark.parametrize("expected", sorted(CASES))
def test_each_verdict_is_reached_with_the_bounds_of_scipy(expected):
    members, non_members = CASES[expected]
    names = _names(members, non_members)
    gate = NerGate(Gate.parse("0.1:0.2"), confidence=0.95)
    verdict = gate.check(_result(names))
    assert verdict.status == expected
    point, = verdict.checks[0]["points"]
    assert point["metric"] == "ner/PER/best_prompt/tpr_at_fpr_0.1" and point["unit"] == "name"
    assert (point["n_members"], point["n_non_members"]) == (60, 60)
    y, s = names["is_member"].to_numpy(), names["c_best"].to_numpy()
    upper, lower = _brute_bounds(y, s, 0.1, 0.95)
    assert point["upper"] == pytest.approx(upper, abs=1e-12) and point["lower"] == pytest.approx(lower, abs=1e-12)
    assert (upper <= 0.2) == (expected == "pass") and (lower > 0.2) == (expected == "fail")
    # the point estimate is the pool's TPR at FPR 0.1: the most members above a threshold flagging <= 6 non-members
    best = max(((s[y == 1] >= t).mean() for t in s if (s[y == 0] >= t).sum() <= 6), default=0.0)
    assert point["value"] == pytest.approx(best)
    if expected == "pass":
        assert upper == pytest.approx(1 - 0.025 ** (1 / 60))  # 0 of 60 caught, one-sided at 97.5 %
    if expected == "fail":
        assert lower == pytest.approx(0.025 ** (1 / 60))  # 60 of 60 caught at FPR 0
    line = verdict.verdict()
    assert line.startswith(f"mia.gate={expected}: ner/PER/best_prompt/tpr_at_fpr_0.1 = ")


def test_the_ratio_score_reads_every_name_and_the_best_prompt_only_the_test_names():
    members, non_members = CASES["fail"]
    split = ["dev", "test"] * 60
    with_reference = _names(members, non_members, column="ratio_avg", split=split).assign(c_best=0.5)
    without = _names(members, non_members, split=split)
    m = ner_gate_metrics(with_reference, alphas=(0.1,), confidence=0.95)
    assert (m["ner/PER/ratio_avg/n_members"], m["ner/PER/ratio_avg/n_non_members"]) == (60, 60)
    assert not any("best_prompt" in k for k in m)  # with a reference, the ratio score alone is gated
    m = ner_gate_metrics(without, alphas=(0.1,), confidence=0.95)
    assert (m["ner/PER/best_prompt/n_members"], m["ner/PER/best_prompt/n_non_members"]) == (30, 30)
    test = without["split"] == "test"
    upper, lower = _brute_bounds(without["is_member"][test], without["c_best"][test], 0.1, 0.95)
    key = "ner/PER/best_prompt/tpr_at_fpr_0.1"
    assert (m[f"{key}_upper_binomial"], m[f"{key}_lower_binomial"]) == pytest.approx((upper, lower), abs=1e-12)
    assert (m["n_members"], m["n_non_members"]) == (60, 60)  # the record's pool size: every name


def test_the_worst_type_decides_and_the_record_names_each_gated_score():
    a = _names(*CASES["pass"], kind="PER")
    b = _names(*CASES["fail"], kind="geo-loc").assign(name_hash=lambda t: "g" + t["name_hash"])
    names = pd.concat([a, b], ignore_index=True)
    result = SimpleNamespace(names=names, reference_weights=None, config=SimpleNamespace(
        subword="first", seed=0, dev_fraction=0.5), prompts_table=pd.DataFrame({"entity_type": ["PER"],
                                                                                "prompt": ["{name} x"]}))
    verdict = NerGate(Gate.parse("0.1:0.2")).check(result)
    assert verdict.status == "fail"
    assert [p["status"] for p in verdict.checks[0]["points"]] == ["pass", "fail"]
    assert "ner/geo-loc/best_prompt/tpr_at_fpr_0.1" in verdict.message()
    record = ner_gate_record(verdict, result)
    assert record.attacks == ("ner/PER/best_prompt", "ner/geo-loc/best_prompt")
    assert (record.members, record.non_members, record.budgets) == (120, 120, ((0.1, 0.2),))
    assert record.signal and record.references == ()
    assert type(record).from_tag(record.to_tag()).attacks == record.attacks  # the tag keeps the type names
    logged = gate_point_metrics(verdict)
    assert logged["ner/geo-loc/best_prompt/tpr_at_fpr_0.1_lower_binomial"] == pytest.approx(0.025 ** (1 / 60))


def test_too_few_non_member_names_is_inconclusive_and_says_how_many_more_per_type():
    members, non_members = CASES["fail"]
    names = pd.concat([_names(members, non_members),
                       _names(members[:30], non_members[:30], kind="LOC").assign(name_hash=lambda t: "l" + t.name_hash)],
                      ignore_index=True)
    verdict = NerGate(Gate.parse("0.01:0.05")).check(_result(names))  # 60 and 30 non-member names: FPR 0.01 unread
    assert verdict.status == "inconclusive"
    for point in verdict.checks[0]["points"]:
        assert math.isnan(point["value"]) and point["non_members_needed"] == 100
    assert "unresolvable (60 non-member names, needs 100)" in verdict.verdict()
    message = verdict.message()
    assert "ner/PER/best_prompt: 40 more non-member names (100 in all) would make the TPR readable" in message
    assert "ner/LOC/best_prompt: 70 more non-member names (100 in all)" in message


def test_bad_inputs_are_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"confidence 0.9 is not allowed with a release gate"):
        NerGate(Gate.parse("0.1:0.2"), confidence=0.9)
    with pytest.raises(TypeError, match=r"takes a Gate \(Gate.parse"):
        NerGate("0.1:0.2")
    one_class = _names(np.linspace(0, 1, 10), [])
    with pytest.raises(ValueError, match="entity type 'PER': its test names hold 10 member and 0 non-member names"):
        NerGate(Gate.parse("0.1:0.2")).check(_result(one_class))
    with pytest.raises(ValueError, match=r"needs the names table's columns \['c_best'\]"):
        ner_gate_metrics(_names([0.1], [0.2]).drop(columns="c_best"), alphas=(0.1,), confidence=0.95)


def test_every_gate_is_checked_the_same_way_and_combines_by_one_severity_table():
    assert isinstance(Gate.parse("0.1:0.2"), verdicts.ReleaseGate)
    assert isinstance(CanaryGate(max_exposure=4.0), verdicts.ReleaseGate)
    assert isinstance(NerGate(Gate.parse("0.1:0.2")), verdicts.ReleaseGate)
    assert gate_history.SEVERITY is verdicts.SEVERITY  # the registry derivation reads the same table
    assert verdicts.worst(["pass", "tampered", "inconclusive"]) == "tampered"
    assert verdicts.worst(["tampered", "fail"]) == "fail" and verdicts.worst([]) == "pass"
    # membership: check(result) decides the result's metrics at the confidence its bounds were computed at
    metrics = {"n_members": 80, "n_non_members": 80, "loss/tpr_at_fpr_0.1": 0.3,
               "loss/tpr_at_fpr_0.1_upper_binomial": 0.35, "loss/tpr_at_fpr_0.1_lower_binomial": 0.25}
    audit = SimpleNamespace(metrics=metrics, config=SimpleNamespace(metrics=SimpleNamespace(confidence=0.99)))
    gate = Gate.parse("0.1:0.4")
    assert gate.check(audit).to_dict() == gate.check(metrics, confidence=0.99).to_dict()
    assert gate.check(audit).confidence == 0.99
    # canary: check(result) reads the points of the result (gate_points) at the audit's confidence
    point = {"metric": "canary/r1/exposure_mean", "value": 2.0, "upper": 3.0, "lower": 1.0}
    canary = SimpleNamespace(metrics={"canary/r1/exposure_mean": 2.0, "canary/r1/exposure_upper": 3.0,
                                      "canary/r1/exposure_lower": 1.0},
                             table=pd.DataFrame({"group": ["r1", "all"]}), bounds={},
                             config=SimpleNamespace(confidence=0.95))
    cg = CanaryGate(max_exposure=4.0)
    assert cg.check(canary).to_dict() == cg.check([point], None, confidence=0.95).to_dict()
    assert cg.check(canary).status == "pass"
