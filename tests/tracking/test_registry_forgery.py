"""Attacks on the registry verdict (security round four): each is performed, and its outcome checked.

Honest audits write through :func:`mlflow_mia.tracking.registry_tags.tag_model_version` in this
process; each attacker is another process (``_attacker``) with MLflow's client only, write access to
the registry, and no seal key of the auditors (its own store key file, no hash key). Both use the
session's real sqlite tracking and registry store (``tests/registered_models.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import mlflow
import pytest
from mlflow import MlflowClient

from mlflow_mia.metrics.gate import Gate
from mlflow_mia.metrics.gate_record import GateRecord

_ATTACKER = textwrap.dedent("""
    import json, sys
    from mlflow import MlflowClient
    client = MlflowClient()
    for op, name, version, key, value in json.loads(sys.argv[1]):
        if op == "set":
            client.set_model_version_tag(name, version, key, value)
        else:
            client.delete_model_version_tag(name, version, key)
""")


def _attacker(tmp_path, *ops) -> None:
    """Run ``ops`` (``("set", name, version, key, value)`` / ``("delete", name, version, key, None)``) in another
    process that holds another store key and no hash key."""
    script = tmp_path / "attacker.py"
    script.write_text(_ATTACKER)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_MIA_HASH_KEY"}
    env["MLFLOW_MIA_STORE_KEY_FILE"] = str(tmp_path / "attacker-keys" / "store.key")
    done = subprocess.run([sys.executable, str(script), json.dumps(ops)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def _tags(name, version) -> dict:
    return dict(MlflowClient().get_model_version(name, str(version)).tags or {})


def _gate(tpr: float, spec: str = "0.1:0.3", *, lower=None, upper=None):
    """A gate verdict of ``spec`` decided on a loss TPR of ``tpr`` at each FPR (its bounds the TPR unless given)."""
    metrics = {"n_members": 80, "n_non_members": 80}
    for alpha in Gate.parse(spec).alphas:
        key = f"loss/tpr_at_fpr_{alpha:g}"
        metrics[key] = tpr
        for part, bound in (("upper", upper), ("lower", lower)):
            for kind in ("binomial", "bootstrap"):
                metrics[f"{key}_{part}_{kind}"] = tpr if bound is None else bound
    return Gate.parse(spec).check(metrics)


class _Result:
    """What tag_model_version reads of an audit result, for a verdict decided on the TPRs given."""

    def __init__(self, gate):
        self.attacks, self.user_attacks, self.metrics = {}, {}, gate.metrics if hasattr(gate, "metrics") else {}


def _audit(name, version, gate, weights, *, clear=False, pool="p1", members=80, headline=False, **record_fields):
    """An honest gated audit of ``name/version``: a finished run that writes its sealed record."""
    from mlflow_mia.tracking.registry_tags import tag_model_version

    record = GateRecord.of(gate, ("loss",), {"n_members": members, "n_non_members": members}, **record_fields)
    with mlflow.start_run() as run:
        tag_model_version((name, version), _Result(gate), run_id=run.info.run_id, gate=gate, weights_id=weights,
                          clear_gate_fail=clear, headline=headline, headline_tags_={}, record=record, pool=pool)
    return run.info.run_id


def _weights(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def test_a_record_on_another_registered_model_cannot_clear_the_victims_fail(tracking, fresh_weights, tmp_path,
                                                                             caplog):
    """Item 1: ``evil/1`` tagged with the victim's digest and a clearing pass record (forged, then even sealed)."""
    import logging

    weights = _weights("victim-1")
    victim, evil = fresh_weights("tgt/1", "victim-one"), fresh_weights("tgt/1", "evil-one")
    failed = _audit("victim-one", victim, _gate(0.9), weights)
    assert _tags("victim-one", victim)["mia.gate"] == "fail"
    forged = GateRecord("pass", attacks=("loss",), budgets=((0.1, 0.9),), confidence=0.99, members=10_000,
                        non_members=10_000, weights=weights, started=4_133_980_800_000,
                        written=4_133_980_800_000, clear=True)
    _attacker(tmp_path, ("set", "evil-one", evil, "mia.weights_sha256", weights),
              ("set", "evil-one", evil, "mia.gate.run.0123456789abcdef0123456789abcdef", forged.to_tag()),
              ("set", "evil-one", evil, "mia.gate", "pass"))
    caplog.set_level(logging.WARNING, logger="mlflow_mia.tracking.registry_tags")
    _audit("victim-one", victim, _gate(0.9), weights)  # the victim's next honest audit fails again
    tags = _tags("victim-one", victim)
    assert tags["mia.gate"] == "fail" and "evil" not in tags["mia.gate.run_id"]
    assert "the record of run 0123456789abcdef0123456789abcdef on evil-one/" in tags["mia.gate.notes"]
    assert "unsealed" in tags["mia.gate.notes"]
    # An insider who holds the seal key audits evil/1 (same weights) to a real, sealed pass: it counts for evil only.
    _audit("evil-one", evil, _gate(0.0), weights, clear=True, headline=True)
    _audit("victim-one", victim, _gate(0.0), weights, headline=True)  # a pass without --clear-gate-fail
    tags = _tags("victim-one", victim)
    assert tags["mia.gate"] == "fail" and tags["mia.gate.run_id"] != failed  # the second honest fail decides
    assert "does not count here (another registered model" in tags["mia.gate.notes"]


