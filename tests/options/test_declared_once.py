"""Each option key is declared once in the package: one ``option(...)`` field, no hand-written flag or key list.

The scan is :func:`mlflow_mia.options.generate.declarations` (an AST count; ``python -m
mlflow_mia.options.generate --declarations`` prints it). An audit that needs an option
declared elsewhere holds it with :func:`~mlflow_mia.option.shared_option` (the same
declaration, its own default), never a second ``option(...)``.
"""

from __future__ import annotations

import dataclasses
import pytest

from mlflow_mia.option import declared_options
from mlflow_mia.options.generate import declarations
from mlflow_mia.options.schema import COMMANDS, METHODS, entries, options_for

#: Keys allowed more than one ``option(...)`` declaration, with the reason. None.
ALLOWED_TWICE: dict[str, str] = {}


def test_each_option_key_is_declared_once():
    found = declarations()
    options = {key: places for (kind, key), places in found.items() if kind == "option"}
    # The scan sees exactly the keys the schema is built from ...
    assert set(options) == {e.key for e in entries()}
    # ... each declared by one option(...) call ...
    twice = {key: places for key, places in options.items() if len(places) > 1 and key not in ALLOWED_TWICE}
    assert not twice, f"options declared more than once: {twice}"
    # ... and nowhere else: no hand-written flag, no hand-kept key list.
    elsewhere = {k: v for k, v in found.items() if k[0] != "option"}
    assert not elsewhere, f"options declared outside their field: {elsewhere}"


def test_every_entry_of_a_key_holds_the_one_declaration():
    """Shared settings (signal, metrics, seed, reference, gate flags) are one Option object in every audit."""
    by_key = {}
    for e in entries():
        assert by_key.setdefault(e.key, e.field.option) is e.field.option, e.key
    for surface in (*COMMANDS, *METHODS):
        options_for(surface)  # raises when one surface sees a key twice


def test_shared_options_keep_each_audit_default_and_the_stricter_bound():
    from mlflow_mia.canaries.config import CanaryAuditConfig
    from mlflow_mia.config import MetricConfig, NerAuditConfig, SignalConfig

    assert declared_options(CanaryAuditConfig)["signal"].default == "pll"
    assert declared_options(SignalConfig)["signal"].default == "energy"
    assert declared_options(CanaryAuditConfig)["fprs"].default == (0.1, 0.01)
    assert declared_options(NerAuditConfig)["fprs"].default == (0.1, 0.01)
    assert declared_options(MetricConfig)["fprs"].default == (0.1, 0.01, 0.001)
    budget = declared_options(NerAuditConfig)["token_budget"]
    assert budget.option is declared_options(SignalConfig)["token_budget"].option and budget.option.ge == 16
    with pytest.raises(ValueError, match=r"^token_budget must be an int >= 16 or None, got 8$"):
        NerAuditConfig(token_budget=8)


def test_a_second_declaration_is_found(tmp_path):
    """The scan can fail: an option declared again, a hand-written flag and a hand-kept key list are all found."""
    pkg = tmp_path / "mlflow_mia"
    pkg.mkdir()
    (pkg / "extra.py").write_text("class MetricConfig:\n    num_masks: int = option(3, 'again')\n"
                                  "CONFIG_KEYS = {'num_masks': 'x'}\n"
                                  "def f(p):\n    p.add_argument('--num-masks')\n", encoding="utf-8")
    found = declarations(pkg)
    assert found[("option", "num_masks")] == ["mlflow_mia/extra.py:MetricConfig.num_masks"]
    assert found[("add_argument", "num_masks")] == ["mlflow_mia/extra.py:5"]
    assert found[("key list", "num_masks")] == ["mlflow_mia/extra.py:3"]


def test_attack_settings_are_declared_on_the_attacks_and_held_by_the_audit_config():
    """min_k_fraction, min_k_plus_plus_fraction, rmia_offline_a, rmia_gamma and lira_online's two: declared on each
    attack's Settings only, gathered from ATTACKS; AuditConfig.attack_settings holds them with the declared defaults."""
    from mlflow_mia.attacks import ATTACKS
    from mlflow_mia.config import AuditConfig, MetricConfig

    declared = {}
    for attack in ATTACKS.values():
        for key, of in declared_options(attack.Settings).items():
            declared[key] = of
            assert options_for("mia")[key].field.option is of.option, key
    assert set(declared) >= {"min_k_fraction", "min_k_plus_plus_fraction", "rmia_offline_a", "rmia_gamma",
                             "lira_online_per_text_variance_min", "lira_online_per_mask_queries"}
    assert AuditConfig().attack_options() == {key: of.default for key, of in declared.items()}
    assert not set(declared) & {f.name for f in dataclasses.fields(MetricConfig)}


def test_a_key_with_two_defaults_or_two_declarations_on_one_surface_is_refused(monkeypatch):
    from dataclasses import dataclass

    from mlflow_mia.config import MetricConfig
    from mlflow_mia.option import option, shared_option
    from mlflow_mia.options import schema

    @dataclass(frozen=True)
    class OtherDefault:
        fprs: tuple = shared_option(MetricConfig, "fprs", (0.5,))

    @dataclass(frozen=True)
    class Again:
        fprs: tuple = option((0.5,), "again")

    with pytest.raises(ValueError, match="option family 'mia' is registered already"):
        schema.register_family("mia", (OtherDefault,), frozenset({"audit"}))
    monkeypatch.setitem(schema.FAMILIES, "extra", ((OtherDefault,), frozenset({"audit"})))
    with pytest.raises(ValueError, match=r"^option 'fprs' of 'audit' has two defaults: \(0.1, 0.01, 0.001\) on "
                                         r"MetricConfig and \(0.5,\) on OtherDefault$"):
        options_for("audit")
    monkeypatch.setitem(schema.FAMILIES, "extra", ((Again,), frozenset({"audit"})))
    with pytest.raises(ValueError, match="^option 'fprs' of 'audit' is declared twice: on MetricConfig and Again$"):
        options_for("audit")


def test_canary_audit_takes_the_shared_reference_option_but_one_reference():
    from mlflow_mia.options.canary import parse_canary_config

    assert parse_canary_config({"method": "canaries", "reference_model": "models:/r/1"})[1].reference_model == \
        "models:/r/1"
    with pytest.raises(ValueError, match=r"^the canary audit takes one reference model, got 2: "
                                         r"\['models:/r/1', 'models:/s/1'\]$"):
        parse_canary_config({"method": "canaries", "reference_model": "models:/r/1, models:/s/1"})
