"""The last encoder layer at the masked positions only (``signals/last_layer.py``) equals the full forward pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlflow_mia.config import SignalConfig
from mlflow_mia.signals import MaskedLM, compute_signals
from mlflow_mia.signals.last_layer import hidden_at, last_layer_of
from mlflow_mia.signals.testing import WORDS, tiny_bert


def _texts(n: int) -> list[str]:
    rng = np.random.default_rng(0)
    words = [w for w in WORDS if w.isalpha()]
    return [" ".join(rng.choice(words, size=int(rng.integers(2, 30)))) for _ in range(n)]


def _full_pass(lm: MaskedLM) -> MaskedLM:
    lm._last_layer = False  # the full encoder, the path before the last layer ran at masked rows only
    return lm


def test_hidden_states_at_masked_rows_equal_the_full_encoder():
    model, tok = tiny_bert(seed=3)
    encoder = model.base_model
    last = last_layer_of(encoder)
    assert last is encoder.encoder.layer[-1]
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, len(tok) - 1, (4, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[2, 8:], mask[3, 4:] = 0, 0  # padded rows: their padding must not be attended to
    rows, cols = torch.tensor([0, 2, 1, 2, 0, 3, 2]), torch.tensor([1, 0, 11, 7, 5, 2, 3])  # rows in any order
    with torch.inference_mode():
        full = encoder(input_ids=ids, attention_mask=mask).last_hidden_state[rows, cols]
        got = hidden_at(encoder, last, ids, mask, rows, cols)
    assert got.shape == (7, model.config.hidden_size)
    assert float((got - full).abs().max()) <= 1e-5


@pytest.mark.parametrize("kind", ["pll", "energy"])
def test_per_token_logprobs_equal_the_full_computation(kind):
    model, tok = tiny_bert(seed=3)
    texts = _texts(12)
    config = SignalConfig(kind=kind, num_masks=3, token_budget=200)  # several batches, padded
    lm = MaskedLM(model, tok)
    fast = compute_signals(lm, texts, config, progress=False, stats=True)
    assert lm._last_layer is model.base_model.encoder.layer[-1]  # the masked-rows path ran
    full = compute_signals(_full_pass(MaskedLM(model, tok)), texts, config, progress=False, stats=True)
    assert sum(len(x) for x in fast.token_logprobs) > 12
    for name in ("token_logprobs", "token_mu", "token_sigma"):
        diff = max(float(np.max(np.abs(a - b))) for a, b in zip(getattr(fast, name), getattr(full, name)))
        assert diff <= 1e-5, (name, diff)  # nats per token
    np.testing.assert_allclose(fast.values, full.values, atol=1e-4, rtol=0)
    np.testing.assert_array_equal(fast.n_tokens, full.n_tokens)


def test_encoders_of_other_layouts_keep_the_full_pass():
    class Plain(torch.nn.Module):
        config = object()

        def __init__(self):
            super().__init__()
            self.encoder = torch.nn.Module()
            self.encoder.layer = torch.nn.ModuleList([torch.nn.Linear(4, 4)])

    assert last_layer_of(Plain()) is None  # no attention.self.query/... in the layer
    assert last_layer_of(torch.nn.Linear(4, 4)) is None  # no encoder.layer at all
    model, _ = tiny_bert(seed=3)
    model.config.chunk_size_feed_forward = 0
    model.base_model.encoder.layer[-1].chunk_size_feed_forward = 2  # a chunked feed-forward block
    assert last_layer_of(model.base_model) is None
