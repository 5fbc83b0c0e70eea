"""EZ-MIA (Ilić et al. 2026) and WBC (Chen et al. 2026) against brute-force per-text loops on tiny random models."""

import copy

import numpy as np
import pytest
import torch

from mlflow_mia.attacks import ATTACKS, AttackInputs, required_token_quantities
from mlflow_mia.attacks.ez_mia import EzMiaAttack, ez_score
from mlflow_mia.attacks.wbc import AUTHORS_WINDOWS, WbcAttack, WbcSettings, geometric_windows, wbc_score
from mlflow_mia.config import SignalConfig
from mlflow_mia.signals import MaskedLM, SignalResult, compute_signals
from mlflow_mia.signals import energy as energy_module
from mlflow_mia.signals.causal import compute_causal_signals
from mlflow_mia.signals.causal_model import CausalLM
from mlflow_mia.signals.testing import tiny_bert, tiny_gpt2

TEXTS = ["the cat sat on the mat", "a dog ran", "bank loan rate market profit growth shares firm said year",
         "patient note doctor pain", "one two", "the bank said profit growth was good this year and the next"]
CAUSAL = SignalConfig(kind="causal")
SMALL_WINDOWS = (1, 2, 3, 5, 40)  # 40 exceeds every text here: clamped to the text's length


@pytest.fixture(scope="module")
def causal_pair():
    target = CausalLM(*tiny_gpt2(seed=3), name="target")
    reference = CausalLM(*tiny_gpt2(target.tokenizer, seed=7), name="reference")
    return target, reference