def test_a_forged_fail_on_another_model_does_not_fail_a_benign_version(tracking, fresh_weights, tmp_path):
    """Item 1, the reverse: an unsealed fail on another model with the same digest leaves the victim's pass."""
    weights = _weights("benign-1")
    victim, evil = fresh_weights("tgt/1", "benign-one"), fresh_weights("tgt/1", "evil-two")
    _audit("benign-one", victim, _gate(0.0), weights, headline=True)
    forged = GateRecord("fail", attacks=("loss",), budgets=((0.1, 0.01),), confidence=0.95, weights=weights,
                        started=1, written=4_133_980_800_000)
    _attacker(tmp_path, ("set", "evil-two", evil, "mia.weights_sha256", weights),
              ("set", "evil-two", evil, "mia.gate.run.feedfacefeedfacefeedfacefeedface", forged.to_tag()))
    _audit("benign-one", victim, _gate(0.0), weights, headline=True)
    assert _tags("benign-one", victim)["mia.gate"] == "pass"


def test_a_future_dated_record_of_no_run_is_ignored_and_reported(tracking, fresh_weights, tmp_path, capsys):
    """Item 2: a pass record written_at 2101 with a run id that does not exist, on the victim itself."""
    weights = _weights("future-1")
    version = fresh_weights("tgt/1", "future-one")
    _attacker(tmp_path, ("set", "future-one", version, "mia.gate.run.99999999999999999999999999999999",
                         GateRecord("pass", attacks=("loss",), budgets=((0.1, 0.01),), confidence=0.999,
                                    weights=weights, started=4_133_980_800_000, written=4_133_980_800_000,
                                    clear=True).to_tag()),
              ("set", "future-one", version, "mia.gate", "pass"))
    _audit("future-one", version, _gate(0.9, "0.01:0.05"), weights)  # a stricter budget, and it fails
    tags = _tags("future-one", version)
    assert tags["mia.gate"] == "fail"
    assert "99999999999999999999999999999999" in tags["mia.gate.notes"]
    # Even sealed under the auditors' key (an insider), a record whose run does not exist is not counted.
    from mlflow_mia.tracking.gate_seal import SealKey, Verifier, seal

    key = SealKey.of()
    record = seal(GateRecord("pass", weights=weights, started=4_133_980_800_000), run_id="0" * 32,
                  where=f"future-one/{version}", key=key)
    assert Verifier(MlflowClient(), key).problem("0" * 32, record, f"future-one/{version}") == \
        f"its run {'0' * 32} does not exist on this tracking server"


