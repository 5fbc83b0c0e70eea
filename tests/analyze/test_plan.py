"""The suite's plan (mlflow_mia/analyze/plan.py) and variant recipes (variants.py): seeds, nulls, fair ablations."""

from __future__ import annotations

import pytest

from mlflow_mia.analyze import ANALYSIS_SIZES
from mlflow_mia.analyze.plan import experiments, variants
from mlflow_mia.analyze.variants import training_settings, variant_key
from mlflow_mia.demo.build import DEMO_SIZES

FULL, QUICK = ANALYSIS_SIZES["full"], ANALYSIS_SIZES["quick"]
DEMO = DEMO_SIZES["default"]


def _settings(name, seed=0, size=FULL):
    return training_settings(variants(size)[name], DEMO, size, 2000, seed=seed)


def test_full_size_runs_three_seeds_and_quick_one():
    assert FULL.seeds == (0, 1, 2) and QUICK.seeds == (0,)


def test_seeds_change_seeded_recipes_only():
    assert _settings("short", 2)["finetune"]["seed"] == 2 and _settings("dp-eps8", 1)["finetune"]["seed"] == 1
    assert _settings("large-base", 2) == _settings("large-base", 0)  # shared by every seed, like the demo's base
    assert _settings("large-reference", 2)["finetune"]["seed"] == 0
    keys = {variant_key(variants(FULL)["target"], base_uri="b", split_digest="s", settings=_settings("target", s))
            for s in FULL.seeds}
    assert len(keys) == 3  # each seed's target is its own registered version


def test_target_at_another_seed_is_the_demo_recipe():
    plain = _settings("target", 1)["finetune"]
    steps = -(-int(DEMO.finetune.epochs * 2000) // DEMO.finetune.batch_size)
    assert (plain["steps"], plain["learning_rate"], plain["batch_size"]) == (steps, DEMO.finetune.learning_rate,
                                                                              DEMO.finetune.batch_size)


def test_each_size_has_its_own_base_and_reference():
    v = variants(FULL)
    assert (v["large"].start, v["large-reference"].start, v["large-base"].start) == ("large-base", "large-base",
                                                                                      "base")
    names = list(v)
    assert all(names.index(x.start) < names.index(x.name) for x in v.values() if x.start != "base")
    base = _settings("large-base")
    assert base["model"]["num_layers"] == FULL.large_layers
    assert base["base"]["learning_rate"] == pytest.approx(DEMO.base.learning_rate * FULL.large_lr_scale)
    for name in ("large", "large-reference"):
        assert _settings(name)["finetune"]["learning_rate"] == pytest.approx(DEMO.finetune.learning_rate
                                                                             * FULL.large_lr_scale)
    exp = experiments(FULL)["larger-model"]
    assert (exp.target, exp.reference) == ("large", "large-reference")
    null = experiments(FULL)[exp.null]
    assert (null.target, null.reference, null.seeded) == ("large-base", "large-reference", False)


def test_dp_control_uses_the_dp_recipe_without_noise():
    control, private = _settings("dp-sigma0"), _settings("dp-eps8")
    assert control["dp"]["noise_multiplier"] == 0.0 and control["dp"]["target_epsilon"] is None
    assert private["dp"]["target_epsilon"] == 8.0 and private["dp"]["noise_multiplier"] is None
    assert control["finetune"] == private["finetune"]  # same schedule, batch, learning rate, seed
    assert control["dp"]["freeze"] == private["dp"]["freeze"] == ["bert.embeddings."]
    assert experiments(FULL)["dp-sgd-sigma0"].target == "dp-sigma0"


def test_every_seeded_experiment_has_an_unseeded_null_with_its_reference_signal_and_pool():
    exps = experiments(FULL)
    for exp in exps.values():
        if not exp.seeded:
            assert exp.null == ""
            continue
        null = exps[exp.null]
        assert not null.seeded and null.target in ("base", "large-base", "reference")
        assert null.target != "reference" or exp.reference == "base"  # the base's own null would be itself
        assert (null.reference, null.signal, null.energy_reduction, null.names_pool) == (
            exp.reference, exp.signal, exp.energy_reduction, exp.names_pool)
        assert set(exp.subsets) <= set(null.subsets)


@pytest.mark.parametrize("size", sorted(ANALYSIS_SIZES))
def test_no_experiment_audits_a_model_against_itself(size):
    """The audit refuses a reference with the target's own weights, so no experiment may name one model twice."""
    for exp in experiments(ANALYSIS_SIZES[size]).values():
        assert exp.target != exp.reference, exp.name
