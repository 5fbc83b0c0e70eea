"""The verdict at a glance: the rule, and where an audit writes it (run name, description, tags, datasets, CLI)."""

from __future__ import annotations

import os
import re

import pytest
from mlflow import MlflowClient

from mlflow_mia.entrypoints.cli import main
from mlflow_mia.metrics.gate import FAIL, INCONCLUSIVE, PASS
from mlflow_mia.tracking.descriptions import DESCRIPTION_START
from mlflow_mia.tracking.verdict import (LEAKS, NO_EVIDENCE, WITHIN_BUDGET, describe_run,
                                         run_description, verdict_of)


@pytest.mark.parametrize("status, expected", [(FAIL, LEAKS), (PASS, WITHIN_BUDGET), (INCONCLUSIVE, INCONCLUSIVE)])
def test_the_gate_decides_when_set(status, expected):
    # Whatever the AUC interval says, a gate's verdict wins.
    assert verdict_of(gate_status=status, auc=0.99, auc_ci=(0.98, 1.0)).value == expected
    assert verdict_of(gate_status=status, auc=0.5, auc_ci=(0.4, 0.6)).value == expected


@pytest.mark.parametrize("ci, expected", [
    ((0.5001, 0.7), LEAKS),
    ((0.5, 0.7), NO_EVIDENCE),  # a lower bound at 0.5 is not above it
    ((0.3, 0.5), NO_EVIDENCE),
    ((0.3, 0.4999), INCONCLUSIVE),  # below chance: the set-up, not privacy
    (None, INCONCLUSIVE),
    ((float("nan"), float("nan")), INCONCLUSIVE),
])
def test_without_gate_the_auc_interval_decides(ci, expected):
    verdict = verdict_of(auc=0.6, auc_ci=ci, attack="likelihood_ratio")
    assert verdict.value == expected
    assert "likelihood_ratio AUC 0.600" in verdict.reason


def test_ner_verdict_takes_the_worst_entity_type():
    from mlflow_mia.tracking.verdict import ner_verdict

    metrics = {"ner/person/best_prompt_mmem": 0.9, "ner/person/best_prompt_mmem_ci_low": 0.8,
               "ner/person/best_prompt_mmem_ci_high": 0.95, "ner/loc/best_prompt_mmem": 0.55,
               "ner/loc/best_prompt_mmem_ci_low": 0.45, "ner/loc/best_prompt_mmem_ci_high": 0.65}
    verdict = ner_verdict(metrics, ["loc", "person"])
    assert verdict.value == LEAKS and verdict.reason.startswith("person: best prompt M-MEM AUC 0.900")
    assert ner_verdict(metrics, ["loc"]).value == NO_EVIDENCE
    assert ner_verdict({}, ["loc"]).value == INCONCLUSIVE  # no interval: nothing to read


def test_unknown_gate_status_is_an_error():
    with pytest.raises(ValueError, match=r"gate_status must be one of \['fail', 'inconclusive', 'pass', 'tampered'\] or None, "
                                         r"not 'ok'"):
        verdict_of(gate_status="ok")


