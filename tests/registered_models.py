"""Shared fixtures (made visible to every folder by ``tests/conftest.py``): a temporary sqlite tracking store with tiny
registered models.

Registered once per session (logging a transformers model takes seconds):

- ``tgt`` v1: a random tiny BERT (alias ``champion``);
- ``tgt`` v2: the same architecture trained on the member texts, so it leaks
  (alias ``candidate``);
- ``ref`` v1: a random tiny BERT with another seed (alias ``champion``).

Pool: 160 texts (80 members), two per group (40 member and 40 non-member groups: enough units for the
release gate to pass a model that does not leak and to fail one that does); population: 100 texts, two per group.
"""

from __future__ import annotations

import itertools
import os
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

TEXT_POOL_SIZE, POPULATION_SIZE = 160, 100


def _texts(n: int, seed: int = 0) -> list[str]:
    from mlflow_mia.signals.testing import WORDS

    rng = random.Random(seed)
    words = [w for w in WORDS if w.isalpha()]
    out: dict[str, None] = {}
    while len(out) < n:
        out[" ".join(rng.choice(words) for _ in range(rng.randint(6, 12)))] = None
    return list(out)


def _train(model, tokenizer, texts, *, steps: int = 40, seed: int = 0):
    """A few MLM steps on ``texts`` so the model memorises them (the leaking target)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    special = torch.zeros_like(enc["input_ids"], dtype=torch.bool)
    for tid in tokenizer.all_special_ids:
        special |= enc["input_ids"] == tid
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(steps):
        ids, labels = enc["input_ids"].clone(), enc["input_ids"].clone()
        mask = (torch.rand(ids.shape, generator=gen) < 0.25) & ~special
        labels[~mask] = -100
        ids[mask] = tokenizer.mask_token_id
        loss = model(input_ids=ids, attention_mask=enc["attention_mask"], labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@dataclass
class Store:
    """What the session fixture built."""

    tracking_uri: str
    root: Path
    pool_path: Path
    population_path: Path
    cache_dir: Path
    pool: object  # pandas.DataFrame
    population: object  # pandas.DataFrame
    run_ids: dict  # "tgt/1" -> run id of log_model
    model_ids: dict  # "tgt/1" -> logged model id

    def config(self, **overrides) -> dict:
        """A small evaluator_config['mia'] for the tiny models."""
        cfg = {"reference_model": "models:/ref@champion", "population_data": self.population,
               "text_column": "text", "group_column": "article_id", "id_column": "sample_id",
               "attacks": ["loss", "likelihood_ratio"], "signal": "energy", "num_masks": 2, "mask_rate": 0.15,
               "seed": 0, "fprs": [0.1, 0.05], "bootstrap_rounds": 50, "log_texts": False,
               "cache_dir": str(self.cache_dir), "progress": False}
        cfg.update(overrides)
        return cfg

    def cli_args(self, *extra: str) -> list[str]:
        return ["--reference", "models:/ref@champion", "--data", str(self.pool_path),
                "--population", str(self.population_path), "--group-column", "article_id",
                "--id-column", "sample_id", "--num-masks", "2", "--fprs", "0.1,0.05", "--bootstrap-rounds", "50",
                "--cache-dir", str(self.cache_dir), "--quiet", *extra]


def restore_experiment(before: str | None) -> None:
    """Forget MLflow's active experiment and put ``$MLFLOW_EXPERIMENT_ID`` back to ``before`` (unset when None)."""
    import mlflow.tracking.fluent as fluent

    fluent._active_experiment_id = None
    if before is None:
        os.environ.pop("MLFLOW_EXPERIMENT_ID", None)
    else:
        os.environ["MLFLOW_EXPERIMENT_ID"] = before


