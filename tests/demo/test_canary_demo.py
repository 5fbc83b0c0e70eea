"""Tests of mlflow_mia/demo/canary.py's build-once, reuse-after logic, with training replaced by counters.

The BBC demo, the training functions and the model logging are replaced (monkeypatched)
by stand-ins that count their calls, so the test runs in seconds; what is real is the
canary set, its secret file and digest, the registry lookups and the version tags the
reuse decision reads.
"""

from __future__ import annotations

import os
import stat
from types import SimpleNamespace

import mlflow
import pandas as pd
import pytest
from mlflow import MlflowClient

from mlflow_mia.demo import canary as canary_demo


@pytest.fixture
def stubbed(tmp_path, monkeypatch):
    """Point tracking at a temporary store and replace the expensive steps; yield the call counts."""
    from mlflow_mia.demo import bbc
    from mlflow_mia.demo import canary as demo_canary  # the names it imported are the ones it calls

    calls = {"train": 0, "dp": 0, "register": 0}
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    pool = tmp_path / "pool.jsonl"
    pool.write_text("")
    monkeypatch.setattr(demo_canary, "build_demo", lambda **kw: SimpleNamespace(pool_path=str(pool),
                                                                          base_uri="models:/base@champion"))
    monkeypatch.setattr(bbc, "make_split", lambda split: SimpleNamespace(
        target_train=pd.DataFrame({"text": [f"member sentence number {i}" for i in range(20)]})))
    monkeypatch.setattr(demo_canary, "resolve_model", lambda uri, role: SimpleNamespace(
        lm=SimpleNamespace(model=SimpleNamespace(weights="base"), tokenizer=object())))

    def fake_train(model, tokenizer, texts, config, **kw):
        calls["train"] += 1
        calls["train_texts"] = len(texts)

    def fake_dp(model, tokenizer, texts, config, dp_config, **kw):
        calls["dp"] += 1
        return SimpleNamespace(epsilon=7.25, delta=dp_config.delta)

    def fake_register(model, tokenizer, *, name, alias, tags=None, client=None, **kw):
        calls["register"] += 1
        client = client or MlflowClient()
        try:
            client.create_registered_model(name)
        except mlflow.exceptions.MlflowException:
            pass
        mv = client.create_model_version(name, source=f"file://{tmp_path}/{name}", tags=tags or {})
        client.set_registered_model_alias(name, alias, mv.version)
        return f"models:/{name}/{mv.version}"

    monkeypatch.setattr(demo_canary, "train_mlm", fake_train)
    monkeypatch.setattr(demo_canary, "train_mlm_dp", fake_dp)
    monkeypatch.setattr(demo_canary, "register_model", fake_register)
    try:
        yield calls, tmp_path
    finally:
        mlflow.set_tracking_uri(previous)


def test_first_call_trains_both_targets_and_writes_the_secret_file(stubbed):
    calls, tmp = stubbed
    spec = canary_demo.build_canary_demo(size="small", progress=False, data_dir=tmp)
    assert (calls["train"], calls["dp"], calls["register"]) == (1, 1, 2)
    cfg = canary_demo.CANARY_DEMO_SIZES["small"]
    from mlflow_mia.canaries import CanarySet

    canaries = CanarySet.load(spec.canaries_path)
    assert calls["train_texts"] == 20 + canaries.n_copies  # members plus the included canaries' copies
    assert int((canaries.repetitions == 1).sum()) == cfg.m // 2  # half the canaries inserted once
    assert stat.S_IMODE(os.stat(spec.canaries_path).st_mode) == 0o600
    assert spec.dp_epsilon == 7.25 and set(spec.seconds) == {"train_target", "train_dp_target"}
    assert spec.target_uri == "models:/bbc-small-canary-target@candidate"


def test_second_call_reuses_the_registered_targets(stubbed):
    calls, tmp = stubbed
    first = canary_demo.build_canary_demo(size="small", progress=False, data_dir=tmp)
    again = canary_demo.build_canary_demo(size="small", progress=False, data_dir=tmp)
    assert (calls["train"], calls["dp"], calls["register"]) == (1, 1, 2)
    assert again.seconds == {} and again.dp_epsilon == pytest.approx(7.25)
    assert (again.target_uri, again.dp_target_uri, again.canaries_path) == (
        first.target_uri, first.dp_target_uri, first.canaries_path)


def test_force_or_another_canary_set_trains_again(stubbed, monkeypatch):
    calls, tmp = stubbed
    canary_demo.build_canary_demo(size="small", progress=False, data_dir=tmp)
    canary_demo.build_canary_demo(size="small", progress=False, data_dir=tmp, force=True)
    assert (calls["train"], calls["dp"]) == (2, 2)
    other = dict(canary_demo.CANARY_DEMO_SIZES)
    other["small"] = canary_demo.replace(other["small"], seed=1)  # a different set: its digest differs
    monkeypatch.setattr(canary_demo, "CANARY_DEMO_SIZES", other)
    canary_demo.build_canary_demo(size="small", progress=False, data_dir=tmp)
    assert (calls["train"], calls["dp"]) == (3, 3)
    versions = MlflowClient().search_model_versions("name = 'bbc-small-canary-target'")
    assert len(versions) == 3


def test_unknown_size_is_refused_before_anything_builds(stubbed):
    calls, tmp = stubbed
    with pytest.raises(ValueError, match="unknown canary demo size 'huge'; choose from"):
        canary_demo.build_canary_demo(size="huge", progress=False, data_dir=tmp)
    assert calls["train"] == 0


def test_without_opacus_the_demo_stops_before_training_and_the_cli_says_what_to_install(stubbed, monkeypatch,
                                                                                      capsys):
    import importlib.util

    from mlflow_mia.entrypoints.cli import main

    calls, tmp = stubbed
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "opacus" else real(name, *a))
    with pytest.raises(ImportError, match=r"trains a DP-SGD target, which needs opacus: pip install -e '\.\[demo\]'"):
        canary_demo.build_canary_demo(size="small", progress=False, data_dir=tmp)
    assert (calls["train"], calls["dp"], calls["register"]) == (0, 0, 0)  # nothing trained first
    assert main(["canary-audit", "--demo-size", "small", "--quiet"]) == 1  # an environment fault, no traceback
    err = capsys.readouterr().err
    assert "mlflow-mia canary-audit: error: the canary demo trains a DP-SGD target, which needs opacus" in err
    assert "Traceback" not in err and calls["train"] == 0