def test_describe_run_keeps_the_users_description_after_the_verdict(tracking):
    import mlflow

    from mlflow_mia.tracking.descriptions import OWN_TEXT_HEADING

    client = MlflowClient()
    verdict = verdict_of(auc=0.9, auc_ci=(0.8, 0.95))
    with mlflow.start_run() as run:
        mlflow.set_tag("mlflow.note.content", "my own notes")
        written = describe_run(client, run.info.run_id, verdict=verdict, description="**Verdict: x**", name="n1")
    tags = client.get_run(run.info.run_id).data.tags
    assert tags["mlflow.note.content"] == written["mlflow.note.content"] == (
        f"**Verdict: x**\n\n---\n\n{OWN_TEXT_HEADING}\n\n> my own notes")
    assert tags["mia.verdict"] == LEAKS and tags["mlflow.runName"] == "[leaks] n1"  # the verdict first
    # Described again (a re-run): the verdict in front is replaced, never repeated.
    describe_run(client, run.info.run_id, verdict=verdict_of(auc=0.5, auc_ci=(0.45, 0.55)), description="x",
                 name="[leaks] n1")
    assert client.get_run(run.info.run_id).info.run_name == "[no evidence of leakage] n1"
    assert tags["mia.run_kind"] == written["mia.run_kind"] == "audit"  # build runs have none: the run list filters
    with mlflow.start_run() as run:
        describe_run(client, run.info.run_id, verdict=verdict, description=run_description(verdict, "p1"))
        describe_run(client, run.info.run_id, verdict=verdict, description=run_description(verdict, "p2"))
    note = client.get_run(run.info.run_id).data.tags["mlflow.note.content"]
    assert note.startswith(DESCRIPTION_START) and "p2" in note and "p1" not in note  # ours is replaced


def test_a_model_authors_verdict_lookalike_is_quoted_after_the_tools_verdict(tracking):
    """Issue 32, low: a version description reading 'Verdict: within budget' was kept as it was after a failing
    audit. The tool's verdict now comes first; the authors' text follows, quoted under a heading that says it is
    not the verdict, and a second audit neither drops it nor quotes it twice."""
    import mlflow

    from mlflow_mia.tracking.registry_tags import describe_versions
    from mlflow_mia.tracking.descriptions import OWN_TEXT_HEADING

    client = MlflowClient()
    source = client.get_model_version("tgt", "1").source
    client.create_registered_model("authored-description")
    authored = "Verdict: within budget\n\n**Verdict: within budget** (release gate passed). Trained on clinic notes."
    version = client.create_model_version("authored-description", source, description=authored).version
    with mlflow.start_run(run_name="a failing audit") as run:
        pass
    leaks = verdict_of(gate_status=FAIL)
    quoted = ("> Verdict: within budget\n>\n> **Verdict: within budget** (release gate passed). Trained on clinic "
              "notes.")
    for paragraph in ("first audit", "second audit"):
        describe_versions(client, [("authored-description", version)], verdict=leaks, paragraph=paragraph,
                          run_id=run.info.run_id)
        text = client.get_model_version("authored-description", version).description
        assert text.startswith("**Verdict: leaks** (release gate failed")
        ours, theirs = text.split("\n\n---\n\n")
        assert paragraph in ours and "within budget" not in ours
        assert theirs == f"{OWN_TEXT_HEADING}\n\n{quoted}"
    assert client.get_model_version("authored-description", version).tags["mia.verdict"] == LEAKS


