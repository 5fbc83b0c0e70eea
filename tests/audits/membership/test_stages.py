"""The two audit stages: signals computed anywhere, then scored."""

import random

import numpy as np
import pytest

from mlflow_mia.audits.membership import AuditExtras, AuditModels, AuditSignals, compute_audit_signals, run_audit, score_audit
from mlflow_mia.config import AuditConfig, MetricConfig, SignalConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.signals import MaskedLM, SignalResult
from mlflow_mia.signals.testing import WORDS, tiny_bert

ALPHA_WORDS = [w for w in WORDS if w.isalpha()]
CONFIG = AuditConfig(attacks=("loss", "likelihood_ratio", "min_k", "zlib"), signal=SignalConfig(num_masks=2),
                     metrics=MetricConfig(fprs=(0.1, 0.05), bootstrap_rounds=30, length_bins=((0, 8), (8, 64))))


def sentences(n, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(ALPHA_WORDS) for _ in range(rng.randint(4, 12))) for _ in range(n)]


@pytest.fixture(scope="module")
def setup():
    texts = list(dict.fromkeys(sentences(140, seed=3)))
    pool = AuditDataset(texts=texts[:40], labels=[1] * 20 + [0] * 20, groups=[f"u{i // 4}" for i in range(40)])
    population = PopulationSet(texts=texts[40:100], groups=[f"p{i // 4}" for i in range(60)])
    target, reference = MaskedLM(*tiny_bert(seed=1), name="target"), MaskedLM(*tiny_bert(seed=2), name="reference")
    return target, reference, pool, population


def _plain_arrays(sig: SignalResult) -> SignalResult:
    """The same signal rebuilt from plain numpy arrays, as another process would send it."""
    return SignalResult.from_arrays(np.array(sig.values.tolist()), n_tokens=np.array(sig.n_tokens.tolist()),
                                    truncated=np.array(sig.truncated.tolist()),
                                    token_logprobs=[np.array(x.tolist(), dtype=np.float32)
                                                    for x in sig.token_logprobs])


def _hashes(pool, population):
    return list(pool.text_hashes) + list(population.text_hashes)


def test_score_audit_on_precomputed_arrays_equals_run_audit(setup):
    target, reference, pool, population = setup
    expected = run_audit(target, pool, population, references=[reference], config=CONFIG, progress=False)
    computed = compute_audit_signals(AuditModels(target=target, references=(reference,)), pool, population, CONFIG,
                                     progress=False)
    assert sorted(computed.signals) == ["reference", "target"]  # exactly what the attacks declare
    arrays = AuditSignals({role: _plain_arrays(computed[role]) for role in ("target", "reference")},
                          text_hashes=_hashes(pool, population))
    result = score_audit(arrays, pool, population, CONFIG)
    assert list(result.metrics) == list(expected.metrics)
    np.testing.assert_equal(result.metrics, expected.metrics)  # NaN == NaN here; every other value exactly equal
    assert result.samples.equals(expected.samples)
    assert any("memorization-feature analysis skipped: it needs the target model" in w for w in result.warnings)
    assert result.memorization_features is None
    assert result.models == {}  # plain arrays carry no model identities
    assert expected.models == {"target": {"identity": target.model_id, "name": "target", "weights": target.weights_id},
                               "reference": {"identity": reference.model_id, "name": "reference",
                                             "weights": reference.weights_id}}


def test_compute_stage_computes_only_what_the_attacks_need(setup):
    target, reference, pool, population = setup
    only_loss = AuditConfig(attacks=("loss",), signal=SignalConfig(num_masks=2), metrics=CONFIG.metrics)
    signals = compute_audit_signals(target, pool, population, only_loss, progress=False)
    assert list(signals.signals) == ["target"] and len(signals) == len(pool) + len(population)
    assert list(signals.info["models"]) == ["target"] and signals.target.kind == "energy"
    assert list(signals.info["timings"]) == ["signals_target_s", "extras_s"]
    extras = signals.extras  # token ids for the memorization features; no generator, no neighbours
    assert len(extras.token_ids) == len(pool) and extras.vocab_size == len(target.tokenizer)
    assert extras.neighbour_examples is None and extras.generator is None
    first = target.tokenizer(pool.texts[0], add_special_tokens=False)["input_ids"]
    assert extras.token_ids[0].tolist() == first
    with pytest.raises(ValueError, match=r"attack\(s\) \['likelihood_ratio'\] need a reference model"):
        compute_audit_signals(target, pool, population, CONFIG, progress=False)
    with pytest.raises(ValueError, match=r"the target pool has no non-members"):
        compute_audit_signals(target, AuditDataset(texts=pool.texts[:3], labels=[1, 1, 1]), population, only_loss,
                              progress=False)


EVERY_ATTACK = AuditConfig(attacks=("loss", "likelihood_ratio", "min_k", "zlib", "neighbourhood", "neighbourhood_local"),
                           signal=SignalConfig(num_masks=2), neighbourhood={"num_neighbours": 3},
                           metrics=MetricConfig(fprs=(0.1, 0.05), bootstrap_rounds=20,
                                                length_bins=((0, 8), (8, 64))))


def _assert_same_result(got, expected):
    assert list(got.metrics) == list(expected.metrics)
    np.testing.assert_equal(got.metrics, expected.metrics)  # NaN == NaN here; every other value exactly equal
    assert got.samples.equals(expected.samples) and got.riskiest.equals(expected.riskiest)
    assert got.warnings == expected.warnings and got.models == expected.models
    assert got.neighbour_examples.equals(expected.neighbour_examples)
    assert got.memorization_features.equals(expected.memorization_features)


