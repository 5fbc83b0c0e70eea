"""The shadow record option (online LiRA from the front ends) and lira_online's declared settings."""

from __future__ import annotations

import pytest

from mlflow_mia.attacks import get_attack
from mlflow_mia.attacks.lira_online import LiraOnlineAttack, LiraOnlineSettings
from mlflow_mia.options.audit import parse_options

REFS4 = "models:/s-0/1,models:/s-1/1,models:/s-2/1,models:/s-3/1"


@pytest.fixture
def record(tmp_path):
    path = tmp_path / "shadows.json"
    path.write_text("{}")
    return str(path)


def test_a_gated_audit_with_a_shadow_record_and_four_shadows_runs_lira_online_last(record):
    config, options = parse_options({"reference_model": REFS4, "shadow_record": record,
                                     "max_tpr_at_fpr": "0.01:0.05"})
    assert config.attacks == ("loss", "zlib", "min_k", "min_k_plus_plus", "likelihood_ratio", "lira_offline", "rmia",
                              "lira_online")
    assert options.shadow_record == record
    gated, _ = parse_options({"reference_model": REFS4, "max_tpr_at_fpr": "0.01:0.05"})
    assert "lira_online" not in gated.attacks  # no record: no shadow membership, no online LiRA


def test_a_shadow_record_adds_lira_online_to_the_default_or_named_attacks_but_not_with_few_shadows(record):
    assert parse_options({"reference_model": REFS4, "shadow_record": record})[0].attacks == (
        "loss", "likelihood_ratio", "lira_online")
    assert parse_options({"reference_model": REFS4, "shadow_record": record,  # as MLproject passes its default
                          "attacks": "loss,lira_offline"})[0].attacks == ("loss", "lira_offline", "lira_online")
    assert parse_options({"reference_model": REFS4, "shadow_record": record,
                          "attacks": "lira_online,loss"})[0].attacks == ("lira_online", "loss")
    two = parse_options({"reference_model": "models:/a/1,models:/b/1", "shadow_record": record,
                         "max_tpr_at_fpr": "0.01:0.05"})[0]
    assert "lira_online" not in two.attacks  # 2 shadows: a text has one IN and one OUT, no spread


def test_a_shadow_record_that_is_not_a_file_is_refused_with_the_fix(tmp_path):
    missing = str(tmp_path / "nope.json")
    with pytest.raises(ValueError, match="is not a file: give the JSON record written by mlflow-mia train-shadows"):
        parse_options({"reference_model": REFS4, "shadow_record": missing})


def test_lira_online_settings_are_options_carried_to_the_attack():
    config, _ = parse_options({"lira_online_per_text_variance_min": "8", "lira_online_per_mask_queries": "true"})
    held = config.attack_settings["lira_online"]
    assert held.per_text_variance_min == 8 and held.per_mask_queries
    assert config.to_dict()["metrics"]["lira_online_per_text_variance_min"] == 8  # the param's name
    attack = get_attack("lira_online").from_config(config)
    assert isinstance(attack, LiraOnlineAttack)
    assert attack.settings == LiraOnlineSettings(per_text_variance_min=8, per_mask_queries=True)
    assert LiraOnlineAttack.from_config(parse_options({})[0]).settings == LiraOnlineSettings()
    with pytest.raises(ValueError, match="lira_online_per_text_variance_min must be an int >= 4, got 2"):
        parse_options({"lira_online_per_text_variance_min": 2})
