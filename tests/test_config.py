"""Parsing of the flat evaluator_config['mia'] dict (the release gate itself: tests/tracking/test_registry_gate.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from mlflow_mia.options.audit import CONFIG_KEYS, parse_options

#: The evaluator keys the README and the docs document as the public API.
DOCUMENTED_KEYS = {"reference_model", "population_data", "text_column", "group_column", "attacks", "signal", "num_masks",
              "mask_rate", "seed", "fprs", "log_texts"}


def test_the_documented_evaluator_keys_are_accepted():
    assert DOCUMENTED_KEYS <= set(CONFIG_KEYS)
    assert {"id_column", "label_column", "population_text_column", "population_group_column", "cache_dir",
            "bootstrap_rounds", "max_length", "token_budget", "device", "max_tpr_at_fpr", "num_neighbours",
            "neighbour_generator", "metric_prefix"} <= set(CONFIG_KEYS)


def test_parse_maps_flat_keys_once():
    config, options = parse_options(
        {"mia": {"reference_model": "models:/r@champion", "population_data": "pop.csv", "text_column": "body",
                 "group_column": "article_id", "attacks": "loss, likelihood_ratio", "signal": "pll",
                 "num_masks": 4, "mask_rate": 0.2, "seed": 7, "fprs": "0.1,0.01", "bootstrap_rounds": 0,
                 "max_length": 128, "log_texts": "true", "num_neighbours": 5}}, targets="is_member")
    assert config.attacks == ("loss", "likelihood_ratio")
    assert (config.signal.kind, config.signal.num_masks, config.signal.mask_rate) == ("pll", 4, 0.2)
    assert config.signal.seed == config.metrics.seed == 7 and config.signal.max_length == 128
    assert config.metrics.fprs == (0.1, 0.01) and config.metrics.bootstrap_rounds == 0
    assert config.neighbourhood.num_neighbours == 5
    assert options.label_column == "is_member" and options.text_column == "body"
    assert options.population_text_column == "body" and options.population_group_column is None
    assert options.log_texts is True and options.gate is None


def test_defaults_match_the_library():
    from mlflow_mia.config import AuditConfig

    config, options = parse_options({})
    assert config == AuditConfig()
    assert options.log_texts is False and options.tag_model_version is True


@pytest.mark.parametrize("bad, match", [
    ({"num_mask": 3}, r"unknown .*\['num_mask'\].*valid keys are"),
    ({"attacks": ["loss", "nope"]}, "registered attacks"),
    ({"signal": "bogus"}, "signal must be one of 'energy', 'pll', 'causal', got 'bogus'"),
    ({"fprs": [0.0]}, r"fprs must be a non-empty list \(or comma-separated string\) of numbers in \[1e-09, 1\), "
                      r"got \[0.0\]"),
    ({"fprs": "abc"}, r"fprs must be a non-empty list .* of numbers in \[1e-09, 1\), got 'abc'"),
    ({"log_texts": "maybe"}, "log_texts must be true or false, got 'maybe'"),
    ({"num_masks": 2.5}, "num_masks must be an int >= 1, got 2.5"),
    ({"num_masks": True}, "num_masks must be an int >= 1, got True"),
    ({"bootstrap_rounds": "-1"}, "bootstrap_rounds must be an int >= 0, got '-1'"),
    ({"energy_reduction": "max"}, "energy_reduction must be one of 'sum', 'mean', got 'max'"),
    ({"method": "other"}, "method must be one of 'mia', 'ner_prompts', 'canaries', got 'other'"),
    ({"metric_prefix": "a@b"}, "metric_prefix"),
])
def test_invalid_config_is_rejected(bad, match):
    with pytest.raises(ValueError, match=match):
        parse_options(bad)


@pytest.mark.parametrize("prefix", ["../x/", "a/../../b", "/abs/", "./", "a/./b", "..", "a\\b"])
def test_traversal_metric_prefix_is_refused_at_parse_time(prefix):
    """Before any audit runs: the prefix becomes part of artifact paths."""
    for parse in (parse_options, _parse_ner):
        with pytest.raises(ValueError, match="metric_prefix .* may only hold"):
            parse({"metric_prefix": prefix})
    assert parse_options({"metric_prefix": "run 1/a.b-c_"})[1].metric_prefix == "run 1/a.b-c_"


def _parse_ner(config):
    from mlflow_mia.audits.ner.kind import parse_ner_config

    return parse_ner_config({"method": "ner_prompts", **config})


def test_new_options_pass_through():
    """log_samples, target_model and energy_reduction are declared and reach the parsed objects."""
    config, options = parse_options({"log_samples": "true", "target_model": " models:/t@candidate ",
                                     "energy_reduction": "Mean"})
    assert options.log_samples is True and options.target_model == "models:/t@candidate"
    assert config.signal.energy_reduction == "mean"
    _, options = parse_options({})
    assert (options.log_samples, options.target_model, options.method) == (False, None, "mia")
    cfg, ner_options = _parse_ner({"log_samples": 1, "target_model": "models:/n/1"})
    assert ner_options.log_samples is True and ner_options.target_model == "models:/n/1"


def test_blank_values_mean_not_given():
    """MLproject passes unset parameters as '': every key then takes its default, as when absent."""
    blank = {key: "" for key in ("num_masks", "fprs", "signal", "seed", "bootstrap_rounds", "log_texts", "device",
                                 "hash_key_file", "energy_reduction", "max_tpr_at_fpr", "max_length")}
    config, options = parse_options(blank)
    assert config == parse_options({})[0] and options.gate is None and options.device is None
    assert parse_options({"max_length": 0})[0].signal.max_length is None  # 0 = the model's limit


def test_missing_population_error_says_how():
    from mlflow_mia.audits.membership.inputs import load_inputs

    _, options = parse_options({})
    with pytest.raises(ValueError, match="population_data.*--population"):
        load_inputs(pd.DataFrame({"text": ["a"], "is_member": [1]}), options)


def test_gate_alphas_are_added_to_fprs():
    config, options = parse_options({"fprs": [0.1], "max_tpr_at_fpr": "0.01:0.05"})
    assert config.metrics.fprs == (0.1, 0.01)
    assert options.gate.budgets == ((0.01, 0.05),)


@pytest.mark.parametrize("device, match", [("banana", "device 'banana' is not a torch device"),
                                           ("cuda:7", "device 'cuda:7'")])
def test_device_is_validated_when_the_config_is_parsed(device, match, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=match):
        parse_options({"device": device})
    assert parse_options({"device": "cuda:0"})[1].device == "cuda:0"


def test_allow_tokenizer_mismatch_parses_and_requires_the_pll_signal():
    config, _ = parse_options({"allow_tokenizer_mismatch": "true", "signal": "pll"})
    assert config.allow_tokenizer_mismatch
    with pytest.raises(ValueError, match="requires signal='pll'"):
        parse_options({"allow_tokenizer_mismatch": True})


def test_delta_of_the_epsilon_lower_bound_is_configurable():
    from mlflow_mia.config import MetricConfig

    config, _ = parse_options({"delta": "1e-3", "confidence": 0.9})
    assert config.metrics.delta == 1e-3 and config.metrics.confidence == 0.9
    assert parse_options({})[0].metrics.delta == 1e-5
    assert MetricConfig.from_dict({"delta": 0.0}).delta == 0.0
    for bad in (1.0, -1e-5, float("nan"), "1e-5", True):
        with pytest.raises(ValueError, match=r"delta must be a number in \[0, 1\)"):
            MetricConfig(delta=bad)
    with pytest.raises(ValueError, match="delta must be"):
        parse_options({"delta": 2})
    with pytest.raises(ValueError, match=r"unknown MetricConfig key\(s\) \['epsilon'\]"):
        MetricConfig.from_dict({"epsilon": 1.0})


def test_cli_delta_flag_reaches_the_metric_config():
    from mlflow_mia.entrypoints.cli import build_parser
    from mlflow_mia.entrypoints.common import flat_config as _flat_config

    args = build_parser().parse_args(["audit", "--delta", "1e-4"])
    assert parse_options(_flat_config(args))[0].metrics.delta == 1e-4
    args = build_parser().parse_args(["audit"])
    assert "delta" not in _flat_config(args)


def test_engine_keys():
    _, options = parse_options({"engine": "Spark", "spark_master": "local[2]", "spark_store": "/tmp/s"})
    assert (options.engine, options.spark_master, options.spark_store) == ("spark", "local[2]", "/tmp/s")
    assert parse_options({})[1].engine == "local"
    with pytest.raises(ValueError, match="engine must be one of 'local', 'spark', got 'dask'"):
        parse_options({"engine": "dask"})
