"""A registry gate verdict that a weaker audit cannot wash, and a gated audit end to end.

The gate's decision itself is tested in ``tests/metrics/test_release_gate.py``. Registry behaviour
uses the tiny registered models of ``tests/registered_models.py``; each test audits weights of its own
(``fresh_weights``), since a fail belongs to the weights digest.
"""

from __future__ import annotations

import logging
import math
import os

import mlflow
import pandas as pd
import pytest
from mlflow import MlflowClient

from mlflow_mia.metrics.gate import Gate
from mlflow_mia.metrics.gate_record import GateRecord
from mlflow_mia.tracking.descriptions import name_without_verdict
from mlflow_mia.tracking.headline import full_metrics


# ---------------------------------------------------------------------------------------------------------------
# What a fail requires of the audit that clears it
# ---------------------------------------------------------------------------------------------------------------

def _record(**overrides) -> GateRecord:
    fields = {"status": "fail", "attacks": ("loss", "likelihood_ratio"), "budgets": ((0.01, 0.05),),
              "confidence": 0.95, "members": 985, "non_members": 985, "user_members": 59, "user_non_members": 59}
    return GateRecord(**{**fields, **overrides})


def test_gate_record_round_trips_parses_the_older_form_and_merges():
    record = _record(bounds="0.01:0.0514 clopper-pearson", via="m/1")
    assert record.to_tag() == ("fail; attacks loss,likelihood_ratio; budgets 0.01:0.05; confidence 0.95; bounds "
                               "0.01:0.0514 clopper-pearson; members 985; non_members 985; user_members 59; "
                               "user_non_members 59; via m/1")
    assert GateRecord.from_tag(record.to_tag()) == record
    old = GateRecord.from_tag("fail; attacks loss,likelihood_ratio; budgets 0.1:0,0.05:0.2")
    assert old.budgets == ((0.1, 0.0), (0.05, 0.2)) and old.members is None and old.confidence is None
    weaker_fail = _record(attacks=("loss",), budgets=((0.1, 0.5), (0.01, 0.2)), members=2000, user_members=None)
    merged = record.merge(weaker_fail)
    assert merged.attacks == ("loss", "likelihood_ratio") and merged.budgets == ((0.1, 0.5), (0.01, 0.05))
    assert (merged.members, merged.user_members, merged.via) == (2000, 59, None)


def test_a_weaker_clearing_audit_is_told_each_shortfall():
    weaker = _record(status="pass", attacks=("loss",), budgets=((0.1, 0.2),), confidence=0.9, members=500,
                     non_members=985, user_members=None, user_non_members=None)
    assert weaker.shortfalls(_record()) == [
        "attack(s) likelihood_ratio did not run (the failed audit ran loss,likelihood_ratio)",
        "no budget at FPR 0.01 (the failed audit's budget was 0.01:0.05; a budget at another FPR does not show "
        "the same)",
        "confidence 0.9 is lower than the failed audit's 0.95",
        "500 members, fewer than the failed audit's 985",
        "0 member users, fewer than the failed audit's 59",
        "0 non-member users, fewer than the failed audit's 59"]
    looser = _record(status="pass", budgets=((0.01, 0.08), (0.001, 0.01)))
    assert looser.shortfalls(_record()) == ["budget 0.01:0.08 is looser than the failed audit's 0.01:0.05"]
    stronger = _record(status="pass", attacks=("loss", "likelihood_ratio", "min_k"),
                       budgets=((0.01, 0.03), (0.001, 0.01)), confidence=0.99, members=2000, user_members=100)
    assert stronger.shortfalls(_record()) == []


