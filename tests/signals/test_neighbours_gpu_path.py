"""Neighbour generation on the GPU path, run on CPU: length buckets, halving on out-of-memory, the compute type.

The generator's loop follows the other signal kinds (issue 45): padded widths rounded to
length buckets, each batch's top substitutes kept on the device and copied back once per
chunk, a batch that runs out of memory halved and retried, the products in the audit's
``dtype``. On CPU in float32 none of it may change a neighbour (the dropout masks come from
``(seed, sha256(text))``, whatever the batching); bfloat16 changes a few, and its
neighbours are cached apart from float32's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlflow_mia.config import NeighbourhoodConfig, SignalConfig
from mlflow_mia.signals import MaskedLM, SignalCache
from mlflow_mia.signals import batching
from mlflow_mia.signals import neighbours as nb_module
from mlflow_mia.signals.neighbour_recipe import NeighbourRecipe
from mlflow_mia.signals.neighbours import candidate_swaps, compute_type, generate_neighbours
from mlflow_mia.signals.runtime import bytes_per_token, memory_token_budget
from mlflow_mia.signals.testing import tiny_bert, tiny_roberta

WORDS = "the cat sat on mat a dog ran to old house and down we saw sea sky bank said market rose".split()


def _texts(n=40, seed=0, longest=30):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(2, longest)))) for _ in range(n)]


TEXTS = _texts()
CONFIG = NeighbourhoodConfig(num_neighbours=10, num_replacements=1)


@pytest.fixture(params=["bert", "roberta"])
def gen(request):
    model, tok = (tiny_bert if request.param == "bert" else tiny_roberta)(seed=3)
    return MaskedLM(model, tok, name=request.param)


def _swaps(words_swaps):
    _, swaps = words_swaps
    return [[[(s.token_id, s.logprob) for s in cands] for cands in per_text] for per_text in swaps]


# --- length buckets -------------------------------------------------------------------------------------------

def test_bucketed_batches_give_the_neighbours_of_exact_padding(gen, monkeypatch):
    """RoBERTa's positions count from the padding id: padding to a bucket must not move them either."""
    plain = generate_neighbours(gen, TEXTS, config=CONFIG, seed=1, progress=False, token_budget=256)
    widths = []
    real_pad = batching.pad_batch
    monkeypatch.setattr(nb_module, "pad_batch",
                        lambda seqs, pad, width=None: widths.append((width, max(map(len, seqs))))
                        or real_pad(seqs, pad, width))
    monkeypatch.setattr(nb_module, "uses_length_buckets", lambda device: True)  # as on CUDA
    bucketed = generate_neighbours(gen, TEXTS, config=CONFIG, seed=1, progress=False, token_budget=256)
    assert bucketed == plain
    assert all(w is not None and w % 8 == 0 for w, _ in widths)  # every batch padded to a bucket
    assert any(w > longest for w, longest in widths)  # and some really got more padding than before
    # the substitutes themselves: same ids in the same order, log-probs to float rounding
    on = _swaps(candidate_swaps(gen, TEXTS, top_k=12, seed=1, progress=False, token_budget=256, buckets=True))
    off = _swaps(candidate_swaps(gen, TEXTS, top_k=12, seed=1, progress=False, token_budget=256, buckets=False))
    assert [[[t for t, _ in c] for c in p] for p in on] == [[[t for t, _ in c] for c in p] for p in off]
    np.testing.assert_allclose([lp for p in on for c in p for _, lp in c],
                               [lp for p in off for c in p for _, lp in c], rtol=0, atol=1e-5)


def test_a_chunk_copies_its_substitutes_to_the_host_once(host_copies):
    calls = host_copies
    gen = MaskedLM(*tiny_bert(seed=3))
    generate_neighbours(gen, TEXTS, config=CONFIG, progress=False, token_budget=128, chunk_size=20)
    assert len(calls) == 2 and min(calls) > 3  # two chunks, several batches each, one copy per chunk


# --- out of memory: halve and retry ----------------------------------------------------------------------------

def _failing_above(tokens_allowed, failed):
    real = MaskedLM.logits_at

    def logits_at(self, input_ids, *args, **kwargs):
        if input_ids.numel() > tokens_allowed:
            failed.append(tuple(input_ids.shape))
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, input_ids, *args, **kwargs)
    return logits_at


def test_a_batch_that_runs_out_of_memory_is_halved_and_the_neighbours_are_unchanged(gen, monkeypatch, caplog):
    plain = generate_neighbours(gen, TEXTS, config=CONFIG, seed=1, progress=False, token_budget=512)
    failed = []
    monkeypatch.setattr(MaskedLM, "logits_at", _failing_above(150, failed))
    with caplog.at_level("WARNING", logger="mlflow_mia.signals.batching"):
        halved = generate_neighbours(gen, TEXTS, config=CONFIG, seed=1, progress=False, token_budget=512)
    assert failed and failed[0][0] * failed[0][1] > 150  # the first batch failed
    assert len(failed) <= 2  # 512 -> 256 -> 128 padded tokens, then later batches are split before they run
    assert "ran out of memory" in caplog.text and "retrying in halves" in caplog.text
    assert halved == plain


