"""A causal audit leaves transformers nothing to warn about: every forward pass carries its attention mask."""

from __future__ import annotations

import logging

import numpy as np
import torch
import transformers

from mlflow_mia.config import SignalConfig
from mlflow_mia.signals.causal_model import CausalLM
from mlflow_mia.signals.gradient import text_loss
from mlflow_mia.signals.testing import tiny_gpt2


def test_the_projection_probe_and_the_gradient_loss_pass_a_mask(caplog):
    model, tok = tiny_gpt2(seed=0)
    model.config.pad_token_id = lm_pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    lm = CausalLM(model, tok, name="tiny")
    transformers.utils.logging.enable_propagation()
    try:
        with caplog.at_level(logging.WARNING, logger="transformers"):
            assert lm.projection is not None
            ids = np.array([lm_pad, 5, 6, 7], dtype=np.int64)  # a pad id inside: what the warning looks for
            loss = text_loss(lm, ids, np.arange(1, 4), SignalConfig(kind="causal"), "k")
    finally:
        transformers.utils.logging.disable_propagation()
    assert torch.isfinite(loss)
    assert "attention_mask" not in caplog.text
