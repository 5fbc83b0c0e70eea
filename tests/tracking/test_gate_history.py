"""The gate verdict of a set of weights, derived from its believed records (mlflow_mia.tracking.gate_history)."""

import math

from mlflow_mia.metrics.gate_record import GateRecord
from mlflow_mia.tracking.gate_history import Entry, derive, pool_digest, records_of, reference_digests

W = "sha256:" + "a" * 64
REF, TWIN = "sha256:" + "1" * 16, "sha256:" + "2" * 16


def _record(status, **fields) -> GateRecord:
    base = {"attacks": ("loss", "likelihood_ratio"), "budgets": ((0.01, 0.05),), "confidence": 0.95,
            "members": 100, "non_members": 100, "weights": W, "references": (REF,), "pool": "p1", "signal": "s1"}
    return GateRecord(status, **{**base, **fields})


def _entry(run_id, status, start, *, end=None, where="m/1", own=True, breaks=False, **fields) -> Entry:
    """A record of run ``run_id`` that began at ``start`` and ended at ``end`` (default: ``start + 1``)."""
    return Entry(run_id, _record(status, **fields), where, own=own, start=start,
                 end=start + 1 if end is None else end, breaks=breaks)


def test_a_fail_stands_against_a_later_pass_that_does_not_clear_it():
    entries = [_entry("a", "fail", 10), _entry("b", "pass", 20)]
    derived = derive(entries)
    assert (derived.status, derived.run_id) == ("fail", "a")
    assert derive([*entries, _entry("c", "pass", 30, clear=True)]).status == "pass"


def test_an_inconclusive_is_lifted_only_by_a_pass_at_least_as_strong():
    """Issue item 3: an inconclusive blocks like a fail; a weaker pass (smaller pool, looser budget) leaves it."""
    full = _entry("a", "inconclusive", 10, members=1000, non_members=1000, budgets=((0.01, 0.067),))
    small = _entry("b", "pass", 20, members=200, non_members=200, budgets=((0.1, 0.5),), pool="p2")
    derived = derive([full, small])
    assert (derived.status, derived.run_id) == ("inconclusive", "a")
    assert small.record.shortfalls(derived.required) == [
        "another pool (keyed digest p2; the failed audit's p1, which this pool neither equals nor contains under "
        "the same hash key)",
        "no budget at FPR 0.01 (the failed audit's budget was 0.01:0.067; a budget at another FPR does not show "
        "the same)",
        "200 members, fewer than the failed audit's 1000", "200 non-members, fewer than the failed audit's 1000"]
    # a larger pool that contains the earlier one, at the same budget, lifts it (no --clear-gate-fail needed)
    larger = _entry("c", "pass", 30, members=2000, non_members=2000, budgets=((0.01, 0.067),), pool="p3",
                    contains=("p1",))
    assert derive([full, small, larger]).status == "pass"
    # other signal settings show something else
    other_settings = _entry("d", "pass", 30, members=1000, non_members=1000, budgets=((0.01, 0.067),), signal="s2")
    assert derive([full, other_settings]).status == "inconclusive"


def test_a_useless_reference_or_another_pool_cannot_clear_a_fail():
    fail = _entry("a", "fail", 10)
    twin = _entry("b", "pass", 20, clear=True, references=(TWIN,))
    assert derive([fail, twin]).status == "fail"
    assert "reference(s) sha256:1111111111111111 of the failed audit were not used" in twin.record.shortfalls(
        derive([fail]).required)[0]
    assert derive([fail, _entry("b", "pass", 20, clear=True, pool="p2")]).status == "fail"
    assert derive([fail, _entry("b", "pass", 20, clear=True, references=(REF, TWIN))]).status == "pass"


def test_a_pass_begun_before_the_blocking_run_ended_does_not_lift_it():
    running_fail = _entry("a", "fail", 10, end=math.inf)  # the failing audit has not ended
    assert derive([running_fail, _entry("b", "pass", 30, clear=True)]).status == "fail"
    fail = _entry("a", "fail", 10, end=40)
    assert derive([fail, _entry("b", "pass", 30, clear=True)]).status == "fail"
    assert derive([fail, _entry("b", "pass", 41, clear=True)]).status == "pass"


def test_the_order_is_by_the_runs_start_on_the_server_not_by_the_records_own_fields():
    """Issue item 2: a record dated 2101 in its own fields is placed by its run's start time."""
    future = _entry("a", "pass", 10, written=4_133_980_800_000)  # 2101-01-01
    later_fail = _entry("b", "fail", 20)
    assert derive([future, later_fail]).status == "fail"
    assert derive([later_fail, future]).status == "fail"


