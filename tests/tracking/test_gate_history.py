"""The gate verdict of a set of weights, derived from its records (mlflow_mia.tracking.gate_history)."""

from mlflow_mia.metrics.gate_record import GateRecord
from mlflow_mia.tracking.gate_history import derive, pool_digest, records_of, reference_digests

W = "sha256:" + "a" * 64
REF, TWIN = "sha256:" + "1" * 16, "sha256:" + "2" * 16


def _record(status, written, **fields) -> GateRecord:
    base = {"attacks": ("loss", "likelihood_ratio"), "budgets": ((0.01, 0.05),), "confidence": 0.95,
            "members": 100, "non_members": 100, "weights": W, "references": (REF,), "pool": "p1",
            "started": written - 1, "written": written}
    return GateRecord(status, **{**base, **fields})


def test_a_fail_stands_against_a_later_pass_that_does_not_clear_it():
    records = [("a", _record("fail", 10), "m/1"), ("b", _record("pass", 20), "m/1")]
    derived = derive(records)
    assert (derived.status, derived.run_id) == ("fail", "a")
    assert derive([*records, ("c", _record("pass", 30, clear=True), "m/2")]).status == "pass"


def test_a_useless_reference_or_another_pool_cannot_clear_a_fail():
    fail = ("a", _record("fail", 10), "m/1")
    twin = _record("pass", 20, clear=True, references=(TWIN,))
    assert derive([fail, ("b", twin, "m/1")]).status == "fail"
    assert "reference(s) sha256:1111111111111111 of the failed audit were not used" in twin.shortfalls(
        derive([fail]).required)[0]
    other_pool = _record("pass", 20, clear=True, pool="p2")
    assert derive([fail, ("b", other_pool, "m/1")]).status == "fail"
    superset = _record("pass", 20, clear=True, references=(REF, TWIN))
    assert derive([fail, ("b", superset, "m/1")]).status == "pass"


def test_a_pass_begun_before_a_fail_was_written_does_not_clear_it():
    racing = _record("pass", 30, clear=True, started=5)
    assert derive([("a", _record("fail", 10), "m/1"), ("b", racing, "m/1")]).status == "fail"


def test_the_order_is_by_time_written_not_by_who_writes_last():
    late_fail, early_pass = _record("fail", 50), _record("pass", 40)
    assert derive([("a", late_fail, "m/1"), ("b", early_pass, "m/1")]).status == "fail"
    assert derive([("b", early_pass, "m/1"), ("a", late_fail, "m/1")]).status == "fail"


def test_siblings_of_one_audit_count_as_its_most_severe():
    children = [("c1", _record("inconclusive", 10, parent="p"), "m/1"), ("c2", _record("pass", 11, parent="p"), "m/1")]
    assert derive(children).status == "inconclusive"
    assert derive([*children, ("next", _record("pass", 20), "m/1")]).status == "pass"


def test_records_belong_to_their_weights():
    other = "sha256:" + "b" * 64
    tags = {"mia.gate.run.a": _record("fail", 10, weights=other).to_tag(),
            "mia.gate.run.b": _record("pass", 20).to_tag(),
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
