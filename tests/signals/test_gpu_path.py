"""The GPU path on CPU: length buckets, one copy back per chunk, memory-sized budgets, halving on out-of-memory, TF32.

Every part runs here with ``device="cpu"`` (forced where CUDA would pick it): values
with buckets and after a halved batch equal those of the plain path to float rounding,
and the plain CPU path is the one the other signal tests pin.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlflow_mia.config import SignalConfig
from mlflow_mia.signals import CausalLM, MaskedLM, compute_signals
from mlflow_mia.signals import batching, causal, energy, entity_confidence as ner, runtime
from mlflow_mia.signals.batching import bucket_width, plan_batches, run_batches
from mlflow_mia.signals.entity_confidence import TokenClassifier
from mlflow_mia.signals.ner_testing import tiny_token_classifier
from mlflow_mia.signals.runtime import (DeviceResults, autocast_for, bytes_per_token, default_token_budget,
                                        dtype_setting, memory_token_budget)
from mlflow_mia.signals.testing import tiny_bert, tiny_gpt2, tiny_roberta

WORDS = "the cat sat on mat a dog ran to old house and down we saw sea sky bank said market rose".split()


def _texts(n=40, seed=0, longest=40):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(2, longest)))) for _ in range(n)]


TEXTS = _texts()


# --- length buckets -------------------------------------------------------------------------------------------

def test_bucket_width_rounds_up_by_at_most_an_eighth_and_reuses_32_widths_up_to_512():
    widths = [bucket_width(n) for n in range(1, 4097)]
    assert all(w >= n for n, w in zip(range(1, 4097), widths))
    assert all(b >= a for a, b in zip(widths, widths[1:]))  # monotone
    assert max(w - n for n, w in zip(range(1, 65), widths)) == 7  # multiples of 8 up to 64
    assert max((w - n) / n for n, w in zip(range(64, 4097), widths[63:])) <= 0.125
    assert sorted({bucket_width(n) for n in range(1, 513)})[:10] == [8, 16, 24, 32, 40, 48, 56, 64, 72, 80]
    assert len({bucket_width(n) for n in range(1, 513)}) == 32
    assert bucket_width(500, limit=510) == 510 and bucket_width(510, limit=510) == 510
    assert bucket_width(33, limit=20) == 33  # never below the row itself
    with pytest.raises(ValueError, match="needs at least 1"):
        bucket_width(0)


def test_the_plan_counts_the_bucketed_width_against_the_budget():
    lengths = np.random.default_rng(1).integers(3, 300, size=500)
    for rows in plan_batches(lengths, 4096, width=bucket_width):
        assert len(rows) * bucket_width(int(lengths[rows].max())) <= 4096 or len(rows) == 1
    assert sorted(np.concatenate(list(plan_batches(lengths, 4096, width=bucket_width))).tolist()) == list(range(500))


def test_pad_batch_refuses_a_width_shorter_than_a_row():
    with pytest.raises(ValueError, match="width 2 is shorter than the longest sequence"):
        batching.pad_batch([np.arange(3)], 0, width=2)


@pytest.fixture
def buckets_on_cpu(monkeypatch):
    """Every signal loop pads to length buckets on CPU, as it does on CUDA."""
    for module in (energy, causal, ner):
        monkeypatch.setattr(module, "uses_length_buckets", lambda device: True)


def _values(kind, stats=True, budget=256):
    lm = CausalLM(*tiny_gpt2(seed=1)) if kind == "causal" else MaskedLM(*tiny_bert(seed=1))
    res = compute_signals(lm, TEXTS, SignalConfig(kind=kind, token_budget=budget), progress=False, stats=stats)
    return res


def _ner(prompts=None):
    clf = TokenClassifier(*tiny_token_classifier())
    prompts = prompts or [" ".join(t.split()[:3]) + " {name} " + " ".join(t.split()[3:]) for t in TEXTS]
    names = (["red dogs", "blue", "the old sea cat"] * len(prompts))[:len(prompts)]
    return ner.entity_confidence(clf, prompts, names, ["PER"] * len(prompts), progress=False, token_budget=512)


@pytest.mark.parametrize("kind", ["energy", "pll", "causal"])
def test_bucketed_padding_gives_the_values_of_the_plain_path(kind, monkeypatch):
    plain = _values(kind)
    for module in (energy, causal):
        monkeypatch.setattr(module, "uses_length_buckets", lambda device: True)
    widths = []
    real_pad = batching.pad_batch
    monkeypatch.setattr(energy if kind != "causal" else causal, "pad_batch",
                        lambda seqs, pad, width=None: widths.append(width) or real_pad(seqs, pad, width))
    bucketed = _values(kind)
    assert widths and all(w is not None and (w % 8 == 0 or w == 64) for w in widths)  # tiny models' limit: 64
    np.testing.assert_allclose(bucketed.values, plain.values, rtol=0, atol=1e-6)
    for a, b in zip(bucketed.token_logprobs, plain.token_logprobs):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    for a, b in zip(bucketed.token_mu, plain.token_mu):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


def test_bucketed_padding_keeps_roberta_positions_and_ner_confidences(buckets_on_cpu, monkeypatch):
    lm = MaskedLM(*tiny_roberta(seed=1))  # positions from the padding id: padding must not shift them
    config = SignalConfig(kind="pll", token_budget=256)
    bucketed = compute_signals(lm, TEXTS, config, progress=False).values
    bucketed_ner = _ner()
    for module in (energy, causal, ner):
        monkeypatch.setattr(module, "uses_length_buckets", lambda device: False)
    np.testing.assert_allclose(bucketed, compute_signals(lm, TEXTS, config, progress=False).values, atol=1e-6, rtol=0)
    np.testing.assert_allclose(bucketed_ner, _ner(), atol=1e-7, rtol=0)


# --- results copied back once ----------------------------------------------------------------------------------

def test_device_results_come_back_in_order_with_their_tags_in_one_copy():
    results = DeviceResults("cpu")
    assert results.to_host() == []
    results.add("a", torch.tensor([1.0, 2.0]))
    results.add(("b", 3), torch.arange(6, dtype=torch.float32).reshape(3, 2)[:, 0])
    results.add("c", torch.zeros(0))
    back = results.to_host()
    assert [t for t, _ in back] == ["a", ("b", 3), "c"] and len(results) == 0
    assert back[0][1].tolist() == [1.0, 2.0] and back[1][1].tolist() == [0.0, 2.0, 4.0] and back[2][1].size == 0


def test_a_chunk_copies_its_results_to_the_host_once(host_copies):
    """No per-batch ``.cpu()``: the energy's heads and the causal batches each end in one ``to_host``."""
    calls = host_copies
    for kind in ("energy", "causal"):
        calls.clear()
        lm = CausalLM(*tiny_gpt2(seed=1)) if kind == "causal" else MaskedLM(*tiny_bert(seed=1))
        compute_signals(lm, TEXTS, SignalConfig(kind=kind, token_budget=128), progress=False, chunk_size=1000)
        assert len(calls) == 1 and calls[0] > 3  # several batches (or heads), one copy


