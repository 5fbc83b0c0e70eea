"""``mlflow-mia canary-audit`` and ``method="canaries"`` end to end on the session's tiny registered models."""

from __future__ import annotations

import logging
import math
import os
import re
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient

from mlflow_mia.canaries import make_canaries
from mlflow_mia.entrypoints.cli import main
from mlflow_mia.tracking.descriptions import name_without_verdict

# A rare prefix makes a secret searchable as a string (eight digits alone turn up in hashes and timestamps).
TEMPLATES = ["the patient record is zq{digits:8}", "the doctor saw {name} on {phone}"]


@pytest.fixture
def canary_file(tmp_path):
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    cs = make_canaries(40, TEMPLATES, repetitions=(1, 4))  # drawn as an auditor would: secrets, no seed
    return cs, cs.save(secret_dir / "canaries.json")


def _args(tracking, path, *extra):
    return ["--canaries", str(path), "--n-candidates", "50", "--bootstrap-rounds", "20", "--cache-dir",
            str(tracking.cache_dir), "--quiet", *extra]


def test_canary_audit_logs_metrics_and_gates_with_the_membership_exit_codes(tracking, fresh_weights, canary_file,
                                                                           capsys):
    cs, path = canary_file
    version = fresh_weights("tgt/2", "canary-tgt")
    target = f"models:/canary-tgt/{version}"
    assert main(["canary-audit", "--target", target, *_args(tracking, path, "--run-name", "plain")]) == 0
    out = capsys.readouterr().out
    assert "record-level epsilon lower bound" in out
    run = mlflow.search_runs(filter_string="attributes.run_name LIKE '%] plain'", output_format="list")[0]
    assert run.data.tags["mia.method"] == "canaries"
    assert 0.0 <= run.data.metrics["canary/r1/auc"] <= 1.0
    assert run.data.metrics["canary/n_canaries"] == 40
    assert run.data.params["canary.set_digest"] and run.data.params["canary.n_included"] == str(cs.included.sum())
    arts = {a.path for a in MlflowClient().list_artifacts(run.info.run_id)}
    assert {"report.md", "canary_audit.json", "plots", "tables"} <= arts
    tags = MlflowClient().get_model_version("canary-tgt", version).tags
    assert "mia.canary.auc" in tags and "mia.gate" not in tags
    # 20 canaries inserted once cannot certify epsilon 5: the gate is inconclusive, which blocks (exit 3)
    assert main(["canary-audit", "--target", target,
                 *_args(tracking, path, "--max-epsilon-lower-bound", "5")]) == 3
    out = capsys.readouterr().out
    assert "mia.gate=inconclusive" in out and "cannot certify an epsilon above" in out
    assert MlflowClient().get_model_version("canary-tgt", version).tags["mia.gate"] == "inconclusive"
    # bad input: exit 2, before any model loads
    assert main(["canary-audit", "--target", target, *_args(tracking, Path(path).parent / "missing.json")]) == 2
    assert main(["canary-audit", "--target", target, *_args(tracking, path, "--max-exposure", "1")]) == 2
    assert main(["canary-audit", "--target", target, *_args(tracking, path, "--planted-in", "run 1; pass")]) == 2
    assert "planted_in must be a string of letters, digits and _.:/@+=- (at most 200)" in capsys.readouterr().err


def test_no_canary_text_or_secret_reaches_the_store_caches_or_logs(tracking, canary_file, tmp_path, monkeypatch,
                                                                  capsys, caplog):
    cs, path = canary_file
    hf_home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(hf_home))
    cache = tmp_path / "cache"
    caplog.set_level(logging.DEBUG)
    args = ["--canaries", str(path), "--n-candidates", "50", "--bootstrap-rounds", "20", "--cache-dir", str(cache),
            "--quiet", "--max-epsilon-lower-bound", "5", "--no-tag-model-version"]
    assert main(["canary-audit", "--target", "models:/tgt@champion", "--reference", "models:/ref@champion",
                 *args]) in (0, 3)
    needles = [t.encode() for t in cs.texts] + [f"zq{s}".encode() for s in cs.secrets if s]
    out = capsys.readouterr()
    assert not any(n.decode() in out.out + out.err + caplog.text for n in needles)
    searched = 0
    for root in (tracking.root, cache, hf_home, tmp_path):
        for file in Path(root).rglob("*"):
            if file.is_file() and file != Path(path):
                searched += 1
                data = file.read_bytes()
                assert not any(n in data for n in needles), file
    assert searched > 10


