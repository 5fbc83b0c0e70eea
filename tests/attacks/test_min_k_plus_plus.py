"""Min-K%++ (Zhang et al. 2024) on masked LMs: against a brute-force computation, its sign, settings and audit."""

import math

import numpy as np
import pytest
import torch

from mlflow_mia.attacks import ATTACKS, AttackInputs, get_attack, required_roles
from mlflow_mia.attacks.min_k_plus_plus import MinKPlusPlusAttack, MinKPlusPlusSettings, token_scores
from mlflow_mia.config import AuditConfig, MetricConfig, SignalConfig
from mlflow_mia.metrics.gate import Gate
from mlflow_mia.signals import MaskedLM, SignalResult, compute_signals
from mlflow_mia.signals import energy as energy_module
from mlflow_mia.signals.testing import tiny_bert, tiny_roberta

TEXTS = ["the cat sat on the mat", "the bank said profit growth was good this year", "a dog ran",
         "patient note : fever and pain , dose two mg a day for a week"]


@pytest.fixture(params=["bert", "roberta"])
def lm(request):
    model, tok = (tiny_bert if request.param == "bert" else tiny_roberta)(seed=4)
    return MaskedLM(model, tok)


def _brute_force_token_scores(lm, ids, positions) -> np.ndarray:
    """(log p(x_t) - mu_t) / sigma_t from the full softmax of one pass over ``ids`` masked at ``positions``."""
    masked = torch.tensor(ids)[None].clone()
    masked[0, positions] = lm.tokenizer.mask_token_id
    with torch.no_grad():
        logits = lm.model(input_ids=masked).logits[0, positions].double().numpy()
    logp = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) - logits.max(
        1, keepdims=True)
    p = np.exp(logp)
    mu = (p * logp).sum(1)
    sigma = np.sqrt((p * (logp - mu[:, None]) ** 2).sum(1))
    return (logp[np.arange(len(positions)), np.asarray(ids)[positions]] - mu) / sigma


@pytest.mark.parametrize("kind,fraction", [("energy", 0.2), ("energy", 0.5), ("pll", 0.2), ("pll", 1.0)])
def test_score_equals_explicit_per_position_computation(lm, kind, fraction, monkeypatch):
    seen = []
    original = energy_module.masked_token_logprobs

    def spy(lm_, ids, copies, **kw):
        seen.append([(ids[s], pos) for s, pos in copies])
        return original(lm_, ids, copies, **kw)

    monkeypatch.setattr(energy_module, "masked_token_logprobs", spy)
    expected, signals = [], []
    for text in TEXTS:  # one text per call: every copy the spy sees belongs to it, in mask order
        seen.clear()
        signals.append(compute_signals(lm, [text], SignalConfig(kind=kind, num_masks=5), progress=False))
        z = np.concatenate([_brute_force_token_scores(lm, ids, pos) for ids, pos in seen[0]])
        k = max(1, math.ceil(round(fraction * len(z), 9)))
        expected.append(np.sort(z)[:k].mean())
    sig = SignalResult.from_arrays(
        [s.values[0] for s in signals], n_tokens=[s.n_tokens[0] for s in signals],
        token_logprobs=[s.token_logprobs[0] for s in signals], token_mu=[s.token_mu[0] for s in signals],
        token_sigma=[s.token_sigma[0] for s in signals], kind=kind)
    got = MinKPlusPlusAttack(fraction=fraction)(AttackInputs(TEXTS, target=sig))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_token_at_the_mode_scores_higher_than_one_below_it():
    """Higher = member: a sample whose tokens sit above the distribution's mean log p outscores one below it."""
    member = SignalResult.from_arrays([0.0], n_tokens=[3], token_logprobs=[[-0.5, -0.4, -0.6]],
                                      token_mu=[[-2.0, -2.0, -2.0]], token_sigma=[[1.0, 1.0, 1.0]])
    other = SignalResult.from_arrays([0.0], n_tokens=[3], token_logprobs=[[-4.0, -3.0, -3.5]],
                                     token_mu=[[-2.0, -2.0, -2.0]], token_sigma=[[1.0, 1.0, 1.0]])
    attack = MinKPlusPlusAttack(fraction=1.0)
    assert attack(AttackInputs(("m",), target=member))[0] == pytest.approx(1.5)
    assert attack(AttackInputs(("o",), target=other))[0] == pytest.approx(-1.5)