def _set_uri(uri):
    import mlflow

    mlflow.set_tracking_uri(uri)


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> Store:
    import mlflow
    import pandas as pd
    import torch
    from mlflow import MlflowClient

    from mlflow_mia.signals.testing import tiny_bert

    root = tmp_path_factory.mktemp("mlflow_store")
    uri = f"sqlite:///{root}/mlflow.db"
    old_uri, old_env = mlflow.get_tracking_uri(), os.environ.get("MLFLOW_TRACKING_URI")
    old_experiment = os.environ.get("MLFLOW_EXPERIMENT_ID")
    old_cwd = os.getcwd()
    os.chdir(root)  # ./mlruns of the logged models lands here
    _set_uri(uri)
    try:
        # An experiment of this store: another test may have left a foreign active experiment id.
        mlflow.set_experiment("registered-test-models")
        texts = _texts(TEXT_POOL_SIZE + POPULATION_SIZE)
        members = texts[:TEXT_POOL_SIZE // 2]
        pool = pd.DataFrame({"sample_id": [f"s{i:03d}" for i in range(TEXT_POOL_SIZE)],
                             "text": texts[:TEXT_POOL_SIZE],
                             "is_member": [1] * (TEXT_POOL_SIZE // 2) + [0] * (TEXT_POOL_SIZE // 2),
                             "article_id": [f"a{i // 2:02d}" for i in range(TEXT_POOL_SIZE)]})
        population = pd.DataFrame({"text": texts[TEXT_POOL_SIZE:],
                                   "article_id": [f"p{i // 2:02d}" for i in range(POPULATION_SIZE)]})
        pool_path, population_path = root / "pool.csv", root / "population.csv"
        pool.to_csv(pool_path, index=False)
        population.to_csv(population_path, index=False)

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            v1, tok = tiny_bert(seed=1)
            v2 = _train(tiny_bert(tok, seed=1)[0], tok, members, steps=200)
            ref = tiny_bert(tok, seed=2)[0]
        finally:
            torch.set_num_threads(threads)
        client = MlflowClient()
        run_ids, model_ids = {}, {}
        for key, model in (("tgt/1", v1), ("tgt/2", v2), ("ref/1", ref)):
            name = key.split("/")[0]
            with mlflow.start_run(run_name=f"train {key}") as run:
                info = mlflow.transformers.log_model(
                    transformers_model={"model": model, "tokenizer": tok}, name="model", task="fill-mask",
                    registered_model_name=name, pip_requirements=["torch", "transformers"])
            run_ids[key], model_ids[key] = run.info.run_id, info.model_id
        client.set_registered_model_alias("tgt", "champion", "1")
        client.set_registered_model_alias("tgt", "candidate", "2")
        client.set_registered_model_alias("ref", "champion", "1")
        os.chdir(old_cwd)
        # set_experiment left its id in $MLFLOW_EXPERIMENT_ID: a session fixture is set up before the module's
        # autouse restore reads the variable, so the id would outlive the module (tests/conftest.py); each test
        # that logs here names its experiment (the tracking fixture)
        restore_experiment(old_experiment)
        yield Store(tracking_uri=uri, root=root, pool_path=pool_path, population_path=population_path,
                    cache_dir=root / "cache", pool=pool, population=population, run_ids=run_ids,
                    model_ids=model_ids)
    finally:
        os.chdir(old_cwd)
        _set_uri(old_uri)
        if old_env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = old_env


@pytest.fixture
def tracking(store, tmp_path, monkeypatch):
    """Point MLflow at the session store for one test, in a fresh experiment, cwd = tmp_path."""
    import mlflow

    monkeypatch.chdir(tmp_path)
    old_uri = mlflow.get_tracking_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.tracking_uri)
    _set_uri(store.tracking_uri)
    experiment = mlflow.set_experiment(f"test-{tmp_path.name}")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", experiment.experiment_id)
    try:
        yield store
    finally:
        while mlflow.active_run() is not None:
            mlflow.end_run()
        _set_uri(old_uri)


_COPIES = itertools.count(1)  # one nudge per copy: every copy in a session has its own weights digest


@pytest.fixture
def fresh_weights(store, tracking, tmp_path):
    """``register(key, name)``: a copy of ``tgt/1`` or ``tgt/2`` with weights of its own, registered as ``name``.

    A registry gate verdict belongs to the weights digest, so a test that needs a clean
    slate audits weights no other test has seen (one value nudged by 1e-4, which leaves
    the model's behaviour as it was). Registering the same key twice registers the same
    logged artifact again (a re-registration: same weights, new version).
    """
    import mlflow
    from safetensors.torch import load_file, save_file

    runs: dict = {}

    def register(key: str, name: str) -> str:
        if key not in runs:
            folder = Path(mlflow.artifacts.download_artifacts(f"runs:/{store.run_ids[key]}/model",
                                                              dst_path=str(tmp_path / key.replace("/", "_"))))
            path = folder / "model" / "model.safetensors"
            tensors = load_file(path)
            first = sorted(tensors)[0]
            tensors[first] = tensors[first].clone()
            tensors[first].view(-1)[0] += 1e-4 * next(_COPIES)
            save_file(tensors, path, metadata={"format": "pt"})
            with mlflow.start_run(run_name=f"copy of {key}") as run:
                mlflow.log_artifacts(str(folder), "model")
            runs[key] = run.info.run_id
        return str(mlflow.register_model(f"runs:/{runs[key]}/model", name).version)

    return register