# ---------------------------------------------------------------------------------------------------------------
# Registry: a gate that cannot be washed
# ---------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def audit_result(store):
    """A small in-memory audit: its attacks and pool sizes go into the gate records."""
    from mlflow_mia.audits.membership import run_audit
    from mlflow_mia.config import AuditConfig
    from mlflow_mia.data import AuditDataset, PopulationSet
    from mlflow_mia.signals import MaskedLM
    from mlflow_mia.signals.testing import tiny_bert

    pool = AuditDataset.from_frame(store.pool, id_column="sample_id", group_column="article_id")
    population = PopulationSet.from_frame(store.population, group_column="article_id")
    model, tok = tiny_bert(seed=1)
    config = AuditConfig.from_dict({"signal": {"num_masks": 2}, "metrics": {"fprs": [0.1], "bootstrap_rounds": 0}})
    return run_audit(MaskedLM(model, tok), pool, population, references=[MaskedLM(tiny_bert(tok, seed=2)[0], tok)],
                     config=config, cache=str(store.cache_dir), progress=False)


def _tags(name, version) -> dict:
    return dict(MlflowClient().get_model_version(name, str(version)).tags or {})


def _runs() -> dict:
    """The runs by the name given with ``--run-name`` (the verdict the name opens with left out)."""
    runs = MlflowClient().search_runs([os.environ["MLFLOW_EXPERIMENT_ID"]])
    return {name_without_verdict(r.info.run_name): r for r in runs}


def _audit(tracking, name, version, *extra) -> int:
    from mlflow_mia.entrypoints.cli import main

    return main(["audit", "--target", f"models:/{name}/{version}", *tracking.cli_args(*extra)])


def _gated(result, spec: str, **tprs):
    """``result``'s gate verdict on ``spec`` with some TPRs replaced (``loss_0_1=0.9``: loss at FPR 0.1).

    Every TPR's bounds are set to the TPR itself, so the verdict is decided on the values given.
    """
    metrics = dict(result.metrics)
    for key, value in tprs.items():
        attack, _, alpha = key.rpartition("_0_")
        metrics[f"{attack.replace('__', '/')}/tpr_at_fpr_0.{alpha}"] = value
    for key in [k for k in metrics if "/tpr_at_fpr_" in k and k.rsplit("_", 1)[-1][0].isdigit()]:
        for part in ("upper_binomial", "lower_binomial", "upper_bootstrap", "lower_bootstrap"):
            metrics[f"{key}_{part}"] = metrics[key]
    return Gate.parse(spec).check(metrics)


def _tag(name, version, result, gate, *, clear=False, weights="sha256:" + "0" * 64) -> str:
    from mlflow_mia.tracking.registry_tags import tag_model_version

    with mlflow.start_run() as run:
        tag_model_version((name, version), result, run_id=run.info.run_id, gate=gate, clear_gate_fail=clear,
                          weights_id=weights)
    return run.info.run_id


def test_only_an_audit_at_least_as_strong_clears_a_fail(fresh_weights, audit_result, caplog):
    import hashlib

    name = "gate-clear-direct"
    version = fresh_weights("tgt/1", name)  # a logged model of its own: other tests resolve tgt/1's run
    weights = "sha256:" + hashlib.sha256(name.encode()).hexdigest()
    clean = {"loss_0_1": 0.1, "likelihood_ratio_0_1": 0.0, "user__loss_0_1": 0.0, "user__likelihood_ratio_0_1": 0.0}
    failed = _tag(name, version, audit_result, _gated(audit_result, "0.1:0.3", loss_0_1=0.9), weights=weights)
    tags = _tags(name, version)
    assert tags["mia.gate"] == "fail" and tags["mia.weights_sha256"] == weights
    assert tags["mia.gate.requires"].startswith("fail; attacks loss,likelihood_ratio; budgets 0.1:0.3; "
                                                "confidence 0.95; bounds 0.1:")
    assert "members 80; non_members 80; user_members 40; user_non_members 40; weights " in tags[f"mia.gate.run.{failed}"]
    second = _tag(name, version, audit_result, _gated(audit_result, "0.5:0.9", loss_0_5=0.95), weights=weights)
    assert GateRecord.from_tag(_tags(name, version)["mia.gate.requires"]).budgets == ((0.5, 0.9), (0.1, 0.3))

    caplog.set_level(logging.WARNING, logger="mlflow_mia.tracking.registry_tags")
    weak = _gated(audit_result, "0.1:0.5", **clean)
    assert weak.status == "pass"
    _tag(name, version, audit_result, weak, clear=True, weights=weights)
    tags = _tags(name, version)
    assert tags["mia.gate"] == "fail" and tags["mia.gate.run_id"] == second
    assert ("lifting it needs an audit at least as strong (and --clear-gate-fail, clear_gate_fail=True), and this "
            "one is weaker: no budget at FPR 0.5 (the failed audit's budget was 0.5:0.9; a budget at another "
            "FPR does not show the same); budget 0.1:0.5 is looser than the failed audit's 0.1:0.3") in caplog.text

    strong = _gated(audit_result, "0.1:0.3,0.5:0.9", **clean, loss_0_5=0.5, likelihood_ratio_0_5=0.5)
    assert strong.status == "pass"
    cleared = _tag(name, version, audit_result, strong, clear=True, weights=weights)
    tags = _tags(name, version)
    assert tags["mia.gate"] == "pass" and tags["mia.gate.run_id"] == cleared
    assert sorted(v.split(";")[0] for k, v in tags.items() if k.startswith("mia.gate.run.")) == \
        ["fail", "fail", "pass", "pass"]