def test_score_audit_runs_no_model_and_equals_run_audit(setup, monkeypatch):
    """Stage 2 with every model deleted and every forward pass, tokenizer call and model load failing."""
    import gc
    import weakref

    import torch
    import transformers

    _, _, pool, population = setup
    models = [MaskedLM(*tiny_bert(seed=s), name=n) for s, n in ((1, "target"), (2, "reference"), (3, "generator"))]
    expected = run_audit(models[0], pool, population, references=[models[1]], generator=models[2], config=EVERY_ATTACK,
                         progress=False)
    signals = compute_audit_signals(AuditModels.build(models[0], references=[models[1]], generator=models[2],
                                                      config=EVERY_ATTACK), pool, population, EVERY_ATTACK,
                                    progress=False)
    assert list(signals.signals) == ["target", "reference", "neighbour_values", "neighbour_local"]
    alive = [weakref.ref(lm.model) for lm in models]
    del models
    gc.collect()
    assert [ref() for ref in alive] == [None, None, None]  # no model object is left anywhere

    def refuse(*args, **kwargs):
        raise AssertionError("stage 2 ran a model")

    monkeypatch.setattr(torch.nn.Module, "__call__", refuse)
    monkeypatch.setattr(transformers.PreTrainedTokenizerBase, "__call__", refuse)
    monkeypatch.setattr(transformers.AutoModelForMaskedLM, "from_pretrained", refuse)
    monkeypatch.setattr(MaskedLM, "from_pretrained", refuse)
    result = score_audit(signals, pool, population, EVERY_ATTACK)
    assert result.neighbour_examples is not None and result.memorization_features is not None
    assert "neighbourhood/generator_accuracy" in result.metrics
    _assert_same_result(result, expected)


def test_checks_run_once_per_audit(setup, monkeypatch):
    from mlflow_mia.audits.membership import checks, scoring

    target, reference, pool, population = setup
    calls = []

    def counted(name, real):
        def wrapper(*args, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)

        return wrapper

    for name in ("check_models", "check_data", "check_signals"):
        wrapper = counted(name, getattr(checks, name))
        monkeypatch.setattr(checks, name, wrapper)
        if hasattr(scoring, name):
            monkeypatch.setattr(scoring, name, wrapper)
    run_audit(target, pool, population, references=[reference], config=CONFIG, progress=False)
    assert sorted(calls) == ["check_data", "check_models", "check_signals"]


def test_misaligned_or_misshaped_signals_are_rejected(setup):
    target, reference, pool, population = setup
    n_pool, n_pop = len(pool), len(population)
    rows = n_pool + n_pop
    rng = np.random.default_rng(0)

    def sig(n):
        return SignalResult.from_arrays(rng.normal(size=n), n_tokens=np.full(n, 5))

    loss = AuditConfig(attacks=("loss",), metrics=CONFIG.metrics)
    with pytest.raises(ValueError, match=rf"signals have {rows - 1} rows; expected {rows} = {n_pool} pool rows "
                                         rf"followed by {n_pop} population rows"):
        score_audit(AuditSignals({"target": sig(rows - 1)}), pool, population, loss)
    with pytest.raises(ValueError, match=r"signals are missing \['reference'\]"):
        score_audit(AuditSignals({"target": sig(rows)}), pool, population, CONFIG)
    swapped = _hashes(pool, population)
    swapped[3], swapped[4] = swapped[4], swapped[3]
    with pytest.raises(ValueError, match="not aligned with the data: 2 row.* first signal row 3 \\(pool row 3\\)"):
        score_audit(AuditSignals({"target": sig(rows)}, text_hashes=swapped), pool, population, loss)
    with pytest.raises(ValueError, match=r"signals have different numbers of rows \{'target': 5, 'reference': 4\}"):
        AuditSignals({"target": sig(5), "reference": sig(4)})
    with pytest.raises(ValueError, match=r"'neighbour_values' must be 1-D .* got shape \(5, 2\)"):
        AuditSignals({"target": sig(5), "neighbour_values": np.zeros((5, 2))})
    with pytest.raises(ValueError, match=r"extras 'token_ids' have 3 rows; expected one per pool text \(40\)"):
        score_audit(AuditSignals({"target": sig(rows)}, extras=AuditExtras(token_ids=(np.zeros(1),) * 3)), pool,
                    population, loss)
    with pytest.raises(TypeError, match="signals 'target' must be a SignalResult"):
        AuditSignals({"target": np.zeros(5)})
    with pytest.raises(ValueError, match=r"unknown signal name\(s\) \['energy'\]"):
        AuditSignals({"energy": sig(5)})
    with pytest.raises(ValueError, match=r"n_tokens has shape \(4,\), expected \(5,\)"):
        SignalResult.from_arrays(np.zeros(5), n_tokens=np.zeros(4))


def test_signal_result_keeps_its_kind_through_take():
    sig = SignalResult.from_arrays([1.0, 2.0], n_tokens=[3, 4], kind="pll")
    assert sig.kind == "pll" and sig.take([1]).kind == "pll" and sig.take([1]).values.tolist() == [2.0]


def test_top_level_exports():
    import mlflow_mia
    from mlflow_mia import (AuditConfig, AuditDataset, AuditResult, PopulationSet, SignalConfig,  # noqa: F401
                            compute_audit_signals, run_audit, score_audit)

    assert run_audit is mlflow_mia.audits.membership.run_audit and score_audit is mlflow_mia.audits.membership.score_audit
    assert AuditConfig is mlflow_mia.config.AuditConfig


def test_docstring_examples_of_the_engines():
    import doctest

    from mlflow_mia.engines import registry

    assert doctest.testmod(registry).failed == 0
