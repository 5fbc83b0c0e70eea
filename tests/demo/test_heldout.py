"""Tests of mlflow_mia.demo.train.heldout_loss: the held-out masked-LM loss every analyze variant logs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mlflow_mia.demo.train import ModelSpec, heldout_loss, new_model, train_tokenizer
from mlflow_mia.signals.testing import WORDS

SPEC = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, vocab_size=200,
                 max_position_embeddings=32)
TEXTS = [" ".join(WORDS[(7 * i + j) % len(WORDS)] for j in range(4 + i % 5)) for i in range(9)]


@pytest.fixture(scope="module")
def tok_model():
    tok = train_tokenizer(TEXTS, vocab_size=SPEC.vocab_size, min_frequency=1, model_max_length=32)
    return tok, new_model(tok, SPEC, seed=0)


def _brute_force(tok, model, texts, seed, rate=0.15):
    """One text at a time, unpadded: the same masks, summed NLL over masked tokens."""
    total, count = 0.0, 0
    for i, text in enumerate(texts):
        enc = tok(text, return_special_tokens_mask=True)
        ids = torch.tensor([enc["input_ids"]])
        maskable = np.flatnonzero(np.asarray(enc["special_tokens_mask"]) == 0)
        chosen = np.random.default_rng([seed, i]).choice(maskable, size=math.ceil(rate * maskable.size),
                                                         replace=False)
        masked = ids.clone()
        masked[0, chosen] = tok.mask_token_id
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=masked).logits[0].float(), -1)
        total -= float(logp[chosen, ids[0, chosen]].sum())
        count += len(chosen)
    return total / count, count


def test_heldout_loss_equals_one_text_at_a_time_and_ignores_batching(tok_model):
    tok, model = tok_model
    loss, n = heldout_loss(model, tok, TEXTS, seed=3, batch_size=4)
    expected, n_expected = _brute_force(tok, model, TEXTS, seed=3)
    assert n == n_expected and loss == pytest.approx(expected, rel=1e-5)
    assert heldout_loss(model, tok, TEXTS, seed=3, batch_size=64)[0] == pytest.approx(loss, rel=1e-5)
    assert heldout_loss(model, tok, TEXTS, seed=4)[0] != pytest.approx(loss, rel=1e-9)  # other masks
    assert not model.training


def test_heldout_loss_rejects_bad_input(tok_model):
    tok, model = tok_model
    with pytest.raises(ValueError, match="at least one text"):
        heldout_loss(model, tok, [])
    with pytest.raises(ValueError, match=r"mask_rate must be in \(0, 1\), got 1.5"):
        heldout_loss(model, tok, TEXTS, mask_rate=1.5)
