"""The gradient-norm attack (MIMIR) on tiny models: against a per-text backward loop, its sign, settings, refusal."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny_causal import tiny_llama, word_texts

from mlflow_mia.attacks import ATTACKS, AttackInputs
from mlflow_mia.attacks.grad_norm import GradNormSettings
from mlflow_mia.audits.membership import run_audit
from mlflow_mia.config import AuditConfig, MetricConfig, SignalConfig
from mlflow_mia.data import AuditDataset, PopulationSet, text_hash
from mlflow_mia.signals import CausalLM, MaskedLM
from mlflow_mia.signals.gradient import backward_bytes, check_backward_fits, gradient_norms
from mlflow_mia.signals.masking import sample_masks
from mlflow_mia.signals.testing import tiny_bert, tiny_gpt2
from mlflow_mia.signals.types import SignalResult

P = {"1": 1, "2": 2, "inf": math.inf}


def _norm(model, loss, p) -> float:
    model.zero_grad()
    loss.backward()
    norms = [float(torch.linalg.vector_norm(w.grad.double(), ord=p)) for w in model.parameters()]
    model.zero_grad()
    return float(np.mean(norms))


def brute_causal(model, tok, text, p) -> float:
    """MIMIR's loop: HF's mean token loss of one text, backward, each parameter's p-norm, their mean."""
    ids = torch.tensor([tok(text)["input_ids"]])
    return _norm(model, model(ids, labels=ids).loss, p)


def brute_energy(model, tok, text, config, p) -> float:
    """The masked energy, mask by mask (HF's loss on one masked copy at a time), summed over masks / K."""
    enc = tok(text, return_special_tokens_mask=True)
    ids, maskable = enc["input_ids"], [i for i, s in enumerate(enc["special_tokens_mask"]) if not s]
    masks = sample_masks(len(maskable), rate=config.mask_rate, num_masks=config.num_masks, seed=config.seed,
                         key=text_hash(text))
    total = 0
    for mask in masks:
        x, labels = torch.tensor([ids]), torch.full((1, len(ids)), -100)
        pos = [maskable[j] for j in mask]
        labels[0, pos] = x[0, pos]
        x[0, pos] = tok.mask_token_id
        total = total + model(x, labels=labels).loss * len(pos)  # HF's loss is the mean over masked positions
    return _norm(model, total / len(masks), p)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("norm", ["1", "2", "inf"])
def test_causal_norms_equal_a_per_text_backward_loop(family, norm):
    model, tok = tiny_gpt2(seed=1) if family == "gpt2" else tiny_llama()
    texts = word_texts(5, seed=2)
    got = gradient_norms(CausalLM(model, tok), texts, norm=norm)
    np.testing.assert_allclose(got, [brute_causal(model, tok, t, P[norm]) for t in texts], rtol=1e-6, atol=1e-9)
    assert all(not w.requires_grad or w.grad is None for w in model.parameters())


@pytest.mark.parametrize("kind", ["energy", "pll"])
def test_masked_norms_are_the_gradient_of_the_signal(kind):
    model, tok = tiny_bert(seed=3)
    texts = word_texts(3, seed=4, low=4, high=9)
    config = SignalConfig(kind=kind, num_masks=4)
    got = gradient_norms(MaskedLM(model, tok), texts, config, norm="2")
    if kind == "energy":
        want = [brute_energy(model, tok, t, config, 2) for t in texts]
    else:  # the PLL's mean NLL per token: all T one-token masks (K >= C(T, 1)), summed and divided by T
        want = [brute_energy(model, tok, t, SignalConfig(mask_rate=1e-9, num_masks=10**6), 2) for t in texts]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


def test_frozen_parameters_count_and_stay_frozen():
    model, tok = tiny_gpt2(seed=1)
    for w in list(model.parameters())[:3]:
        w.requires_grad_(False)
    got = gradient_norms(CausalLM(model, tok), ["the cat sat on the mat"], norm="2")
    assert [w.requires_grad for w in model.parameters()][:4] == [False, False, False, True]
    for w in model.parameters():
        w.requires_grad_(True)
    assert got[0] == pytest.approx(brute_causal(model, tok, "the cat sat on the mat", 2), rel=1e-6)


def test_an_audit_scores_minus_the_norm_and_trained_members_have_smaller_gradients():
    texts = word_texts(40, seed=6, low=5, high=9)
    members, others = texts[:8], texts[8:16]
    model, tok = tiny_gpt2(seed=5)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(30):  # fit the members
        for t in members:
            ids = torch.tensor([tok(t)["input_ids"]])
            opt.zero_grad()
            model(ids, labels=ids).loss.backward()
            opt.step()
    model.eval()
    pool = AuditDataset(texts=members + others, labels=[1] * 8 + [0] * 8)
    config = AuditConfig(attacks=("grad_norm",), metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=0),
                         attack_settings={"grad_norm": {"norm": "2"}})
    result = run_audit(CausalLM(model, tok), pool, PopulationSet(texts=texts[16:36]), config=config, progress=False)
    want = [-brute_causal(model, tok, t, 2) for t in pool.texts]
    np.testing.assert_allclose(result.samples["score_grad_norm"], want, rtol=1e-6)
    assert result.metrics["grad_norm/auc"] > 0.9


def test_a_model_too_large_for_the_device_is_refused_with_the_figures():
    model, tok = tiny_gpt2(seed=1)
    need = backward_bytes(model, 10)
    assert check_backward_fits(model, 10, torch.device("cpu"), free=10 * need) == need
    with pytest.raises(ValueError, match=r"attack 'grad_norm' needs a backward pass through the target: its 0\.0M "
                                         r"parameters and a pass of 1 x 10 tokens need about .* GiB beside the "
                                         r"weights, and cpu has 0\.00 GiB free"):
        check_backward_fits(model, 10, torch.device("cpu"), free=need)
    with pytest.raises(ValueError, match="leave grad_norm out"):
        gradient_norms(CausalLM(model, tok), ["the cat sat"], free=1000)


def test_sign_and_settings():
    sig = SignalResult.from_arrays([1.0, 1.0], n_tokens=[3, 3], kind="causal")
    assert ATTACKS["grad_norm"]()(AttackInputs(("a", "b"), target=sig, grad_norm=[0.5, 2.0])).tolist() == [-0.5, -2.0]
    assert GradNormSettings(norm="INF").norm == "inf"
    with pytest.raises(ValueError, match=r"grad_norm norm must be one of \['1', '2', 'inf'\], got '3'"):
        GradNormSettings(norm="3")
    with pytest.raises(ValueError, match="gradient norm must be one of"):
        gradient_norms(CausalLM(*tiny_gpt2()), ["the cat sat"], norm="fro")
