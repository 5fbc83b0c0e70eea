"""A registered ``text-generation`` model (transformers flavor) is recognised as a causal LM and audited."""

from __future__ import annotations

import os
import random

import pytest

from mlflow_mia.signals.testing import WORDS

N_POOL, N_POPULATION = 40, 30


def _texts(n, seed=0):
    rng = random.Random(seed)
    words = [w for w in WORDS if w.isalpha()]
    out: dict = {}
    while len(out) < n:
        out[" ".join(rng.choice(words) for _ in range(rng.randint(6, 12)))] = None
    return list(out)


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    import mlflow
    import pandas as pd
    from mlflow import MlflowClient

    from mlflow_mia.signals.testing import tiny_gpt2

    root = tmp_path_factory.mktemp("causal_store")
    old_uri, old_env, old_cwd = mlflow.get_tracking_uri(), os.environ.get("MLFLOW_TRACKING_URI"), os.getcwd()
    os.chdir(root)
    uri = f"sqlite:///{root}/mlflow.db"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    mlflow.set_tracking_uri(uri)
    try:
        mlflow.set_experiment("causal-models")
        for name, seed in (("gpt-tgt", 1), ("gpt-ref", 2)):
            model, tok = tiny_gpt2(seed=seed)
            with mlflow.start_run():
                mlflow.transformers.log_model(transformers_model={"model": model, "tokenizer": tok}, name="model",
                                              task="text-generation", registered_model_name=name,
                                              pip_requirements=["torch", "transformers"])
        MlflowClient().set_registered_model_alias("gpt-tgt", "candidate", "1")
        texts = _texts(N_POOL + N_POPULATION)
        pool = pd.DataFrame({"text": texts[:N_POOL], "is_member": [1] * (N_POOL // 2) + [0] * (N_POOL // 2)})
        population = pd.DataFrame({"text": texts[N_POOL:]})
        yield pool, population, root
    finally:
        os.chdir(old_cwd)
        mlflow.set_tracking_uri(old_uri)
        if old_env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = old_env


def test_registered_text_generation_model_resolves_to_a_causal_lm(registry):
    from mlflow_mia.models.resolve import resolve_model
    from mlflow_mia.signals import CausalLM

    resolved = resolve_model("models:/gpt-tgt@candidate", role="target")
    assert isinstance(resolved.lm, CausalLM)
    assert resolved.resolved_uri == "models:/gpt-tgt/1" and resolved.registry == ("gpt-tgt", "1")


def test_evaluator_audits_a_registered_causal_model(registry):
    import mlflow

    pool, population, root = registry
    config = {"reference_model": "models:/gpt-ref/1", "population_data": population, "text_column": "text",
              "attacks": ["loss", "likelihood_ratio", "min_k_plus_plus"], "fprs": [0.1],
              "bootstrap_rounds": 10, "cache_dir": str(root / "cache"), "progress": False}
    with mlflow.start_run():
        result = mlflow.models.evaluate(model="models:/gpt-tgt@candidate", data=pool, targets="is_member",
                                        model_type="mia", evaluators=["mia"], evaluator_config={"mia": config})
    for attack in ("loss", "likelihood_ratio", "min_k_plus_plus"):
        assert 0.0 <= result.metrics[f"{attack}/auc"] <= 1.0


def test_the_pyfunc_scorer_of_a_causal_model_returns_its_causal_signal(registry):
    """``log_scorer`` on a ``text-generation`` model: a ``causal`` column equal to the per-token mean NLL."""
    import mlflow
    import numpy as np
    import pandas as pd
    import torch

    from mlflow_mia.entrypoints.scorer import log_scorer
    from mlflow_mia.models.resolve import resolve_model

    pool, _, _ = registry
    texts = list(pool["text"][:5])
    with mlflow.start_run():
        info = log_scorer("models:/gpt-tgt@candidate")
    scorer = mlflow.pyfunc.load_model(info.model_uri)
    out = scorer.predict(pd.DataFrame({"text": texts}))
    assert list(out.columns) == ["causal", "n_tokens", "truncated"]
    lm = resolve_model("models:/gpt-tgt/1").lm
    expected = []
    for text in texts:  # brute force: -mean log p(x_t | x_<t), t = 2..n, one unbatched pass in float64
        ids = lm.tokenizer(text)["input_ids"]
        with torch.no_grad():
            logp = torch.log_softmax(lm.model(torch.tensor([ids])).logits[0].double(), dim=-1)
        expected.append(-float(logp[:-1].gather(1, torch.tensor(ids[1:])[:, None]).mean()))
    np.testing.assert_allclose(out["causal"].to_numpy(), expected, rtol=1e-5)
    assert list(out["n_tokens"]) == [len(lm.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
