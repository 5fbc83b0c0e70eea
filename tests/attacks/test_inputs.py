"""Attack inputs declared once (``attacks/inputs.py``), and attack settings held by the audit config."""

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
                           "shadow_membership", "dc_pdd_beta", "grad_norm", "recall_conditional"]
    assert {name: spec.rows for name, spec in INPUTS.items()} == {
        "target": "signal", "reference": "signal", "neighbour_values": "values", "neighbour_local": "values",
        "references": "signals", "shadow_membership": "membership", "dc_pdd_beta": "values", "grad_norm": "values",
        "recall_conditional": "values"}
    assert {name: spec.roles for name, spec in INPUTS.items()} == {
        "target": ("target",), "reference": ("reference",), "neighbour_values": ("target", "generator"),
        "neighbour_local": ("target", "generator"), "references": ("reference",),
        "shadow_membership": ("reference",), "dc_pdd_beta": ("target",), "grad_norm": ("target",),
        "recall_conditional": ("target",)}
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


def test_min_k_receives_its_own_settings_from_the_audit_config():
    config = AuditConfig(metrics={"min_k_fraction": 0.5})
    assert config.attack_settings["min_k"] == MinKSettings(fraction=0.5)
    assert AuditConfig(attack_settings={"min_k": {"fraction": 0.5}}) == config
    assert AuditConfig(attack_settings={"min_k": MinKSettings(fraction=0.5)}) == config
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


def test_attack_settings_round_trip_under_their_option_keys_and_carry_the_signal_values():
    """to_dict writes each attack option under metrics by key (the params metrics.min_k_fraction, ...);
    from_dict reads it back; a same_option field carries the signal's value; bad entries are named."""
    from mlflow_mia.attacks.lira_offline import LiraOfflineSettings
    from mlflow_mia.attacks.lira_online import LiraOnlineSettings

    config = AuditConfig(signal=SignalConfig(mask_rate=0.3, energy_reduction="mean"),
                         attack_settings={"rmia": {"gamma": 2.0}})
    data = config.to_dict()
    assert "attack_settings" not in data and data["metrics"]["rmia_gamma"] == 2.0
    assert data["metrics"]["min_k_fraction"] == 0.2 and data["metrics"]["rmia_offline_a"] is None
    assert AuditConfig.from_dict(data) == config and hash(AuditConfig.from_dict(data)) == hash(config)
    assert config.attack_settings["lira_online"] == LiraOnlineSettings(mask_rate=0.3, energy_reduction="mean")
    # lira_offline declares no option: not held, its carried fields still come from the config
    assert "lira_offline" not in config.attack_settings
    assert get_attack("lira_offline", config).settings == LiraOfflineSettings(mask_rate=0.3, energy_reduction="mean")
    with pytest.raises(ValueError, match=r"attacks with settings: \[.*'lira_online', 'min_k', 'min_k_plus_plus', "
                                         r".*'rmia'.*\], got \{'loss': \{\}\}"):
        AuditConfig(attack_settings={"loss": {}})
    with pytest.raises(TypeError, match=r"attack_settings\['rmia'\] must be a RmiaSettings or a dict of its fields, "
                                        "got MinKSettings"):
        AuditConfig(attack_settings={"rmia": MinKSettings()})
    with pytest.raises(ValueError, match=r"^rmia_gamma must be a finite number > 0, got inf$"):
        AuditConfig(metrics={"rmia_gamma": float("inf")})


def test_settings_declarations_are_checked_at_registration():
    from mlflow_mia.option import option, same_option

    @dataclass(frozen=True)
    class Width:
        width: int = option(3, "a width", key="min_k_fraction")

    class Taken(Attack):
        name = "taken_key"
        Settings = Width

    with pytest.raises(ValueError, match=r"declares the option 'min_k_fraction', which attack 'min_k' declares; "
                                         r"give Width's option another key \(e.g. taken_key_min_k_fraction\)"):
        register_attack(Taken)

    @dataclass(frozen=True)
    class Seed:
        seed: int = option(3, "a seed")

    class Clash(Attack):
        name = "clash_key"
        Settings = Seed

    with pytest.raises(ValueError, match="declares the option 'seed', which is an audit config option"):
        register_attack(Clash)

    @dataclass(frozen=True)
    class Carried:
        rate: float = same_option("no_such_option", 0.1)

    class Nowhere(Attack):
        name = "carries_nothing"
        Settings = Carried

    with pytest.raises(ValueError, match=r"Carried carries \['no_such_option'\], which are not options of the audit"):
        register_attack(Nowhere)

    class Stale(Attack):
        name = "stale_mapping"
        settings_from_config = {"width": "metrics.top_records"}

    with pytest.raises(ValueError, match="declares settings_from_config, which is gone"):
        register_attack(Stale)

    class BadGate(Attack):
        name = "bad_gate"
        gate_min_references = -1

    with pytest.raises(ValueError, match="gate_min_references must be None or an int >= 0, got -1"):
        register_attack(BadGate)
    assert not {"taken_key", "clash_key", "carries_nothing", "stale_mapping", "bad_gate"} & set(ATTACKS)


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
