"""PEFT / LoRA targets: a registered adapter loads as saved, through every front end, and bad adapters are refused.

The adapter is a LoRA (r = 4 on ``c_attn`` and ``c_fc``) on a tiny random GPT-2, its B matrices drawn at random so
that the adapter changes every adapted layer (a fresh LoRA has B = 0 and changes nothing).
"""

from __future__ import annotations

import os

import pytest
import torch
from registered_models import _texts  # the session store's random word sentences

N_POOL, N_POPULATION = 40, 30


def _lora(base, *, seed: int = 3, task_type: str = "CAUSAL_LM", targets=("c_attn", "c_fc")):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=list(targets), task_type=task_type))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
    return model.eval()


def _logits(model, tokenizer, texts):
    enc = tokenizer(texts[:4], return_tensors="pt", padding=True) if tokenizer.pad_token else None
    ids = enc["input_ids"] if enc is not None else torch.tensor([tokenizer(texts[0])["input_ids"]])
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    """A registered LoRA target (``lora-tgt/1``), its base folder, its adapter folder, a pool and a population."""
    import mlflow
    import pandas as pd

    from mlflow_mia.signals.testing import tiny_gpt2

    root = tmp_path_factory.mktemp("adapter_store")
    old_uri, old_env, old_cwd = mlflow.get_tracking_uri(), os.environ.get("MLFLOW_TRACKING_URI"), os.getcwd()
    os.chdir(root)
    uri = f"sqlite:///{root}/mlflow.db"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    mlflow.set_tracking_uri(uri)
    try:
        mlflow.set_experiment("adapters")
        base, tok = tiny_gpt2(seed=1)
        base.save_pretrained(root / "base")
        tok.save_pretrained(root / "base")
        peft_model = _lora(tiny_gpt2(tok, seed=1)[0])
        peft_model.save_pretrained(root / "adapter")
        with mlflow.start_run():
            mlflow.transformers.log_model(transformers_model={"model": peft_model, "tokenizer": tok}, name="model",
                                          task="text-generation", registered_model_name="lora-tgt",
                                          pip_requirements=["torch", "transformers", "peft"])
        texts = _texts(N_POOL + N_POPULATION)
        pool = pd.DataFrame({"text": texts[:N_POOL], "is_member": [1] * (N_POOL // 2) + [0] * (N_POOL // 2)})
        population = pd.DataFrame({"text": texts[N_POOL:]})
        yield {"root": root, "peft": peft_model, "base": base, "tok": tok, "pool": pool, "population": population,
               "texts": texts}
    finally:
        os.chdir(old_cwd)
        mlflow.set_tracking_uri(old_uri)
        if old_env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = old_env


def test_a_registered_lora_model_loads_as_saved_and_mlflows_own_loader_does_not(adapters):
    """The round trip: the loaded model's logits equal the logged PeftModel's (merged: within MERGE_TOLERANCE)."""
    import mlflow

    from mlflow_mia.models.adapters import MERGE_TOLERANCE
    from mlflow_mia.models.resolve import resolve_model
    from mlflow_mia.signals import CausalLM

    resolved = resolve_model("models:/lora-tgt/1")
    assert isinstance(resolved.lm, CausalLM) and resolved.registry == ("lora-tgt", "1")
    texts, tok = adapters["texts"], adapters["tok"]
    expected = _logits(adapters["peft"], tok, texts)
    got = _logits(resolved.lm.model, tok, texts)
    scale = float(expected.abs().max())
    assert float((got - expected).abs().max()) <= MERGE_TOLERANCE * scale
    base = _logits(adapters["base"], tok, texts)
    assert float((base - expected).abs().max()) > 100 * MERGE_TOLERANCE * scale  # the adapter matters
    # What MLflow's own pyfunc loader restores: the adapted layers at random (the bug the audit must not repeat).
    raw = mlflow.pyfunc.load_model("models:/lora-tgt/1").get_raw_model().model
    assert float((_logits(raw, tok, texts) - expected).abs().max()) > 100 * MERGE_TOLERANCE * scale


def test_the_base_of_a_registered_adapter_is_its_reference(adapters):
    from mlflow_mia.models.resolve import resolve_model, resolve_reference
    from mlflow_mia.signals.identity import weights_digest

    target = resolve_model("models:/lora-tgt/1")
    reference = resolve_reference("base", target=target)
    assert reference.lm.weights_id == "sha256:" + weights_digest(adapters["base"])
    assert reference.lm.weights_id != target.lm.weights_id
    with pytest.raises(ValueError, match="reference 'base' names the base model of a PEFT adapter, but the target"):
        resolve_reference("base", target=resolve_model(str(adapters["root"] / "base")))


def test_a_local_adapter_folder_on_its_base_and_an_in_memory_peft_model(adapters):
    from mlflow_mia.models.resolve import resolve_model
    from mlflow_mia.signals import CausalLM

    root, texts, tok = adapters["root"], adapters["texts"], adapters["tok"]
    with pytest.raises(ValueError, match=r"base model \(not recorded\) is not a local folder .* --base-model"):
        resolve_model(str(root / "adapter"))
    folder = resolve_model(str(root / "adapter"), base_model=str(root / "base"))
    registered = resolve_model("models:/lora-tgt/1")
    assert folder.lm.weights_id == registered.lm.weights_id  # merged weights: the same bits either way
    in_memory = resolve_model((adapters["peft"], tok))
    assert isinstance(in_memory.lm, CausalLM)
    torch.testing.assert_close(_logits(in_memory.lm.model, tok, texts), _logits(adapters["peft"], tok, texts))


def test_bad_adapters_are_refused_by_name(adapters, tmp_path):
    from mlflow_mia.models.resolve import resolve_model
    from mlflow_mia.signals.testing import tiny_gpt2

    root, tok = adapters["root"], adapters["tok"]
    wide, _ = tiny_gpt2(tok, seed=1, hidden=48)  # another architecture: the adapter's shapes do not fit
    wide.save_pretrained(tmp_path / "wide")
    tok.save_pretrained(tmp_path / "wide")
    with pytest.raises(ValueError, match="does not fit its base model"):
        resolve_model(str(root / "adapter"), base_model=str(tmp_path / "wide"))
    classifier = _lora(tiny_gpt2(tok, seed=1)[0], task_type="SEQ_CLS")
    classifier.save_pretrained(tmp_path / "seq_cls")
    with pytest.raises(ValueError, match="PEFT adapter for task 'SEQ_CLS'; a language model audit needs CAUSAL_LM"):
        resolve_model(str(tmp_path / "seq_cls"), base_model=str(root / "base"))


def test_a_checkpoint_with_missing_weights_is_refused_with_the_keys(tmp_path):
    """Any weight left at random by the load is named; before, only a missing head was refused."""
    from safetensors.torch import load_file, save_file

    from mlflow_mia.models.resolve import resolve_model
    from mlflow_mia.signals.testing import tiny_gpt2

    model, tok = tiny_gpt2(seed=5)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    path = tmp_path / "m" / "model.safetensors"
    tensors = load_file(path)
    del tensors["transformer.h.1.mlp.c_fc.weight"]
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"1 weight\(s\) missing from the checkpoint, which transformers would "
                                         r"initialise at random \(transformer.h.1.mlp.c_fc.weight\)"):
        resolve_model(str(tmp_path / "m"))


def test_a_registered_lora_target_is_audited_against_its_base_through_the_cli_and_evaluate(adapters, capsys):
    import mlflow

    from mlflow_mia.entrypoints.cli import main

    root, pool, population = adapters["root"], adapters["pool"], adapters["population"]
    pool.to_csv(root / "pool.csv", index=False)
    population.to_csv(root / "population.csv", index=False)
    code = main(["audit", "--target", "models:/lora-tgt/1", "--reference", "base", "--data", str(root / "pool.csv"),
                 "--population", str(root / "population.csv"), "--label-column", "is_member", "--attacks",
                 "loss,likelihood_ratio", "--fprs", "0.1", "--bootstrap-rounds", "0", "--cache-dir",
                 str(root / "cache"), "--quiet", "--no-tag-model-version"])
    out = capsys.readouterr().out
    assert code == 0 and "audit of models:/lora-tgt/1 against base of models:/lora-tgt/1" in out
    code = main(["audit", "--target", str(root / "adapter"), "--base-model", str(root / "base"), "--reference",
                 "base", "--data", str(root / "pool.csv"), "--population", str(root / "population.csv"),
                 "--label-column", "is_member", "--attacks", "loss,likelihood_ratio", "--fprs", "0.1",
                 "--bootstrap-rounds", "0", "--cache-dir", str(root / "cache"), "--quiet"])
    assert code == 0 and "against base of sha256:" in capsys.readouterr().out
    config = {"target_model": "models:/lora-tgt/1", "reference_model": "base", "population_data": population,
              "text_column": "text", "attacks": ["loss", "likelihood_ratio"], "fprs": [0.1], "bootstrap_rounds": 0,
              "cache_dir": str(root / "cache"), "progress": False, "tag_model_version": False}
    with mlflow.start_run():
        result = mlflow.models.evaluate(model=None, data=pool, targets="is_member", model_type="mia",
                                        evaluators=["mia"], evaluator_config={"mia": config})
    assert 0.0 <= result.metrics["likelihood_ratio/auc"] <= 1.0


def test_a_quantized_checkpoint_is_refused_with_the_fix(tmp_path):
    import json

    from mlflow_mia.models.resolve import resolve_model
    from mlflow_mia.signals.testing import tiny_gpt2

    model, tok = tiny_gpt2(seed=5)
    model.save_pretrained(tmp_path / "q")
    tok.save_pretrained(tmp_path / "q")
    config = json.loads((tmp_path / "q" / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    (tmp_path / "q" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"is a quantized checkpoint \(gptq\).*Dequantize first"):
        resolve_model(str(tmp_path / "q"))


def test_evaluate_with_a_loaded_peft_pyfunc_reloads_the_adapter_as_saved(adapters, caplog):
    """model="models:/..." hands the evaluator MLflow's pyfunc, whose adapted layers are random: reloaded."""
    import logging

    import mlflow

    from mlflow_mia.models.adapters import MERGE_TOLERANCE
    from mlflow_mia.models.resolve import resolve_model

    caplog.set_level(logging.WARNING, logger="mlflow_mia.models.resolve")
    pyfunc = mlflow.pyfunc.load_model("models:/lora-tgt/1")
    resolved = resolve_model(pyfunc)
    assert "MLflow's pyfunc loader left its adapted layers at random" in caplog.text
    texts, tok = adapters["texts"], adapters["tok"]
    expected = _logits(adapters["peft"], tok, texts)
    assert float((_logits(resolved.lm.model, tok, texts) - expected).abs().max()) <= \
        MERGE_TOLERANCE * float(expected.abs().max())


def test_loading_a_registered_adapter_prints_no_load_report(adapters, caplog):
    """The base's LoRA keys are expected unused (the adapter is attached after): transformers' UNEXPECTED table
    is not shown; the filter is removed after the load."""
    import logging

    import transformers

    from mlflow_mia.models.resolve import resolve_model

    transformers.utils.logging.enable_propagation()
    try:
        with caplog.at_level(logging.WARNING, logger="transformers"):
            resolve_model("models:/lora-tgt/1")
            assert "UNEXPECTED" not in caplog.text and "lora_A" not in caplog.text  # shown before: 12 LoRA keys
    finally:
        transformers.utils.logging.disable_propagation()
    assert logging.getLogger("transformers.modeling_utils").filters == []
