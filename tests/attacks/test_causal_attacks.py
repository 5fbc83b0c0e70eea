"""The attacks on causal signals: hand computations on known log-probs, and audits of a tiny causal target."""

from __future__ import annotations

import random
import zlib

import numpy as np
import pytest

from mlflow_mia.attacks import ATTACKS
from mlflow_mia.attacks.inputs import AttackInputs
from mlflow_mia.audits.membership import run_audit
from mlflow_mia.config import AuditConfig, MetricConfig, SignalConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.signals import CausalLM, MaskedLM
from mlflow_mia.signals.causal import compute_causal_signals
from mlflow_mia.signals.testing import WORDS, tiny_bert, tiny_gpt2
from mlflow_mia.signals.types import SignalResult

TEXTS = ("the cat sat", "a dog ran on the mat")
# Known per-token log-probs of tokens 2..n (nats) and the moments of log p at each position.
LOGPROBS = ([-1.0, -3.0], [-0.5, -2.0, -4.0, -0.5])
MU = ([-2.0, -2.0], [-1.0, -1.0, -2.0, -1.0])
SIGMA = ([0.5, 2.0], [1.0, 0.5, 1.0, 2.0])


def causal(logprobs, mu=MU, sigma=SIGMA):
    """A causal SignalResult whose value is the mean NLL per predicted token of ``logprobs``."""
    return SignalResult.from_arrays([-np.mean(x) for x in logprobs], n_tokens=[len(x) + 1 for x in logprobs],
                                    token_logprobs=logprobs, token_mu=mu, token_sigma=sigma, kind="causal")


def score(name, **inputs):
    return ATTACKS[name]()(AttackInputs(TEXTS, **inputs))


def test_loss_is_minus_mean_nll_per_predicted_token():
    np.testing.assert_allclose(score("loss", target=causal(LOGPROBS)), [-2.0, -1.75])


def test_zlib_is_mean_nll_over_compressed_bytes():
    lengths = [len(zlib.compress(t.encode("utf-8"), 9)) for t in TEXTS]
    np.testing.assert_allclose(score("zlib", target=causal(LOGPROBS)), [-2.0 / lengths[0], -1.75 / lengths[1]])


def test_min_k_is_mean_of_lowest_k_percent_token_log_probs():
    # k = 0.5: ceil(0.5 * 2) = 1 of [-1, -3] -> -3; ceil(0.5 * 4) = 2 of [-0.5, -2, -4, -0.5] -> (-4 - 2) / 2
    got = ATTACKS["min_k"](fraction=0.5)(AttackInputs(TEXTS, target=causal(LOGPROBS)))
    np.testing.assert_allclose(got, [-3.0, -3.0])


def test_min_k_plus_plus_normalises_by_the_next_token_distribution():
    # token scores (logp - mu) / sigma: [2.0, -0.5] and [0.5, -2.0, -2.0, 0.25]; lowest half averaged
    got = ATTACKS["min_k_plus_plus"](fraction=0.5)(AttackInputs(TEXTS, target=causal(LOGPROBS)))
    np.testing.assert_allclose(got, [-0.5, -2.0])


def test_likelihood_ratio_is_reference_loss_minus_target_loss():
    ref = causal(([-2.0, -2.0], [-1.0, -1.0, -1.0, -1.0]))
    # target mean NLL [2.0, 1.75], reference [2.0, 1.0]: score = -(target - reference)
    np.testing.assert_allclose(score("likelihood_ratio", target=causal(LOGPROBS), reference=ref), [0.0, -0.75])


def test_rmia_reads_the_mean_token_log_prob_of_causal_signals():
    from mlflow_mia.attacks.rmia import per_token_loglik

    np.testing.assert_allclose(per_token_loglik(causal(LOGPROBS)), [-2.0, -1.75])


def test_lira_offline_over_causal_references():
    refs = [causal(([-2.0, -2.0], [-1.0, -1.0, -1.0, -1.0])), causal(([-3.0, -3.0], [-2.0, -2.0, -2.0, -2.0]))]
    got = ATTACKS["lira_offline"](per_sample_spread_min=2)(AttackInputs(TEXTS, target=causal(LOGPROBS),
                                                                        references=refs))
    # per text: (mean reference NLL - target NLL) / sd(reference NLLs, ddof=1)
    np.testing.assert_allclose(got, [(2.5 - 2.0) / np.std([2, 3], ddof=1), (1.5 - 1.75) / np.std([1, 2], ddof=1)])


