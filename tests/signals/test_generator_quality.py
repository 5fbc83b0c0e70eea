import logging
import random

import numpy as np
import pytest
import torch

from mlflow_mia.audits.membership import run_audit
from mlflow_mia.config import AuditConfig, MetricConfig, NeighbourhoodConfig, SignalConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.audits.membership.report import render_report
from mlflow_mia.signals import MaskedLM
from mlflow_mia.signals.generator_quality import (WARNING_TEXT, GeneratorEvidence, check_generator, generator_accuracy,
                                                  judge_generator, loss_gap, neighbour_shift_over_gap)
from mlflow_mia.signals.neighbours import replaceable_words
from mlflow_mia.signals.testing import WORDS, tiny_bert

ALPHA = [w for w in WORDS if w.isalpha()]


def sentences(n, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(ALPHA) for _ in range(rng.randint(5, 10))) for _ in range(n)]


def always_predicts(word):
    """A tiny BERT whose MLM head puts all mass on ``word``, whatever the context."""
    model, tok = tiny_bert(seed=0)
    with torch.no_grad():
        model.cls.predictions.bias.zero_()
        model.cls.predictions.bias[tok.convert_tokens_to_ids(word)] = 1e4
    return model, tok


def test_accuracy_is_the_hand_count_of_words_equal_to_the_only_prediction():
    model, tok = always_predicts("the")
    texts = ["the cat sat on the mat .", "a dog ran", "the the bank"]
    # replaceable words: 6 + 3 + 3 = 12, of which "the" 2 + 0 + 2 = 4
    acc, n = generator_accuracy((model, tok), texts, n_texts=10)
    assert n == 12
    assert acc == pytest.approx(4 / 12)


def test_accuracy_matches_one_forward_pass_per_masked_word():
    model, tok = tiny_bert(seed=3)
    texts = sentences(12, seed=1)
    acc, n = generator_accuracy((model, tok), texts, n_texts=12, token_budget=64)
    ids, words = replaceable_words(tok, texts, max_length=64)
    hits = total = 0
    with torch.no_grad():
        for x, ws in zip(ids, words):
            for w in ws:
                masked = torch.tensor(x)[None].clone()
                masked[0, w.position] = tok.mask_token_id
                hits += int(model(input_ids=masked).logits[0, w.position].argmax() == x[w.position])
                total += 1
    assert n == total
    assert acc == pytest.approx(hits / total)


def test_accuracy_samples_texts_with_a_seed():
    model, tok = tiny_bert(seed=0)
    texts = sentences(30, seed=2)
    a = generator_accuracy((model, tok), texts, n_texts=5, seed=7)
    assert a == generator_accuracy((model, tok), texts, n_texts=5, seed=7)
    assert a[1] < sum(len(w) for w in replaceable_words(tok, texts, max_length=64)[1])


def test_shift_over_gap_is_the_hand_count():
    sample = np.array([1.0, 2.0, 5.0])
    neighbours = [np.array([1.2, 3.0]), np.array([]), np.array([5.4, 4.0, 5.5])]
    # shifts: 0.2, 2.0 | - | 0.4, 1.0, 0.5 ; gap 0.45 -> 2.0, 1.0, 0.5 exceed it: 3 of 5
    frac, median, n = neighbour_shift_over_gap(sample, neighbours, gap=0.45)
    assert (frac, n) == (pytest.approx(3 / 5), 5)
    assert median == pytest.approx(0.5)
    assert np.isnan(neighbour_shift_over_gap(sample, [np.array([])] * 3, gap=0.1)[0])


def test_loss_gap_is_the_absolute_difference_of_class_means():
    assert loss_gap(np.array([1.0, 3.0, 4.0, 8.0]), np.array([1, 1, 0, 0])) == pytest.approx(4.0)


def test_judge_reads_only_the_evidence_and_the_pool_values():
    evidence = GeneratorEvidence(accuracy=0.2, n_words=10, rows=np.array([0, 2]),
                                 neighbour_values=(np.array([1.2, 3.0]), np.array([5.4, 4.0, 5.5])))
    values, labels = np.array([1.0, 9.0, 5.0, 2.0]), np.array([1, 1, 0, 0])
    # gap |mean(1, 9) - mean(5, 2)| = 1.5; shifts 0.2, 2.0 | 0.4, 1.0, 0.5: one of five exceeds it
    quality = judge_generator(evidence, values, labels)
    assert (quality.gap, quality.n_neighbours, quality.n_words) == (1.5, 5, 10)
    assert quality.shift_over_gap == pytest.approx(0.2) and quality.median_shift == pytest.approx(0.5)
    assert quality.problems == ["generator top-1 accuracy 0.200 < 0.3"]
    assert judge_generator(evidence, values, labels, min_accuracy=0.1).passed


@pytest.fixture(scope="module")
def random_setup():
    texts = sentences(140, seed=0)
    target, tok = tiny_bert(seed=0)
    generator, _ = tiny_bert(tok, seed=5)  # random weights, random head
    pool = AuditDataset(texts=texts[:40], labels=[1] * 20 + [0] * 20)
    return MaskedLM(target, tok, name="target"), MaskedLM(generator, tok, name="random-generator"), pool, \
        PopulationSet(texts=texts[40:])


CONFIG = AuditConfig(attacks=("loss", "neighbourhood"), signal=SignalConfig(num_masks=2),
                     neighbourhood=NeighbourhoodConfig(num_neighbours=4),
                     metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=0))


def test_random_generator_fails_the_check(random_setup, caplog):
    target, generator, pool, population = random_setup
    from mlflow_mia.signals import compute_signals

    energy = compute_signals(target, list(pool.texts), CONFIG.signal, progress=False).values
    with caplog.at_level(logging.WARNING):
        q = check_generator(target, generator, list(pool.texts), pool.labels, energy, list(population.texts),
                            config=CONFIG, n_texts=20)
    assert q.accuracy < 0.1  # a random head over ~90 tokens
    assert q.n_neighbours > 0 and 0 <= q.shift_over_gap <= 1
    assert not q.passed and WARNING_TEXT in q.warning()
    assert WARNING_TEXT in caplog.text
    lenient = check_generator(target, generator, list(pool.texts), pool.labels, energy, list(population.texts),
                              config=CONFIG, n_texts=20, min_accuracy=0.0, max_shift_over_gap=1.0)
    assert lenient.passed and lenient.warning() is None


def test_audit_with_random_generator_warns_in_result_report_and_metrics(random_setup):
    target, generator, pool, population = random_setup
    res = run_audit(target, pool, population, generator=generator, config=CONFIG, progress=False)
    assert any(WARNING_TEXT in w for w in res.warnings)
    assert WARNING_TEXT in render_report(res)
    assert res.metrics["neighbourhood/generator_accuracy"] < 0.1
    assert 0 <= res.metrics["neighbourhood/neighbour_shift_over_gap"] <= 1
    assert res.metrics["neighbourhood/generator_check_passed"] == 0.0


def test_audit_without_neighbourhood_runs_no_check(random_setup):
    target, _, pool, population = random_setup
    res = run_audit(target, pool, population, config=AuditConfig(attacks=("loss",), signal=SignalConfig(num_masks=2),
                                                                  metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=0)),
                    progress=False)
    assert not any(k.startswith("neighbourhood/") for k in res.metrics)
