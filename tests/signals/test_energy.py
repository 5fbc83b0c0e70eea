import math
from itertools import combinations

import numpy as np
import pytest
import torch

from mlflow_mia.config import SignalConfig
from mlflow_mia.signals import MaskedLM, SignalCache, compute_signals, tokenize
from mlflow_mia.signals import energy as energy_module
from mlflow_mia.signals.testing import tiny_bert, tiny_roberta

TEXTS = [
    "the cat sat on the mat",
    "the bank said profit growth was good this year",
    "a dog ran",
    "patient note : fever and pain , dose two mg a day for a week",
    "the firm said shares were red",
]


@pytest.fixture(params=["bert", "roberta"])
def lm(request):
    model, tok = (tiny_bert if request.param == "bert" else tiny_roberta)(seed=1)
    return MaskedLM(model, tok)


def brute_force_subset_logprob(lm, text, subset):
    """Sum of log p(s_i | s_\\I) over i in subset, one full forward pass, full LM head."""
    enc = lm.tokenizer(text, return_special_tokens_mask=True)
    ids = torch.tensor([enc["input_ids"]])
    maskable = np.flatnonzero(~np.asarray(enc["special_tokens_mask"], dtype=bool))
    positions = maskable[list(subset)]
    masked = ids.clone()
    masked[0, positions] = lm.tokenizer.mask_token_id
    with torch.no_grad():
        logp = torch.log_softmax(lm.model(input_ids=masked).logits[0].double(), dim=-1)
    return float(sum(logp[p, ids[0, p]] for p in positions))


def test_energy_with_all_subsets_equals_eq2(lm):
    text = "the cat sat on the mat and the dog ran"  # T = 10, l = 2, C = 45
    config = SignalConfig(num_masks=1000, mask_rate=0.15)
    res = compute_signals(lm, [text], config, progress=False)
    T = int(res.n_tokens[0])
    length = math.ceil(0.15 * T)
    subsets = list(combinations(range(T), length))
    expected = -np.mean([brute_force_subset_logprob(lm, text, s) for s in subsets])
    assert T == 10 and len(res.token_logprobs[0]) == len(subsets) * length
    assert res.values[0] == pytest.approx(expected, rel=1e-5)


def test_pll_equals_mean_nll_per_token(lm):
    text = TEXTS[1]
    res = compute_signals(lm, [text], SignalConfig(kind="pll"), progress=False)
    T = int(res.n_tokens[0])
    expected = -np.mean([brute_force_subset_logprob(lm, text, (i,)) for i in range(T)])
    assert res.values[0] == pytest.approx(expected, rel=1e-5)


def test_batched_equals_one_sample_at_a_time(lm):
    config = SignalConfig(num_masks=4, token_budget=4096)
    together = compute_signals(lm, TEXTS, config, progress=False, chunk_size=2)
    alone = [compute_signals(lm, [t], SignalConfig(num_masks=4, token_budget=16), progress=False) for t in TEXTS]
    np.testing.assert_allclose(together.values, [a.values[0] for a in alone], rtol=1e-5)
    for t, a in zip(together.token_logprobs, alone):
        np.testing.assert_allclose(t, a.token_logprobs[0], rtol=1e-5, atol=1e-6)


def test_masks_do_not_depend_on_batch_order(lm):
    config = SignalConfig(num_masks=3)
    forward = compute_signals(lm, TEXTS, config, progress=False)
    backward = compute_signals(lm, TEXTS[::-1], config, progress=False)
    np.testing.assert_allclose(forward.values, backward.values[::-1], rtol=1e-6)
    other_seed = compute_signals(lm, TEXTS, SignalConfig(num_masks=3, seed=1), progress=False)
    assert not np.allclose(forward.values, other_seed.values)


