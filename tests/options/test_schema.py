"""The option schema: --help, evaluator keys, key tables and MLproject agree with it (declared once: tests/options)."""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import pytest

from mlflow_mia.entrypoints.cli import build_parser, main
from mlflow_mia.entrypoints.common import flat_config as _flat_config
from mlflow_mia.options.audit import CONFIG_KEYS, parse_options
from mlflow_mia.options.generate import passed_on_options
from mlflow_mia.options.schema import (dest, flag_of, key_table, mlproject_parameters,
                                             options_for)

REPO = Path(__file__).resolve().parents[2]
CLI_COMMANDS = ("audit", "compare", "ner-audit", "analyze", "canary-audit")


def _subparser(command):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices[command]


@pytest.mark.parametrize("command", CLI_COMMANDS)
def test_help_evaluator_keys_and_mlproject_agree(command):
    from mlflow.projects._project_spec import load_project

    declared = {e.key: e for e in options_for(command).values() if e.field.option.cli}
    parser = _subparser(command)
    dests = {a.dest for a in parser._actions if a.option_strings and a.dest != "help"}
    assert dests == {dest(e) for e in declared.values()}
    text = parser.format_help()
    for e in declared.values():
        assert flag_of(command, dest(e)) in text
    entry = load_project(str(REPO)).get_entry_point(command)
    expected = mlproject_parameters(command)
    # "" means "not given": no parameter (MLflow would log it as ''); -P name=value passes it on as --name value.
    blank = {n for n, (_, default) in expected.items() if default == ""} | passed_on_options(command)
    assert set(entry.parameters) == set(expected) - blank, "MLproject lacks or adds parameters"
    command_line = " ".join(entry.command.split())
    for name, (kind, default) in expected.items():
        if name in blank:
            assert f"{{{name}}}" not in command_line, name
            continue
        param = entry.parameters[name]
        assert param.type == kind, name
        given = str(param.default)
        same = float(given) == float(default) if kind == "float" else given == default
        assert same, f"MLproject {command}.{name} default {given!r}, declared {default!r}"
        assert f"{flag_of(command, name)} {{{name}}}" in command_line, name
    # The entry point's own defaults parse, and give the library's defaults.
    args = build_parser().parse_args(shlex.split(entry.compute_command({}, storage_dir=None))[1:])
    assert args.command == command
    if command in ("audit", "compare"):
        from mlflow_mia.config import AuditConfig

        assert parse_options(_flat_config(args))[0] == AuditConfig()
    if command == "ner-audit":
        from mlflow_mia.config import NerAuditConfig
        from mlflow_mia.audits.ner.kind import parse_ner_config
        from mlflow_mia.entrypoints.common import flat_from_args

        assert parse_ner_config(flat_from_args(args, command))[0] == NerAuditConfig()


def test_evaluator_keys_are_the_command_options_plus_evaluator_only_ones():
    evaluator_only = {"method", "target_model", "metric_prefix"}
    for method, command in (("mia", "audit"), ("ner_prompts", "ner-audit")):
        keys = set(options_for(method))
        on_cli = {k for k, e in options_for(command).items() if e.family is not None}
        assert on_cli <= keys and keys - on_cli == evaluator_only
        assert all(not options_for(method)[k].field.option.cli for k in evaluator_only)
    assert set(CONFIG_KEYS) == set(options_for("mia"))
    assert set(options_for("audit")) - set(options_for("mia")) == {"target", "data", "demo_size", "demo_kind",
                                                                   "demo_shadows", "experiment", "run_name",
                                                                   "tracking_uri", "quiet"}


@pytest.mark.parametrize("module, method", [("mlflow_mia.entrypoints.evaluator", "mia"),
                                            ("mlflow_mia.audits.ner.kind", "ner_prompts")])