def test_neighbourhood_is_mean_neighbour_loss_minus_loss():
    got = score("neighbourhood", target=causal(LOGPROBS), neighbour_values=np.array([2.5, 1.0]))
    np.testing.assert_allclose(got, [0.5, -0.75])


# ----------------------------------------------------------------------------- audits of a tiny causal target

WORDS_ = [w for w in WORDS if w.isalpha()]


def _texts(n, seed):
    rng = random.Random(seed)
    return list(dict.fromkeys(" ".join(rng.choice(WORDS_) for _ in range(rng.randint(5, 10))) for _ in range(n)))


@pytest.fixture(scope="module")
def audit_set():
    texts = _texts(80, seed=11)
    pool = AuditDataset(texts=texts[:30], labels=[1] * 15 + [0] * 15)
    population = PopulationSet(texts=texts[30:70])
    target = CausalLM(*tiny_gpt2(seed=1), name="target")
    reference = CausalLM(*tiny_gpt2(seed=2), name="reference")
    return target, reference, pool, population


def test_audit_of_a_causal_target_and_reference(audit_set):
    target, reference, pool, population = audit_set
    attacks = ("loss", "zlib", "min_k", "min_k_plus_plus", "likelihood_ratio", "neighbourhood")
    config = AuditConfig(attacks=attacks, metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=10),
                         neighbourhood={"num_neighbours": 3})
    generator = MaskedLM(*tiny_bert(seed=5), name="generator")
    result = run_audit(target, pool, population, references=[reference], generator=generator, config=config,
                       progress=False)
    assert list(result.attacks) == list(attacks)
    want = compute_causal_signals(target, pool.texts, SignalConfig(kind="causal"), progress=False).values
    ref = compute_causal_signals(reference, pool.texts, SignalConfig(kind="causal"), progress=False).values
    np.testing.assert_allclose(result.samples["score_loss"], -want)
    np.testing.assert_allclose(result.samples["score_likelihood_ratio"], ref - want)
    assert np.isfinite(result.metrics["neighbourhood/auc"])
    assert result.models["target"]["weights"] == target.weights_id


def test_causal_target_with_masked_reference_is_refused_before_any_model_runs(audit_set):
    target, _, pool, population = audit_set
    masked = MaskedLM(*tiny_bert(seed=2), name="bert")
    config = AuditConfig(attacks=("loss", "likelihood_ratio"), metrics=MetricConfig(fprs=(0.1,)))
    with pytest.raises(ValueError, match="the target is a causal LM but the reference model is a masked LM"):
        run_audit(target, pool, population, references=[masked], config=config, progress=False)


def test_audit_of_a_causal_target_records_the_causal_signal(audit_set):
    target, reference, pool, population = audit_set
    config = AuditConfig(attacks=("loss",), metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=0))
    result = run_audit(target, pool, population, config=config, progress=False)
    assert result.config.signal.kind == "causal"


def test_energy_on_a_causal_target_becomes_causal_and_the_audit_says_so_once(audit_set, caplog):
    """``--signal energy`` (also the default) on a causal LM: the causal signal, and one warning saying so."""
    import logging

    target, _, pool, population = audit_set
    metrics = MetricConfig(fprs=(0.1,), bootstrap_rounds=0)
    caplog.set_level(logging.WARNING)
    result = run_audit(target, pool, population, config=AuditConfig(attacks=("loss", "zlib", "min_k"),
                                                                    signal=SignalConfig(kind="energy"),
                                                                    metrics=metrics), progress=False)
    note = ("target is a causal LM: signal='energy' masks tokens, which only a masked LM predicts, so its causal "
            "signal ('causal': the negative log-likelihood of each token given the tokens before it) is used "
            "instead; give --signal causal (evaluator key signal) to ask for it by name")
    assert result.config.signal.kind == "causal"
    assert [w for w in result.warnings if "is a causal LM" in w] == [note]
    assert [r.getMessage() for r in caplog.records if "is a causal LM" in r.getMessage()] == [note]  # once
    caplog.clear()
    named = run_audit(target, pool, population, config=AuditConfig(attacks=("loss",), signal=SignalConfig(
        kind="causal"), metrics=metrics), progress=False)
    assert not any("is a causal LM" in w for w in named.warnings) and "is a causal LM" not in caplog.text