def test_special_tokens_and_padding_never_masked(lm, monkeypatch):
    seen = []
    original = energy_module.masked_token_logprobs

    def spy(lm_, ids, copies, **kw):
        seen.extend((ids[s], pos) for s, pos in copies)
        return original(lm_, ids, copies, **kw)

    monkeypatch.setattr(energy_module, "masked_token_logprobs", spy)
    compute_signals(lm, TEXTS, SignalConfig(num_masks=5), progress=False)
    # [UNK] stands for real text and is maskable; the structural tokens never are.
    special = set(lm.tokenizer.all_special_ids) - {lm.tokenizer.unk_token_id}
    assert seen
    for ids, positions in seen:
        assert len(positions) > 0
        assert positions.max() < len(ids)  # never a padding position
        assert not special & set(ids[positions].tolist())
    ids, maskable, _ = tokenize(lm, ["the cat"], max_length=64)
    assert ids[0][0] in special and ids[0][-1] in special and maskable[0].tolist() == [1, 2]


def test_target_and_reference_share_masks_when_tokenizers_agree(monkeypatch):
    target_model, tok = tiny_bert(seed=1)
    reference_model, _ = tiny_bert(tok, seed=2)
    calls = []
    original = energy_module.masked_token_logprobs

    def spy(lm_, ids, copies, **kw):
        calls.append([(ids[s].tolist(), pos.tolist()) for s, pos in copies])
        return original(lm_, ids, copies, **kw)

    monkeypatch.setattr(energy_module, "masked_token_logprobs", spy)
    a = compute_signals(MaskedLM(target_model, tok), TEXTS, progress=False)
    b = compute_signals(MaskedLM(reference_model, tok), TEXTS, progress=False)
    assert calls[0] == calls[1]
    assert not np.allclose(a.values, b.values)


def test_energy_is_sum_over_masked_tokens_mean_over_masks(lm):
    res = compute_signals(lm, TEXTS, SignalConfig(num_masks=7), progress=False)
    for e, lp, T in zip(res.values, res.token_logprobs, res.n_tokens):
        length = math.ceil(round(0.15 * T, 9))
        n_masks = min(7, math.comb(int(T), length))
        assert len(lp) == n_masks * length
        assert e == pytest.approx(-lp.astype(np.float64).sum() / n_masks, rel=1e-6)
        assert (lp <= 0).all()


def test_energy_reduction_sum_is_eq2_bit_for_bit_and_keeps_the_cache_key(lm):
    default = compute_signals(lm, TEXTS, SignalConfig(num_masks=7), progress=False)
    summed = compute_signals(lm, TEXTS, SignalConfig(num_masks=7, energy_reduction="sum"), progress=False)
    np.testing.assert_array_equal(summed.values, default.values)
    for e, lp, T in zip(summed.values, summed.token_logprobs, summed.n_tokens):
        n_masks = min(7, math.comb(int(T), math.ceil(round(0.15 * T, 9))))
        assert e == -float(np.sum(lp, dtype=np.float64)) / n_masks  # the formula of earlier releases, exactly
    # "sum" adds nothing to the cache key: energies cached before the setting existed are still found.
    assert SignalConfig(energy_reduction="sum").cache_spec() == {"kind": "energy", "max_length": None, "num_masks": 10,
                                                                 "mask_rate": 0.15, "seed": 0}


def test_energy_reduction_mean_is_the_sum_per_masked_token(lm):
    total = compute_signals(lm, TEXTS, SignalConfig(num_masks=7), progress=False)
    mean = compute_signals(lm, TEXTS, SignalConfig(num_masks=7, energy_reduction="mean"), progress=False)
    for e, e_sum, lp, lp_sum, T in zip(mean.values, total.values, mean.token_logprobs, total.token_logprobs,
                                       total.n_tokens):
        np.testing.assert_array_equal(lp, lp_sum)  # same masks, same log-probs: only the reduction differs
        length = math.ceil(round(0.15 * T, 9))
        per_mask = lp.astype(np.float64).reshape(-1, length)  # K masks of l positions each
        assert e == pytest.approx(-np.mean(per_mask.sum(axis=1) / length), rel=1e-12)
        assert e == pytest.approx(e_sum / length, rel=1e-12)
    # A longer text sums more tokens: the summed energy grows with length, the mean does not.
    longest, shortest = int(np.argmax(total.n_tokens)), int(np.argmin(total.n_tokens))
    assert total.values[longest] / total.values[shortest] > 2 * mean.values[longest] / mean.values[shortest]