def test_an_audit_too_small_for_its_budget_is_inconclusive_exits_3_and_says_what_resolves_it(
        tracking, fresh_weights, capsys):
    version = fresh_weights("tgt/1", "gate-small")
    code = _audit(tracking, "gate-small", version, "--max-tpr-at-fpr", "0.1:0.2", "--run-name", "small",
                  "--attacks", "loss,likelihood_ratio")
    out = capsys.readouterr().out
    run = _runs()["small"]
    metrics = full_metrics(MlflowClient(), run.info.run_id)  # the metrics table: every attack at both levels
    points = {k: v for k, v in metrics.items() if k.endswith("/tpr_at_fpr_0.1")}
    # Every attack the reference allows ran, at both levels: the named ones add to the gate's set.
    assert len(points) == 12
    assert all(metrics[f"{k}_lower"] <= 0.2 < metrics[f"{k}_upper"] for k in points if metrics[f"{k}_upper"] > 0.2)
    assert code == 3
    assert run.data.tags["mia.gate"] == "inconclusive"
    tags = _tags("gate-small", version)
    assert tags["mia.gate"] == "inconclusive"
    assert tags[f"mia.gate.run.{run.info.run_id}"].startswith(
        "inconclusive; attacks loss,zlib,min_k,min_k_plus_plus,likelihood_ratio,rmia; budgets 0.1:0.2; confidence "
        "0.95; bounds 0.1:")
    assert "mia.gate=inconclusive: " in out and "release gate inconclusive" in out
    # What would resolve it, in the units whose membership was randomised (articles: groups and users).
    assert "more member groups" in out or "more member users" in out or "no number of member" in out


def test_re_registered_weights_inherit_a_fail(tracking, fresh_weights, audit_result, capsys, caplog):
    before = fresh_weights("tgt/2", "leaky-before")  # the same logged model registered twice before the fail
    audited = fresh_weights("tgt/2", "leaky-audited")
    assert _audit(tracking, "leaky-before", before) == 0
    assert "mia.gate" not in _tags("leaky-before", before)

    # clearly leaking: the likelihood-ratio TPR at FPR 0.1 is far over 0.5
    assert _audit(tracking, "leaky-audited", audited, "--max-tpr-at-fpr", "0.1:0.5", "--run-name", "fail") == 3
    out = capsys.readouterr().out
    assert "OVER BUDGET" in out and "release gate failed: the model leaks more than its budget" in out
    failed = _runs()["fail"].info.run_id
    assert _tags("leaky-audited", audited)["mia.gate"] == "fail"
    tags = _tags("leaky-before", before)  # a version already holding these weights gets the fail at once
    assert (tags["mia.gate"], tags["mia.gate.run_id"], tags["mia.gate.inherited_from"]) == \
        ("fail", failed, f"leaky-audited/{audited}")

    after = fresh_weights("tgt/2", "leaky-after")  # registered again after the fail
    caplog.set_level(logging.WARNING, logger="mlflow_mia.tracking.registry_tags")
    # A passing verdict for the same weights (constructed: these weights cannot pass) does not replace the fail.
    weights = _tags("leaky-audited", audited)["mia.weights_sha256"]
    passing = _gated(audit_result, "0.1:0.9", loss_0_1=0.0, likelihood_ratio_0_1=0.0, user__loss_0_1=0.0,
                     user__likelihood_ratio_0_1=0.0)
    assert passing.status == "pass"
    _tag("leaky-after", after, audit_result, passing, weights=weights)
    tags = _tags("leaky-after", after)
    assert (tags["mia.gate"], tags["mia.gate.run_id"], tags["mia.gate.inherited_from"]) == \
        ("fail", failed, f"leaky-audited/{audited}")
    assert f"; via leaky-audited/{audited}" in tags[f"mia.gate.run.{failed}"]
    assert f"models:/leaky-after/{after} keeps mia.gate=fail (run {failed}, leaky-audited/{audited})" in caplog.text
    assert _audit(tracking, "leaky-after", after, "--max-tpr-at-fpr", "0.1:0.9", "--allow-loose-budget") == 3  # a real audit: these leak