def test_a_pass_on_another_registered_model_never_counts_and_its_blocking_records_do():
    """Issue item 1: only blocking verdicts cross registered models holding the same weights."""
    fail_here = _entry("a", "fail", 10)
    evil_pass = _entry("b", "pass", 20, clear=True, where="evil/1", own=False)
    derived = derive([fail_here, evil_pass])
    assert (derived.status, derived.run_id) == ("fail", "a")
    assert "the pass of run b on evil/1 does not count here" in derived.notes[0]
    assert derive([evil_pass]) is None
    evil_fail = _entry("c", "fail", 30, where="evil/1", own=False)
    derived = derive([_entry("d", "pass", 5), evil_fail])
    assert (derived.status, derived.where) == ("fail", "evil/1")


def test_a_broken_chain_is_tampered_until_an_audit_at_least_as_strong():
    """Issue item 4: a record after a deleted one breaks the chain; a weaker pass does not mend it."""
    passing = _entry("a", "pass", 10)
    weak = _entry("b", "pass", 20, breaks=True, budgets=((0.1, 0.5),))
    derived = derive([passing, weak])
    assert derived.status == "tampered" and derived.required.budgets == ((0.01, 0.05),)
    strong = _entry("c", "pass", 20, breaks=True)
    assert derive([passing, strong]).status == "pass"
    # evidence no later record answered (the latest record deleted) ends tampered
    assert derive([passing], tampering=[(15, "the latest record was deleted")]).status == "tampered"
    assert derive([passing, strong], tampering=[(15, "deleted")]).status == "pass"
    # a standing fail stays a fail, with the tampering noted
    derived = derive([_entry("a", "fail", 10)], tampering=[(15, "the chain tag was deleted")])
    assert derived.status == "fail" and "the chain tag was deleted" in derived.notes


def test_a_seeded_canary_audit_is_not_a_release_audit():
    derived = derive([_entry("a", "inconclusive", 10), _entry("b", "pass", 20, release=False)])
    assert derived.status == "inconclusive" and "not a release audit" in derived.notes[0]


def test_siblings_of_one_audit_count_as_its_most_severe():
    children = [_entry("c1", "inconclusive", 10, parent="p"), _entry("c2", "pass", 11, parent="p")]
    assert derive(children).status == "inconclusive"
    assert derive([*children, _entry("next", "pass", 20)]).status == "pass"


def test_records_belong_to_their_weights():
    other = "sha256:" + "b" * 64
    tags = {"mia.gate.run.a": _record("fail", weights=other).to_tag(),
            "mia.gate.run.b": _record("pass").to_tag(),
            "mia.gate.run.old": GateRecord("fail", attacks=("loss",)).to_tag(),  # an earlier release: no digest
            "mia.gate": "fail"}
    assert [r for r, _, _ in records_of(tags, "m/1", weights=W, version_weights=W)] == ["b", "old"]
    assert [r for r, _, _ in records_of(tags, "m/1", weights=W, version_weights=other)] == ["b"]


def test_digests_of_references_and_pools():
    models = {"target": {"weights": W}, "reference_2": {"weights": "sha256:" + "c" * 64},
              "reference": {"weights": "sha256:" + "d" * 64}, "generator": {"identity": "x"}}
    assert reference_digests(models) == ("sha256:" + "d" * 16, "sha256:" + "c" * 16)
    assert pool_digest(["h1", "h2"], [1, 0], b"k" * 32) == pool_digest(["h2", "h1"], [0, 1], b"k" * 32)
    assert pool_digest(["h1", "h2"], [1, 0], b"k" * 32) != pool_digest(["h1", "h2"], [0, 1], b"k" * 32)
    assert pool_digest(["h1", "h2"], [1, 0], b"k" * 32) != pool_digest(["h1", "h2"], [1, 0], b"j" * 32)


def test_a_fail_found_with_one_shadow_record_is_cleared_only_with_the_same_record():
    """Round four item 5: the record that decided lira_online is part of what a clearing audit must match."""
    fail = _entry("a", "fail", 10, shadow_record="r1")
    other = _entry("b", "pass", 20, clear=True, shadow_record="r2")
    derived = derive([fail, other])
    assert derived.status == "fail"
    assert other.record.shortfalls(derived.required) == [
        "other shadow record (digest r2, the failed audit's r1): a blocking verdict is lifted only with the same "
        "shadow record"]
    assert derive([fail, _entry("c", "pass", 20, clear=True, shadow_record="r1")]).status == "pass"
    assert GateRecord.from_tag(fail.record.to_tag()).shadow_record == "r1"


def test_the_record_carries_the_gates_loose_budgets_and_release_flag():
    from dataclasses import replace

    from mlflow_mia.metrics.gate import Gate

    metrics = {"loss/tpr_at_fpr_0.1": 0.0, "loss/tpr_at_fpr_0.1_upper_binomial": 0.0,
               "loss/tpr_at_fpr_0.1_lower_binomial": 0.0, "n_members": 80, "n_non_members": 80}
    gate = replace(Gate.parse("0.1:0.9").check(metrics), loose=("0.1:0.9",), release=False)
    record = GateRecord.of(gate, ("loss",), metrics)
    assert (record.loose, record.release) == (("0.1:0.9",), False)
    assert GateRecord.from_tag(record.to_tag()) == record
