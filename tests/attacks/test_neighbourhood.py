import doctest

import numpy as np
import pytest

from mlflow_mia.attacks import ATTACKS, AttackInputs, get_attack
from mlflow_mia.attacks import neighbourhood as neighbourhood_module
from mlflow_mia.signals import generator_quality as gq
from mlflow_mia.audits.membership import run_audit
from mlflow_mia.config import AuditConfig
from mlflow_mia.data import AuditDataset, PopulationSet, text_hash
from mlflow_mia.signals import MaskedLM
from mlflow_mia.signals import neighbours as nb_module
from mlflow_mia.signals.testing import WORDS, tiny_bert
from mlflow_mia.signals.types import SignalResult


def _sig(energy):
    energy = np.asarray(energy, dtype=np.float64)
    return SignalResult(energy, (), np.full(len(energy), 5), np.zeros(len(energy), bool))


def test_registered_with_its_requirements():
    assert ATTACKS["neighbourhood"] is neighbourhood_module.NeighbourhoodAttack
    attack = get_attack("neighbourhood")
    assert attack.requires == ("target", "neighbour_values") and attack.higher_is_member
    assert "Mattern" in attack.citation


def test_score_is_neighbour_mean_minus_target_energy_higher_is_member():
    # sample 0: far below its neighbours (member-like); sample 1: like its neighbours
    inputs = AttackInputs(("a", "b", "c"), target=_sig([1.0, 4.0, 2.0]), neighbour_values=np.array([5.0, 4.0, np.nan]))
    scores = get_attack("neighbourhood")(inputs)
    assert scores[0] == 4.0 and scores[1] == 0.0 and np.isnan(scores[2])
    assert scores[0] > scores[1]


def test_missing_neighbour_values_says_so():
    with pytest.raises(ValueError, match=r"needs \['neighbour_values'\]; neighbour values are computed by the audit"):
        get_attack("neighbourhood")(AttackInputs(("a",), target=_sig([1.0])))


def test_docstring_examples():
    assert doctest.testmod(neighbourhood_module).failed == 0


def _texts(n, seed):
    rng = np.random.default_rng(seed)
    vocab = [w for w in WORDS if w.isalpha()]
    return [" ".join(rng.choice(vocab, size=rng.integers(4, 9))) for _ in range(n)]


@pytest.fixture(scope="module")
def data():
    texts = list(dict.fromkeys(_texts(60, 0)))
    pool_texts = texts[:16] + ["12 , 34 ."]  # the last one has no replaceable word
    labels = [1] * 8 + [0] * 9
    pool = AuditDataset(tuple(pool_texts), np.array(labels))
    population = PopulationSet(tuple(texts[16:36]))
    return pool, population


METRICS = {"fprs": (0.1,), "bootstrap_rounds": 20, "length_bins": ((0, 64),)}


def _config(**neighbourhood):
    return AuditConfig(attacks=("loss", "neighbourhood"), metrics=METRICS,
                       neighbourhood={"num_neighbours": 6, **neighbourhood})


def test_run_audit_end_to_end(data, tmp_path, monkeypatch):
    pool, population = data
    target, reference = MaskedLM(*tiny_bert(seed=1)), MaskedLM(*tiny_bert(seed=2))
    result = run_audit(target, pool, population, references=[reference], config=_config(), cache=str(tmp_path),
                       progress=False)
    scores = result.samples["score_neighbourhood"].to_numpy()
    assert np.isnan(scores[-1]) and np.isfinite(scores[:-1]).all()
    assert result.metrics["neighbourhood/n_unscored"] == 1
    assert 0.0 <= result.metrics["neighbourhood/auc"] <= 1.0 and "loss/auc" in result.metrics
    assert any("'neighbourhood' could not score 1 sample(s) (1 in the pool, 0 in the population)" in w
               for w in result.warnings)
    assert result.attacks["neighbourhood"].roc.fpr.size > 1
    assert "signals_neighbour_values_s" in result.info["timings"]
    import matplotlib.pyplot as plt

    figs = result.figures()  # the histogram leaves the unscored sample out
    assert "plots/hist_neighbourhood.png" in figs
    for fig in figs.values():
        plt.close(fig)
    # by hand: mean target energy of the neighbours minus the sample's
    nbs = nb_module.generate_neighbours(reference, [pool.texts[0]], config=_config().neighbourhood, progress=False)
    from mlflow_mia.signals import compute_signals

    own = compute_signals(target, [pool.texts[0]], progress=False).values[0]
    # shared masks (default): each neighbour is masked from its sample's key
    theirs = compute_signals(target, nbs[0], progress=False, mask_keys=[text_hash(pool.texts[0])] * len(nbs[0]))
    assert scores[0] == pytest.approx(theirs.values.mean() - own, rel=1e-9)
    # examples for the report: the top-scored members, each followed by neighbours, energies under the target
    ex = result.neighbour_examples
    heads = ex[ex["kind"] == "sample"]
    members = result.samples[result.samples["label"] == 1].dropna(subset=["score_neighbourhood"])
    top = members.nlargest(len(heads), "score_neighbourhood")
    assert list(heads["sample_id"]) == list(top["sample_id"]) and len(heads) == 5
    first = ex[ex["sample_id"] == heads["sample_id"].iat[0]]
    text = pool.texts[list(result.samples["sample_id"]).index(heads["sample_id"].iat[0])]
    assert first["text"].iat[0] == text and len(first) == 6 and (first["kind"].iloc[1:] == "neighbour").all()
    e_ex = np.r_[compute_signals(target, [text], progress=False).values,
                 compute_signals(target, list(first["text"].iloc[1:]), progress=False,
                                 mask_keys=[text_hash(text)] * 5).values]
    np.testing.assert_allclose(first["energy"].to_numpy(), e_ex, rtol=1e-12)
    all_nbs = nb_module.generate_neighbours(reference, [text], config=_config().neighbourhood, progress=False)[0]
    assert list(first["text"].iloc[1:]) == all_nbs[:5]
    assert first["score_neighbourhood"].iat[0] == pytest.approx(
        np.mean(compute_signals(target, all_nbs, progress=False, mask_keys=[text_hash(text)] * 6).values)
        - e_ex[0], rel=1e-9)
    # a re-run reuses the cached neighbours and energies
    def boom(*args, **kwargs):
        raise AssertionError("recomputed")

    monkeypatch.setattr(nb_module, "_candidate_swaps", boom)
    monkeypatch.setattr("mlflow_mia.signals.energy.masked_token_logprobs", boom)
    again = run_audit(target, pool, population, references=[reference], config=_config(), cache=str(tmp_path),
                      progress=False)
    np.testing.assert_array_equal(again.samples["score_neighbourhood"].to_numpy(), scores)