# --- out of memory: halve and retry ----------------------------------------------------------------------------

def _fails_above(tokens_allowed, real, counter):
    """``real`` that raises CUDA's out-of-memory error on a batch of more than ``tokens_allowed`` padded tokens."""
    def wrapped(input_ids, *args, **kwargs):
        if input_ids.numel() > tokens_allowed:
            counter.append(input_ids.shape[0])
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(input_ids, *args, **kwargs)
    return wrapped


@pytest.mark.parametrize("kind", ["energy", "causal"])
def test_a_batch_that_runs_out_of_memory_is_halved_and_the_values_are_unchanged(kind, monkeypatch, caplog):
    plain = _values(kind, budget=512)
    failed = []
    if kind == "causal":
        monkeypatch.setattr(causal, "capture_projection_input",
                            lambda model, decoder, ids, mask, real=causal.capture_projection_input:
                            _fails_above(150, lambda i, m: real(model, decoder, i, m), failed)(ids, mask))
    else:
        monkeypatch.setattr(MaskedLM, "features_at", _method_failing_above(150, MaskedLM.features_at, failed))
    with caplog.at_level("WARNING", logger="mlflow_mia.signals.batching"):
        halved = _values(kind, budget=512)
    assert failed  # the fake out-of-memory did fire
    # 512 -> 256 -> 128 padded tokens: then every later batch is split to the size that fitted, none fails again
    assert len(failed) <= 2
    assert "ran out of memory" in caplog.text and "retrying in halves" in caplog.text
    np.testing.assert_allclose(halved.values, plain.values, rtol=0, atol=1e-6)
    for a, b in zip(halved.token_logprobs, plain.token_logprobs):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


def _method_failing_above(tokens_allowed, method, counter):
    """The same for a method, with the message of other backends' out-of-memory RuntimeError."""
    def wrapped(self, input_ids, *args, **kwargs):
        if input_ids.numel() > tokens_allowed:
            counter.append(input_ids.shape[0])
            raise RuntimeError("CUDA error: out of memory")  # the other spelling: a RuntimeError's message
        return method(self, input_ids, *args, **kwargs)
    return wrapped


def test_ner_confidences_survive_an_out_of_memory_batch(monkeypatch):
    plain = _ner()
    failed = []
    monkeypatch.setattr(TokenClassifier, "logits_at", _method_failing_above(60, TokenClassifier.logits_at, failed))
    np.testing.assert_allclose(_ner(), plain, rtol=0, atol=1e-7)
    assert failed