def test_sigma_normalises_where_min_k_does_not():
    """Same log-probs, different spread: min_k ties, Min-K%++ ranks the peaked distribution's token higher."""
    lp = [[-1.0], [-1.0]]
    sig = SignalResult.from_arrays([0.0, 0.0], n_tokens=[1, 1], token_logprobs=lp, token_mu=[[-2.0], [-2.0]],
                                   token_sigma=[[0.5], [4.0]])
    inputs = AttackInputs(("a", "b"), target=sig)
    assert get_attack("min_k", fraction=1.0)(inputs).tolist() == [-1.0, -1.0]
    assert MinKPlusPlusAttack(fraction=1.0)(inputs).tolist() == [2.0, 0.25]


def test_zero_sigma_is_floored():
    assert token_scores([0.0, -1.0], [0.0, 0.0], [0.0, 0.0]).tolist() == [0.0, -1e6]


def test_signals_without_statistics_are_a_clear_error():
    sig = SignalResult.from_arrays([1.0], n_tokens=[2], token_logprobs=[[-1.0, -2.0]])
    with pytest.raises(ValueError, match="min_k_plus_plus needs the per-token statistics token_mu and token_sigma"):
        MinKPlusPlusAttack()(AttackInputs(("a",), target=sig))


def test_registered_with_its_settings_from_the_audit_config():
    assert ATTACKS["min_k_plus_plus"] is MinKPlusPlusAttack
    assert required_roles(["min_k_plus_plus"]) == {"target": ("min_k_plus_plus",)}
    assert get_attack("min_k_plus_plus").settings == MinKPlusPlusSettings(fraction=0.2)
    config = AuditConfig(attacks=("min_k_plus_plus",), metrics={"min_k_plus_plus_fraction": 0.4, "min_k_fraction": 0.3})
    assert get_attack("min_k_plus_plus", config).settings == MinKPlusPlusSettings(fraction=0.4)
    with pytest.raises(ValueError, match=r"min_k_plus_plus fraction must be in \(0, 1\], got 1.5"):
        MinKPlusPlusSettings(fraction=1.5)
    # The option is declared on MinKPlusPlusSettings: the parser checks it by its key, the attack when built.
    from mlflow_mia.options.audit import parse_options

    with pytest.raises(ValueError, match=r"^min_k_plus_plus_fraction must be a number in \(0, 1\], got 0$"):
        parse_options({"min_k_plus_plus_fraction": 0})
    with pytest.raises(ValueError, match=r"min_k_plus_plus fraction must be in \(0, 1\], got 0"):
        AuditConfig(attack_settings={"min_k_plus_plus": {"fraction": 0}})


def test_cli_accepts_the_attack_and_its_k():
    from mlflow_mia.entrypoints.cli import build_parser

    parser = build_parser()
    audit = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices["audit"]
    assert "--min-k-plus-plus-fraction" in audit.format_help()
    args = parser.parse_args(["audit", "--attacks", "min_k_plus_plus,min_k", "--min-k-plus-plus-fraction", "0.3"])
    assert args.attacks in ("min_k_plus_plus,min_k", ("min_k_plus_plus", "min_k"), ["min_k_plus_plus", "min_k"])
    assert args.min_k_plus_plus_fraction in (0.3, "0.3")


def test_audit_reports_the_metrics_of_every_attack_and_the_gate_checks_it():
    from mlflow_mia.audits.membership import run_audit
    from mlflow_mia.data import AuditDataset, PopulationSet
    from mlflow_mia.signals.testing import WORDS

    rng = np.random.default_rng(0)
    words = [w for w in WORDS if w.isalpha()]
    texts = list(dict.fromkeys(" ".join(rng.choice(words, size=int(rng.integers(4, 10)))) for _ in range(80)))
    pool = AuditDataset(texts=texts[:30], labels=[1] * 15 + [0] * 15)
    population = PopulationSet(texts=texts[30:70])
    config = AuditConfig(attacks=("min_k_plus_plus", "min_k"), signal=SignalConfig(num_masks=2),
                         metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=20))
    result = run_audit(MaskedLM(*tiny_bert(seed=1)), pool, population, config=config, progress=False)
    ours = {k.split("/", 1)[1] for k in result.metrics if k.startswith("min_k_plus_plus/")}
    theirs = {k.split("/", 1)[1] for k in result.metrics if k.startswith("min_k/")}
    assert ours == theirs and {"auc", "auc_ci_low", "tpr_at_fpr_0.1_upper", "threshold_at_pop_fpr_0.1",
                               "epsilon_lower_bound"} <= ours
    assert 0.0 <= result.metrics["min_k_plus_plus/auc"] <= 1.0
    assert result.metrics["min_k_plus_plus/auc"] != result.metrics["min_k/auc"]
    checked = Gate.parse("0.1:0.99").check(result.metrics, confidence=0.95).checks[0]["points"]
    assert "min_k_plus_plus/tpr_at_fpr_0.1" in {p["metric"] for p in checked}