def test_audit_run_shows_the_verdict_everywhere(tracking, capsys):
    from mlflow_mia.audits.membership.report import in_brief  # noqa: F401  (the paragraph the run must carry)

    args = ["audit", "--target", "models:/tgt@candidate", *tracking.cli_args()]
    assert main([*args, "--max-tpr-at-fpr", "0.1:0.5"]) == 3
    out = capsys.readouterr().out.strip().splitlines()
    client = MlflowClient()
    run = client.search_runs([os.environ["MLFLOW_EXPERIMENT_ID"]], order_by=["attributes.start_time DESC"])[0]
    tags = run.data.tags
    # The run's name gives the verdict, then what was audited; the verdict follows the failed gate.
    assert run.info.run_name == "[leaks] tgt v2 / ref v1"
    assert tags["mia.verdict"] == LEAKS and tags["mia.gate"] == FAIL
    note = tags["mlflow.note.content"]
    assert note.startswith("**Verdict: leaks** (release gate failed")
    assert "**Release gate: FAIL**" in note and "The strongest attack" in note
    report = client.download_artifacts(run.info.run_id, "report.md")
    with open(report, encoding="utf-8") as fh:
        text = fh.read()
    brief = text.split("## In brief\n\n")[1].split("\n")[0]
    assert brief in note  # the description carries the report's paragraph word for word
    # Readable metrics: no infinity or undefined value logged as a number, no deprecated alias.
    assert run.data.metrics and all(abs(v) < 1e300 for v in run.data.metrics.values())
    assert not [k for k in run.data.metrics if k.endswith(("_at_mu", "/mu"))]
    # The registered version: verdict tag and description with a link to the run.
    version = client.get_model_version("tgt", "2")
    assert version.tags["mia.verdict"] == LEAKS
    assert (f"(#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}?workflowType=machine_learning)"
            in version.description)
    assert brief in version.description
    # The last lines: verdict, headline numbers with intervals, experiment, run and report addresses.
    experiment = client.get_experiment(run.info.experiment_id).name
    assert out[-7].startswith("verdict: leaks (release gate failed")
    assert re.match(r"likelihood_ratio: AUC \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]; TPR at FPR 0\.1 \d\.\d{3} "
                    r"\[\d\.\d{3}, \d\.\d{3}\], TPR at FPR 0\.05 .+ \(95% intervals\)$", out[-6]), out[-6]
    assert out[-5] == f"experiment: {experiment}; run: [leaks] tgt v2 / ref v1 ({run.info.run_id})"
    assert out[-4] == (f"run list: http://127.0.0.1:5000/#/experiments/{run.info.experiment_id}/runs"
                       "?workflowType=machine_learning&viewStateShareKey=mia-audits")  # the audits' view
    assert out[-3] == (f"run page: http://127.0.0.1:5000/#/experiments/{run.info.experiment_id}/runs/"
                       f"{run.info.run_id}?workflowType=machine_learning")
    assert out[-2].endswith(f"/runs/{run.info.run_id}/artifactPath/report.md?workflowType=machine_learning")
    assert out[-1] == f"  (start the UI first: mlflow ui --backend-store-uri {tracking.tracking_uri})"
    # No text under Datasets: pool and population logged with keyed digests, schema and row counts only.
    inputs = {d.dataset.name: d for d in run.inputs.dataset_inputs}
    assert set(inputs) == {"pool", "population"}
    pool, population = inputs["pool"].dataset, inputs["population"].dataset
    assert pool.digest == run.data.tags["mia.pool.digest"][:32]
    assert population.digest == run.data.tags["mia.population.digest"][:32]
    assert '"num_rows": 160' in pool.profile and '"num_rows": 100' in population.profile
    columns = [c["name"] for c in __import__("json").loads(pool.schema)["mlflow_colspec"]]
    assert columns == ["sample_id", "label", "group", "text_hmac"]
    assert {t.key: t.value for t in inputs["pool"].tags}["mlflow.data.context"] == "pool"
    everything = repr((pool, population, tags, run.data.params))
    assert not any(text in everything for text in tracking.pool["text"])
    # The audited version's logged model is an input of the run.
    linked = client.get_run(run.info.run_id).inputs.model_inputs
    assert [m.model_id for m in linked] == [tracking.model_ids["tgt/2"]]


def test_experiment_defaults_to_mlflow_mia_opened_as_model_training(tracking, monkeypatch, capsys):
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    assert main(["audit", "--target", "models:/tgt@champion", *tracking.cli_args()]) == 0
    experiment = MlflowClient().get_experiment_by_name("mlflow-mia")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    runs = MlflowClient().search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"])
    assert runs[0].info.run_name == "[no evidence of leakage] tgt v1 / ref v1"
    assert "experiment: mlflow-mia;" in capsys.readouterr().out