def test_evaluator_docstring_key_table_is_generated(module, method):
    import importlib

    doc = importlib.import_module(module).__doc__
    table = key_table(method)
    assert table in doc
    for key in options_for(method):
        assert doc.count(f"``{key}``") == 1, key
    # A reStructuredText simple table: two rules, the key column as wide as its rule, text after two spaces.
    lines = table.splitlines()
    rule = lines[0]
    width = rule.index("  ")
    assert lines[-1] == rule and set(rule[:width]) == {"="} and set(rule[width + 2:]) == {"="}
    for line in lines[1:-1]:
        assert line[:width].rstrip().startswith("``") and line[width:width + 2] == "  " and line[width + 2] != " "


def test_every_audit_flag_reaches_the_parsed_options(tmp_path):
    key = tmp_path / "k.key"
    key.write_text("k" * 32)
    key.chmod(0o600)
    argv = ["audit", "--attacks", "loss", "--signal", "energy", "--num-masks", "3", "--mask-rate", "0.2",
            "--seed", "4", "--max-length", "64", "--token-budget", "32", "--dtype", "bfloat16", "--energy-reduction",
            "mean", "--allow-tokenizer-mismatch", "false", "--num-neighbours", "5", "--neighbour-generator",
            "models:/g/1", "--fprs", "0.2,0.1", "--bootstrap-rounds", "0", "--confidence", "0.99",
            "--min-k-fraction", "0.3", "--top-records", "5", "--delta", "1e-4", "--label-column", "m",
            "--log-texts", "--log-samples", "true", "--hash-key-file", str(key), "--cache-dir", "c",
            "--device", "cpu", "--device-map", "auto", "--no-progress", "--reference", "models:/r/1,models:/r2/1",
            "--reference-mode", "each",
            "--rmia-offline-a", "0.4", "--rmia-gamma", "2", "--population", "p.csv", "--text-column", "t",
            "--id-column", "i", "--group-column", "g", "--population-text-column", "pt",
            "--population-group-column", "pg", "--max-tpr-at-fpr", "0.05:0.2", "--max-tpr-at-fpr", "0.01:0.1",
            "--no-tag-model-version", "--clear-gate-fail", "--trust-remote-code", "--engine", "spark",
            "--spark-master", "local[1]", "--spark-store", "s"]
    argv += ["--min-k-plus-plus-fraction", "0.4", "--allow-loose-budget", "--base-model", "models:/b/1"]
    record = tmp_path / "shadows.json"
    record.write_text("{}")
    argv += ["--shadow-record", str(record), "--lira-online-per-text-variance-min", "8",
             "--lira-online-per-mask-queries"]
    counts = tmp_path / "f.npy"
    np.save(counts, np.ones(8))
    argv += ["--recall-shots", "3", "--recall-seed", "7", "--dc-pdd-clip", "0.05", "--dc-pdd-frequencies", str(counts),
             "--grad-norm-p", "2", "--wbc-windows", "2,3,5"]
    args = build_parser().parse_args(argv)
    flat = _flat_config(args)
    assert set(flat) == {k for k, e in options_for("audit").items() if e.family is not None and e.field.option.cli}
    config, options = parse_options(flat)
    s, m, n = config.signal, config.metrics, config.neighbourhood
    assert config.attacks == ("loss", "zlib", "min_k", "min_k_plus_plus", "likelihood_ratio", "lira_offline", "rmia")
    assert config.allow_tokenizer_mismatch is False
    assert (s.kind, s.num_masks, s.mask_rate, s.seed, s.max_length, s.token_budget, s.dtype,
            s.energy_reduction) == ("energy", 3, 0.2, 4, 64, 32, "bfloat16", "mean")
    assert (n.num_neighbours, n.generator_model) == (5, "models:/g/1")
    assert (m.fprs, m.bootstrap_rounds, m.confidence, m.top_records, m.delta, m.seed) == (
        (0.2, 0.1, 0.05, 0.01), 0, 0.99, 5, 1e-4, 4)
    a = config.attack_settings
    assert (a["min_k"].fraction, a["min_k_plus_plus"].fraction) == (0.3, 0.4)
    assert (a["recall"].shots, a["recall"].seed, a["dc_pdd"].clip, a["dc_pdd"].frequencies) == (3, 7, 0.05, str(counts))
    assert (a["grad_norm"].norm, a["wbc"].windows) == ("2", (2, 3, 5))
    assert (a["rmia"].offline_a, a["rmia"].gamma) == (0.4, 2.0)
    assert (a["lira_online"].per_text_variance_min, a["lira_online"].per_mask_queries) == (8, True)
    assert (a["lira_online"].mask_rate, a["lira_online"].energy_reduction) == (0.2, "mean")  # carried from the signal
    assert options.shadow_record == str(record)  # 2 references: too few for lira_online, not added
    assert options.gate.budgets == ((0.05, 0.2), (0.01, 0.1))
    assert (options.label_column, options.log_texts, options.log_samples, options.cache_dir, options.device,
            options.device_map, options.progress) == ("m", True, True, "c", "cpu", "auto", False)
    assert options.hash_key.source == "file" and options.hash_key.key == b"k" * 32
    assert (options.reference_model, options.population_data, options.text_column, options.id_column,
            options.group_column, options.population_text_column, options.population_group_column) == (
        "models:/r/1,models:/r2/1", "p.csv", "t", "i", "g", "pt", "pg")
    assert options.reference_mode == "each" and options.reference_sets == (("models:/r/1",), ("models:/r2/1",))
    assert (options.tag_model_version, options.clear_gate_fail, options.trust_remote_code) == (False, True, True)
    assert options.allow_loose_budget is True and options.base_model == "models:/b/1"
    assert (options.engine, options.spark_master, options.spark_store) == ("spark", "local[1]", "s")


