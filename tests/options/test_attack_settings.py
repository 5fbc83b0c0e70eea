"""A new attack with a setting is its file plus one import line (issue 46, item 5).

A throwaway attack registered here (and removed afterwards) declares one option on its
``Settings`` and its gate eligibility on its class; nothing in ``config.py``, ``options/`` or
``entrypoints/`` names it, yet its option is a CLI flag, an MLproject parameter, an evaluator
key and a row of the options reference, the audit config holds its value (logged as the param
``metrics.<key>``), and a release gate runs it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from mlflow_mia.attack_settings import ATTACK_SETTINGS
from mlflow_mia.attacks import ATTACKS, Attack, AttackInputs, gate_attacks, get_attack, register_attack
from mlflow_mia.option import option
from mlflow_mia.options.audit import parse_options
from mlflow_mia.options.schema import options_for
from mlflow_mia.signals import SignalResult


@dataclass(frozen=True)
class ToySettings:
    """Settings of the throwaway attack: one option."""

    width: int = option(3, "how many of the toy attack's lowest values are averaged", key="toy_width", ge=1,
                        metavar="N")


class ToyAttack(Attack):
    """Score = the negated energy times ``width`` (only its settings matter here)."""

    name = "toy"
    citation = "none: a test attack"
    requires = ("target",)
    Settings = ToySettings
    gate_min_references = 0

    def score(self, inputs):
        return -inputs.target.values * self.settings.width


@pytest.fixture
def toy_attack():
    attacks, settings = dict(ATTACKS), dict(ATTACK_SETTINGS)
    register_attack(ToyAttack)
    yield ToyAttack
    for registry, saved in ((ATTACKS, attacks), (ATTACK_SETTINGS, settings)):
        registry.clear()
        registry.update(saved)


def test_a_registered_attack_setting_reaches_every_front_end_and_the_gate(toy_attack):
    from mlflow_mia.entrypoints.cli import build_parser
    from mlflow_mia.options.generate import mlproject_text, options_reference

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    for command in ("audit", "compare"):
        help_text = " ".join(sub[command].format_help().split())
        assert ("--toy-width N how many of the toy attack's lowest values are averaged (>= 1; default: 3)"
                in help_text), command
    assert "--toy-width" not in sub["ner-audit"].format_help()
    assert sub["audit"].parse_args(["--toy-width", "5"]).toy_width == 5

    mlproject = mlproject_text()
    audit_entry = mlproject.split("\n  audit:\n")[1].split("\n\n")[0]
    # an attack's setting is passed on when given (-P toy_width=5), not declared: mlflow run would log it otherwise
    passed_on = " ".join(line.strip(" #") for line in audit_entry.splitlines() if line.lstrip().startswith("#"))
    assert "toy_width" in passed_on.replace(",", " ").split() and "toy_width: {" not in audit_entry
    assert "toy_width" not in mlproject.split("\n  ner-audit:\n")[1].split("\n\n")[0]

    assert ("| `toy_width` | `--toy-width` | `audit`, `compare`, `mia` | 3 | how many of the toy attack's lowest "
            "values are averaged (>= 1) |") in options_reference().splitlines()
    assert options_for("mia")["toy_width"].field.owner is ToySettings

    assert gate_attacks(0)[:4] == ("loss", "zlib", "min_k", "min_k_plus_plus") and gate_attacks(0)[-1] == "toy"
    assert gate_attacks(4, shadow_membership=True)[-1] == "toy"  # after the built-in ones (gate_order)
    config, _ = parse_options({"max_tpr_at_fpr": "0.01:0.2"})
    assert "toy" in config.attacks


def test_the_audit_config_holds_the_value_and_the_attack_reads_it(toy_attack):
    config, _ = parse_options({"toy_width": "5", "attacks": "toy"})
    assert config.attack_settings["toy"] == ToySettings(width=5)
    assert config.to_dict()["metrics"]["toy_width"] == 5  # logged as the param metrics.toy_width
    attack = get_attack("toy", config)
    sig = SignalResult.from_arrays(np.array([1.0, 2.0]), n_tokens=[5, 5])
    assert attack(AttackInputs(("a", "b"), target=sig)).tolist() == [-5.0, -10.0]
    assert parse_options({})[0].attack_settings["toy"] == ToySettings(width=3)
    with pytest.raises(ValueError, match=r"^toy_width must be an int >= 1, got 0$"):
        parse_options({"toy_width": 0})


def test_without_the_registration_nothing_knows_the_setting():
    assert "toy" not in ATTACKS and "toy" not in ATTACK_SETTINGS
    assert "toy_width" not in options_for("audit")
    with pytest.raises(ValueError, match=r"unknown evaluator_config\['mia'\] key\(s\) \['toy_width'\]"):
        parse_options({"toy_width": 5})