def test_an_inconclusive_is_not_lifted_by_a_weaker_pass(tracking, fresh_weights):
    """Item 3: inconclusive on a full pool at 0.01:0.067, then a pass on a fifth of it at 0.1:0.5."""
    weights = _weights("inconclusive-1")
    version = fresh_weights("tgt/1", "inconclusive-one")
    gate = _gate(0.06, "0.01:0.067", lower=0.0, upper=0.2)  # the bounds straddle the budget
    assert gate.status == "inconclusive"
    _audit("inconclusive-one", version, gate, weights, pool="full", members=1000)
    assert _tags("inconclusive-one", version)["mia.gate"] == "inconclusive"
    weak = _audit("inconclusive-one", version, _gate(0.0, "0.1:0.5"), weights, pool="subset", members=200,
                  headline=True)
    tags = _tags("inconclusive-one", version)
    assert tags["mia.gate"] == "inconclusive" and tags["mia.gate.run_id"] != weak
    strong = _audit("inconclusive-one", version, _gate(0.0, "0.01:0.067"), weights, pool="full", members=1000,
                    headline=True)
    assert (_tags("inconclusive-one", version)["mia.gate"], _tags("inconclusive-one", version)["mia.gate.run_id"]) \
        == ("pass", strong)


def test_copied_or_deleted_records_are_visible(tracking, fresh_weights, tmp_path):
    """Item 4: a copied mia.gate.requires is no record; deleting records sets mia.verdict=tampered."""
    weights = _weights("tamper-1")
    version = fresh_weights("tgt/1", "tamper-one")
    failed = _audit("tamper-one", version, _gate(0.9), weights)
    requires = _tags("tamper-one", version)["mia.gate.requires"]
    copied = requires.replace("fail;", "pass;", 1) + "; clear 1"
    _attacker(tmp_path, ("set", "tamper-one", version, "mia.gate.run.abcdefabcdefabcdefabcdefabcdefab", copied))
    _audit("tamper-one", version, _gate(0.0), weights, headline=True)
    tags = _tags("tamper-one", version)
    assert tags["mia.gate"] == "fail" and "abcdefabcdefabcdefabcdefabcdefab" in tags["mia.gate.notes"]

    # Deleting every record (and the chain tag) erases nothing: the runs still name the version.
    gone = [("delete", "tamper-one", version, k, None) for k in tags
            if k.startswith("mia.gate.run.") or k.startswith("mia.gate.chain") or k == "mia.gate"]
    _attacker(tmp_path, *gone)
    assert not any(k.startswith("mia.gate.run.") for k in _tags("tamper-one", version))
    _audit("tamper-one", version, _gate(0.0, "0.1:0.5"), weights, headline=True)  # a weak pass
    tags = _tags("tamper-one", version)
    assert tags["mia.gate"] == "fail" and tags["mia.gate.run_id"] == failed  # recovered from its run
    assert "was deleted" in tags["mia.gate.notes"] and "recovered from its run" in tags["mia.gate.notes"]


def test_a_deleted_pass_record_leaves_the_version_tampered_until_an_audit_as_strong(tracking, fresh_weights,
                                                                                     tmp_path):
    """Item 4: the chain: the latest record deleted, or the chain tag edited, shows as tampered."""
    from mlflow_mia.tracking.registry_tags import describe_versions
    from mlflow_mia.tracking.verdict import Verdict

    weights = _weights("chain-1")
    version = fresh_weights("tgt/1", "chain-one")
    _audit("chain-one", version, _gate(0.0, "0.01:0.05"), weights, headline=True)
    latest = _audit("chain-one", version, _gate(0.0, "0.01:0.05"), weights, headline=True)
    _attacker(tmp_path, ("delete", "chain-one", version, f"mia.gate.run.{latest}", None))
    _audit("chain-one", version, _gate(0.0, "0.1:0.5"), weights, headline=True)  # a weaker pass after it
    tags = _tags("chain-one", version)
    assert tags["mia.gate"] == "tampered" and tags["mia.verdict"] == "tampered"
    with mlflow.start_run() as run:
        describe_versions(MlflowClient(), [("chain-one", version)], verdict=Verdict("within budget", "passed"),
                          paragraph="in brief", run_id=run.info.run_id)
    description = MlflowClient().get_model_version("chain-one", version).description
    assert description.startswith("**Verdict: tampered**") and f"the record of run {latest}" in description
    strong = _audit("chain-one", version, _gate(0.0, "0.01:0.05"), weights, headline=True)
    assert (_tags("chain-one", version)["mia.gate"], _tags("chain-one", version)["mia.gate.run_id"]) == \
        ("pass", strong)
    chain = next(k for k in _tags("chain-one", version) if k.startswith("mia.gate.chain."))
    _attacker(tmp_path, ("set", "chain-one", version, chain, "x:y 0123"))
    _audit("chain-one", version, _gate(0.0, "0.1:0.5"), weights, headline=True)
    assert _tags("chain-one", version)["mia.gate"] == "tampered"