def test_energy_reduction_is_in_the_cache_key_and_ignored_by_the_pll(tmp_path):
    model, tok = tiny_bert()
    lm = MaskedLM(model, tok)
    cache = SignalCache(tmp_path)
    summed = compute_signals(lm, TEXTS, SignalConfig(num_masks=3), cache=cache, progress=False)
    mean = compute_signals(lm, TEXTS, SignalConfig(num_masks=3, energy_reduction="mean"), cache=cache, progress=False)
    fresh = compute_signals(lm, TEXTS, SignalConfig(num_masks=3, energy_reduction="mean"), progress=False)
    np.testing.assert_array_equal(mean.values, fresh.values)  # not the cached sums
    lengths = np.ceil(np.round(0.15 * summed.n_tokens, 9))
    assert lengths.max() > 1
    np.testing.assert_allclose(mean.values, summed.values / lengths, rtol=1e-12)
    assert SignalConfig(energy_reduction="mean").cache_spec()["energy_reduction"] == "mean"
    pll = SignalConfig(kind="pll", energy_reduction="mean")
    assert pll.cache_spec() == SignalConfig(kind="pll").cache_spec()
    np.testing.assert_array_equal(compute_signals(lm, TEXTS[:2], pll, progress=False).values,
                                  compute_signals(lm, TEXTS[:2], SignalConfig(kind="pll"), progress=False).values)


def test_energy_reduction_must_be_sum_or_mean():
    with pytest.raises(ValueError, match=r"energy_reduction must be one of 'sum', 'mean', got 'avg'"):
        SignalConfig(energy_reduction="avg")


def test_head_only_at_masked_positions_equals_full_head(lm, monkeypatch):
    fast = compute_signals(lm, TEXTS, progress=False)
    monkeypatch.setattr(MaskedLM, "split_head", lambda self: None)
    full = compute_signals(lm, TEXTS, progress=False)
    np.testing.assert_allclose(fast.values, full.values, rtol=1e-5)


def _expected_target_logprobs(lm, enc, rows, cols, targets):
    full = torch.log_softmax(lm.model(**enc).logits[rows, cols].double(), dim=-1)
    return full[torch.arange(len(rows)), targets].float()


@pytest.mark.parametrize("split", [True, False])
def test_target_logprobs_in_chunks_equal_log_softmax_of_the_full_logits(lm, split, monkeypatch):
    if not split:
        monkeypatch.setattr(MaskedLM, "split_head", lambda self: None)
    enc = lm.tokenizer(TEXTS[:3], padding=True, return_tensors="pt")
    rows = torch.tensor([0, 0, 1, 2, 2, 1, 0])
    cols = torch.tensor([1, 2, 1, 3, 1, 4, 5])
    targets = torch.tensor([5, 9, 11, 7, 3, 20, 8])
    with torch.inference_mode():
        expected = _expected_target_logprobs(lm, enc, rows, cols, targets)
        for chunk_rows, vocab_block in ((1, 7), (3, 1), (256, 2048), (4, lm.model.config.vocab_size)):
            got = lm.target_logprobs_at(enc["input_ids"], enc["attention_mask"], rows, cols, targets,
                                        chunk_rows=chunk_rows, vocab_block=vocab_block)
            assert got.dtype == torch.float32 and got.shape == (7,)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # the split head is recognised as features -> output embeddings (the blocked path ran)
    assert (lm._projection is lm.model.get_output_embeddings()) == split


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("block", [1, 5, 64, 1000])
def test_blocked_log_softmax_equals_torch(bias, block):
    from mlflow_mia.signals.model import blocked_target_logprobs

    gen = torch.Generator().manual_seed(block)
    features = torch.randn(9, 6, generator=gen) * 3
    weight = torch.randn(64, 6, generator=gen)
    b = torch.randn(64, generator=gen) * 5 if bias else None
    targets = torch.randint(0, 64, (9,), generator=gen)
    expected = torch.log_softmax(torch.nn.functional.linear(features.double(), weight.double(),
                                                            None if b is None else b.double()), dim=-1)
    got = blocked_target_logprobs(features, weight, b, targets, block)
    torch.testing.assert_close(got, expected[torch.arange(9), targets].float(), rtol=1e-5, atol=1e-5)


