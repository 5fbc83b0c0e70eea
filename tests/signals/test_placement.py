"""Models placed by accelerate's device_map (signals/placement.py): loaded in place, same digest, same signals.

A CPU-only machine has one device, so the tests place a tiny GPT-2 with an explicit map that offloads a
block to disk: its weights sit on the meta device between forward passes, as those of a model too big
for its GPUs do, and accelerate's hooks bring them in. What must hold: nothing moves such a model, its
weights digest (the cache key) equals the plain model's, and its signals equal the plain model's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlflow_mia.signals.causal_model import CausalLM
from mlflow_mia.signals.identity import weights_digest
from mlflow_mia.signals.placement import is_dispatched, load_kwargs, loading, place_model, state_items
from mlflow_mia.signals.testing import tiny_gpt2

#: Every module of the tiny GPT-2 on CPU but its second block, offloaded to disk.
OFFLOAD_MAP = {"transformer.wte": "cpu", "transformer.wpe": "cpu", "transformer.drop": "cpu",
               "transformer.h.0": "cpu", "transformer.h.1": "disk", "transformer.ln_f": "cpu", "lm_head": "cpu"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    model, tokenizer = tiny_gpt2(seed=5)
    path = tmp_path_factory.mktemp("tiny_gpt2")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def plain_and_offloaded(folder, tmp_path_factory):
    plain = CausalLM.from_pretrained(folder)
    with loading(OFFLOAD_MAP, offload_folder=str(tmp_path_factory.mktemp("offload"))):
        offloaded = CausalLM.from_pretrained(folder)
    return plain, offloaded


def test_loading_sets_the_from_pretrained_arguments_only_inside_its_block():
    assert load_kwargs() == {}
    with loading("auto"):
        kwargs = load_kwargs()
        assert kwargs["device_map"] == "auto" and kwargs["offload_folder"]
        with loading(None):
            assert load_kwargs() == {}
    assert load_kwargs() == {}
    with pytest.raises(ValueError, match="device_map 'balanced' is not one of auto"):
        with loading("balanced"):
            pass


def test_offloaded_model_is_dispatched_and_left_where_accelerate_put_it(plain_and_offloaded):
    plain, offloaded = plain_and_offloaded
    assert not is_dispatched(plain.model) and is_dispatched(offloaded.model)
    meta = [name for name, t in offloaded.model.state_dict().items() if t.device.type == "meta"]
    assert meta and all(name.startswith("transformer.h.1.") for name in meta)
    assert place_model(offloaded.model, torch.device("cpu")) == torch.device("cpu")
    assert is_dispatched(offloaded.model)  # not moved: .to() would have failed on its meta weights


def test_weights_digest_of_offloaded_model_equals_the_plain_models(plain_and_offloaded):
    plain, offloaded = plain_and_offloaded
    assert weights_digest(offloaded.model) == weights_digest(plain.model)
    names = [name for name, _ in state_items(offloaded.model)]
    assert names == sorted(plain.model.state_dict())
    assert all(t.device.type == "cpu" for _, t in state_items(offloaded.model))


def test_cli_refuses_an_unknown_device_map(capsys, tmp_path):
    from mlflow_mia.entrypoints.cli import main

    data = tmp_path / "pool.csv"
    data.write_text("text,is_member\na,1\nb,0\n")
    assert main(["audit", "--device-map", "balanced", "--data", str(data), "--target", "y"]) == 2
    assert "device_map 'balanced' is not one of auto" in capsys.readouterr().err


def test_causal_signal_of_offloaded_model_equals_the_plain_models(plain_and_offloaded):
    from mlflow_mia.config import SignalConfig
    from mlflow_mia.signals.causal import compute_causal_signals

    plain, offloaded = plain_and_offloaded
    texts = ["the cat sat on the mat", "a dog ran far", "bank loan rate market profit"]
    a = compute_causal_signals(plain, texts, SignalConfig(kind="causal"), progress=False)
    b = compute_causal_signals(offloaded, texts, SignalConfig(kind="causal"), progress=False)
    assert offloaded.projection() is None  # full logits through accelerate's hooks, not the blocked head
    np.testing.assert_allclose(b.values, a.values, atol=1e-5)
    for x, y in zip(a.token_logprobs, b.token_logprobs):
        np.testing.assert_allclose(y, x, atol=1e-5)
    assert is_dispatched(offloaded.model)


def test_masked_energy_of_offloaded_model_equals_the_plain_models(tmp_path):
    from mlflow_mia.config import SignalConfig
    from mlflow_mia.signals import compute_signals
    from mlflow_mia.signals.model import MaskedLM
    from mlflow_mia.signals.testing import tiny_bert

    model, tokenizer = tiny_bert(seed=2)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    layers = {f"bert.encoder.layer.{i}": ("disk" if i == 0 else "cpu") for i in range(model.config.num_hidden_layers)}
    device_map = {"bert.embeddings": "cpu", **layers, "cls": "cpu"}
    plain = MaskedLM.from_pretrained(tmp_path)
    with loading(device_map):
        offloaded = MaskedLM.from_pretrained(tmp_path)
        assert is_dispatched(offloaded.model) and offloaded.split_head() is None
        texts = ["the cat sat on the mat", "bank loan rate market profit growth"]
        config = SignalConfig(num_masks=3, seed=0)
        a = compute_signals(plain, texts, config, progress=False)
        b = compute_signals(offloaded, texts, config, progress=False)
    np.testing.assert_allclose(b.values, a.values, atol=1e-5)
    assert weights_digest(offloaded.model) == weights_digest(plain.model)


def test_adapter_on_an_offloaded_base_is_refused_with_the_fix(plain_and_offloaded, tmp_path):
    from peft import LoraConfig, get_peft_model

    from mlflow_mia.models.adapters import attach

    model, _ = tiny_gpt2(seed=5)
    get_peft_model(model, LoraConfig(r=2, target_modules=["c_attn"])).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="cannot be applied to a base spread by --device-map.*merge the adapter"):
        attach(plain_and_offloaded[1].model, str(tmp_path), source="adapter")