def test_a_weaker_clear_gate_fail_audit_is_refused_with_the_reason(tracking, fresh_weights, tmp_path, caplog):
    from mlflow_mia.entrypoints.cli import main

    version = fresh_weights("tgt/2", "gate-wash")
    assert _audit(tracking, "gate-wash", version, "--max-tpr-at-fpr", "0.1:0.5", "--run-name", "fail",
                  "--attacks", "loss,likelihood_ratio") == 3
    failed = _runs()["fail"].info.run_id
    small = tmp_path / "small.csv"
    pool = tracking.pool
    pd.concat([pool[pool.is_member == 1].head(10), pool[pool.is_member == 0].head(10)]).to_csv(small, index=False)
    caplog.set_level(logging.WARNING, logger="mlflow_mia.tracking.registry_tags")
    code = main(["audit", "--target", f"models:/gate-wash/{version}", "--reference", "models:/ref@champion",
                 "--data", str(small), "--population", str(tracking.population_path), "--id-column", "sample_id",
                 "--num-masks", "2", "--fprs", "0.1", "--bootstrap-rounds", "0", "--cache-dir",
                 str(tracking.cache_dir), "--quiet",
                 "--attacks", "loss", "--max-tpr-at-fpr", "0.1:0.99,0.2:0.99", "--allow-loose-budget",
                 "--clear-gate-fail"])
    assert code == 3  # the weak audit cannot pass these leaking weights either ...
    tags = _tags("gate-wash", version)
    assert tags["mia.gate"] == "fail" and tags["mia.gate.run_id"] == failed  # ... and clears nothing


def test_a_fail_written_between_the_audits_start_and_its_tag_write_is_kept(
        tracking, fresh_weights, monkeypatch, caplog):
    import mlflow_mia.audits.membership
    import mlflow_mia.pipeline.membership

    version = fresh_weights("tgt/1", "gate-race")
    other = MlflowClient().create_run(os.environ["MLFLOW_EXPERIMENT_ID"]).info.run_id
    real = mlflow_mia.audits.membership.run_audit

    def audit_while_another_audit_fails(*args, **kwargs):
        result = real(*args, **kwargs)
        _tag_as(other, result)
        return result

    def _tag_as(run_id, result):  # what a concurrent, failing audit of the same version writes
        from mlflow_mia.tracking.registry_tags import tag_model_version

        tag_model_version(("gate-race", version), result, run_id=run_id, headline=False,
                          gate=_gated(result, "0.1:0.2", loss_0_1=0.9))

    monkeypatch.setattr(mlflow_mia.pipeline.membership, "run_audit", audit_while_another_audit_fails)
    caplog.set_level(logging.WARNING, logger="mlflow_mia.tracking.registry_tags")
    assert _audit(tracking, "gate-race", version, "--max-tpr-at-fpr", "0.1:0.9", "--allow-loose-budget", "--clear-gate-fail",
                  "--run-name", "race") == 0
    ours = _runs()["race"].info.run_id
    tags = _tags("gate-race", version)
    assert tags["mia.gate"] == "fail" and tags["mia.gate.run_id"] == other
    assert tags[f"mia.gate.run.{ours}"].startswith("pass;")  # this audit's verdict is in the history only
    assert (f"mia.gate=fail was written by run {other}, which ended after this audit began (or still runs); it is "
            "kept") in caplog.text