def test_the_cache_and_the_params_hold_no_recoverable_canary_secret(
        tracking, tmp_path, monkeypatch):
    import sqlite3

    from mlflow_mia.audits.canary import candidate_secrets
    from mlflow_mia.data import text_hash
    from mlflow_mia.hashing import lookup_hash

    cs = make_canaries(40, TEMPLATES, repetitions=(1, 4))  # drawn as an auditor would: no seed
    path = cs.save(tmp_path / "secret" / "canaries.json")
    key = "k" * 32
    monkeypatch.setenv("MLFLOW_MIA_HASH_KEY", key)
    cache = tmp_path / "cache"
    assert main(["canary-audit", "--target", "models:/tgt@champion", "--canaries", str(path), "--n-candidates",
                 "50", "--bootstrap-rounds", "20", "--cache-dir", str(cache), "--quiet",
                 "--no-tag-model-version"]) == 0
    # The red team's search: the candidates regenerated from the logged seed and n_candidates, and every canary.
    run = _last_run()
    assert run.data.params["canary.n_candidates"] == "50"
    template = cs.templates[0]
    candidates, _ = candidate_secrets(template, 50, seed=int(run.data.params["canary.seed"]) + 1)
    texts = list(cs.texts) + [template.render(s) for s in candidates]
    with sqlite3.connect(cache / "signals.sqlite") as conn:
        rows = {h for (h,) in conn.execute("SELECT text_hash FROM signal_rows")}
    assert rows and not rows & {text_hash(t) for t in texts}
    assert {lookup_hash(t, key) for t in texts} <= rows
    plain = [text_hash(t).encode() for t in texts]
    for file in cache.rglob("*"):
        if file.is_file():
            data = file.read_bytes()
            assert not any(h in data for h in plain), file
    # A seed search over the logged params finds nothing: no seed is logged, and among seeds 0..1999 those that
    # match every logged per-repetition count regenerate neither the secrets nor the bits.
    params = run.data.params
    assert params["canary.set_drawn_from"] == "secrets" and not any(
        "seed" in k for k in params if k != "canary.seed")  # canary.seed: the audit's masks and bootstrap
    logged = {k: params[f"canary.{k.replace('/', '.')}"] for k in cs.counts()}
    matches = 0
    for seed in range(2000):
        again = make_canaries(40, TEMPLATES, repetitions=(1, 4), seed=seed)
        if {k: str(v) for k, v in again.counts().items()} == logged:
            matches += 1
            assert again.texts != cs.texts and not (set(again.secrets) - {None}) & (set(cs.secrets) - {None})
    assert matches > 0  # the counts alone do narrow the seeds, as the red team found; the seeds are not the set