class _ScaledHead(torch.nn.Module):
    """A head that rescales the projection's output: not features -> output embeddings."""

    def __init__(self, head):
        super().__init__()
        self.inner = head
        self.predictions = head.predictions  # where BertForMaskedLM looks up its output embeddings

    def forward(self, x):
        return self.inner(x) * 0.5


def test_head_with_work_after_the_projection_falls_back_to_full_logits():
    model, tok = tiny_bert(seed=3)
    model.cls = _ScaledHead(model.cls)
    lm = MaskedLM(model, tok)
    enc = tok(TEXTS[:2], padding=True, return_tensors="pt")
    rows, cols, targets = torch.tensor([0, 1, 1]), torch.tensor([1, 2, 3]), torch.tensor([5, 6, 7])
    with torch.inference_mode():
        got = lm.target_logprobs_at(enc["input_ids"], enc["attention_mask"], rows, cols, targets, vocab_block=8)
        expected = _expected_target_logprobs(lm, enc, rows, cols, targets)
    assert lm._projection is False and not lm.has_projection()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="does not end in its output embeddings"):
        lm.features_at(enc["input_ids"], enc["attention_mask"], rows, cols)


@pytest.mark.parametrize("head_positions", [1, 5, 10_000])
def test_head_over_several_batches_equals_head_per_batch(lm, head_positions, monkeypatch):
    config = SignalConfig(num_masks=3, token_budget=16)  # a batch or two of copies per sample
    monkeypatch.setattr(energy_module, "HEAD_POSITIONS", head_positions)
    calls = []
    original = MaskedLM.target_logprobs_of_features
    monkeypatch.setattr(MaskedLM, "target_logprobs_of_features",
                        lambda self, f, t, **kw: calls.append(len(t)) or original(self, f, t, **kw))
    pooled = compute_signals(lm, TEXTS, config, progress=False)
    assert all(n >= head_positions for n in calls[:-1])
    assert len(calls) == 1 if head_positions == 10_000 else len(calls) > 1  # one call: all positions at the end
    monkeypatch.setattr(MaskedLM, "has_projection", lambda self: False)
    per_batch = compute_signals(lm, TEXTS, config, progress=False)
    np.testing.assert_allclose(pooled.values, per_batch.values, rtol=1e-6)
    for a, b in zip(pooled.token_logprobs, per_batch.token_logprobs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_token_budget_defaults_by_device():
    from mlflow_mia.signals.runtime import default_token_budget

    assert default_token_budget("cpu") == 1024 and default_token_budget(torch.device("cuda")) == 16384
    assert default_token_budget("cpu", "pll") == 4096 and default_token_budget("cuda", "pll") == 16384
    assert SignalConfig().token_budget is None and SignalConfig(token_budget=64).token_budget == 64
    for bad in (8, True, 1.5):
        with pytest.raises(ValueError, match="token_budget must be an int >= 16 or None"):
            SignalConfig(token_budget=bad)


def test_long_texts_are_truncated_and_counted(caplog):
    model, tok = tiny_bert()
    lm = MaskedLM(model, tok)
    long_text = " ".join(["the cat sat on the mat"] * 20)  # 120 words > 64 tokens
    with caplog.at_level("WARNING"):
        res = compute_signals(lm, [long_text, TEXTS[0]], progress=False)
    assert res.truncated.tolist() == [True, False] and res.n_truncated == 1
    assert res.n_tokens[0] == 62  # 64 minus [CLS] and [SEP]
    assert "truncated" in caplog.text
    short = compute_signals(lm, [long_text], SignalConfig(max_length=10), progress=False)
    assert short.n_tokens[0] == 8


class _ForwardCounter:
    def __init__(self, model):
        self.calls = 0
        model.base_model.embeddings.register_forward_hook(self)

    def __call__(self, *args):
        self.calls += 1


def test_cache_hit_runs_no_forward_pass(tmp_path):
    model, tok = tiny_bert()
    lm = MaskedLM(model, tok)
    counter = _ForwardCounter(model)
    cache = SignalCache(tmp_path)
    first = compute_signals(lm, TEXTS, cache=cache, progress=False)
    assert counter.calls > 0
    counter.calls = 0
    again = compute_signals(lm, TEXTS + TEXTS[:2], cache=SignalCache(tmp_path), progress=False)
    assert counter.calls == 0
    np.testing.assert_array_equal(again.values[:5], first.values)
    np.testing.assert_array_equal(again.values[5:], first.values[:2])
    # Other settings are another key: computed, not served from the cache.
    compute_signals(lm, TEXTS, SignalConfig(num_masks=3), cache=cache, progress=False)
    assert counter.calls > 0


def test_cache_is_keyed_by_weights(tmp_path):
    cache = SignalCache(tmp_path)
    m1, tok = tiny_bert(seed=1)
    m2, _ = tiny_bert(tok, seed=2)
    a = compute_signals(MaskedLM(m1, tok), TEXTS, cache=cache, progress=False)
    b = compute_signals(MaskedLM(m2, tok), TEXTS, cache=cache, progress=False)
    assert not np.allclose(a.values, b.values)


def test_killed_run_resumes_from_cache(tmp_path):
    model, tok = tiny_bert()
    lm = MaskedLM(model, tok)
    texts = [f"the {w} sat on the mat" for w in ("cat", "dog", "bank", "firm", "model", "patient")]
    config = SignalConfig(num_masks=2, token_budget=16)  # 8-token copies: a chunk of 2 samples = 2 batches
    reference = compute_signals(lm, texts, config, progress=False)
    counter = _ForwardCounter(model)
    state = {"batches": 0}

    def crash(*args):
        state["batches"] += 1
        if state["batches"] > 2:
            raise KeyboardInterrupt

    handle = model.base_model.embeddings.register_forward_hook(crash)  # one call per forward pass
    with pytest.raises(KeyboardInterrupt):
        compute_signals(lm, texts, config, cache=SignalCache(tmp_path), progress=False,
                        chunk_size=2)
    handle.remove()
    assert SignalCache(tmp_path).count() == 2  # the first chunk was committed
    counter.calls = 0
    resumed = compute_signals(lm, texts, config, cache=SignalCache(tmp_path), progress=False,
                              chunk_size=2)
    np.testing.assert_allclose(resumed.values, reference.values, rtol=1e-6)
    full_batches = counter.calls
    counter.calls = 0
    compute_signals(lm, texts, config, progress=False, chunk_size=2)
    assert full_batches == counter.calls - 2


def test_model_without_mlm_head_is_rejected():
    from transformers import BertConfig, BertModel

    _, tok = tiny_bert()
    with pytest.raises(ValueError, match="no masked-LM head.*AutoModelForMaskedLM"):
        MaskedLM(BertModel(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1,
                                      num_attention_heads=2, intermediate_size=32)), tok)


