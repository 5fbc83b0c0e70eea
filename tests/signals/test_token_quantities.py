"""Stage 1 computes the optional per-token quantities (Min-K%++'s statistics) only for the attacks that declare them."""

import random
import sqlite3

import numpy as np
import pytest

from mlflow_mia.attacks import ATTACKS, Attack, register_attack, required_token_quantities
from mlflow_mia.audits.membership import AuditModels, compute_audit_signals, run_audit
from mlflow_mia.config import AuditConfig, MetricConfig, SignalConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.signals import MaskedLM, SignalCache, compute_signals
from mlflow_mia.signals import model as model_module
from mlflow_mia.signals.testing import WORDS, tiny_bert

WORDS_ONLY = [w for w in WORDS if w.isalpha()]


def _config(*attacks):
    return AuditConfig(attacks=attacks, signal=SignalConfig(num_masks=2),
                       metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=0))


@pytest.fixture(scope="module")
def setup():
    rng = random.Random(5)
    texts = list(dict.fromkeys(" ".join(rng.choice(WORDS_ONLY) for _ in range(rng.randint(4, 10)))
                               for _ in range(60)))
    pool = AuditDataset(texts=texts[:16], labels=[1] * 8 + [0] * 8)
    population = PopulationSet(texts=texts[16:40])
    models = AuditModels(target=MaskedLM(*tiny_bert(seed=1), name="target"),
                         references=(MaskedLM(*tiny_bert(seed=2), name="reference"),))
    return models, pool, population


@pytest.fixture
def stats_calls(monkeypatch):
    """Count the calls of both functions that reduce the vocabulary to Min-K%++'s statistics."""
    calls = []
    for name in ("blocked_logprob_stats", "logprob_stats_of_logits"):
        real = getattr(model_module, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(model_module, name, spy)
    return calls


def _stored_stats(cache_dir):
    conn = sqlite3.connect(cache_dir / "signals.sqlite")
    try:
        return [row[0] is not None for row in conn.execute("SELECT token_stats FROM signal_rows")]
    finally:
        conn.close()


def test_required_token_quantities_follow_the_attacks():
    assert required_token_quantities(["loss", "likelihood_ratio", "min_k", "zlib"]) == {}
    assert required_token_quantities(["likelihood_ratio", "min_k_plus_plus"]) == {"target": ("token_stats",)}
    with pytest.raises(ValueError, match="unknown attack"):
        required_token_quantities(["no_such_attack"])


def test_an_attack_declaring_an_unknown_quantity_is_refused():
    with pytest.raises(ValueError, match=r"declares token quantities \['entropy'\]; declared ones: \['token_stats'\]"):
        @register_attack
        class Entropic(Attack):
            name = "entropic"
            token_quantities = ("entropy",)
    assert "entropic" not in ATTACKS


def test_loss_and_likelihood_ratio_compute_no_statistics_and_min_k_plus_plus_later_equals_a_fresh_run(
        setup, stats_calls, tmp_path):
    models, pool, population = setup
    cache = SignalCache(tmp_path)
    plain = compute_audit_signals(models, pool, population, _config("loss", "likelihood_ratio"), cache=cache,
                                  progress=False)
    assert stats_calls == []  # neither statistics function ran
    assert not plain["target"].has_token_stats and not plain["reference"].has_token_stats
    n_rows = len(set(pool.texts) | set(population.texts))
    assert _stored_stats(tmp_path) == [False] * (2 * n_rows)  # both models' rows, none with statistics

    config = _config("loss", "min_k_plus_plus")
    later = run_audit(models.target, pool, population, config=config, cache=cache, progress=False)
    assert stats_calls  # the target's rows were recomputed with their statistics
    stored = _stored_stats(tmp_path)
    assert sum(stored) == n_rows and len(stored) == 2 * n_rows  # target rows overwritten; reference rows as they were
    fresh = run_audit(models.target, pool, population, config=config, progress=False)
    np.testing.assert_array_equal(later.samples["score_min_k_plus_plus"], fresh.samples["score_min_k_plus_plus"])
    np.testing.assert_array_equal(later.samples["score_loss"], fresh.samples["score_loss"])

    stats_calls.clear()  # a third audit finds everything it needs in the cache
    again = compute_audit_signals(models.target, pool, population, config, cache=cache, progress=False)
    assert stats_calls == [] and again["target"].has_token_stats


@pytest.mark.parametrize("kind", ["energy", "pll"])
@pytest.mark.parametrize("separable_head", [True, False])
def test_values_without_statistics_equal_values_with_them_bitwise(setup, kind, separable_head, monkeypatch):
    """Both reductions of the head (blocked projection, full logits) give the same float32 log-probs either way."""
    models, pool, _ = setup
    if not separable_head:
        monkeypatch.setattr(MaskedLM, "split_head", lambda self: None)
    texts = list(pool.texts)
    config = SignalConfig(kind=kind, num_masks=3)
    with_stats = compute_signals(models.target, texts, config, progress=False)
    without = compute_signals(models.target, texts, config, progress=False, stats=False)
    assert without.token_mu is None and without.token_sigma is None and with_stats.has_token_stats
    np.testing.assert_array_equal(without.values, with_stats.values)
    for a, b in zip(without.token_logprobs, with_stats.token_logprobs):
        np.testing.assert_array_equal(a, b)