def test_a_version_deleted_mid_audit_exits_3_when_its_fail_could_not_be_recorded(
        tracking, fresh_weights, monkeypatch, capsys):
    import mlflow_mia.audits.membership
    import mlflow_mia.pipeline.membership

    real = mlflow_mia.audits.membership.run_audit
    deleted = []

    def audit_then_delete(*args, **kwargs):
        result = real(*args, **kwargs)
        MlflowClient().delete_model_version("gate-gone", deleted[-1])
        return result

    monkeypatch.setattr(mlflow_mia.pipeline.membership, "run_audit", audit_then_delete)
    deleted.append(fresh_weights("tgt/2", "gate-gone"))
    assert _audit(tracking, "gate-gone", deleted[-1], "--max-tpr-at-fpr", "0.1:0.5", "--run-name", "gone") == 3
    run = _runs()["gone"]
    assert (f"error: registered model version models:/gate-gone/{deleted[-1]} was deleted during the audit (run "
            f"{run.info.run_id}): its mia.gate=fail verdict could not be recorded on the version; the run keeps "
            "the verdict (run tag mia.gate) and its report") in capsys.readouterr().err
    assert run.data.tags["mia.gate"] == "fail"
    deleted.append(fresh_weights("tgt/2", "gate-gone"))
    assert _audit(tracking, "gate-gone", deleted[-1]) == 2  # no blocking verdict: an input error
    assert "its audit tags could not be written" in capsys.readouterr().err


def test_a_weights_swap_marks_the_verdict_stale_and_inherits_the_new_weights_fail(tracking, fresh_weights,
                                                                                  audit_result, caplog):
    from mlflow_mia.tracking.registry_tags import tag_model_version

    benign, leaking, fresh = ("sha256:" + c * 64 for c in "123")
    version = fresh_weights("tgt/1", "swap-tgt")
    other = fresh_weights("tgt/1", "swap-leaky")
    passing = _gated(audit_result, "0.1:0.9", loss_0_1=0.0, likelihood_ratio_0_1=0.0, user__loss_0_1=0.0,
                     user__likelihood_ratio_0_1=0.0)
    _tag("swap-tgt", version, audit_result, passing, weights=benign)
    assert _tags("swap-tgt", version)["mia.gate"] == "pass"
    failed = _tag("swap-leaky", other, audit_result, _gated(audit_result, "0.1:0.3", loss_0_1=0.9), weights=leaking)

    # The version's weights are replaced by the leaking ones; an audit without a gate loads them.
    caplog.set_level(logging.WARNING, logger="mlflow_mia.tracking.registry_tags")
    with mlflow.start_run() as run:
        tag_model_version(("swap-tgt", version), audit_result, run_id=run.info.run_id, weights_id=leaking)
    tags = _tags("swap-tgt", version)
    assert f"changed since its last audit (recorded {benign}, now {leaking})" in caplog.text
    assert (tags["mia.gate"], tags["mia.gate.run_id"], tags["mia.gate.inherited_from"]) == \
        ("fail", failed, f"swap-leaky/{other}")
    assert tags["mia.weights_sha256"] == leaking

    # Weights of no recorded audit: the verdict is stale until an audit writes one.
    with mlflow.start_run() as run:
        tag_model_version(("swap-tgt", version), audit_result, run_id=run.info.run_id, weights_id=fresh,
                          headline=False)
    tags = _tags("swap-tgt", version)
    assert tags["mia.verdict"] == "stale" and "mia.gate" not in tags
    assert MlflowClient().get_model_version("swap-tgt", version).description.startswith("**Verdict: stale**")


