"""A reference set of several models in one audit (``run_audit(references=[...])``), on tiny models."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mlflow_mia.audits.membership import run_audit
from mlflow_mia.config import AuditConfig, MetricConfig, SignalConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.metrics.gate import Gate
from mlflow_mia.signals import MaskedLM, SignalCache
from mlflow_mia.signals.testing import WORDS, tiny_bert, tiny_bert_tokenizer

WORDS_ = [w for w in WORDS if w.isalpha()]
ATTACKS = ("loss", "likelihood_ratio", "lira_offline", "rmia")
CONFIG = AuditConfig(attacks=ATTACKS, signal=SignalConfig(num_masks=2),
                     metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=20))


def _texts(n, seed):
    rng = random.Random(seed)
    return list(dict.fromkeys(" ".join(rng.choice(WORDS_) for _ in range(rng.randint(5, 10))) for _ in range(n)))


@pytest.fixture(scope="module")
def audit_set():
    tok = tiny_bert_tokenizer()
    texts = _texts(80, seed=7)
    pool = AuditDataset(texts=texts[:30], labels=[1] * 15 + [0] * 15)
    population = PopulationSet(texts=texts[30:70])
    target = MaskedLM(tiny_bert(tok, seed=1)[0], tok, name="target")
    refs = [MaskedLM(tiny_bert(tok, seed=s)[0], tok, name=f"ref{s}") for s in (2, 3, 4)]
    return target, refs, pool, population


def test_one_audit_over_three_references_reports_every_attack_and_lr_against_each(audit_set, tmp_path):
    target, refs, pool, population = audit_set
    cache = SignalCache(str(tmp_path / "cache"))
    result = run_audit(target, pool, population, references=refs, config=CONFIG, cache=cache, progress=False)
    assert list(result.attacks) == ["loss", "likelihood_ratio", "likelihood_ratio.reference_2",
                                    "likelihood_ratio.reference_3", "lira_offline", "rmia"]
    assert set(result.models) == {"target", "reference", "reference_2", "reference_3"}
    assert [result.models[r]["name"] for r in ("reference", "reference_2", "reference_3")] == ["ref2", "ref3", "ref4"]
    assert result.info["attack_settings"]["rmia"]["offline_a"] == 1.0
    assert result.info["attack_settings"]["lira_offline"]["spread"] == "global"
    for name in result.attacks:
        assert f"{name}/auc" in result.metrics and f"{name}/tpr_at_fpr_0.1" in result.metrics
        assert f"score_{name}" in result.samples
    assert result.config_record()["models"]["reference_3"]["identity"] == refs[2].model_id
    # The likelihood ratio against the i-th reference is the one-reference audit's likelihood ratio.
    one = run_audit(target, pool, population, references=[refs[1]], config=CONFIG, cache=cache, progress=False)
    np.testing.assert_allclose(result.samples["score_likelihood_ratio.reference_2"],
                               one.samples["score_likelihood_ratio"])
    assert list(one.attacks) == ["loss", "likelihood_ratio", "lira_offline", "rmia"]
    # The gate covers every report: the set attacks and each reference's likelihood ratio.
    gate = Gate.parse("0.1:0.9").check(result.metrics, confidence=0.95)
    assert {p["metric"] for p in gate.checks[0]["points"]} == {f"{name}/tpr_at_fpr_0.1" for name in result.attacks}


def test_reference_set_signals_are_cached_per_reference(audit_set, tmp_path):
    target, refs, pool, population = audit_set
    cache = SignalCache(str(tmp_path / "cache"))
    first = run_audit(target, pool, population, references=refs[:2], config=CONFIG, cache=cache, progress=False)
    entries = len(list((tmp_path / "cache").rglob("*")))
    again = run_audit(target, pool, population, references=refs[:2], config=CONFIG, cache=cache, progress=False)
    assert len(list((tmp_path / "cache").rglob("*"))) == entries  # nothing new: every model's signals were cached
    np.testing.assert_array_equal(first.samples["score_rmia"], again.samples["score_rmia"])


def test_references_must_be_a_non_empty_list(audit_set):
    target, refs, pool, population = audit_set
    with pytest.raises(ValueError, match=r"references must be a list of models, got MaskedLM; pass one model "
                                         r"as references=\[model\]"):
        run_audit(target, pool, population, references=refs[0], config=CONFIG)
    with pytest.raises(ValueError, match="references is empty"):
        run_audit(target, pool, population, references=[], config=CONFIG)


def test_every_reference_gets_the_tokenizer_check(audit_set):
    from mlflow_mia.signals.testing import tiny_roberta

    target, refs, pool, population = audit_set
    odd = MaskedLM(*tiny_roberta(seed=5), name="odd")
    with pytest.raises(ValueError, match=r"the reference model 'reference_2''s tokenizer differs from the target's"):
        run_audit(target, pool, population, references=[refs[0], odd], config=CONFIG, progress=False)
