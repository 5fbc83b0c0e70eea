"""Attack inputs declared once (``attacks/inputs.py``), and attack settings read through a declared mapping."""

import doctest
import random
from dataclasses import dataclass

import numpy as np
import pytest

from mlflow_mia import attacks as attacks_package
from mlflow_mia.attacks import (ATTACKS, INPUTS, MODEL_ROLES, Attack, AttackInput, AttackInputs, declare_input,
                                get_attack, register_attack, required_inputs, required_roles)
from mlflow_mia.attacks import base, inputs, min_k
from mlflow_mia.attacks.min_k import MinKSettings, min_k_mean
from mlflow_mia.audits.membership import AuditSignals, compute_audit_signals, run_audit
from mlflow_mia.config import AuditConfig, MetricConfig, SignalConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.signals import MaskedLM, SignalResult
from mlflow_mia.signals.testing import WORDS, tiny_bert


def _sig(values):
    values = np.asarray(values, dtype=np.float64)
    return SignalResult.from_arrays(values, n_tokens=np.full(len(values), 5))


def test_every_input_is_declared_once_with_roles_and_a_computation():
    assert list(INPUTS) == ["target", "reference", "neighbour_values", "neighbour_local", "references",
                           "shadow_membership"]
    assert {name: spec.rows for name, spec in INPUTS.items()} == {
        "target": "signal", "reference": "signal", "neighbour_values": "values", "neighbour_local": "values",
        "references": "signals", "shadow_membership": "membership"}
    assert {name: spec.roles for name, spec in INPUTS.items()} == {
        "target": ("target",), "reference": ("reference",), "neighbour_values": ("target", "generator"),
        "neighbour_local": ("target", "generator"), "references": ("reference",),
        "shadow_membership": ("reference",)}
    assert all(callable(spec.compute) and spec.how_to_provide for spec in INPUTS.values())
    assert all(need in INPUTS for cls in ATTACKS.values() for need in cls.requires)


def test_requirements_follow_from_the_declarations():
    names = ["loss", "likelihood_ratio", "neighbourhood", "neighbourhood_local"]
    assert required_inputs(names) == {"target": tuple(names), "reference": ("likelihood_ratio",),
                                      "neighbour_values": ("neighbourhood",),
                                      "neighbour_local": ("neighbourhood_local",)}
    assert required_roles(names) == {"target": tuple(names), "reference": ("likelihood_ratio",),
                                     "generator": ("neighbourhood", "neighbourhood_local")}
    assert required_roles(["loss"]) == {"target": ("loss",)}
    with pytest.raises(ValueError, match=r"unknown attack\(s\) \['lira'\]"):
        required_roles(["lira"])


def test_attack_inputs_has_one_attribute_per_declared_input():
    got = AttackInputs(("a", "b"), target=_sig([1.0, 2.0]), neighbour_values=[3.0, np.nan])
    assert got.reference is None and got.neighbour_local is None and got.texts == ("a", "b")
    assert got.neighbour_values.dtype == np.float64 and list(got.given()) == ["target", "neighbour_values"]
    with pytest.raises(ValueError, match=r"neighbour_values has 1 rows, expected 2: rows must pair up"):
        AttackInputs(("a", "b"), target=_sig([1.0, 2.0]), neighbour_values=[3.0])
    with pytest.raises(TypeError, match=r"signals 'reference' must be a SignalResult"):
        AttackInputs(("a",), target=_sig([1.0]), reference=np.zeros(1))
    with pytest.raises(ValueError, match=r"unknown signal name\(s\) \['energies'\]"):
        AttackInputs(("a",), energies=np.zeros(1))
    with pytest.raises(AttributeError, match="read-only"):
        got.target = None


def test_declarations_are_checked():
    with pytest.raises(ValueError, match=r"unknown model role\(s\) \['oracle'\]"):
        AttackInput("x", rows="values", roles=("oracle",), how_to_provide="", compute=len)
    with pytest.raises(ValueError, match=r"a 'signal' input is the signals of one model role"):
        AttackInput("x", rows="signal", roles=("target", "reference"), how_to_provide="", compute=len)
    with pytest.raises(ValueError, match=r"rows must be one of \['membership', 'signal', 'signals', 'values'\]"):
        AttackInput("x", rows="matrix", roles=("target",), how_to_provide="", compute=len)
    with pytest.raises(ValueError, match=r"an input named 'target' is declared already"):
        declare_input(AttackInput("target", rows="values", roles=("target",), how_to_provide="", compute=len))
    assert set(MODEL_ROLES) == {"target", "reference", "generator"}

    class Unknown(Attack):
        name = "needs_unknown"
        requires = ("target", "oracle_scores")

    with pytest.raises(ValueError, match=r"requires 'oracle_scores', which is not a declared input"):
        register_attack(Unknown)