def test_tokenizer_without_mask_token_is_rejected():
    model, tok = tiny_bert()
    tok.mask_token = None
    with pytest.raises(ValueError, match="no mask token"):
        MaskedLM(model, tok)


def test_text_without_maskable_token_is_rejected():
    model, tok = tiny_bert()
    with pytest.raises(ValueError, match="no maskable token"):
        compute_signals(MaskedLM(model, tok), ["the cat", "\u200b"], progress=False)


def test_text_without_maskable_token_is_reported_at_its_row(tmp_path):
    """Row numbers are the caller's, not those of the uncached, deduplicated texts left to compute."""
    lm = MaskedLM(*tiny_bert())
    cache = SignalCache(tmp_path)
    compute_signals(lm, ["the dog"], cache=cache, progress=False)
    with pytest.raises(ValueError, match=r"no maskable token .*\(first: row 3\)"):
        compute_signals(lm, ["the dog", "the cat", "the cat", "\u0301\u0301"], cache=cache, progress=False)


def test_checkpoint_without_trained_head_is_rejected(tmp_path):
    from transformers import BertConfig, BertModel

    _, tok = tiny_bert()
    encoder = BertModel(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=32))
    encoder.save_pretrained(tmp_path)  # a sentence encoder: no MLM head in the checkpoint
    tok.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="no trained masked-LM head.*cls.predictions"):
        MaskedLM.from_pretrained(tmp_path)
    model, _ = tiny_bert(tok)
    model.save_pretrained(tmp_path / "mlm")
    tok.save_pretrained(tmp_path / "mlm")
    assert MaskedLM.from_pretrained(tmp_path / "mlm").model_id.startswith("sha256:")


