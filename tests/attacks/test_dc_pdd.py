"""DC-PDD (Zhang et al. 2024): an audit's scores against a per-text loop on tiny models, its frequencies, settings."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tiny_causal import tiny_llama, word_texts as _texts

from mlflow_mia.attacks import ATTACKS, AttackInputs
from mlflow_mia.attacks.dc_pdd import DcPddSettings, dc_pdd_score, first_occurrences
from mlflow_mia.audits.membership import run_audit
from mlflow_mia.config import AuditConfig, MetricConfig, SignalConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.signals import CausalLM, MaskedLM, SignalCache
from mlflow_mia.signals.testing import tiny_bert, tiny_gpt2
from mlflow_mia.signals.token_frequency import corpus_counts, load_counts
from mlflow_mia.signals.types import SignalResult


def _tokens(tok, text):
    enc = tok(text, return_special_tokens_mask=True)
    return enc["input_ids"], [i for i, s in zip(enc["input_ids"], enc["special_tokens_mask"]) if not s]


def brute_beta(model, tok, text, corpus, clip, *, masked=False) -> float:
    """Zhang et al.'s beta by loops: Laplace-smoothed corpus frequencies, each distinct token's first occurrence."""
    counts = {}
    for t in corpus:
        for i in _tokens(tok, t)[1]:
            counts[i] = counts.get(i, 0) + 1
    total, size = sum(counts.values()), len(tok)
    ids, plain = _tokens(tok, text)
    pairs = []
    with torch.no_grad():
        if masked:  # the PLL: each non-special token masked once
            for pos in [j for j, i in enumerate(ids) if i in plain and tok.convert_ids_to_tokens(i) not in tok.all_special_tokens]:
                x = torch.tensor([ids])
                x[0, pos] = tok.mask_token_id
                p = torch.softmax(model(x).logits[0, pos].double(), -1)[ids[pos]]
                pairs.append((ids[pos], float(p)))
        else:
            prob = torch.softmax(model(torch.tensor([ids])).logits[0].double(), -1)
            pairs = [(ids[t], float(prob[t - 1, ids[t]])) for t in range(1, len(ids))]
    seen, alphas = set(), []
    for i, p in pairs:
        if i in seen:
            continue
        seen.add(i)
        f = (counts.get(i, 0) + 1) / (total + size)
        alphas.append(min(p * np.log(1 / f), clip))
    return float(np.mean(alphas))


@pytest.fixture(scope="module")
def audit_data():
    texts = _texts(70, seed=8, low=4, high=12)
    return AuditDataset(texts=texts[:20], labels=[1] * 10 + [0] * 10), PopulationSet(texts=texts[20:60])


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert-pll"])
def test_audit_scores_equal_a_per_text_loop(audit_data, family, tmp_path):
    pool, population = audit_data
    model, tok = {"gpt2": lambda: tiny_gpt2(seed=1), "llama": tiny_llama, "bert-pll": lambda: tiny_bert(seed=2)}[family]()
    lm = MaskedLM(model, tok) if family == "bert-pll" else CausalLM(model, tok)
    config = AuditConfig(attacks=("loss", "dc_pdd"), metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=0),
                         signal=SignalConfig(kind="pll" if family == "bert-pll" else "causal"),
                         attack_settings={"dc_pdd": {"clip": 0.5}})
    result = run_audit(lm, pool, population, config=config, cache=SignalCache(tmp_path), progress=False)
    masked = family == "bert-pll"
    want = [brute_beta(model, tok, t, population.texts, 0.5, masked=masked) for t in pool.texts]
    np.testing.assert_allclose(result.samples["score_dc_pdd"], want, rtol=0, atol=1e-6)
    pop = list(population.texts)  # each population text against the corpus without itself
    pop_want = [brute_beta(model, tok, t, pop[:i] + pop[i + 1:], 0.5, masked=masked) for i, t in enumerate(pop)]
    np.testing.assert_allclose(result.population_scores["dc_pdd"], pop_want, rtol=0, atol=1e-6)
    assert list((tmp_path / "token_counts").glob("*.npy")), "the counts are kept beside the signal cache"


def test_a_frequency_file_replaces_the_population_counts(audit_data, tmp_path):
    pool, population = audit_data
    model, tok = tiny_gpt2(seed=1)
    corpus = ["the cat sat on the mat", "a dog ran to the bank"]
    path = tmp_path / "counts.json"
    path.write_text(json.dumps(corpus_counts(CausalLM(model, tok), corpus).tolist()))
    config = AuditConfig(attacks=("dc_pdd",), metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=0),
                         attack_settings={"dc_pdd": {"frequencies": str(path)}})
    result = run_audit(CausalLM(model, tok), pool, population, config=config, progress=False)
    want = [brute_beta(model, tok, t, corpus, 0.01) for t in pool.texts]
    np.testing.assert_allclose(result.samples["score_dc_pdd"], want, rtol=0, atol=1e-6)


def test_clipping_and_first_occurrences_by_hand():
    assert first_occurrences([4, 4, 2, 4, 2, 9]).tolist() == [True, False, True, False, False, True]
    # alpha = p log(1/f): 0.5 * log 4 = 0.693 (clipped to 0.1), 0.2 * log 4 = 0.277 (clipped); the repeat is skipped
    assert dc_pdd_score(np.log([0.5, 0.2, 0.9]), [1, 2, 1], np.log([0.25] * 3), 0.1) == pytest.approx(0.1)
    assert dc_pdd_score(np.log([0.01, 0.02]), [1, 2], np.log([0.25, 0.25]), 1.0) == pytest.approx(0.015 * np.log(4))


@pytest.mark.parametrize("fields,message", [({"clip": 0}, "dc_pdd clip must be a finite number > 0, got 0"),
                                            ({"clip": float("inf")}, "got inf"),
                                            ({"frequencies": "nowhere.npy"}, "must be 'population' or an existing"),
                                            ({"frequencies": "counts.csv"}, "got 'counts.csv'")])
def test_settings_are_checked(fields, message):
    with pytest.raises(ValueError, match=message):
        DcPddSettings(**fields)


def test_a_frequency_file_of_another_tokenizer_is_refused(tmp_path):
    path = tmp_path / "big.npy"
    np.save(path, np.ones(500, dtype=np.int64))
    with pytest.raises(ValueError, match="a table made with another tokenizer"):
        load_counts(str(path), 100)
    np.save(path, -np.ones(5, dtype=np.int64))
    with pytest.raises(ValueError, match="non-negative integers"):
        load_counts(str(path), 100)


def test_the_masked_energy_is_refused_by_name(audit_data):
    sig = SignalResult.from_arrays([2.0], n_tokens=[3], kind="energy")
    with pytest.raises(ValueError, match="DC-PDD is refused with signal='energy'"):
        ATTACKS["dc_pdd"]()(AttackInputs(("a",), target=sig, dc_pdd_beta=[0.1]))
    pool, population = audit_data
    config = AuditConfig(attacks=("dc_pdd",), metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=0))
    with pytest.raises(ValueError, match="DC-PDD is refused with signal='energy'"):
        run_audit(MaskedLM(*tiny_bert(seed=2)), pool, population, config=config, progress=False)