def test_a_canary_fail_is_cleared_by_neither_a_looser_budget_nor_another_canary_set(
        tracking, fresh_weights, tmp_path, monkeypatch, caplog):
    """The red team's washes, replayed with the record-level bound set as they measured it (1.57)."""
    import mlflow_mia.metrics.canary_gate as canary_gate
    import mlflow_mia.tracking.canary_log as canary_log
    from mlflow_mia.canaries import insert
    from mlflow_mia.hashing import resolve_hash_key
    from mlflow_mia.metrics.gate_record import GateRecord

    real, bound = canary_log.gate_points, {"value": 1.57}

    def measured(result):
        points, eps = real(result)
        return points, {**eps, "value": bound["value"], "ceiling": 3.0}

    monkeypatch.setattr(canary_gate, "gate_points", measured)  # where the gate reads its points (check(result))
    monkeypatch.setenv("MLFLOW_MIA_HASH_KEY", "k" * 32)
    planted = make_canaries(40, TEMPLATES, repetitions=(1, 4))
    path = planted.save(tmp_path / "planted" / "canaries.json")
    never = make_canaries(120, TEMPLATES, repetitions=(1, 4))  # never used in training
    never_path = never.save(tmp_path / "never" / "canaries.json")
    _, planted_in = insert([f"training text {i}" for i in range(50)], planted, with_digest=True)
    name = "canary-wash"
    target = f"models:/{name}/{fresh_weights('tgt/2', name)}"

    def audit(canaries, budget, *extra):
        caplog.clear()
        return main(["canary-audit", "--target", target,
                     *_args(tracking, canaries, "--max-epsilon-lower-bound", budget, *extra)])

    def tags():
        return MlflowClient().get_model_version(name, target.rsplit("/", 1)[1]).tags

    assert audit(path, "0.5", "--planted-in", planted_in) == 3
    required = GateRecord.from_tag(tags()["mia.gate.requires"])
    assert tags()["mia.gate"] == "fail" and tags()["mia.verdict"] == "leaks"
    assert required.canary_sets == (canary_log.canary_set_id(planted, resolve_hash_key()),)
    assert required.canary_budgets == (("canary_epsilon", 0.5),) and required.confidence == 0.95
    assert required.planted_in == (planted_in,) and required.delta == 1e-5 and required.candidates == 50
    # the same canaries with a looser budget: this audit passes, the version keeps its fail
    assert audit(path, "1.9", "--planted-in", planted_in, "--clear-gate-fail") == 0
    assert (tags()["mia.gate"], tags()["mia.verdict"]) == ("fail", "leaks")
    assert "--max-epsilon-lower-bound 1.9 is looser than the failed audit's 0.5" in caplog.text
    # a fresh set of 120 canaries never planted, budget 0.5: passes on its own, clears nothing
    bound["value"] = 0.1
    assert audit(never_path, "0.5", "--planted-in", planted_in, "--clear-gate-fail") == 0
    assert (tags()["mia.gate"], tags()["mia.verdict"]) == ("fail", "leaks")
    assert "another canary set (digest " in caplog.text and "a canary fail is cleared only by an audit" in caplog.text
    # the planted set at the same budget, without saying where it was planted: still refused
    bound["value"] = 0.3
    assert audit(path, "0.5", "--clear-gate-fail") == 0
    assert tags()["mia.gate"] == "fail" and f"planted in not stated, not in {planted_in}" in caplog.text
    # the same set, as tight, planted where the failed audit said: the fail is cleared
    assert audit(path, "0.5", "--planted-in", planted_in, "--clear-gate-fail") == 0
    assert (tags()["mia.gate"], tags()["mia.verdict"]) == ("pass", "within budget")
    history = [GateRecord.from_tag(v) for k, v in tags().items() if k.startswith("mia.gate.run.")]
    assert len(history) == 5 and all(r.canary_sets and r.canary_budgets for r in history)
    run = _last_run()
    assert run.data.params["canary.planted_in"] == planted_in and run.data.params["canary.set_drawn_from"] == "secrets"
    with open(MlflowClient().download_artifacts(run.info.run_id, "report.md"), encoding="utf-8") as fh:
        report = fh.read()
    assert (f"Canary set: keyed digest {planted.digest(resolve_hash_key())} (under the hash key with check "
            f"{resolve_hash_key().check}); planted in: {planted_in}.") in report


def test_the_evaluator_method_canaries(tracking, canary_file):
    cs, path = canary_file
    with mlflow.start_run() as run:
        result = mlflow.models.evaluate(
            model=None, data=cs.id_frame(), model_type="mia", evaluators=["mia"],
            evaluator_config={"mia": {"method": "canaries", "target_model": "models:/tgt@champion",
                                      "canaries": str(path), "n_candidates": 50, "bootstrap_rounds": 20,
                                      "cache_dir": str(tracking.cache_dir), "progress": False,
                                      "tag_model_version": False}})
    assert result.metrics["canary/n_canaries"] == 40
    assert "canary/r1/epsilon_lower_bound" in result.metrics
    # 20 canaries at r = 1, about 10 excluded: FPR 0.01 (100 needed) is unresolved and returns no metric, never nan
    assert "canary/r1/tpr_at_fpr_0.01" not in result.metrics
    assert all(math.isfinite(v) for v in result.metrics.values())
    with pytest.raises(ValueError, match="data=canary_set.id_frame"):
        mlflow.models.evaluate(model=None, data=cs.id_frame().iloc[:5], model_type="mia", evaluators=["mia"],
                               evaluator_config={"mia": {"method": "canaries", "target_model": "models:/tgt@champion",
                                                         "canaries": str(path)}})
    with pytest.raises(ValueError, match="unknown evaluator_config"):
        mlflow.models.evaluate(model=None, data=cs.id_frame(), model_type="mia", evaluators=["mia"],
                               evaluator_config={"mia": {"method": "canaries", "canaries": str(path), "attacks": "x"}})
    assert run.info.run_id