def _causal_brute_force(lm, text):
    """log p(x_t | x_<t) and whether x_t is the argmax, t = 2..n, from one unbatched pass in float64."""
    ids = lm.tokenizer(text)["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(lm.model(torch.tensor([ids])).logits[0].double(), dim=-1)[:-1]
    nxt = torch.tensor(ids[1:])
    return logp.gather(1, nxt[:, None]).squeeze(1).numpy(), (logp.argmax(-1) == nxt).numpy()


def _ez_loop(delta, top1):
    """The paper's P and N over the error positions by a plain loop, as P / (P + N) with the module's edge rules."""
    up = down = 0.0
    n_errors = 0
    for d, first in zip(delta, top1):
        if not first:
            n_errors += 1
            up += d if d > 0 else 0.0
            down += -d if d < 0 else 0.0
    if n_errors == 0 or (down == 0 and up > 0):
        return 1.0
    return 0.5 if up + down == 0 else up / (up + down)


def _wbc_loop(delta, windows):
    """Mean over sizes of the fraction of windows with a positive sum, every window summed by a loop."""
    per_size = []
    for w in windows:
        w = min(w, len(delta))
        sums = [sum(delta[i:i + w]) for i in range(len(delta) - w + 1)]
        per_size.append(sum(s > 0 for s in sums) / len(sums))
    return sum(per_size) / len(per_size)


def _inputs(target_signals, reference_signals, texts=TEXTS):
    return AttackInputs(tuple(texts), target=target_signals, reference=reference_signals)


def test_causal_scores_equal_brute_force_loops(causal_pair):
    target, reference = causal_pair
    inputs = _inputs(compute_causal_signals(target, TEXTS, CAUSAL, progress=False),
                     compute_causal_signals(reference, TEXTS, CAUSAL, progress=False))
    ez_expected, wbc_expected, n_errors = [], [], 0
    for text in TEXTS:
        (lp_t, top1), (lp_r, _) = _causal_brute_force(target, text), _causal_brute_force(reference, text)
        delta = list(lp_t - lp_r)
        n_errors += int((~top1).sum())
        ez_expected.append(_ez_loop(delta, top1))
        wbc_expected.append(_wbc_loop(delta, SMALL_WINDOWS))
    assert 0 < n_errors  # the random target ranks most tokens below others: error positions exist
    np.testing.assert_allclose(EzMiaAttack()(inputs), ez_expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(WbcAttack(windows=SMALL_WINDOWS)(inputs), wbc_expected, rtol=0, atol=1e-6)
    default = [_wbc_loop(list(_causal_brute_force(target, t)[0] - _causal_brute_force(reference, t)[0]),
                         geometric_windows(2, 40, 10)) for t in TEXTS]
    np.testing.assert_allclose(WbcAttack()(inputs), default, rtol=0, atol=1e-6)


def test_a_target_fine_tuned_on_some_texts_ranks_them_above_the_others(causal_pair):
    _, reference = causal_pair
    members, others = TEXTS[::2], TEXTS[1::2]
    model = copy.deepcopy(reference.model)
    torch.manual_seed(0)
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(15):
        for text in members:
            ids = torch.tensor([reference.tokenizer(text)["input_ids"]])
            optimiser.zero_grad()
            model(input_ids=ids, labels=ids).loss.backward()
            optimiser.step()
    model.eval()
    tuned = CausalLM(model, reference.tokenizer, name="tuned")
    texts = members + others
    inputs = _inputs(compute_causal_signals(tuned, texts, CAUSAL, progress=False),
                     compute_causal_signals(reference, texts, CAUSAL, progress=False), texts)
    for attack in (EzMiaAttack(), WbcAttack()):
        scores = attack(inputs)
        assert scores[:len(members)].min() > scores[len(members):].max(), (attack.name, scores)


@pytest.fixture(scope="module")
def masked_pair():
    target_model, tok = tiny_bert(seed=4)
    return MaskedLM(target_model, tok), MaskedLM(tiny_bert(tok, seed=9)[0], tok)


def _masked_brute_force(lm, ids, positions):
    """log p of the original tokens at ``positions`` masked together, and whether each is the argmax (float64)."""
    masked = torch.tensor(ids)[None].clone()
    masked[0, positions] = lm.tokenizer.mask_token_id
    with torch.no_grad():
        logp = torch.log_softmax(lm.model(input_ids=masked).logits[0, positions].double(), dim=-1)
    original = torch.tensor(np.asarray(ids)[positions])
    return logp.gather(1, original[:, None]).squeeze(1).numpy(), (logp.argmax(-1) == original).numpy()


@pytest.mark.parametrize("kind", ["energy", "pll"])
def test_masked_scores_equal_brute_force_loops_under_the_same_masks(masked_pair, kind, monkeypatch):
    seen = []
    original = energy_module.masked_token_logprobs

    def spy(lm_, ids, copies, **kw):
        seen.append([(ids[s], pos) for s, pos in copies])
        return original(lm_, ids, copies, **kw)

    monkeypatch.setattr(energy_module, "masked_token_logprobs", spy)
    config = SignalConfig(kind=kind, num_masks=4)
    target, reference = masked_pair
    rows, ez_expected, wbc_expected = {"t": [], "r": []}, [], []
    for text in TEXTS:  # one text per call: every copy the spy sees belongs to it, in mask order
        seen.clear()
        rows["t"].append(compute_signals(target, [text], config, progress=False, stats=True))
        rows["r"].append(compute_signals(reference, [text], config, progress=False))
        assert [p.tolist() for _, p in seen[0]] == [p.tolist() for _, p in seen[1]]  # the same masks
        per_mask = [(_masked_brute_force(target, ids, pos), _masked_brute_force(reference, ids, pos))
                    for ids, pos in seen[0]]
        delta = list(np.concatenate([t[0] - r[0] for t, r in per_mask]))
        ez_expected.append(_ez_loop(delta, np.concatenate([t[1] for t, _ in per_mask])))
        wbc_expected.append(_wbc_loop(delta, SMALL_WINDOWS))

    def joined(results, **extra):
        return SignalResult.from_arrays([r.values[0] for r in results], n_tokens=[r.n_tokens[0] for r in results],
                                        token_logprobs=[r.token_logprobs[0] for r in results], kind=kind, **extra)

    inputs = _inputs(joined(rows["t"], token_top1=[r.token_top1[0] for r in rows["t"]]), joined(rows["r"]))
    np.testing.assert_allclose(EzMiaAttack()(inputs), ez_expected, rtol=0, atol=1e-6)
    if kind == "pll":  # every token masked once, in text order: windows are spans of the text
        np.testing.assert_allclose(WbcAttack(windows=SMALL_WINDOWS)(inputs), wbc_expected, rtol=0, atol=1e-6)
    else:
        with pytest.raises(ValueError, match="wbc slides windows.*energy's log-probs are of K random masks.*"
                                             "signal='pll'"):
            WbcAttack()(inputs)


def _sig(logprobs, kind="causal", **extra):
    return SignalResult.from_arrays([0.0] * len(logprobs), n_tokens=[len(x) for x in logprobs],
                                    token_logprobs=logprobs, kind=kind, **extra)


def test_edge_cases_of_the_error_zone():
    # no error position; N = 0 < P; P = N = 0; only downward shifts; one error position up
    target = _sig([[-1.0, -1.0], [-1.0, -1.0], [-2.0, -2.0], [-3.0, -3.0], [-1.0, -5.0]],
                  token_top1=[[True, True], [False, False], [False, False], [False, False], [False, True]])
    reference = _sig([[-2.0, -2.0], [-2.0, -1.0], [-2.0, -2.0], [-2.0, -2.0], [-2.0, -1.0]])
    scores = EzMiaAttack()(AttackInputs(tuple("abcde"), target=target, reference=reference))
    assert scores.tolist() == [1.0, 1.0, 0.5, 0.0, 1.0]
    assert ez_score([0.5, -1.5, 9.0], [False, False, True]) == pytest.approx(0.25)  # P / (P + N) = r / (1 + r)


def test_window_votes_and_clamping():
    assert wbc_score([2.0, -1.0, 0.0, 2.0], [2]) == pytest.approx(2 / 3)  # sums 1, -1, 2
    assert wbc_score([1.0, 1.0, -5.0], [10, 20]) == 0.0  # both sizes clamp to one window over the text, sum -3
    assert wbc_score([1.0, -1.0], [2]) == 0.0  # a zero sum votes non-member
    assert geometric_windows(2, 40, 10) != AUTHORS_WINDOWS and len(AUTHORS_WINDOWS) == 10
    with pytest.raises(ValueError, match="at least one scored token"):
        wbc_score([], [2])
    with pytest.raises(ValueError, match="w_min <= w_max"):
        geometric_windows(5, 3, 4)


def test_errors_name_the_problem_and_the_fix():
    reference = _sig([[-1.0, -2.0]])
    with pytest.raises(ValueError, match="ez_mia needs the target's per-token top1 flags.*token_top1="):
        EzMiaAttack()(AttackInputs(("a",), target=_sig([[-1.0, -2.0]]), reference=reference))
    shorter = _sig([[-1.0]], token_top1=[[False]])
    for attack in (EzMiaAttack(), WbcAttack()):
        with pytest.raises(ValueError, match=f"{attack.name}: row 0 has 1 scored token.*2 under the reference.*"
                                             "target's tokenizer"):
            attack(AttackInputs(("a",), target=shorter, reference=reference))
        with pytest.raises(ValueError, match="the target's signals are 'pll' and the reference's 'causal'"):
            attack(AttackInputs(("a",), target=_sig([[-1.0, -2.0]], "pll", token_top1=[[False, True]]),
                                reference=reference))
        with pytest.raises(ValueError, match=rf"attack '{attack.name}' needs \['reference'\]"):
            attack(AttackInputs(("a",), target=_sig([[-1.0, -2.0]], token_top1=[[False, True]])))
    with pytest.raises(ValueError, match=r"wbc windows must be one or more sizes >= 1, got \(2, 0\)"):
        WbcSettings(windows=(2, 0))
    with pytest.raises(ValueError, match="token_top1\\[0\\] has shape \\(1,\\).*one statistic per scored token"):
        _sig([[-1.0, -2.0]], token_top1=[[True]])


def test_registered_against_a_reference_with_the_target_statistics():
    assert ATTACKS["ez_mia"] is EzMiaAttack and ATTACKS["wbc"] is WbcAttack
    assert required_token_quantities(["ez_mia"])["target"] == ("token_stats",)
    assert "target" not in required_token_quantities(["wbc"])  # WBC reads the log-probs alone
    assert EzMiaAttack.requires == WbcAttack.requires == ("target", "reference")


def test_window_sizes_are_an_audit_option_and_neither_attack_joins_a_gate_unasked():
    from mlflow_mia.attacks import gate_attacks, get_attack
    from mlflow_mia.config import AuditConfig

    config = AuditConfig.from_dict({"attacks": ["wbc", "ez_mia"], "metrics": {"wbc_windows": [2, 3]}})
    assert get_attack("wbc", config).settings.windows == (2, 3)
    assert config.to_dict()["metrics"]["wbc_windows"] == (2, 3)  # logged as the param metrics.wbc_windows
    assert get_attack("wbc", AuditConfig()).settings.windows == geometric_windows(2, 40, 10)
    for k in (0, 1, 4):
        assert not {"ez_mia", "wbc"} & set(gate_attacks(k, shadow_membership=True))