def test_literal_special_token_strings_are_ordinary_text(lm):
    """'[MASK] [SEP]' (or '<mask> </s>') typed in a text is text: never the mask id, never an unmaskable token."""
    tok = lm.tokenizer
    text = f"the cat {tok.mask_token} {tok.sep_token} sat"
    ids, maskable, _ = tokenize(lm, [text], max_length=64)
    inner = ids[0][1:-1]
    assert tok.mask_token_id not in inner.tolist()
    assert not set(inner.tolist()) & set(tok.all_special_ids) - {tok.unk_token_id}
    np.testing.assert_array_equal(maskable[0], np.arange(1, len(ids[0]) - 1))  # every text token maskable
    assert compute_signals(lm, [text], progress=False).n_tokens.tolist() == [len(inner)]
    # Cached rows tokenised the old way are not reused: the tokenisation is part of the cache key.
    assert energy_module.TOKENIZATION == "split_special_tokens"


# ---- Min-K%++ statistics (Zhang et al. 2024): mean and spread of log p under the model's own distribution ----


def _brute_force_stats(lm, ids, positions):
    """(log p(target), mu, sigma) at ``positions`` of ``ids`` masked there: full softmax, float64, one pass."""
    masked = torch.tensor(ids)[None].clone()
    masked[0, positions] = lm.tokenizer.mask_token_id
    with torch.no_grad():
        logp = torch.log_softmax(lm.model(input_ids=masked).logits[0, positions].double(), dim=-1)
    p = logp.exp()
    mu = (p * logp).sum(-1)
    sigma = (p * (logp - mu[:, None]) ** 2).sum(-1).sqrt()
    return np.stack([logp[torch.arange(len(positions)), torch.tensor(ids)[positions]].numpy(), mu.numpy(),
                     sigma.numpy()])


def _spy_copies(monkeypatch):
    seen = []
    original = energy_module.masked_token_logprobs

    def spy(lm_, ids, copies, **kw):
        seen.extend((ids[s], pos) for s, pos in copies)
        return original(lm_, ids, copies, **kw)

    monkeypatch.setattr(energy_module, "masked_token_logprobs", spy)
    return seen


@pytest.mark.parametrize("kind", ["energy", "pll"])
def test_token_stats_equal_full_softmax_at_every_masked_position(lm, kind, monkeypatch):
    seen = _spy_copies(monkeypatch)
    for text in TEXTS[:3]:
        seen.clear()
        res = compute_signals(lm, [text], SignalConfig(kind=kind, num_masks=4), progress=False)
        expected = np.concatenate([_brute_force_stats(lm, ids, pos) for ids, pos in seen], axis=1)
        assert res.has_token_stats and res.token_mu[0].dtype == np.float32
        got = np.stack([res.token_logprobs[0], res.token_mu[0], res.token_sigma[0]])
        assert got.shape == expected.shape and expected.shape[1] == len(res.token_logprobs[0])
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        assert (res.token_mu[0] <= 0).all() and (res.token_sigma[0] > 0).all()


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("block", [1, 5, 64, 1000])
def test_blocked_logprob_stats_equal_torch(bias, block):
    from mlflow_mia.signals.token_stats import blocked_logprob_stats, logprob_stats_of_logits

    gen = torch.Generator().manual_seed(block)
    features = torch.randn(9, 6, generator=gen) * 3
    weight = torch.randn(64, 6, generator=gen)
    b = torch.randn(64, generator=gen) * 5 if bias else None
    targets = torch.randint(0, 64, (9,), generator=gen)
    logits = torch.nn.functional.linear(features.double(), weight.double(), None if b is None else b.double())
    targets[:4] = logits.argmax(-1)[:4]  # some targets at the row's mode (top1 = 1), the others mostly not
    logp = torch.log_softmax(logits, dim=-1)
    mu = (logp.exp() * logp).sum(-1)
    var = (logp.exp() * (logp - mu[:, None]) ** 2).sum(-1)
    top1 = (logits.argmax(-1) == targets).double()
    expected = torch.stack([logp[torch.arange(9), targets], mu, var.sqrt(), top1], dim=1).float()
    torch.testing.assert_close(blocked_logprob_stats(features, weight, b, targets, block), expected,
                               rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logprob_stats_of_logits(logits.float(), targets), expected, rtol=1e-5, atol=1e-5)