def _last_run():
    return MlflowClient().search_runs([os.environ["MLFLOW_EXPERIMENT_ID"]], order_by=["attributes.start_time DESC"])[0]


def test_canary_run_shows_the_verdict_everywhere(tracking, fresh_weights, canary_file, capsys, monkeypatch):
    from mlflow_mia.tracking.verdict import canary_verdict

    _, path = canary_file
    version = fresh_weights("tgt/2", "canary-seen")
    target = f"models:/canary-seen/{version}"
    client = MlflowClient()
    # Under `mlflow run` the project run (random name) is the audit run: it gets the audit's name.
    tracking_experiment = os.environ["MLFLOW_EXPERIMENT_ID"]
    project = client.create_run(tracking_experiment)
    monkeypatch.setenv("MLFLOW_RUN_ID", project.info.run_id)
    assert main(["canary-audit", "--target", target, *_args(tracking, path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    run = client.get_run(project.info.run_id)
    tags = run.data.tags
    assert name_without_verdict(run.info.run_name) == f"canary-audit canary-seen v{version}"
    # The verdict is the rule's, read from the logged metrics (NaN metrics are not logged, as the rule reads them).
    expected = canary_verdict(run.data.metrics)
    assert (tags["mia.verdict"], tags["mia.verdict.reason"]) == (expected.value, expected.reason)
    note = tags["mlflow.note.content"]
    assert note.startswith(f"**Verdict: {expected.value}** ({expected.reason}).")
    with open(client.download_artifacts(run.info.run_id, "report.md"), encoding="utf-8") as fh:
        report = fh.read()
    brief = report.split("## In brief\n\n")[1].split("\n")[0]
    assert brief.startswith("Record-level epsilon lower bound ")
    assert "(unit: one canary inserted once = one record" in brief
    assert re.search(r"AUC \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\] at r = 1 and \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\] at r = 4 "
                     r"\(95% intervals", brief), brief
    assert brief in note
    assert report.splitlines()[:3] == [f"# Canary audit of models:/canary-seen/{version} (loss)", "",
                                       f"**Verdict: {expected.value}** ({expected.reason})."]
    # The registered version: the verdict tag and the same paragraph, with a link to the run.
    registered = client.get_model_version("canary-seen", version)
    assert registered.tags["mia.verdict"] == expected.value
    assert brief in registered.description
    assert (f"(#/experiments/{tracking_experiment}/runs/{run.info.run_id}?workflowType=machine_learning)"
            in registered.description)
    # The last lines: verdict, headline numbers with intervals, experiment, run and report addresses.
    experiment = client.get_experiment(tracking_experiment).name
    assert out[-7] == f"verdict: {expected.value} ({expected.reason})"
    assert re.fullmatch(r"canaries: record-level epsilon lower bound \d\.\d{3} \(one canary = one record\); AUC "
                        r"r = 1 \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\], r = 4 \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]; "
                        r"mean exposure (?:r = 1 \d+\.\d{2} bits( \(rank-based (>= )?\d+\.\d{2}\))?, r = 4 \d+\.\d{2} "
                        r"bits( \(rank-based (>= )?\d+\.\d{2}\))?|n/a) \(95% intervals\)",
                        out[-6]), out[-6]  # the tiny tokenizer may leave no exposure to measure: n/a, never a number
    assert out[-5] == (f"experiment: {experiment}; run: [{expected.value}] canary-audit canary-seen v{version} "
                       f"({run.info.run_id})")
    assert out[-3] == (f"run page: http://127.0.0.1:5000/#/experiments/{tracking_experiment}/runs/"
                       f"{run.info.run_id}?workflowType=machine_learning")
    assert out[-2].endswith(f"/runs/{run.info.run_id}/artifactPath/report.md?workflowType=machine_learning")
    assert out[-1] == f"  (start the UI first: mlflow ui --backend-store-uri {tracking.tracking_uri})"
    # With a budget the canary gate decides, on the run and on the version.
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)  # end_run clears it, as after `mlflow run`
    assert main(["canary-audit", "--target", target, *_args(tracking, path, "--max-epsilon-lower-bound", "5")]) == 3
    out = capsys.readouterr().out.strip().splitlines()
    gated = _last_run()
    reason = "canary gate inconclusive: the audit cannot show that the budgets hold"
    assert (gated.data.tags["mia.verdict"], gated.data.tags["mia.verdict.reason"]) == ("inconclusive", reason)
    assert "**Release gate: INCONCLUSIVE**" in gated.data.tags["mlflow.note.content"]
    assert out[-7] == f"verdict: inconclusive ({reason})"
    assert client.get_model_version("canary-seen", version).tags["mia.verdict"] == "inconclusive"


def test_canary_demo_under_mlflow_run_nests_one_run_per_target(tracking, canary_file, capsys, monkeypatch):
    import mlflow_mia.demo.canary as demo_module
    from mlflow_mia.demo.canary import CanaryDemoSpec

    _, path = canary_file
    spec = CanaryDemoSpec(target_uri="models:/tgt@champion", dp_target_uri="models:/tgt@candidate",
                          canaries_path=str(path), dp_epsilon=8.0, dp_delta=1e-5)
    monkeypatch.setattr(demo_module, "build_canary_demo", lambda **kwargs: spec)
    client = MlflowClient()
    project = client.create_run(os.environ["MLFLOW_EXPERIMENT_ID"])
    monkeypatch.setenv("MLFLOW_RUN_ID", project.info.run_id)
    args = ["--n-candidates", "50", "--bootstrap-rounds", "20", "--cache-dir", str(tracking.cache_dir), "--quiet",
            "--no-tag-model-version"]
    assert main(["canary-audit", "--demo-size", "small", *args]) == 0
    parent = client.get_run(project.info.run_id)
    assert name_without_verdict(parent.info.run_name) == "canary-audit demo-small"
    children = client.search_runs([os.environ["MLFLOW_EXPERIMENT_ID"]],
                                  filter_string=f"tags.mlflow.parentRunId = '{project.info.run_id}'")
    assert sorted(name_without_verdict(c.info.run_name) for c in children) == ["canary-audit tgt v1",
                                                                              "canary-audit tgt v2"]
    severity = ["within budget", "no evidence of leakage", "inconclusive", "leaks"]
    worst = max((c.data.tags["mia.verdict"] for c in children), key=severity.index)
    assert parent.data.tags["mia.verdict"] == worst
    assert "One nested run per demo target:" in parent.data.tags["mlflow.note.content"]


def _record_of(name: str, version: str, run_id: str):
    from mlflow_mia.metrics.gate_record import GateRecord

    return GateRecord.from_tag(MlflowClient().get_model_version(name, version).tags[f"mia.gate.run.{run_id}"])


def test_a_gated_audit_of_a_seeded_canary_set_is_refused_unless_allowed_and_then_is_no_release_audit(
        tracking, fresh_weights, tmp_path, capsys):
    """The red team regenerated a ``seed=1234`` set from the logged counts (5 candidate seeds, 4 s)."""
    seeded = make_canaries(40, TEMPLATES, repetitions=(1, 4), seed=1234)
    path = seeded.save(tmp_path / "seeded" / "canaries.json")
    name = "canary-seeded"
    version = fresh_weights("tgt/2", name)
    argv = ["canary-audit", "--target", f"models:/{name}/{version}",
            *_args(tracking, path, "--max-epsilon-lower-bound", "5")]
    runs_before = len(mlflow.search_runs(output_format="list"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the canary set was drawn from an explicit seed (make_canaries(seed=...))" in err
    assert "give --allow-seeded-canaries (evaluator key allow_seeded_canaries)" in err and "1234" not in err
    assert len(mlflow.search_runs(output_format="list")) == runs_before  # refused before any model loads
    # accepted as a test: recorded as not a release audit, said in the verdict reason and the report
    assert main(argv + ["--allow-seeded-canaries"]) == 3
    run = _last_run()
    assert run.data.params["canary.set_drawn_from"] == "seed"
    assert "not a release audit: its canary set was drawn from an explicit seed" in run.data.tags["mia.verdict.reason"]
    record = _record_of(name, version, run.info.run_id)
    assert record.release is False and "release 0" in record.to_tag()
    report = Path(MlflowClient().download_artifacts(run.info.run_id, "report.md")).read_text(encoding="utf-8")
    assert "not a release audit" in report
    # the evaluator refuses it the same way, before the model loads
    with pytest.raises(ValueError, match="drawn from an explicit seed"):
        mlflow.models.evaluate(model=None, data=seeded.id_frame(), model_type="mia", evaluators=["mia"],
                               evaluator_config={"mia": {"method": "canaries", "target_model": "models:/tgt@champion",
                                                         "canaries": str(path), "max_exposure": 4}})


def test_an_exposure_budget_above_the_candidate_space_is_refused_unless_allowed_and_then_recorded_loose(
        tracking, fresh_weights, canary_file, capsys):
    """``--max-exposure 1e308`` can never fail: the largest space here is 10**8 secrets, 26.58 bits."""
    _, path = canary_file
    name = "canary-loose"
    version = fresh_weights("tgt/2", name)
    argv = ["canary-audit", "--target", f"models:/{name}/{version}", *_args(tracking, path, "--max-exposure", "1e308")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert ("loose release budget(s) canary_exposure:1e+308: a mean exposure budget above 26.58 bits, the largest "
            "candidate space of this canary set (template 'user_0'), can never be exceeded") in err
    assert "--allow-loose-budget (evaluator key allow_loose_budget)" in err
    assert main(argv + ["--allow-loose-budget"]) in (0, 3)
    run = _last_run()
    assert "loose budget(s) canary_exposure:1e+308 accepted with --allow-loose-budget" in \
        run.data.tags["mia.verdict.reason"]
    record = _record_of(name, version, run.info.run_id)
    assert record.loose == ("canary_exposure:1e+308",) and record.release is True


def test_a_full_disk_under_the_cache_says_free_space_and_never_to_delete_the_healthy_cache(
        tracking, canary_file, tmp_path, monkeypatch, capsys):
    """SQLite's 'database or disk is full' (here: the file may not grow) is an environment fault, exit 1."""
    from mlflow_mia.signals.cache import SignalCache, SqliteSpecStore

    _, path = canary_file
    monkeypatch.setenv("MLFLOW_MIA_HASH_KEY", "k" * 32)  # canary rows are cached under a kept key only
    cache = tmp_path / "cache"
    real = SqliteSpecStore.put_rows

    def on_a_full_disk(self, key, rows):
        self._conn.execute("PRAGMA max_page_count = 1")  # clamped to the file's size: it cannot grow (SQLITE_FULL)
        return real(self, key, rows)

    monkeypatch.setattr(SqliteSpecStore, "put_rows", on_a_full_disk)
    argv = ["canary-audit", "--target", "models:/tgt@champion", "--canaries", str(path), "--n-candidates", "50",
            "--bootstrap-rounds", "20", "--cache-dir", str(cache), "--quiet", "--no-tag-model-version"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"the disk holding the cache file {cache / 'signals.sqlite'} is full (database or disk is full" in err
    assert "free space on it, or set --cache-dir" in err and "The cache is not damaged: keep it" in err
    assert "damaged (" not in err and "delete it" not in err
    monkeypatch.setattr(SqliteSpecStore, "put_rows", real)
    assert SignalCache(cache).count() == 0  # the file opens and reads: healthy, nothing half-written
    assert main(argv) == 0  # space freed: the same command runs
