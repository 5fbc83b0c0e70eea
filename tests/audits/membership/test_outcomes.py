"""Stage 2 is built, not filled: one frozen AttackOutcome per attack run, folded into a frozen AuditResult once."""

import dataclasses

import numpy as np
import pytest

from mlflow_mia.attacks import get_attack
from mlflow_mia.audits.membership import AuditSignals, score_audit
from mlflow_mia.audits.membership.result import AttackOutcome
from mlflow_mia.audits.membership.scoring import _score_attack, attack_report, attack_runs
from mlflow_mia.config import AuditConfig, MetricConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.naming import fmt_alpha
from mlflow_mia.signals import SignalResult

N_POOL, N_POP = 40, 80
CONFIG = AuditConfig(attacks=("loss", "min_k", "likelihood_ratio"),
                     metrics=MetricConfig(fprs=(0.1, 0.05), bootstrap_rounds=20, length_bins=((0, 10), (10, 64))))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    texts = [f"text {i} " + "word " * int(rng.integers(2, 9)) for i in range(N_POOL + N_POP)]
    labels = np.r_[np.ones(N_POOL // 2, int), np.zeros(N_POOL // 2, int)]
    pool = AuditDataset(texts=texts[:N_POOL], labels=labels.tolist(), groups=[f"u{i // 2}" for i in range(N_POOL)])
    population = PopulationSet(texts=texts[N_POOL:], groups=[f"p{i // 2}" for i in range(N_POP)])
    member = np.r_[labels, np.zeros(N_POP, int)]

    def sig(shift):
        lengths = rng.integers(4, 30, N_POOL + N_POP)
        lps = [rng.normal(-3 + shift * m, 1.0, k).astype(np.float32) for m, k in zip(member, lengths)]
        return SignalResult.from_arrays(np.array([-lp.mean() for lp in lps]), n_tokens=lengths, token_logprobs=lps)

    signals = AuditSignals({"target": sig(0.5), "reference": sig(0.0)},
                           text_hashes=list(pool.text_hashes) + list(population.text_hashes))
    return signals, pool, population


def test_the_result_is_frozen_and_holds_each_outcome(data):
    signals, pool, population = data
    result = score_audit(signals, pool, population, CONFIG, notes=["a note"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.models = {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.info = {}
    assert isinstance(result.warnings, tuple) and result.warnings[0] == "a note"
    table = result.samples[["sample_id", "text_hash", "label", "group", "n_tokens", "truncated"]]
    y = pool.labels.astype(np.int64)
    for run in attack_runs(CONFIG, signals):
        outcome = _score_attack(run, get_attack(run[1], CONFIG), signals, pool, population, CONFIG, table,
                                signals.target.n_tokens[:N_POOL])
        name = outcome.name
        with pytest.raises(dataclasses.FrozenInstanceError):
            outcome.scores = None
        np.testing.assert_array_equal(result.samples[f"score_{name}"].to_numpy(), outcome.scores)
        np.testing.assert_array_equal(result.population_scores[name], outcome.population_scores)
        # the report is attack_report on the scores, at sample and user level (two members per user)
        expected = attack_report(name, y, outcome.scores, outcome.population_scores, CONFIG,
                                 lengths=signals.target.n_tokens[:N_POOL], groups=np.asarray(pool.groups),
                                 pop_groups=np.asarray(population.groups)).metrics(f"{name}/")
        np.testing.assert_equal({k: result.metrics[k] for k in expected}, expected)
        assert result.user_attacks[name].metrics("") == pytest.approx(outcome.user_report.metrics(""), nan_ok=True)
        for t in outcome.report.population:
            column = f"flagged_{name}_fpr_{fmt_alpha(t.alpha)}"
            np.testing.assert_array_equal(result.samples[column].to_numpy(), outcome.scores > t.threshold)
        assert (result.riskiest["attack"] == name).sum() == len(outcome.riskiest)
        assert outcome.unscored is None and outcome.warning is None and outcome.resolved == {}
    assert [c for c in result.samples.columns if c.startswith("score_")] == [f"score_{a}" for a in CONFIG.attacks]


def test_an_outcome_is_a_frozen_record():
    fields = [f.name for f in dataclasses.fields(AttackOutcome)]
    assert fields == ["name", "scores", "population_scores", "report", "user_report", "flags", "riskiest",
                      "unscored", "warning", "resolved"]
    assert AttackOutcome.__dataclass_params__.frozen
