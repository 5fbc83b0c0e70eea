"""Tests of mlflow_mia/demo/build_steps.py: the steps the masked and causal demo builds share (no training here)."""

from __future__ import annotations

from types import SimpleNamespace

import mlflow
import pandas as pd
import pytest

from mlflow_mia.demo import build_steps
from mlflow_mia.demo.specs import ModelSpec, TrainResult


@pytest.fixture
def logged(monkeypatch):
    """What the steps log to MLflow: ``{"params": {...}, "metrics": [(key, value, step), ...]}``."""
    out = {"params": {}, "metrics": []}
    monkeypatch.setattr(mlflow, "log_params", lambda params: out["params"].update(params))
    monkeypatch.setattr(mlflow, "log_metric", lambda key, value, step=None: out["metrics"].append((key, value, step)))
    return out


def test_the_tokenizer_learns_from_the_reference_articles_only():
    split = SimpleNamespace(reference_train=pd.DataFrame({"text": ["in a", "in b"]}),
                            ood_reference_train=pd.DataFrame({"text": ["out c"]}),
                            target_train=pd.DataFrame({"text": ["member"]}))
    calls, timings = [], {}

    def train(texts, **kwargs):
        calls.append((texts, kwargs))
        return "tokenizer"

    spec = ModelSpec(vocab_size=300, max_position_embeddings=48)
    assert build_steps.reference_tokenizer(train, split, spec, timings) == "tokenizer"
    assert calls == [(["in a", "in b", "out c"], {"vocab_size": 300, "model_max_length": 48})]
    assert list(timings) == ["tokenizer"] and timings["tokenizer"] >= 0


def test_each_role_trains_a_fresh_model_on_its_texts_and_logs_its_losses(logged):
    made, trained, timings = [], [], {}

    def new_model():
        made.append(f"model-{len(made)}")
        return made[-1]

    def train(model, tokenizer, texts, config, *, progress, desc):
        trained.append((model, tokenizer, texts, config, progress, desc))
        return TrainResult(steps=len(texts), tokens=10 * len(texts), seconds=1.5 * len(texts),
                           epoch_losses=(2.0, 1.0))

    runs = [("target", pd.DataFrame({"text": ["a", "b"]}), "target (members)"),
            ("reference", pd.DataFrame({"text": ["c"]}), "reference")]
    models = build_steps.train_roles(runs, new_model=new_model, train=train, tokenizer="tok", config="cfg",
                                     progress=False, timings=timings)
    assert models == {"target": "model-0", "reference": "model-1"}
    assert trained == [("model-0", "tok", ["a", "b"], "cfg", False, "target (members)"),
                       ("model-1", "tok", ["c"], "cfg", False, "reference")]
    assert timings == {"train_target": 3.0, "train_reference": 1.5}
    assert logged["params"] == {"result.target.steps": 2, "result.target.tokens": 20, "result.target.final_loss": 1.0,
                                "result.reference.steps": 1, "result.reference.tokens": 10,
                                "result.reference.final_loss": 1.0}  # no seconds: they differ from run to run
    assert logged["metrics"] == [("target/train_loss", 2.0, 1), ("target/train_loss", 1.0, 2),
                                 ("reference/train_loss", 2.0, 1), ("reference/train_loss", 1.0, 2)]


def test_each_role_is_registered_under_its_alias_with_its_role_tag(logged, monkeypatch):
    registered = []

    def register_model(model, tokenizer, **kwargs):
        registered.append((model, tokenizer, kwargs))
        return f"models:/{kwargs['name']}/1"

    monkeypatch.setattr(build_steps, "register_model", register_model)
    timings = {"tokenizer": 0.04}
    build_steps.register_roles({"target": "m0", "reference": "m1"}, "tok", names={"target": "t", "reference": "r"},
                               aliases={"target": "candidate", "reference": "champion"}, tags={"size": "small"},
                               metadata={"kind": "causal"}, card=lambda role: f"card of {role}", client="client",
                               timings=timings, started=0.0, log=build_steps.logging.getLogger("test"),
                               task="text-generation")
    assert registered == [
        ("m0", "tok", {"name": "t", "alias": "candidate", "artifact_name": "target", "task": "text-generation",
                       "tags": {"size": "small", build_steps.ROLE_TAG: "target"}, "client": "client",
                       "model_card": "card of target", "metadata": {"kind": "causal", "mlflow_mia_demo_role": "target"}}),
        ("m1", "tok", {"name": "r", "alias": "champion", "artifact_name": "reference", "task": "text-generation",
                       "tags": {"size": "small", build_steps.ROLE_TAG: "oracle_reference"}, "client": "client",
                       "model_card": "card of reference",
                       "metadata": {"kind": "causal", "mlflow_mia_demo_role": "reference"}}),
    ]
    assert list(timings) == ["tokenizer", "log_target", "log_reference", "total"]
    assert logged["params"] == {f"timing.{k}_s": round(v, 1) for k, v in timings.items()}
    assert logged["params"]["timing.tokenizer_s"] == 0.0
