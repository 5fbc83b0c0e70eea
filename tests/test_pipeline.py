"""The two audit stages: signals computed anywhere, then scored."""

import random

import numpy as np
import pytest

from mlflow_mia.audit import AuditModels, AuditSignals, compute_audit_signals, run_audit, score_audit
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
    expected = run_audit(target, pool, population, reference=reference, config=CONFIG, progress=False)
    computed = compute_audit_signals(AuditModels(target=target, reference=reference),
                                     list(pool.texts) + list(population.texts), CONFIG, progress=False)
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
    assert expected.models == {"target": {"identity": target.model_id, "name": "target"},
                               "reference": {"identity": reference.model_id, "name": "reference"}}


def test_compute_stage_computes_only_what_the_attacks_need(setup):
    target, reference, pool, population = setup
    only_loss = AuditConfig(attacks=("loss",), signal=SignalConfig(num_masks=2))
    signals = compute_audit_signals(target, pool.texts[:5], only_loss, progress=False)
    assert list(signals.signals) == ["target"] and len(signals) == 5
    assert list(signals.info["models"]) == ["target"] and signals.target.kind == "energy"
    with pytest.raises(ValueError, match=r"attack\(s\) \['likelihood_ratio'\] need a reference model"):
        compute_audit_signals(target, pool.texts[:5], CONFIG, progress=False)


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
    with pytest.raises(ValueError, match=r"'neighbour_energy' must be 1-D .* got shape \(5, 2\)"):
        AuditSignals({"target": sig(5), "neighbour_energy": np.zeros((5, 2))})
    with pytest.raises(TypeError, match="signals 'target' must be a SignalResult"):
        AuditSignals({"target": np.zeros(5)})
    with pytest.raises(ValueError, match=r"unknown signal name\(s\) \['energy'\]"):
        AuditSignals({"energy": sig(5)})
    with pytest.raises(ValueError, match=r"n_tokens has shape \(4,\), expected \(5,\)"):
        SignalResult.from_arrays(np.zeros(5), n_tokens=np.zeros(4))


def test_signal_result_energy_was_removed_in_favour_of_values():
    sig = SignalResult.from_arrays([1.0, 2.0], n_tokens=[3, 4], kind="pll")
    assert sig.kind == "pll" and sig.take([1]).kind == "pll" and sig.take([1]).values.tolist() == [2.0]
    with pytest.raises(AttributeError, match=r"SignalResult.energy was removed: read SignalResult.values"):
        sig.energy


def test_top_level_exports():
    import mlflow_mia
    from mlflow_mia import (AuditConfig, AuditDataset, AuditResult, PopulationSet, SignalConfig,  # noqa: F401
                            compute_audit_signals, run_audit, score_audit)

    assert run_audit is mlflow_mia.audit.run_audit and score_audit is mlflow_mia.audit.score_audit
    assert AuditConfig is mlflow_mia.config.AuditConfig