def test_run_audit_needs_a_generator_before_any_model_runs(data, monkeypatch):
    pool, population = data
    monkeypatch.setattr("mlflow_mia.signals.energy.masked_token_logprobs", lambda *a, **k: pytest.fail("a model ran"))
    with pytest.raises(ValueError, match="generator masked LM.*generator_model"):
        run_audit(MaskedLM(*tiny_bert(seed=1)), pool, population, config=_config(), progress=False)


def _generators_used(monkeypatch):
    """Record the generator of every neighbour recipe; neighbours are faked (no generator runs)."""
    from mlflow_mia.signals.neighbour_recipe import NeighbourRecipe

    seen = []

    def mean_values(self, texts):
        seen.append(self.generator)
        return np.zeros(len(texts))

    monkeypatch.setattr(NeighbourRecipe, "mean_values", mean_values)
    monkeypatch.setattr(NeighbourRecipe, "neighbours", lambda self, texts: [[] for _ in texts])
    monkeypatch.setattr(NeighbourRecipe, "values", lambda self, texts: [np.zeros(0) for _ in texts])
    def measured(recipe, *args, **kwargs):
        seen.append(recipe.generator)
        return gq.GeneratorEvidence(accuracy=0.5, n_words=1, rows=np.arange(0), neighbour_values=())

    monkeypatch.setattr("mlflow_mia.audits.membership.signals.measure_generator", measured)
    return seen


def test_configured_generator_wins_over_reference(data, tmp_path, monkeypatch):
    pool, population = data
    seen = _generators_used(monkeypatch)
    reference = MaskedLM(*tiny_bert(seed=2))
    result = run_audit(MaskedLM(*tiny_bert(seed=1)), pool, population, references=[reference],
                       config=_config(generator_model=str(tmp_path)), progress=False)
    assert set(seen) == {str(tmp_path)}  # the configured folder, loaded on first use by the recipe
    assert result.info["neighbour_generator"] == str(tmp_path)
    seen.clear()
    result = run_audit(MaskedLM(*tiny_bert(seed=1)), pool, population, references=[reference], config=_config(),
                       progress=False)
    assert seen and all(g is reference for g in seen)
    assert result.info["neighbour_generator"] == reference.model_id


def test_generator_argument_wins_and_needs_no_reference(data, monkeypatch):
    pool, population = data
    seen = _generators_used(monkeypatch)
    generator, reference = MaskedLM(*tiny_bert(seed=3)), MaskedLM(*tiny_bert(seed=2))
    result = run_audit(MaskedLM(*tiny_bert(seed=1)), pool, population, generator=generator, references=[reference],
                       config=_config(generator_model="/not/used"), progress=False)
    assert seen[-1] is generator and result.info["neighbour_generator"] == generator.model_id
    result = run_audit(MaskedLM(*tiny_bert(seed=1)), pool, population, generator=generator, config=_config(),
                       progress=False)  # no reference needed
    assert seen[-1] is generator and result.info["reference_model"] is None


def test_other_attacks_stay_strict_about_nan(data, monkeypatch):
    pool, population = data
    monkeypatch.setattr("mlflow_mia.attacks.loss.LossAttack.score", lambda self, inputs:
                        np.full(len(inputs.texts), np.nan))
    with pytest.raises(ValueError, match="'loss' produced .* NaN"):
        run_audit(MaskedLM(*tiny_bert(seed=1)), pool, population, config=AuditConfig(attacks=("loss",), metrics=METRICS),
                  progress=False)