def test_one_copy_that_does_not_fit_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(MaskedLM, "logits_at", _failing_above(0, []))
    with pytest.raises(MemoryError, match=r"one text of \d+ tokens does not fit .* lower max_length"):
        generate_neighbours(MaskedLM(*tiny_bert(seed=3)), TEXTS[:2], config=CONFIG, progress=False)


# --- the compute type ------------------------------------------------------------------------------------------

def test_bfloat16_mostly_agrees_with_float32_and_really_runs_in_bfloat16():
    """Measured on these texts (tiny BERT and RoBERTa, seeds 3 and 4, n = 10, m = 1 and 2): bfloat16 keeps
    98-99.5 % of a text's float32 neighbours on average (at least 80 % of any text's), the same best neighbour
    for 95-100 % of the texts and the same list in the same order for 38-65 %; the top substitute's
    log p_swap moves by at most 0.002 nats. Random tiny models have flat distributions: near-ties reorder."""
    for make in (tiny_bert, tiny_roberta):
        gen = MaskedLM(*make(seed=3))
        for m in (1, 2):
            config = NeighbourhoodConfig(num_neighbours=10, num_replacements=m)
            full = generate_neighbours(gen, TEXTS, config=config, seed=1, progress=False, dtype="float32")
            low = generate_neighbours(gen, TEXTS, config=config, seed=1, progress=False, dtype=torch.bfloat16)
            kept = [len(set(a) & set(b)) / len(a) for a, b in zip(full, low) if a]
            assert np.mean(kept) >= 0.9 and min(kept) >= 0.6, (make.__name__, m, kept)
            assert np.mean([a[0] == b[0] for a, b in zip(full, low) if a]) >= 0.8
            assert full != low  # the products really ran in bfloat16
        top32 = _swaps(candidate_swaps(gen, TEXTS, top_k=1, seed=1, progress=False, dtype="float32"))
        top16 = _swaps(candidate_swaps(gen, TEXTS, top_k=1, seed=1, progress=False, dtype="bfloat16"))
        np.testing.assert_allclose([c[0][1] for p in top16 for c in p], [c[0][1] for p in top32 for c in p],
                                   rtol=0, atol=0.02)


def test_the_compute_type_is_part_of_the_cache_key(tmp_path, monkeypatch):
    gen = MaskedLM(*tiny_bert(seed=3))
    full = generate_neighbours(gen, TEXTS, config=CONFIG, seed=1, progress=False, dtype="float32")
    low = generate_neighbours(gen, TEXTS, config=CONFIG, seed=1, progress=False, dtype="bfloat16")
    assert full != low
    cache = SignalCache(tmp_path)
    assert generate_neighbours(gen, TEXTS, config=CONFIG, seed=1, progress=False, cache=cache) == full  # "auto"
    # bfloat16 does not read float32's neighbours from the cache: it computes (and stores) its own
    assert generate_neighbours(gen, TEXTS, config=CONFIG, seed=1, progress=False, cache=cache,
                               dtype=torch.bfloat16) == low

    def boom(*args, **kwargs):
        raise AssertionError("recomputed")

    monkeypatch.setattr(nb_module, "_candidate_swaps", boom)
    for dtype, expected in (("float32", full), ("auto", full), (torch.float32, full), ("bfloat16", low)):
        assert generate_neighbours(gen, TEXTS, config=CONFIG, seed=1, progress=False, cache=cache,
                                   dtype=dtype) == expected, dtype
    with pytest.raises(ValueError, match="dtype 'float64' is not one of auto, float32, bfloat16, float16"):
        generate_neighbours(gen, TEXTS, config=CONFIG, progress=False, dtype=torch.float64)


def test_the_recipe_runs_the_generator_in_the_signal_dtype():
    gen = MaskedLM(*tiny_bert(seed=3))
    for dtype in ("float32", "bfloat16"):
        recipe = NeighbourRecipe(gen, neighbourhood=CONFIG, signal=SignalConfig(dtype=dtype, seed=2), progress=False)
        assert recipe.neighbours(TEXTS) == generate_neighbours(gen, TEXTS, config=CONFIG, seed=2, progress=False,
                                                               dtype=dtype)
    assert compute_type("auto", "cpu") == (torch.float32, {})


# --- token budget ----------------------------------------------------------------------------------------------

def test_the_budget_is_sized_to_the_device_memory_on_cuda_and_stays_measured_on_cpu(cuda_memory):
    model = cuda_memory
    cuda = torch.device("cuda")
    per_token = bytes_per_token(model.config, torch.bfloat16, vocab_logits=True)  # each copy holds a row of logits
    assert nb_module._generator_budget(None, cuda, model, torch.bfloat16) == memory_token_budget(8 << 30, per_token)
    assert nb_module._generator_budget(None, torch.device("cpu"), model, torch.float32) == 4096
    assert nb_module._generator_budget(777, cuda, model, torch.bfloat16) == 777