def test_a_pass_written_while_a_fail_lands_cannot_hide_it(tracking, fresh_weights, audit_result, monkeypatch):
    """Forced interleaving: another writer's fail lands between this writer's derivation and its headline write."""
    import mlflow_mia.tracking.gate_chain as gate_chain

    version = fresh_weights("tgt/1", "race-forced")
    weights = "sha256:" + "4" * 64
    real, landed, calls = gate_chain.derive_for, [], []

    def derive_then_a_fail_lands(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(out)
        if len(calls) == 2:  # this writer's record is written and derived (a pass): the fail lands now
            from mlflow_mia.tracking.registry_tags import tag_model_version

            other = MlflowClient().create_run(os.environ["MLFLOW_EXPERIMENT_ID"]).info.run_id
            landed.append(other)
            tag_model_version(("race-forced", version), audit_result, run_id=other, headline=False,
                              gate=_gated(audit_result, "0.1:0.3", loss_0_1=0.9), weights_id=weights)
        return out

    passing = _gated(audit_result, "0.1:0.9", loss_0_1=0.0, likelihood_ratio_0_1=0.0, user__loss_0_1=0.0,
                     user__likelihood_ratio_0_1=0.0)
    monkeypatch.setattr(gate_chain, "derive_for", derive_then_a_fail_lands)
    _tag("race-forced", version, audit_result, passing, weights=weights)
    assert calls[1][0].status == "pass"  # what this writer derived before its headline write
    tags = _tags("race-forced", version)
    assert (tags["mia.gate"], tags["mia.gate.run_id"]) == ("fail", landed[0])


_RACER = """
import os, sys, time, mlflow
from mlflow_mia.metrics.gate import Gate
from mlflow_mia.tracking.registry_tags import tag_model_version
name, version, status, n, weights = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
metrics = {"loss/tpr_at_fpr_0.1": 0.9 if status == "fail" else 0.0, "n_members": 80, "n_non_members": 80}
for part in ("upper_binomial", "lower_binomial"):
    metrics["loss/tpr_at_fpr_0.1_" + part] = metrics["loss/tpr_at_fpr_0.1"]
gate = Gate.parse("0.1:0.3").check(metrics)
class Result:
    attacks, user_attacks, metrics = {}, {}, metrics
for _ in range(n):
    with mlflow.start_run() as run:
        tag_model_version((name, version), Result, run_id=run.info.run_id, gate=gate, weights_id=weights,
                          headline=False if status == "fail" else True, headline_tags_={})
"""


def test_two_processes_writing_pass_and_fail_leave_the_fail_standing(tracking, fresh_weights, tmp_path):
    import subprocess
    import sys

    version = fresh_weights("tgt/1", "race-processes")
    weights = "sha256:" + "5" * 64
    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    env = {**os.environ}
    procs = [subprocess.Popen([sys.executable, str(script), "race-processes", str(version), status, n, weights],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for status, n in (("pass", "6"), ("fail", "1"), ("pass", "6"))]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()[-2000:]
    tags = _tags("race-processes", version)
    assert tags["mia.gate"] == "fail"
    assert sum(v.startswith("pass;") for k, v in tags.items() if k.startswith("mia.gate.run.")) == 12


def test_a_newer_audit_that_finds_a_leak_shows_leaks_on_the_version(tracking, fresh_weights, audit_result):
    version = fresh_weights("tgt/2", "leak-after-pass")
    assert _audit(tracking, "leak-after-pass", version) == 0  # ungated: records the weights digest
    weights = _tags("leak-after-pass", version)["mia.weights_sha256"]
    passing = _gated(audit_result, "0.1:0.9", loss_0_1=0.0, likelihood_ratio_0_1=0.0, user__loss_0_1=0.0,
                     user__likelihood_ratio_0_1=0.0)
    _tag("leak-after-pass", version, audit_result, passing, weights=weights)
    assert _tags("leak-after-pass", version)["mia.gate"] == "pass"
    assert _audit(tracking, "leak-after-pass", version) == 0  # ungated again: these weights leak
    tags = _tags("leak-after-pass", version)
    assert tags["mia.gate"] == "pass" and tags["mia.verdict"] == "leaks"
