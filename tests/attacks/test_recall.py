"""ReCaLL (Xie et al. 2024) on tiny causal LMs: an audit's scores against a per-text loop, its prefix, settings, refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_causal import tiny_llama, word_texts as _texts

from mlflow_mia.attacks import ATTACKS, AttackInputs, gate_attacks
from mlflow_mia.attacks.recall import RecallSettings, prefix_rows
from mlflow_mia.audits.membership import run_audit
from mlflow_mia.config import AuditConfig, MetricConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.signals import CausalLM, MaskedLM
from mlflow_mia.signals.conditional import conditional_loglik, fit_prefix
from mlflow_mia.signals.testing import tiny_bert, tiny_gpt2
from mlflow_mia.signals.types import SignalResult


def _logp(model, ids):
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)


def brute_recall(model, tok, text, shots) -> float:
    """LL(x | P) / LL(x), one unbatched pass each, float64 softmax: P the shots joined, BOS once, prefix unscored."""
    ids = tok(text)["input_ids"]
    ll = float(_logp(model, ids)[:-1].gather(1, torch.tensor(ids[1:])[:, None]).mean())
    prefix = tok("".join(shots))["input_ids"]
    part = ids[1:] if ids[0] == tok.bos_token_id and tok("a")["input_ids"][0] == tok.bos_token_id else ids
    seq = prefix + part
    logp = _logp(model, seq)
    p = len(prefix)
    cond = float(logp[p - 1:-1].gather(1, torch.tensor(seq[p:])[:, None]).mean())
    return cond / ll


@pytest.fixture(scope="module")
def audit_data():
    texts = _texts(60, seed=5)
    return AuditDataset(texts=texts[:20], labels=[1] * 10 + [0] * 10), PopulationSet(texts=texts[20:50])


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_audit_scores_equal_a_per_text_loop(audit_data, family):
    pool, population = audit_data
    model, tok = tiny_gpt2(seed=1) if family == "gpt2" else tiny_llama()
    config = AuditConfig(attacks=("loss", "recall"), metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=0),
                         attack_settings={"recall": {"shots": 3, "seed": 7}})
    result = run_audit(CausalLM(model, tok), pool, population, config=config, progress=False)
    shots = [population.texts[i] for i in prefix_rows(len(population), 3, 7)]
    want = [brute_recall(model, tok, t, shots) for t in pool.texts]
    np.testing.assert_allclose(result.samples["score_recall"], want, rtol=0, atol=1e-6)
    pop_want = np.array([brute_recall(model, tok, t, shots) for t in population.texts])
    used = prefix_rows(len(population), 3, 7)
    pop_want[used] = np.nan  # a prefix text is not scored after itself
    np.testing.assert_allclose(result.population_scores["recall"], pop_want, rtol=0, atol=1e-6)
    assert result.metrics["recall/n_unscored"] == 3
    assert result.info["attack_settings"]["recall"] == {"shots": 3, "seed": 7, "shots_used": 3,
                                                        "prefix_population_rows": sorted(int(i) for i in used)}


def test_batching_does_not_change_the_conditional_loglik():
    lm = CausalLM(*tiny_gpt2(seed=2))
    texts = _texts(12, seed=3, low=2, high=12)
    shots = ["the old bank said .", "a red hat"]
    batched = conditional_loglik(lm, texts, shots).values
    alone = [conditional_loglik(lm, [t], shots).values[0] for t in texts]
    np.testing.assert_allclose(batched, alone, rtol=0, atol=1e-6)


def test_shots_that_do_not_fit_are_dropped_from_the_front_and_one_that_cannot_is_refused():
    lm = CausalLM(*tiny_gpt2(seed=2))  # 64 positions
    long_shot = " ".join(["cat"] * 60)
    res = conditional_loglik(lm, ["the cat sat on the mat"], [long_shot, "a dog ran ."])
    # both shots: 63 tokens ("cat" x 59, "cata" unknown, "dog ran ."), + 6 of the text > 64: the first is dropped
    assert (res.n_shots, res.prefix_tokens) == (1, 4)
    with pytest.raises(ValueError, match="ReCaLL's prefix does not fit: one shot needs 60 tokens"):
        fit_prefix(lm, [" ".join(["cat"] * 60)], room=58)


def test_the_ratio_is_the_papers_higher_is_member_orientation():
    sig = SignalResult.from_arrays([2.0, 4.0], n_tokens=[3, 3], kind="causal")
    # LL(x) = -2, LL(x|P) = -3: the prefix lowered the likelihood by half -> 1.5; -4 vs -4 -> 1.0
    got = ATTACKS["recall"]()(AttackInputs(("a", "b"), target=sig, recall_conditional=[-3.0, -4.0]))
    assert got.tolist() == [1.5, 1.0]


@pytest.mark.parametrize("fields,message", [({"shots": 0}, "recall shots must be an int >= 1, got 0"),
                                            ({"shots": 2.5}, "recall shots must be an int >= 1, got 2.5"),
                                            ({"seed": -1}, "recall seed must be an int >= 0, got -1"),
                                            ({"shots": True}, "recall shots must be an int >= 1, got True")])
def test_settings_are_checked(fields, message):
    with pytest.raises(ValueError, match=message):
        RecallSettings(**fields)


def test_more_shots_than_the_population_allows_is_refused():
    with pytest.raises(ValueError, match="ReCaLL draws 5 prefix texts from a population of 5"):
        prefix_rows(5, 5, 0)


def test_a_masked_target_is_refused_by_name_before_any_model_runs(audit_data):
    pool, population = audit_data
    config = AuditConfig(attacks=("loss", "recall"), metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=0))
    with pytest.raises(ValueError, match=r"attack\(s\) \['recall'\] need a causal LM target"):
        run_audit(MaskedLM(*tiny_bert(seed=1)), pool, population, config=config, progress=False)
    sig = SignalResult.from_arrays([2.0], n_tokens=[3], kind="energy")
    with pytest.raises(ValueError, match="attack 'recall' needs a causal LM target"):
        ATTACKS["recall"]()(AttackInputs(("a",), target=sig, recall_conditional=[-1.0]))


def test_recall_dc_pdd_and_grad_norm_join_no_gate_unasked():
    for k in (0, 1, 4):
        assert not {"recall", "dc_pdd", "grad_norm"} & set(gate_attacks(k, shadow_membership=True))
    assert all(ATTACKS[a].gate_min_references is None for a in ("recall", "dc_pdd", "grad_norm"))