def test_token_stats_of_the_full_head_equal_the_blocked_head(lm, monkeypatch):
    fast = compute_signals(lm, TEXTS, SignalConfig(num_masks=3), progress=False)
    monkeypatch.setattr(MaskedLM, "split_head", lambda self: None)
    full = compute_signals(lm, TEXTS, SignalConfig(num_masks=3), progress=False)
    for name in ("token_logprobs", "token_mu", "token_sigma", "token_top1"):
        for a, b in zip(getattr(fast, name), getattr(full, name)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_token_stats_cost_no_second_forward_pass(lm):
    """The statistics come from the logits of the energy's passes: as many encoder passes with them as without."""
    ids, maskable, _ = tokenize(lm, TEXTS, max_length=64)
    copies = [(i, m[j:j + 2]) for i, m in enumerate(maskable) for j in range(0, len(m) - 1, 2)]
    energy_module.masked_token_logprobs(lm, ids, copies[:1])  # the head's and last layer's paths, decided once
    calls = []
    handle = lm.model.base_model.embeddings.register_forward_hook(lambda *a: calls.append(1))  # one per pass
    try:
        plain = energy_module.masked_token_logprobs(lm, ids, copies, token_budget=64)
        without = len(calls)
        calls.clear()
        with_stats = energy_module.masked_token_logprobs(lm, ids, copies, token_budget=64, stats=True)
        assert len(calls) == without > 1
        calls.clear()
        compute_signals(lm, TEXTS, SignalConfig(num_masks=3), progress=False)
        counted = len(calls)
        calls.clear()
        config = SignalConfig(num_masks=3)
        masks = [energy_module._masks(len(m), config, energy_module.text_hash(t)) for m, t in zip(maskable, TEXTS)]
        energy_module.masked_token_logprobs(lm, ids, [(i, maskable[i][r]) for i in range(len(ids)) for r in masks[i]])
        assert counted == len(calls)  # compute_signals (statistics included) makes the passes of the log-probs alone
    finally:
        handle.remove()
    for a, b in zip(plain, with_stats):
        assert b.shape == (len(a), 4)
        np.testing.assert_allclose(b[:, 0], a, rtol=1e-5, atol=1e-6)


def test_token_stats_round_trip_through_the_cache(tmp_path):
    model, tok = tiny_bert()
    lm = MaskedLM(model, tok)
    counter = _ForwardCounter(model)
    first = compute_signals(lm, TEXTS, cache=SignalCache(tmp_path), progress=False)
    counter.calls = 0
    again = compute_signals(lm, TEXTS, cache=SignalCache(tmp_path), progress=False)
    assert counter.calls == 0
    for name in ("token_logprobs", "token_mu", "token_sigma"):
        for a, b in zip(getattr(first, name), getattr(again, name)):
            np.testing.assert_array_equal(a, b)


def test_cached_statistics_without_top1_read_as_absent_and_are_recomputed(tmp_path):
    cache = SignalCache(tmp_path)
    lp = np.array([-1.0, -2.0], np.float32)
    # a row as written before EZ-MIA's top1 flag: mu and sigma only, (2, n)
    cache.put_rows("k", {"h": (3.0, 2, 0, lp.tobytes(), np.ones((2, 2), np.float32).tobytes())})
    assert cache.get_many("k", ["h"])["h"][4] is None  # compute_signals recomputes it when statistics are asked for
    cache.put_many("k", {"h": (3.0, 2, False, lp, np.array([[-1, -1], [1, 1], [1, 0]], np.float32))})
    np.testing.assert_array_equal(cache.get_many("k", ["h"])["h"][4][2], [1.0, 0.0])
    with pytest.raises(ValueError, match=r"expected \(3, 2\): mu, sigma and top1"):
        cache.put_many("k", {"h": (3.0, 2, False, lp, np.ones((2, 2), np.float32))})


def _old_cache_rows(path, lm, config, rows):
    """A signal cache as an mlflow-mia without Min-K%++ wrote it: no token_stats column, MACs over four values."""
    from mlflow_mia.signals.cache import SqliteSpecStore

    class OldSignalCache(SqliteSpecStore):
        table = "signal_rows"
        columns = ("energy REAL", "n_tokens INTEGER", "truncated INTEGER", "logprobs BLOB")

    old = OldSignalCache(str(path / "signals.sqlite"))
    spec = {"weights": lm.weights_id, "config": lm.config_id, "tokenizer_id": lm.tokenizer_id,
            **energy_module.value_settings(lm, config)}
    old.put_rows(old.register(spec), rows)
    old.close()


def test_cache_rows_from_before_the_token_stats_are_recomputed_and_said_at_info(tmp_path, caplog):
    from mlflow_mia.data import text_hash

    model, tok = tiny_bert()
    lm = MaskedLM(model, tok)
    config = SignalConfig(num_masks=2)
    fresh = compute_signals(lm, TEXTS, config, progress=False)
    _old_cache_rows(tmp_path, lm, config, {
        text_hash(t): (float(e), int(n), 0, lp.tobytes())
        for t, e, n, lp in zip(TEXTS[:3], fresh.values, fresh.n_tokens, fresh.token_logprobs)})
    counter = _ForwardCounter(model)
    with caplog.at_level("INFO", logger="mlflow_mia"):
        res = compute_signals(lm, TEXTS, config, cache=SignalCache(tmp_path), progress=False)
    assert "3 cached text(s) were stored without the per-token statistics of Min-K%++" in caplog.text
    assert "failed their MAC" not in caplog.text  # old rows verify; they are only incomplete
    assert counter.calls > 0
    for name in ("token_mu", "token_sigma"):
        for a, b in zip(getattr(res, name), getattr(fresh, name)):
            np.testing.assert_allclose(a, b, rtol=1e-6)
    counter.calls = 0
    compute_signals(lm, TEXTS, config, cache=SignalCache(tmp_path), progress=False)
    assert counter.calls == 0  # rewritten with their statistics


def test_cache_row_with_its_token_stats_removed_fails_its_mac(tmp_path, caplog):
    import sqlite3

    lm = MaskedLM(*tiny_bert())
    compute_signals(lm, TEXTS[:2], SignalConfig(num_masks=2), cache=SignalCache(tmp_path), progress=False)
    conn = sqlite3.connect(tmp_path / "signals.sqlite")
    conn.execute("UPDATE signal_rows SET token_stats = NULL")
    conn.commit()
    conn.close()
    compute_signals(lm, TEXTS[:2], SignalConfig(num_masks=2), cache=SignalCache(tmp_path), progress=False)
    assert "2 row(s) failed their MAC" in caplog.text


def test_signal_result_checks_and_keeps_the_token_stats():
    from mlflow_mia.signals import SignalResult

    lp = [[-1.0, -2.0], [-3.0]]
    res = SignalResult.from_arrays([1.0, 2.0], n_tokens=[2, 1], token_logprobs=lp, token_mu=[[-1.5, -1.5], [-2.0]],
                                   token_sigma=[[1.0, 2.0], [0.5]])
    taken = res.take([1])
    assert taken.token_mu[0].tolist() == [-2.0] and taken.token_sigma[0].tolist() == [0.5]
    assert not SignalResult.from_arrays([1.0], n_tokens=[1]).has_token_stats
    with pytest.raises(ValueError, match="give token_mu and token_sigma together"):
        SignalResult.from_arrays([1.0, 2.0], n_tokens=[2, 1], token_logprobs=lp, token_mu=[[0.0, 0.0], [0.0]])
    with pytest.raises(ValueError, match=r"token_sigma\[1\] has shape \(2,\), but token_logprobs\[1\] has shape "
                                         r"\(1,\)"):
        SignalResult.from_arrays([1.0, 2.0], n_tokens=[2, 1], token_logprobs=lp, token_mu=[[0.0, 0.0], [0.0]],
                                 token_sigma=[[1.0, 1.0], [1.0, 1.0]])