def test_tables_open_on_labels_and_scores_and_the_summary_on_results():
    import pandas as pd

    from mlflow_mia.tracking.audit_log import readable_order

    table = pd.DataFrame(columns=["sample_id", "text_hmac", "label", "group", "n_tokens", "truncated",
                                  "score_loss", "score_likelihood_ratio", "flagged_loss_fpr_0.1", "text"])
    assert list(readable_order(table).columns) == [
        "sample_id", "text", "label", "score_loss", "score_likelihood_ratio", "flagged_loss_fpr_0.1",
        "n_tokens", "truncated", "group", "text_hmac"]
    risky = pd.DataFrame(columns=["attack", "text_hmac", "group", "score", "flagged_at_fpr", "sample_id"])
    assert list(readable_order(risky).columns) == ["attack", "sample_id", "flagged_at_fpr", "score", "group",
                                                   "text_hmac"]


def test_audit_summary_puts_results_before_config(tracking):
    import json

    import pandas as pd

    assert main(["audit", "--target", "models:/tgt@champion", *tracking.cli_args("--log-samples")]) == 0
    client = MlflowClient()
    run = client.search_runs([os.environ["MLFLOW_EXPERIMENT_ID"]], order_by=["attributes.start_time DESC"])[0]
    with open(client.download_artifacts(run.info.run_id, "audit_summary.json"), encoding="utf-8") as fh:
        keys = list(json.load(fh))
    assert keys[:3] == ["verdict", "gate", "info"] and keys[-1] == "config"
    assert keys.index("metrics") < keys.index("config")
    samples = pd.read_csv(client.download_artifacts(run.info.run_id, "tables/samples.csv"))
    columns = list(samples.columns)
    assert columns[:3] == ["sample_id", "label", "score_loss"] and columns[-2:] == ["group", "text_hmac"]


def _canary_metrics(eps, ceiling=4.78, ci=(0.45, 0.55)):
    metrics = {"canary/epsilon_lower_bound": eps, "canary/epsilon_max": ceiling, "canary/r1/auc": 0.5}
    if ci is not None:
        metrics["canary/r1/auc_ci_low"], metrics["canary/r1/auc_ci_high"] = ci
    return metrics


@pytest.mark.parametrize("metrics, expected, reason", [
    (_canary_metrics(0.062, ci=(0.45, 0.55)), LEAKS,
     "record-level epsilon lower bound 0.062 (95%, one canary = one record) above 0"),
    (_canary_metrics(0.0, ci=(0.5001, 0.6)), LEAKS, "r = 1 AUC 0.500, 95% interval [0.500, 0.600] above 0.5"),
    (_canary_metrics(0.0), NO_EVIDENCE,
     "record-level epsilon lower bound 0.000 (95%, one canary = one record) (these canaries could show up to "
     "4.780) and r = 1 AUC 0.500, 95% interval [0.450, 0.550]; not a proof of privacy"),
    (_canary_metrics(0.0, ci=None), NO_EVIDENCE, None),  # no interval: the bound alone could have spoken
    (_canary_metrics(0.0, ci=(0.5, 0.6)), NO_EVIDENCE, None),  # a lower end at 0.5 is not above it
    (_canary_metrics(0.0, ci=(0.3, 0.45)), INCONCLUSIVE, "r = 1 AUC 0.500, 95% interval [0.300, 0.450] below 0.5: "
                                                         "check the audit set-up"),
    (_canary_metrics(0.0, ceiling=0.0), INCONCLUSIVE,
     "record-level epsilon lower bound 0.000 (95%, one canary = one record), and these canaries could not show "
     "more than 0.000: plant more canaries inserted once"),
    (_canary_metrics(float("nan")), INCONCLUSIVE,
     "no canary inserted once: no record-level epsilon bound (no gate set)"),
    ({}, INCONCLUSIVE, "no canary inserted once: no record-level epsilon bound (no gate set)"),
])
def test_canary_verdict_without_gate_reads_the_canaries_inserted_once(metrics, expected, reason):
    from mlflow_mia.tracking.verdict import canary_verdict

    verdict = canary_verdict(metrics)
    assert verdict.value == expected
    if reason is not None:
        assert verdict.reason == reason