@pytest.mark.parametrize("argv, message", [
    (["audit", "--fprs", "abc"], "fprs must be a non-empty list (or comma-separated string) of numbers in "
                                 "[1e-09, 1), got 'abc'"),
    (["compare", "--fprs", "0.1,x"], "fprs must be a non-empty list"),
    (["ner-audit", "--fprs", "abc"], "fprs must be a non-empty list"),
    (["audit", "--num-masks", "many"], "num_masks must be an int >= 1, got 'many'"),
    (["audit", "--signal", "bogus"], "signal must be one of 'energy', 'pll', 'causal', got 'bogus'"),
    (["audit", "--max-tpr-at-fpr", "0.01"], "ALPHA:MAX"),
    (["audit", "--device", "banana"], "device 'banana' is not a torch device"),
    (["analyze", "--device", "banana"], "device 'banana' is not a torch device"),
    (["audit", "--hash-key-file", "/nonexistent/mia.key"], "hash key file '/nonexistent/mia.key' does not exist"),
])
def test_fprs_abc_and_other_bad_values_name_the_option(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err


_NOT_CREATABLE = "cache_dir '{}' cannot be created: '{}' is not a folder (it is a file)"


@pytest.mark.parametrize("argv, message", [
    (["audit", "--cache-dir", "/dev/null"],
     "argument --cache-dir: cache_dir '/dev/null' is not a folder (it is a device, pipe or socket); give a folder for "
     "the cache (created when missing), or leave it unset for $MLFLOW_MIA_CACHE or ~/.cache/mlflow_mia"),
    (["ner-audit", "--cache-dir", "{file}/sub"], "argument --cache-dir: " + _NOT_CREATABLE),
    (["audit", "--rmia-gamma", "inf"], "argument --rmia-gamma: rmia_gamma must be a finite number > 0, got 'inf'"),
    (["audit", "--rmia-gamma", "nan"], "argument --rmia-gamma: rmia_gamma must be a finite number > 0, got 'nan'"),
    (["audit", "--device", "meta"], "argument --device: device 'meta' is not one the models run on here; use one "
                                    "of 'cpu', 'cuda', 'cuda:<index>' or 'mps'"),
    (["canary-audit", "--n-candidates", "1000000000000"],
     "argument --n-candidates: n_candidates must be an int in [10, 1e+06], got '1000000000000'"),
    (["audit", "--fprs", "1e-300"], "argument --fprs: fprs must be a non-empty list (or comma-separated string) of "
                                    "numbers in [1e-09, 1), got '1e-300'"),
    (["canary-audit", "--fprs", "1e-10"], "argument --fprs: fprs must be a non-empty list"),
    (["audit", "--max-tpr-at-fpr", "1e-300:0.5"],
     "gate budget 1e-300:0.5: the FPR alpha must be in [1e-09, 1) (a threshold at FPR alpha needs ceil(1 / alpha) "
     "population texts); e.g. 0.01:0.05"),
    (["audit", "--hash-key-file", "/dev/null"],
     "argument --hash-key-file: hash key file '/dev/null' is not a regular file (a device, pipe or socket); give a "
     "file holding 32+ random bytes, e.g. (umask 077; python -c 'import secrets; print(secrets.token_hex(32))' > "
     "mia_hash.key)"),
    (["audit", "--hash-key-file", "/etc/passwd"],
     "argument --hash-key-file: hash key file '/etc/passwd' can be read or written by other users (mode 0644): "
     "anyone who reads it can look up every logged hash; keep a secret key readable by you only: chmod 600 "
     "/etc/passwd, or make a new one with (umask 077; "),
])
def test_bad_option_values_are_refused_at_parse_time_naming_the_option_exit_2(argv, message, tmp_path, capsys):
    """Each bad value is refused while the flags are parsed (exit 2), naming the option (issue 32, low items)."""
    import os

    file = tmp_path / "afile"
    file.write_text("x")
    argv = [a.format(file=file) for a in argv]
    if "/etc/passwd" in argv and (not os.path.exists("/etc/passwd") or os.stat("/etc/passwd").st_mode & 0o777 != 0o644):
        pytest.skip("needs a world-readable /etc/passwd")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message.format(f"{file}/sub", file) in err, err


def test_a_hash_key_file_others_can_read_a_folder_or_a_short_key_is_refused(tmp_path):
    from mlflow_mia.hashing import resolve_hash_key

    key = tmp_path / "mia.key"
    key.write_text("k" * 40)
    key.chmod(0o640)
    with pytest.raises(ValueError, match=r"^hash key file '.*mia.key' can be read or written by other users \(mode "
                                         r"0640\)"):
        resolve_hash_key(key)
    key.chmod(0o600)
    assert resolve_hash_key(key).key == b"k" * 40
    key.write_text("k" * 31)
    with pytest.raises(ValueError, match=r"^hash key file '.*mia.key': the hash key \(file\) has 31 bytes; use at "
                                         r"least 32"):
        resolve_hash_key(key)
    with pytest.raises(ValueError, match=r"^hash key file '.*' is not a regular file \(a folder\)"):
        resolve_hash_key(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"^hash key file '.*missing.key' does not exist$"):
        resolve_hash_key(tmp_path / "missing.key")


@pytest.mark.parametrize("gate", [0.05, [0.05], [0.01, 0.05], {0.01: "high"}])
def test_evaluator_max_tpr_at_fpr_as_one_number_names_the_key_and_the_form(gate):
    """``max_tpr_at_fpr=0.05`` was a TypeError ('float' object is not iterable)."""
    with pytest.raises(ValueError, match=r"^max_tpr_at_fpr .* is not a budget: give ALPHA:MAX, e.g. '0.01:0.05' \(the "
                                         r"TPR at FPR 0.01 may be at most 0.05\), a list of those or a dict "
                                         r"\{alpha: max\}$"):
        parse_options({"max_tpr_at_fpr": gate, "reference_model": "models:/r/1"})
    # the accepted forms, JSON's string keys included
    for ok in ("0.01:0.05", [(0.01, 0.05)], {0.01: 0.05}, {"0.01": "0.05"}):
        assert parse_options({"max_tpr_at_fpr": ok, "reference_model": "models:/r/1"})[1].gate.budgets == (
            (0.01, 0.05),)


def test_a_cache_folder_that_cannot_be_made_is_named_not_an_oserror(tmp_path, monkeypatch):
    """$MLFLOW_MIA_CACHE (no option parsing on the way) pointing at a device: a named ValueError."""
    from mlflow_mia.signals.cache import SignalCache

    with pytest.raises(ValueError, match=r"^cache folder '/dev/null' is not a folder \(it is a device, pipe or "
                                         r"socket\)"):
        SignalCache("/dev/null")
    monkeypatch.setenv("MLFLOW_MIA_CACHE", "/dev/null")
    with pytest.raises(ValueError, match=r"^cache folder '/dev/null' is not a folder"):
        SignalCache()


@pytest.mark.parametrize("command", ["audit", "compare"])
def test_bootstrap_rounds_minus_one_is_refused(command, capsys):
    assert main([command, "--bootstrap-rounds", "-1"]) == 2
    assert "bootstrap_rounds must be an int >= 0, got '-1'" in capsys.readouterr().err


def test_mlproject_blank_parameters_are_not_given():
    args = build_parser().parse_args(["audit", "--fprs", "", "--max-length", "", "--log-texts", "", "--device", "",
                                      "--max-tpr-at-fpr", "", "--num-masks", ""])
    assert _flat_config(args) == {"label_column": "is_member"}


def test_hash_key_is_resolved_once_at_the_boundary(tmp_path, monkeypatch):
    from mlflow_mia.hashing import HashKey

    monkeypatch.delenv("MLFLOW_MIA_HASH_KEY", raising=False)
    first, second = parse_options({})[1].hash_key, parse_options({})[1].hash_key
    assert isinstance(first, HashKey) and first.is_random and first.key != second.key
    monkeypatch.setenv("MLFLOW_MIA_HASH_KEY", "e" * 40)
    assert parse_options({})[1].hash_key.key == b"e" * 40
    key = tmp_path / "k"
    key.write_text("f" * 40)
    key.chmod(0o600)
    assert parse_options({"hash_key_file": str(key)})[1].hash_key.source == "file"
    assert "f" * 40 not in repr(parse_options({"hash_key_file": str(key)})[1])


@pytest.mark.parametrize("key, raw, value", [
    ("num_masks", "10", 10), ("num_masks", "10.0", 10), ("num_masks", 4.0, 4), ("num_masks", " 7 ", 7),
    ("mask_rate", "0.2", 0.2), ("mask_rate", 1, 1.0), ("delta", "1e-3", 1e-3),
    ("log_texts", "yes", True), ("log_texts", "0", False), ("log_texts", 1, True),
    ("fprs", "0.1, 0.01", (0.1, 0.01)), ("fprs", 0.1, (0.1,)), ("fprs", ["0.1", 0.01], (0.1, 0.01)),
    ("attacks", "loss,likelihood_ratio", ("loss", "likelihood_ratio")), ("signal", "PLL", "pll"),
    ("text_column", 3, "3"), ("population_data", " p.csv ", "p.csv"),
])
def test_values_from_any_front_end_are_read_by_their_declaration(key, raw, value):
    from mlflow_mia.option import coerce

    out = coerce(options_for("mia")[key].field, raw)
    assert out == value and type(out) is type(value)


@pytest.mark.parametrize("key, raw", [("num_masks", True), ("num_masks", "2.5"), ("num_masks", 0),
                                      ("mask_rate", "nan"), ("mask_rate", 1.5), ("log_texts", "maybe"),
                                      ("log_texts", 2), ("fprs", [0.1, True]), ("seed", -1), ("top_records", "x")])
def test_a_value_that_does_not_fit_names_the_key_and_the_form(key, raw):
    from mlflow_mia.option import coerce

    of = options_for("mia")[key].field
    with pytest.raises(ValueError) as info:
        coerce(of, raw)
    assert str(info.value) == f"{key} must be {of.expected()}, got {raw!r}"


def test_energy_reduction_changes_the_cache_key_only_when_not_sum():
    from mlflow_mia.config import SignalConfig

    assert "energy_reduction" not in SignalConfig().cache_spec()
    assert SignalConfig(energy_reduction="sum").cache_spec() == SignalConfig().cache_spec()
    assert SignalConfig(energy_reduction="mean").cache_spec()["energy_reduction"] == "mean"
    with pytest.raises(ValueError, match="energy_reduction must be one of 'sum', 'mean', got 'max'"):
        SignalConfig(energy_reduction="max")
    config, _ = parse_options(_flat_config(build_parser().parse_args(["audit", "--energy-reduction", "mean"])))
    assert config.signal.energy_reduction == "mean"


@pytest.mark.parametrize("references, expected", [
    (None, ("loss", "zlib", "min_k", "min_k_plus_plus")),
    ("models:/r@x", ("loss", "zlib", "min_k", "min_k_plus_plus", "likelihood_ratio", "rmia")),
    ("models:/r@x,models:/s@x", ("loss", "zlib", "min_k", "min_k_plus_plus", "likelihood_ratio", "lira_offline",
                                 "rmia"))])
def test_a_gate_without_named_attacks_runs_every_attack_the_references_allow(references, expected):
    from mlflow_mia.options.audit import parse_options

    base = {"reference_model": references} if references else {}
    assert parse_options({**base, "max_tpr_at_fpr": "0.01:0.05"})[0].attacks == expected
    assert parse_options(base)[0].attacks == ("loss", "likelihood_ratio")  # no gate: the default
    named = parse_options({**base, "max_tpr_at_fpr": "0.01:0.05", "attacks": ["loss"]})[0].attacks
    assert named == expected  # naming one attack cannot shrink the gate's set
    extra = parse_options({"max_tpr_at_fpr": "0.01:0.05", "attacks": ["neighbourhood"]})[0].attacks
    assert extra == ("loss", "zlib", "min_k", "min_k_plus_plus", "neighbourhood")  # named attacks add to it


@pytest.mark.parametrize("config,match", [
    ({"max_tpr_at_fpr": "0.01:0.2", "confidence": 0.0001}, "confidence 0.0001 is not allowed with a release gate"),
    ({"max_tpr_at_fpr": "0.1:1"}, r"maximum TPR must be a finite number in \[0, 1\)"),
    ({"max_tpr_at_fpr": "0.01:inf"}, "finite"),
])
def test_a_gate_that_would_pass_on_no_evidence_is_refused_where_it_is_parsed(config, match):
    from mlflow_mia.options.audit import parse_options

    with pytest.raises(ValueError, match=match):
        parse_options(config)


@pytest.mark.parametrize("config,match", [
    ({"max_exposure": "inf"}, "max_exposure must be a finite number > 0"),
    ({"max_epsilon_lower_bound": "inf"}, "max_epsilon_lower_bound must be a finite number > 0"),
    ({"max_exposure": 4, "confidence": 0.5}, "confidence 0.5 is not allowed with a release gate"),
])
def test_canary_budgets_must_be_finite_and_the_gate_confident(config, match):
    from mlflow_mia.options.canary import parse_canary_config

    with pytest.raises(ValueError, match=match):
        parse_canary_config({"method": "canaries", **config})


def test_a_tpr_budget_above_one_half_is_refused_unless_allowed_and_is_then_carried_as_loose(capsys):
    """``0.01:0.9999`` passes a model whose attacks find nearly every member: it states nothing."""
    from mlflow_mia.options.canary import parse_canary_config

    with pytest.raises(ValueError, match=r"loose release budget\(s\) 0.01:0.9999: a TPR budget above 0.5 passes a "
                                         r"model whose attacks find every other member, so a pass shows almost "
                                         r"nothing about the model; give a tighter budget, or accept it with "
                                         r"--allow-loose-budget \(evaluator key allow_loose_budget\)"):
        parse_options({"max_tpr_at_fpr": "0.01:0.05,0.01:0.9999"})
    _, options = parse_options({"max_tpr_at_fpr": "0.01:0.05,0.001:0.9999", "allow_loose_budget": True})
    assert options.allow_loose_budget and options.gate.loose == ("0.001:0.9999",)
    assert parse_options({"max_tpr_at_fpr": "0.01:0.5"})[1].gate.loose == ()  # 0.5 itself is not loose
    # the command refuses it at parse time (exit 2), before any data or model is read (this file: it exists)
    assert main(["audit", "--target", "nowhere", "--data", __file__, "--max-tpr-at-fpr", "0.01:0.9999"]) == 2
    assert "loose release budget(s) 0.01:0.9999" in capsys.readouterr().err
    # one declaration, on every surface with a gate: --help, evaluator keys, MLproject, the options reference
    reference = (REPO / "docs" / "reference" / "options.md").read_text(encoding="utf-8")
    assert ("| `allow_loose_budget` | `--allow-loose-budget` | `audit`, `compare`, `ner-audit`, `canary-audit`, `mia`, "
            "`ner_prompts`, `canaries` |") in reference
    for command in ("audit", "compare", "ner-audit", "canary-audit"):
        assert "--allow-loose-budget" in _subparser(command).format_help()
        assert mlproject_parameters(command)["allow_loose_budget"] == ("string", "false")
    assert {"allow_loose_budget", "allow_seeded_canaries"} <= set(options_for("canaries"))
    assert parse_canary_config({"method": "canaries", "max_exposure": 1e308, "allow_loose_budget": "true"}
                               )[1].allow_loose_budget


def test_a_seeded_canary_set_or_an_exposure_budget_above_its_space_is_refused_with_a_gate_unless_allowed():
    """The red team found ``seed=1234`` among 5 candidates in 4 s; ``--max-exposure 1e308`` can never fail."""
    from mlflow_mia.canaries import make_canaries
    from mlflow_mia.options.canary import parse_canary_config

    templates = ["my pin is {digits:4}", "call {name}"]  # the largest candidate space: 10**4, 13.29 bits
    seeded = make_canaries(20, templates, seed=1234)
    drawn = make_canaries(20, templates)

    def options(**keys):
        return parse_canary_config({"method": "canaries", **keys})[1]

    with pytest.raises(ValueError, match=r"the canary set was drawn from an explicit seed \(make_canaries\(seed=...\)\)"
                                         r": whoever knows or guesses the seed regenerates every secret and inclusion "
                                         r"bit .* give --allow-seeded-canaries \(evaluator key allow_seeded_canaries\): "
                                         r"the audit is then recorded as not a release audit"):
        options(max_exposure=4).gate(seeded)
    assert "1234" not in _message(lambda: options(max_exposure=4).gate(seeded))  # the seed is never printed
    assert options().gate(seeded) is None  # no gate: a seeded set is a demo or a test, audited as such
    allowed = options(max_exposure=4, allow_seeded_canaries=True).gate(seeded)
    assert (allowed.release, allowed.loose) == (False, ())
    assert options(max_exposure=4).gate(drawn).release is True
    with pytest.raises(ValueError, match=r"loose release budget\(s\) canary_exposure:1e\+308: a mean exposure budget "
                                         r"above 13.29 bits, the largest candidate space of this canary set \(template "
                                         r"'user_0'\), can never be exceeded, .* --allow-loose-budget"):
        options(max_exposure=1e308).gate(drawn)
    assert options(max_exposure=13.2).gate(drawn).loose == ()
    loose = options(max_exposure=1e308, allow_loose_budget=True).gate(drawn)
    assert (loose.loose, loose.release) == (("canary_exposure:1e+308",), True)


def _message(call) -> str:
    with pytest.raises(ValueError) as info:
        call()
    return str(info.value)