@pytest.mark.parametrize("status", ["pass", "fail"])
def test_records_verify_only_under_the_key_they_were_sealed_with(tracking, fresh_weights, status, monkeypatch):
    """Another auditor's key: its pass is not counted (reported), its fail still blocks (its run exists)."""
    weights = _weights(f"keys-{status}")
    version = fresh_weights("tgt/1", f"keys-{status}")
    first = _audit(f"keys-{status}", version, _gate(0.9 if status == "fail" else 0.0), weights, headline=True)
    monkeypatch.setenv("MLFLOW_MIA_HASH_KEY", "another auditor's hash key of 32 bytes or more")
    from mlflow_mia.hashing import resolve_hash_key
    from mlflow_mia.tracking.registry_tags import tag_model_version

    gate = _gate(0.0, "0.1:0.5")
    with mlflow.start_run() as run:
        tag_model_version((f"keys-{status}", version), _Result(gate), run_id=run.info.run_id, gate=gate,
                          weights_id=weights, headline_tags_={}, hash_key=resolve_hash_key(), pool="p1",
                          record=GateRecord.of(gate, ("loss",), {"n_members": 80, "n_non_members": 80}))
    tags = _tags(f"keys-{status}", version)
    assert "was deleted" not in tags.get("mia.gate.notes", "")  # another key's record is there, not deleted
    if status == "pass":
        assert tags["mia.gate"] == "pass" and tags["mia.gate.run_id"] == run.info.run_id
        assert (f"the record of run {first} on keys-{status}/{version} is not counted: sealed under another key"
                in tags["mia.gate.notes"])
    else:  # the weaker pass under another key does not lift the fail it cannot verify
        assert tags["mia.gate"] == "fail" and tags["mia.gate.run_id"] == first
        assert f"the record of run {first} on keys-{status}/{version} is counted as blocking although sealed " \
               "under another key" in tags["mia.gate.notes"]


def test_a_larger_pool_contains_the_earlier_one_by_its_logged_keyed_hashes(tracking, tmp_path):
    """A pool contains a blocking audit's pool when every (keyed hash, label) of that run's samples table is in it."""
    import pandas as pd

    from mlflow_mia.tracking.gate_history import Entry
    from mlflow_mia.tracking.gate_chain import contained_pools

    table = tmp_path / "tables" / "samples.csv"
    table.parent.mkdir()
    pd.DataFrame({"sample_id": ["s1", "s2"], "text_hmac": ["h1", "h2"], "label": [1, 0]}).to_csv(table, index=False)
    with mlflow.start_run() as run:
        mlflow.log_artifact(str(table), "tables")
    blocking = Entry(run.info.run_id, GateRecord("inconclusive", pool="small"), "m/1")
    client = MlflowClient()
    assert contained_pools(client, [blocking], "large", {("h1", 1), ("h2", 0), ("h3", 1)}) == ("small",)
    assert contained_pools(client, [blocking], "large", {("h1", 1), ("h3", 0)}) == ()
    assert contained_pools(client, [blocking], "large", {("h1", 1), ("h2", 1)}) == ()  # a label flipped
    passing = Entry(run.info.run_id, GateRecord("pass", pool="small"), "m/1")
    assert contained_pools(client, [passing], "large", {("h1", 1), ("h2", 0)}) == ()  # a pass requires nothing
