"""A model kind in one file and one registration (mlflow_mia.model_kinds), done here with a throwaway kind.

The kind ``prefix`` is a GPT-2 whose config says ``prefix_lm``; its signal kind ``prefix_nll`` is the summed NLL
of tokens 2..n. Registering both is all it takes for an audit's loader, dispatch and option choices to use them.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
import torch

from mlflow_mia.config import SignalConfig
from mlflow_mia.model_kinds import model_kinds, register_model_kind, unregister_model_kind
from mlflow_mia.signal_kinds import MODEL_KINDS, register_signal_kind, unregister_signal_kind
from mlflow_mia.signals import CausalLM, compute_signals
from mlflow_mia.signals.causal_model import kind_of
from mlflow_mia.signals.testing import tiny_gpt2
from mlflow_mia.signals.types import SignalResult

TEXTS = ["the cat sat on the mat", "a dog ran to the old house"]


class PrefixLM(CausalLM):
    kind: ClassVar[str] = "prefix"


def _is_prefix(obj) -> bool:
    config = obj if isinstance(obj, dict) else getattr(obj, "config", obj)
    return bool(config.get("prefix_lm") if isinstance(config, dict) else getattr(config, "prefix_lm", False))


def _summed_nll(lm, ids) -> float:
    with torch.no_grad():
        logp = torch.log_softmax(lm.model(torch.tensor([ids])).logits[0].double(), dim=-1)
    return -float(logp[:-1].gather(1, torch.tensor(ids[1:])[:, None]).sum())


def _compute(lm, texts, config, **_):
    ids = [lm.tokenizer(t)["input_ids"] for t in texts]
    values = np.array([_summed_nll(lm, x) for x in ids])
    return SignalResult(kind="prefix_nll", values=values, n_tokens=np.array([len(x) for x in ids]),
                        truncated=np.zeros(len(texts), dtype=bool), token_logprobs=[np.zeros(len(x) - 1) for x in ids])


@pytest.fixture
def prefix_kind():
    register_model_kind("prefix", PrefixLM, _is_prefix, order=5, description="prefix LMs (a test's kind)")
    register_signal_kind("prefix_nll", model="prefix", unit="nats", compute=_compute)
    yield
    unregister_signal_kind("prefix_nll")
    unregister_model_kind("prefix")


def test_a_registered_model_kind_is_loaded_dispatched_and_listed(prefix_kind):
    from mlflow_mia.models.resolve import resolve_model

    model, tok = tiny_gpt2(seed=2)
    model.config.prefix_lm = True
    lm = resolve_model((model, tok)).lm
    assert type(lm) is PrefixLM and kind_of(lm) == "prefix"
    assert "prefix" in model_kinds() and "prefix" in tuple(MODEL_KINDS)
    res = compute_signals(lm, TEXTS, SignalConfig(kind="prefix_nll"), progress=False)
    np.testing.assert_allclose(res.values, [_summed_nll(lm, lm.tokenizer(t)["input_ids"]) for t in TEXTS])
    with pytest.raises(ValueError, match="is a prefix model and signal='causal' is defined for causal models; use "
                                         "signal='prefix_nll'"):
        compute_signals(lm, TEXTS, SignalConfig(kind="causal"), progress=False)
    plain, _ = tiny_gpt2(seed=2)
    assert type(resolve_model((plain, tok)).lm) is CausalLM  # the other GPT-2s are still causal LMs


def test_unknown_kinds_are_refused_by_name():
    with pytest.raises(ValueError, match="model of signal kind 'x' must be one of \\('masked', 'causal'\\)"):
        register_signal_kind("x", model="seq2seq", unit="nats", compute=_compute)
    with pytest.raises(ValueError, match="'masked' is a built-in model kind and stays registered"):
        unregister_model_kind("masked")
