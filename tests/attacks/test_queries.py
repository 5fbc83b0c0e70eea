"""Per-mask queries (attacks/queries.py) and lira_online / lira_offline over them, against hand computations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from mlflow_mia.attacks import AttackInputs, get_attack
from mlflow_mia.attacks.queries import mask_energies, per_text_mean
from mlflow_mia.config import AuditConfig, SignalConfig
from mlflow_mia.signals.types import SignalResult

L = 2  # masked tokens per mask: T = 10 tokens at the default rate 0.15 -> ceil(1.5) = 2
Q = 3  # masks per text


def _signal(cells):
    """An energy signal whose text i has masks with energies cells[i] (each split over L tokens)."""
    cells = np.asarray(cells, dtype=np.float64)
    logprobs = [np.repeat(-row / L, L) for row in cells]
    return SignalResult.from_arrays(cells.mean(axis=1), n_tokens=np.full(len(cells), 10), token_logprobs=logprobs)


def _world(n, k, seed):
    rng = np.random.default_rng(seed)
    mu = rng.normal(30.0, 3.0, size=(n, Q))  # each (text, mask) its own mean
    member = rng.uniform(size=(n, k)).argsort(axis=1) < k // 2
    shadows = mu[None] + rng.normal(0, 1.0, size=(k, n, Q)) - 1.0 * member.T[:, :, None]
    target = mu + rng.normal(0, 1.0, size=(n, Q))
    return target, shadows, member


def test_mask_energies_are_the_masks_of_the_energy_of_a_real_model():
    from mlflow_mia.signals import MaskedLM
    from mlflow_mia.signals.energy import compute_signals
    from mlflow_mia.signals.testing import tiny_bert

    model, tok = tiny_bert(seed=0)
    lm = MaskedLM(model, tok, name="tiny")
    texts = ["the cat sat on the mat and the dog ran to the bank", "a new drug dose of five mg a day for a week"]
    three = compute_signals(lm, texts, SignalConfig(num_masks=3), progress=False)
    one = compute_signals(lm, texts, SignalConfig(num_masks=1), progress=False)
    values, rows = mask_energies(three, mask_rate=0.15)
    assert rows.tolist() == [0, 0, 0, 1, 1, 1]
    np.testing.assert_allclose(values[[0, 3]], one.values, rtol=1e-5)  # mask 1 of 3 is the one mask of K=1
    np.testing.assert_allclose(per_text_mean(values, rows, 2), three.values, rtol=1e-5)
    with pytest.raises(ValueError, match="check mask_rate and energy_reduction|do not split into masks"):
        mask_energies(three, mask_rate=0.5)
    with pytest.raises(ValueError, match="per-mask queries need the masked energy"):
        mask_energies(SignalResult.from_arrays([1.0], n_tokens=[3], kind="pll"), mask_rate=0.15)


def test_lira_online_over_mask_queries_averages_the_per_mask_log_likelihood_ratios():
    target, shadows, member = _world(20, 6, seed=0)
    pop_target, pop_shadows, pop_member = _world(30, 6, seed=1)
    population = AttackInputs(["p"] * 30, population="self", target=_signal(pop_target),
                              references=[_signal(s) for s in pop_shadows], shadow_membership=pop_member)
    pool = AttackInputs(["x"] * 20, population=population, target=_signal(target),
                        references=[_signal(s) for s in shadows], shadow_membership=member)
    # global spreads pooled over the population's (text, mask) cells, IN and OUT apart
    ss = {True: 0.0, False: 0.0}
    dof = {True: 0, False: 0}
    for i in range(30):
        for q in range(Q):
            for side in (True, False):
                v = pop_shadows[pop_member[i] == side, i, q]
                ss[side] += np.sum((v - v.mean()) ** 2)
                dof[side] += len(v) - 1
    sigma_in, sigma_out = np.sqrt(ss[True] / dof[True]), np.sqrt(ss[False] / dof[False])
    by_hand = []
    for i in range(20):
        llr = [norm.logpdf(-target[i, q], -shadows[member[i], i, q].mean(), sigma_in)
               - norm.logpdf(-target[i, q], -shadows[~member[i], i, q].mean(), sigma_out) for q in range(Q)]
        by_hand.append(np.mean(llr))
    attack = get_attack("lira_online", per_mask_queries=True)
    np.testing.assert_allclose(attack(pool), by_hand, atol=2e-5)  # token log-probs are float32
    assert attack.record(pool)["per_mask_queries"] is True
    assert attack.record(pool)["global_spread_in"] == pytest.approx(sigma_in, rel=1e-5)
    # off (the default): one query per text, the mean energy
    assert not np.allclose(get_attack("lira_online")(pool), by_hand)


def test_lira_offline_over_mask_queries_averages_the_per_mask_z_values_and_reads_the_audit_config():
    target, shadows, _ = _world(15, 3, seed=2)
    inputs = AttackInputs(["x"] * 15, target=_signal(target), references=[_signal(s) for s in shadows])
    cells = shadows.reshape(3, -1)  # (k, text * mask)
    sigma = np.sqrt(np.mean(np.var(cells, axis=0, ddof=1)))
    by_hand = ((shadows.mean(axis=0) - target) / sigma).mean(axis=1)
    np.testing.assert_allclose(get_attack("lira_offline", per_mask_queries=True)(inputs), by_hand, atol=2e-5)
    config = AuditConfig(signal=SignalConfig(mask_rate=0.3, energy_reduction="mean"))
    settings = get_attack("lira_offline", config).settings
    assert (settings.mask_rate, settings.energy_reduction, settings.per_mask_queries) == (0.3, "mean", False)