def test_missing_input_error_comes_from_the_declaration():
    with pytest.raises(ValueError, match=r"attack 'likelihood_ratio' needs \['reference'\]; give a reference model"):
        get_attack("likelihood_ratio")(AttackInputs(("a",), target=_sig([1.0])))


def test_min_k_receives_its_own_settings_through_the_declared_mapping():
    assert min_k.MinKAttack.settings_from_config == {"fraction": "metrics.min_k_fraction"}
    config = AuditConfig(metrics={"min_k_fraction": 0.5})
    attack = get_attack("min_k", config)
    assert attack.settings == MinKSettings(fraction=0.5)
    assert get_attack("min_k").settings == MinKSettings(fraction=0.2)
    assert get_attack("loss", config).settings == base.NoSettings()
    with pytest.raises(ValueError, match=r"min_k fraction must be in \(0, 1\], got 0"):
        get_attack("min_k", fraction=0)
    with pytest.raises(TypeError, match="config or settings, not both"):
        get_attack("min_k", config, fraction=0.3)
    sig = SignalResult.from_arrays([0.0], n_tokens=[4], token_logprobs=[[-1.0, -5.0, -2.0, -4.0]])
    assert attack(AttackInputs(("a",), target=sig)).tolist() == [min_k_mean(np.array([-1.0, -5.0, -2.0, -4.0]), 0.5)]


def test_settings_mapping_is_checked_at_registration():
    @dataclass(frozen=True)
    class Width:
        width: int = 3

    class Wrong(Attack):
        name = "wrong_settings"
        Settings = Width
        settings_from_config = {"height": "metrics.top_records"}

    with pytest.raises(ValueError, match=r"maps \['height'\] from the audit config, but Width has fields \['width'\]"):
        register_attack(Wrong)

    class Nowhere(Attack):
        name = "wrong_path"
        Settings = Width
        settings_from_config = {"width": "metrics.no_such_field"}

    with pytest.raises(ValueError, match=r"reads settings from 'metrics.no_such_field', which is not an AuditConfig"):
        register_attack(Nowhere)
    assert "wrong_settings" not in ATTACKS and "wrong_path" not in ATTACKS


def test_a_new_input_is_one_declaration_plus_its_computation():
    """Declare an input and an attack reading it: compute_audit_signals, AuditSignals and scoring need no edit."""
    words = [w for w in WORDS if w.isalpha()]
    rng = random.Random(0)
    texts = list(dict.fromkeys(" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))) for _ in range(60)))
    pool = AuditDataset(texts=texts[:20], labels=[1] * 10 + [0] * 10)
    population = PopulationSet(texts=texts[20:50])

    def n_words(stage):
        return np.array([len(t.split()) for t in stage.texts], dtype=np.float64)

    spec = declare_input(AttackInput("n_words", rows="values", roles=("target",), compute=n_words,
                                     how_to_provide="word counts are computed by the audit"))

    @register_attack
    class Wordy(Attack):
        name = "wordy"
        requires = ("target", "n_words")

        def score(self, inputs):
            return inputs.n_words  # a toy: longer = member

    try:
        config = AuditConfig(attacks=("wordy",), signal=SignalConfig(num_masks=1),
                             metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=0))
        target = MaskedLM(*tiny_bert(seed=1))
        signals = compute_audit_signals(target, pool, population, config, progress=False)
        assert list(signals.signals) == ["target", "n_words"] and "signals_n_words_s" in signals.info["timings"]
        result = run_audit(target, pool, population, config=config, progress=False)
        expected = [len(t.split()) for t in pool.texts]
        assert result.samples["score_wordy"].tolist() == expected
        with pytest.raises(ValueError, match=r"attack 'wordy' needs \['n_words'\]; word counts are computed"):
            Wordy()(AttackInputs(("a",), target=_sig([1.0])))
    finally:
        ATTACKS.pop("wordy", None)
        INPUTS.pop(spec.name, None)


@pytest.mark.parametrize("module", [inputs, base, min_k, attacks_package])
def test_docstring_examples(module):
    assert doctest.testmod(module).failed == 0
