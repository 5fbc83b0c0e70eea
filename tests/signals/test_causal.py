"""The causal signal (signals/causal.py) against brute force on a tiny GPT-2 built on the fly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlflow_mia.config import SignalConfig
from mlflow_mia.signals import SignalCache, compute_signals
from mlflow_mia.signals.causal import causal_token_logprobs, compute_causal_signals
from mlflow_mia.signals.causal_model import CausalLM, as_language_model, config_kind, folder_kind
from mlflow_mia.signals.dispatch import check_model_kinds, signal_config_for
from mlflow_mia.signals.model import MaskedLM
from mlflow_mia.signals.testing import tiny_bert, tiny_gpt2

TEXTS = ["the cat sat on the mat", "a dog ran", "bank loan rate market profit growth shares firm said year",
         "patient note doctor pain", "one two"]
CAUSAL = SignalConfig(kind="causal")


@pytest.fixture(scope="module")
def lm():
    return CausalLM(*tiny_gpt2(seed=3), name="tiny-gpt2")


def brute_force(lm, text):
    """Per-token log p(x_t | x_<t), t = 2..n, and the moments of log p, from one unbatched pass in float64."""
    ids = lm.tokenizer(text)["input_ids"]
    with torch.no_grad():
        logits = lm.model(torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)[:-1]  # position t-1 predicts token t
    target = logp.gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1)
    p = logp.exp()
    mu = (p * logp).sum(-1)
    sigma = ((p * logp ** 2).sum(-1) - mu ** 2).sqrt()
    top1 = logp.argmax(-1) == torch.tensor(ids[1:])
    return target.numpy(), mu.numpy(), sigma.numpy(), top1.numpy()


def test_signal_equals_brute_force_per_token_log_probs_and_moments(lm):
    res = compute_causal_signals(lm, TEXTS, CAUSAL, progress=False)
    assert res.kind == "causal" and res.has_token_stats
    for i, text in enumerate(TEXTS):
        logp, mu, sigma, top1 = brute_force(lm, text)
        n = len(lm.tokenizer(text)["input_ids"])
        assert res.token_logprobs[i].shape == (n - 1,)  # the first token is not scored, nothing prepended
        assert res.n_tokens[i] == n
        np.testing.assert_allclose(res.token_logprobs[i], logp, atol=1e-5)
        np.testing.assert_allclose(res.token_mu[i], mu, atol=1e-5)
        np.testing.assert_allclose(res.token_sigma[i], sigma, atol=1e-5)
        np.testing.assert_array_equal(res.token_top1[i], top1)  # EZ-MIA's error positions are the False ones
        assert res.values[i] == pytest.approx(-logp.mean(), abs=1e-6)  # mean NLL per predicted token


def test_padded_length_sorted_batches_equal_batch_size_one(lm):
    ids = [np.asarray(lm.tokenizer(t)["input_ids"], dtype=np.int64) for t in TEXTS]
    one = causal_token_logprobs(lm, ids, token_budget=1)  # every text alone
    packed = causal_token_logprobs(lm, ids, token_budget=4096)  # all texts in one right-padded batch
    for a, b in zip(one, packed):
        assert a.shape == b.shape and a.shape[1] == 4
        np.testing.assert_allclose(a, b, atol=2e-6)
    loss_only = causal_token_logprobs(lm, ids, token_budget=4096, stats=False)
    for a, b in zip(loss_only, packed):
        np.testing.assert_allclose(a, b[:, 0], atol=2e-6)


def test_full_logits_fallback_equals_projection_path(lm):
    ids = [np.asarray(lm.tokenizer(t)["input_ids"], dtype=np.int64) for t in TEXTS]
    fast = causal_token_logprobs(lm, ids)
    slow_lm = CausalLM(lm.model, lm.tokenizer, name="fallback")
    slow_lm._projection = False  # as for a model whose logits are scaled after the projection
    assert slow_lm.projection() is None
    for a, b in zip(fast, causal_token_logprobs(slow_lm, ids)):
        np.testing.assert_allclose(a, b, atol=2e-6)


def test_cached_rows_are_read_back_and_keyed_by_kind(lm, tmp_path):
    cache = SignalCache(str(tmp_path))
    first = compute_causal_signals(lm, TEXTS, CAUSAL, cache=cache, progress=False)
    assert cache.count() == len(TEXTS)
    again = compute_causal_signals(lm, TEXTS[::-1], CAUSAL, cache=cache, progress=False)
    assert cache.count() == len(TEXTS)  # nothing recomputed
    np.testing.assert_array_equal(again.values, first.values[::-1])
    np.testing.assert_array_equal(again.token_mu[0], first.token_mu[-1])
    compute_causal_signals(lm, TEXTS[:1], CAUSAL, cache=cache, progress=False, text_key=b"k" * 32)
    assert cache.count() == len(TEXTS) + 1  # keyed rows are stored apart


def test_dispatch_picks_the_causal_signal_for_a_causal_model(lm):
    auto = compute_signals(lm, TEXTS[:2], SignalConfig(), progress=False)  # the default kind "energy"
    assert auto.kind == "causal"
    np.testing.assert_array_equal(auto.values, compute_causal_signals(lm, TEXTS[:2], CAUSAL, progress=False).values)
    with pytest.raises(ValueError, match="causal LM and signal='pll' masks tokens.*use signal='causal'"):
        signal_config_for(lm, SignalConfig(kind="pll"))
    with pytest.raises(ValueError, match="is a masked LM and signal='causal' needs a causal LM"):
        signal_config_for(MaskedLM(*tiny_bert()), CAUSAL)


def test_text_of_one_token_is_refused_with_its_row(lm):
    with pytest.raises(ValueError, match="row 1 has 1 token; a causal LM scores tokens 2..n"):
        compute_causal_signals(lm, ["the cat", "cat"], CAUSAL, progress=False)


def test_kind_is_read_from_config_and_folder(lm, tmp_path):
    assert config_kind(lm.model.config) == "causal"
    assert config_kind(tiny_bert()[0].config) == "masked"
    folder = tmp_path / "gpt"
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    assert folder_kind(folder) == "causal"
    loaded = as_language_model(str(folder), role="target")
    assert isinstance(loaded, CausalLM) and loaded.weights_id == lm.weights_id
    from mlflow_mia.models.resolve import resolve_model

    resolved = resolve_model(str(folder), role="target")
    assert isinstance(resolved.lm, CausalLM) and resolved.resolved_uri == lm.weights_id
    assert isinstance(as_language_model(tiny_bert(), role="reference"), MaskedLM)


def test_causal_target_with_masked_reference_is_refused(lm):
    masked = MaskedLM(*tiny_bert(), name="bert")
    with pytest.raises(ValueError, match=r"the target is a causal LM but the reference model is a masked LM.*Use a "
                                         r"causal reference model.*or drop the reference-based attacks"):
        check_model_kinds(lm, [masked])
    with pytest.raises(ValueError, match="the target is a masked LM but the reference model 2 is a causal LM"):
        check_model_kinds(masked, [MaskedLM(*tiny_bert(seed=1)), lm])
    with pytest.raises(ValueError, match="neighbour generator must be a masked LM"):
        check_model_kinds(lm, [], generator=lm)
    with pytest.raises(ValueError, match=r"\['neighbourhood_local'\] re-mask the target's tokens"):
        check_model_kinds(lm, [], attacks=["loss", "neighbourhood_local"])
    check_model_kinds(lm, [CausalLM(*tiny_gpt2(seed=4))], attacks=["loss"])  # same kinds: fine


def test_a_token_the_tokenizer_adds_itself_is_context_not_scored():
    from tokenizers import processors

    from mlflow_mia.signals.testing import tiny_gpt2_tokenizer

    tok = tiny_gpt2_tokenizer()
    bos = tok.bos_token_id
    tok._tokenizer.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A",
                                                                  special_tokens=[("<|endoftext|>", bos)])
    lm = CausalLM(*tiny_gpt2(tok, seed=5))
    text = "the cat sat"
    ids = lm.tokenizer(text)["input_ids"]
    assert ids[0] == bos and len(ids) == 4  # Llama-style: the tokenizer prepends its BOS
    res = compute_causal_signals(lm, [text], CAUSAL, progress=False)
    logp = brute_force(lm, text)[0]
    assert res.token_logprobs[0].shape == (3,) and res.n_tokens[0] == 3  # every word scored, given the BOS
    np.testing.assert_allclose(res.token_logprobs[0], logp, atol=1e-5)
