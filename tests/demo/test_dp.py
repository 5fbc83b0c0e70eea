"""Tests of mlflow_mia/demo/dp.py: DP-SGD training of a tiny BERT masked LM with opacus."""

from __future__ import annotations

import math
import random
import warnings

import pytest

pytest.importorskip("opacus")

import torch  # noqa: E402
from opacus.accountants import RDPAccountant  # noqa: E402

from mlflow_mia.demo.dp import DPConfig, train_mlm_dp  # noqa: E402
from mlflow_mia.demo.train import ModelSpec, TrainConfig, new_model, train_tokenizer  # noqa: E402
from mlflow_mia.signals.testing import WORDS  # noqa: E402

SPEC = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, vocab_size=200,
                 max_position_embeddings=32)


def _texts(n=64, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))) for _ in range(n)]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(_texts(), vocab_size=SPEC.vocab_size, min_frequency=1, model_max_length=32)


def _train(tokenizer, config, dp):
    model = new_model(tokenizer, SPEC, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng_state = torch.get_rng_state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # opacus: secure RNG off, RDP order range
        result = train_mlm_dp(model, tokenizer, _texts(), config, dp, progress=False)
    assert torch.equal(rng_state, torch.get_rng_state())  # the global RNG is left alone
    return model, before, result


def _accounted(result):
    """The epsilon of ``steps`` Poisson-subsampled Gaussian steps, from a fresh opacus accountant."""
    accountant = RDPAccountant()
    for _ in range(result.train.steps):
        accountant.step(noise_multiplier=result.noise_multiplier, sample_rate=result.sample_rate)
    return accountant.get_epsilon(result.delta)


def test_dp_training_spends_at_most_the_target_and_trains(tokenizer):
    config = TrainConfig(epochs=3, batch_size=16, learning_rate=1e-2, warmup_ratio=0.0, max_length=32)
    model, before, result = _train(tokenizer, config, DPConfig(target_epsilon=8.0, delta=1e-5))
    assert result.train.steps == 12 and result.sample_rate == 0.25  # 64 texts, expected batch 16
    assert 0 < result.epsilon <= 8.0
    assert result.epsilon == pytest.approx(_accounted(result), rel=1e-9)
    assert result.noise_multiplier > 0.5
    assert result.metrics() == {"dp/epsilon": result.epsilon, "dp/delta": 1e-5,
                                "dp/noise_multiplier": result.noise_multiplier}
    # Training ran: the loss fell and every trainable weight moved; the frozen head bias did not.
    losses = result.train.epoch_losses
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    assert result.frozen == ("cls.predictions.bias",)
    after = model.state_dict()
    moved = {k for k in after if not torch.equal(after[k], before[k])}
    assert moved == set(after) - {"cls.predictions.bias", "cls.predictions.decoder.bias"}
    # The model comes back as a plain module: no opacus hooks, no per-sample gradients, all trainable.
    assert type(model).__name__ == "BertForMaskedLM" and not model.training
    assert all(p.requires_grad and not hasattr(p, "grad_sample") for p in model.parameters())
    assert not any(m._forward_hooks or m._backward_hooks for m in model.modules())


def test_smaller_budget_means_more_noise_and_stopping_early_spends_less(tokenizer):
    config = TrainConfig(steps=5, batch_size=16, learning_rate=1e-2, warmup_ratio=0.0, max_length=32)
    _, _, result = _train(tokenizer, config, DPConfig(target_epsilon=1.0, delta=1e-5))
    assert result.train.steps == 5  # noise planned for 2 epochs (8 steps), 5 run
    assert result.noise_multiplier > 2.0
    assert result.epsilon == pytest.approx(_accounted(result), rel=1e-9)
    assert 0 < result.epsilon < 1.0


def test_clip_only_control_adds_no_noise_and_frozen_embeddings_stay_put(tokenizer):
    config = TrainConfig(epochs=2, batch_size=16, learning_rate=1e-2, warmup_ratio=0.0, max_length=32)
    dp = DPConfig(target_epsilon=None, noise_multiplier=0.0, freeze=("bert.embeddings.",))
    model, before, result = _train(tokenizer, config, dp)
    assert result.noise_multiplier == 0.0 and result.epsilon == math.inf
    assert result.metrics() == {"dp/delta": 1e-5, "dp/noise_multiplier": 0.0}  # no infinite epsilon logged
    assert result.to_params()["dp.target_epsilon"] == "none"
    after = model.state_dict()
    moved = {k for k in after if not torch.equal(after[k], before[k])}
    embeddings = {k for k in after if k.startswith("bert.embeddings.")} | {"cls.predictions.decoder.weight"}
    assert not moved & embeddings  # the word embeddings are tied to the decoder: both stay
    assert moved == set(after) - embeddings - {"cls.predictions.bias", "cls.predictions.decoder.bias"}
    assert set(result.frozen) >= {"bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight"}
    assert all(p.requires_grad for p in model.parameters())  # unfrozen again afterwards
    # The same recipe with noise ends elsewhere: the control differs from the private run only by the noise.
    noisy, _, _ = _train(tokenizer, config, DPConfig(target_epsilon=None, noise_multiplier=1.0,
                                                     freeze=("bert.embeddings.",)))
    assert not torch.equal(noisy.state_dict()["bert.encoder.layer.0.output.dense.weight"],
                           after["bert.encoder.layer.0.output.dense.weight"])


@pytest.mark.parametrize("kwargs, match", [
    ({"target_epsilon": 0}, "target_epsilon"), ({"target_epsilon": math.inf}, "target_epsilon"),
    ({"noise_multiplier": 1.0}, "give target_epsilon or noise_multiplier, not both"),
    ({"target_epsilon": None, "noise_multiplier": -1.0}, "noise_multiplier must be a finite number >= 0"),
    ({"target_epsilon": None}, "target_epsilon must be a finite number > 0, got None"),
    ({"delta": 0.0}, "delta"), ({"max_grad_norm": -1}, "max_grad_norm"), ({"accountant": "moments"}, "accountant"),
])
def test_dp_config_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DPConfig(**kwargs)


def test_no_texts_is_an_error(tokenizer):
    with pytest.raises(ValueError, match="at least one text"):
        train_mlm_dp(new_model(tokenizer, SPEC), tokenizer, [], TrainConfig(), DPConfig())