def test_canary_verdict_follows_the_canary_gate_whatever_the_bound():
    from mlflow_mia.metrics.canary_gate import CanaryGate
    from mlflow_mia.tracking.verdict import canary_verdict

    leaky = _canary_metrics(0.9, ci=(0.7, 0.8))  # without a gate: leaks
    point = {"metric": "canary/epsilon_lower_bound", "value": 0.9, "ceiling": 4.78, "m": 500}
    gates = {"fail": CanaryGate(max_epsilon=0.5), "pass": CanaryGate(max_epsilon=2.0),
             "inconclusive": CanaryGate(max_epsilon=6.0)}
    results = {k: g.check([], point, confidence=0.95) for k, g in gates.items()}
    assert {k: r.status for k, r in results.items()} == {k: k for k in gates}
    assert canary_verdict(leaky, results["fail"]) == canary_verdict({}, results["fail"])  # the gate alone decides
    assert canary_verdict(leaky, results["fail"]).value == LEAKS
    assert canary_verdict(leaky, results["fail"]).reason == ("canary gate failed: canary/epsilon_lower_bound = "
                                                             "0.900 over its budget 0.5")
    assert canary_verdict(leaky, results["pass"]).value == WITHIN_BUDGET
    assert canary_verdict(leaky, results["pass"]).reason == ("canary gate passed: every canary budget holds at 95% "
                                                             "confidence")
    assert canary_verdict(_canary_metrics(0.0), results["inconclusive"]).value == INCONCLUSIVE


def test_a_kept_verdict_links_the_audit_that_set_it_not_the_latest(tracking):
    """A version whose standing ``mia.gate=fail`` a later passing audit cannot clear: its description links
    the failing audit (``mia.gate.run_id``), by name, not the audit that ran last."""
    import mlflow

    from mlflow_mia.tracking.registry_tags import describe_versions

    client = MlflowClient()
    client.create_registered_model("kept-verdict")
    version = client.create_model_version("kept-verdict", client.get_model_version("tgt", "1").source).version
    with mlflow.start_run(run_name="audit that failed") as failed:
        mlflow.set_tag("mia.gate", FAIL)
    with mlflow.start_run(run_name="audit that passed") as passed:
        mlflow.set_tag("mia.gate", PASS)
    client.set_model_version_tag("kept-verdict", version, "mia.gate", FAIL)
    client.set_model_version_tag("kept-verdict", version, "mia.gate.run_id", failed.info.run_id)
    describe_versions(client, [("kept-verdict", version)], verdict=verdict_of(gate_status=PASS), paragraph="p",
                      run_id=passed.info.run_id)
    text = client.get_model_version("kept-verdict", version).description
    experiment = failed.info.experiment_id
    assert text.startswith("**Verdict: leaks** (release gate failed")
    assert (f"[audit that failed](#/experiments/{experiment}/runs/{failed.info.run_id}?workflowType="
            "machine_learning)") in text
    assert passed.info.run_id not in text and "audit that passed" not in text  # before: the latest audit's link


def test_the_verdict_is_the_first_tag_of_a_newly_audited_version(tracking, fresh_weights, capsys):
    """The version page lists tags in the order they were first written (MLflow's SQL store returns them
    so): ``mia.verdict`` is written first, then the headline numbers, and holds the audit's verdict."""
    version = fresh_weights("tgt/2", "verdict-first")
    assert main(["audit", "--target", f"models:/verdict-first/{version}", *tracking.cli_args()]) == 0
    tags = MlflowClient().get_model_version("verdict-first", version).tags
    assert len(tags) > 5 and list(tags)[0] == "mia.verdict"
    run = MlflowClient().search_runs([os.environ["MLFLOW_EXPERIMENT_ID"]], order_by=["attributes.start_time DESC"])[0]
    assert tags["mia.verdict"] == run.data.tags["mia.verdict"] != "pending"