def test_run_batches_splits_later_batches_to_the_size_that_fitted_and_runs_every_row_once():
    lengths = np.full(40, 10)
    seen, failures = [], []

    def step(rows):
        if len(rows) > 5:
            failures.append(len(rows))
            raise torch.OutOfMemoryError("CUDA out of memory")
        seen.append(rows.tolist())

    plan = [np.arange(i, i + 20) for i in (0, 20)]
    assert run_batches(plan, lengths, step) == 2  # 20 -> 10 (fails) -> 5
    assert failures == [20, 10]
    assert sorted(r for rows in seen for r in rows) == list(range(40)) and max(map(len, seen)) == 5


def test_one_row_that_does_not_fit_is_a_clear_error_and_other_errors_pass_through():
    def oom(rows):
        raise torch.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(MemoryError, match="one text of 12 tokens does not fit .* lower max_length"):
        run_batches([np.arange(4)], np.full(4, 12), oom)

    def other(rows):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        run_batches([np.arange(4)], np.full(4, 12), other)
    assert batching.is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to ..."))
    assert not batching.is_out_of_memory(ValueError("out of memory"))


# --- token budget sized to the device's memory -----------------------------------------------------------------

def test_bytes_per_token_and_the_memory_budget():
    from transformers import BertConfig, LlamaConfig

    base = BertConfig()  # hidden 768, intermediate 3072
    assert bytes_per_token(base, torch.bfloat16) == 2 * 2 * (6 * 768 + 3 * 3072)
    assert bytes_per_token(base, torch.float32) == 2 * bytes_per_token(base, torch.bfloat16)
    llama = LlamaConfig(hidden_size=4096, intermediate_size=11008, vocab_size=32000)
    assert bytes_per_token(llama, torch.bfloat16, vocab_logits=True) == 2 * 2 * (6 * 4096 + 3 * 11008) + 2 * 32000
    # an 80 GB GPU with a 7B model's 14 GB of weights loaded
    assert memory_token_budget(66 << 30, bytes_per_token(llama, torch.bfloat16)) == 131072
    assert memory_token_budget(66 << 30, bytes_per_token(base, torch.bfloat16)) == 262144  # capped
    assert memory_token_budget(2 << 30, bytes_per_token(base, torch.float32)) == 16384  # floor
    assert memory_token_budget(0, 100) == 16384


def test_the_cuda_budget_reads_the_free_memory_and_the_cpu_budget_stays(cuda_memory):
    model = cuda_memory
    per = bytes_per_token(model.config, torch.bfloat16)
    assert default_token_budget("cuda", model=model, dtype=torch.bfloat16) == memory_token_budget(8 << 30, per)
    assert default_token_budget("cuda", model=model, dtype=torch.float32) == memory_token_budget(8 << 30, 2 * per)
    assert default_token_budget("cpu", model=model) == 1024 and default_token_budget("cpu", "pll", model=model) == 4096
    assert default_token_budget("cuda") == 16384  # no model: the table


# --- TF32 -----------------------------------------------------------------------------------------------------

def test_tf32_is_on_for_float32_on_cuda_only_inside_the_loop_and_part_of_the_cache_key(monkeypatch):
    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with autocast_for(torch.float32, torch.device("cuda")):
            assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert not torch.backends.cuda.matmul.allow_tf32  # restored
        with autocast_for(torch.float32, torch.device("cpu")):
            assert not torch.backends.cuda.matmul.allow_tf32
        monkeypatch.setenv("MLFLOW_MIA_TF32", "0")
        with autocast_for(torch.float32, torch.device("cuda")):
            assert not torch.backends.cuda.matmul.allow_tf32
        assert dtype_setting("float32", "cuda") == {}
        monkeypatch.delenv("MLFLOW_MIA_TF32")
        assert dtype_setting("float32", "cuda") == {"dtype": "tf32"}
        assert dtype_setting("float32", "cpu") == {} and dtype_setting("auto", "cpu") == {}
        assert dtype_setting("bfloat16", "cuda") == {"dtype": "bfloat16"}
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


def test_auto_is_float32_on_cpu_and_bfloat16_on_a_cuda_device_that_supports_it(monkeypatch):
    assert runtime.resolve_dtype("auto", "cpu") == torch.float32
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert runtime.resolve_dtype("auto", "cuda") == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert runtime.resolve_dtype("auto", "cuda") == torch.float32


def test_the_causal_head_gives_the_same_values_in_blocks_of_any_number_of_rows():
    """On CUDA the head takes 8192 positions per product instead of 512: values do not depend on it."""
    gen = torch.Generator().manual_seed(0)
    features, decoder = torch.randn(50, 16, generator=gen), torch.nn.Linear(16, 300)
    targets = torch.randint(0, 300, (50,), generator=gen)
    with torch.inference_mode():
        for stats in (False, True):
            small, large = (causal._head(features, decoder, targets, stats, rows)
                            for rows in (7, causal.CUDA_HEAD_POSITIONS))
            torch.testing.assert_close(small, large, rtol=0, atol=1e-6)
            logits = decoder(features)
            torch.testing.assert_close(causal._from_logits(logits, targets, stats, 7),
                                       causal._from_logits(logits, targets, stats), rtol=0, atol=1e-6)
