"""The audit registry (mlflow_mia/pipeline/__init__.py): one Audit per kind, found by method and by command."""

from __future__ import annotations

import dataclasses

import pytest

from mlflow_mia.audits.base import Audit, Settings
from mlflow_mia.config import AuditConfig, NerAuditConfig
from mlflow_mia.canaries.config import CanaryAuditConfig
from mlflow_mia.pipeline import AUDITS, LoggedAudit, audit_for, get_audit, register_audit

#: What every subcommand's --help description ends with (entrypoints/commands.py).
OPTIONS_POINTER = "Every option in full: docs/reference/options.md."

TEXT_FIELDS = ("name", "command", "help", "description", "target_flag")


def test_each_audit_kind_is_registered_by_its_evaluator_method_with_every_part():
    assert {name: a.command for name, a in AUDITS.items()} == {
        "mia": "audit", "ner_prompts": "ner-audit", "canaries": "canary-audit"}
    for audit in AUDITS.values():
        assert type(audit) is LoggedAudit, audit.name
        assert all(callable(getattr(audit, f.name)) for f in dataclasses.fields(LoggedAudit)
                   if f.name not in (*TEXT_FIELDS, "scope")), audit.name
    assert {name: a.scope for name, a in AUDITS.items()} == {"mia": "mia.", "ner_prompts": "mia.ner.",
                                                             "canaries": "mia.canary."}


def test_an_audit_is_complete_where_it_is_built_and_registration_adds_the_logging_parts():
    audit_fields = [f.name for f in dataclasses.fields(Audit)]
    assert audit_fields == [*TEXT_FIELDS, "parse", "load_inputs", "resolve", "signals", "score", "gate"]
    assert [f.name for f in dataclasses.fields(LoggedAudit)] == [*audit_fields, "run", "log", "metrics", "scope"]
    for f in dataclasses.fields(LoggedAudit):  # no part left to fill in later
        assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, f.name
    with pytest.raises(TypeError, match="missing 4 required keyword-only arguments: 'run', 'log', 'metrics', and "
                                        "'scope'"):
        register_audit(AUDITS["mia"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        AUDITS["mia"].run = AUDITS["ner_prompts"].run


def test_registration_keeps_every_part_of_the_audit_it_is_given():
    from mlflow_mia.audits.membership.kind import MEMBERSHIP

    registered = AUDITS["mia"]
    assert all(getattr(registered, f.name) is getattr(MEMBERSHIP, f.name) for f in dataclasses.fields(Audit))


def test_every_audit_logs_with_the_same_signature():
    import inspect

    for audit in AUDITS.values():
        params = inspect.signature(audit.log).parameters
        assert list(params)[:2] == ["result", "run_id"], audit.name
        assert params["settings"].kind is inspect.Parameter.KEYWORD_ONLY, audit.name
        assert [n for n, p in params.items() if p.default is inspect.Parameter.empty] == ["result", "settings"], \
            audit.name


@pytest.mark.parametrize("method, config_type", [("mia", AuditConfig), ("ner_prompts", NerAuditConfig),
                                                 ("canaries", CanaryAuditConfig)])
def test_parse_gives_settings_of_the_audits_own_config(method, config_type):
    settings = AUDITS[method].parse({"mia": {"method": method, "seed": 3}})
    assert isinstance(settings, Settings) and type(settings.config) is config_type
    config, options = settings  # still unpacks as the parsers' (config, options)
    assert (config.signal if method == "mia" else config).seed == 3 and options is settings.options


def test_the_method_key_selects_the_audit_and_an_unknown_one_lists_the_registered():
    assert audit_for({"mia": {"method": "ner_prompts"}}) is AUDITS["ner_prompts"]
    assert audit_for({"target_model": "models:/m/1"}) is AUDITS["mia"]  # the default method
    with pytest.raises(ValueError, match=r"unknown audit method 'nerr'; use one of canaries, mia, ner_prompts"):
        get_audit("nerr")


def test_a_second_audit_under_a_taken_name_or_command_is_refused_unless_forced():
    membership = AUDITS["mia"]
    parts = {"run": membership.run, "log": membership.log, "metrics": membership.metrics, "scope": "mia."}
    with pytest.raises(ValueError, match="already registered; pass force=True"):
        register_audit(dataclasses.replace(membership, name="other"), **parts)  # the command 'audit' is taken
    try:
        replaced = register_audit(membership, force=True, run=membership.run, log=membership.log,
                                  metrics=lambda result, settings: {}, scope="mia.")
        assert AUDITS["mia"] is replaced and replaced.metrics(None, None) == {}
    finally:
        AUDITS["mia"] = membership


def test_every_audit_gets_its_subcommand_from_the_registry():
    from mlflow_mia.entrypoints.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert list(sub.choices) == [a.command for a in AUDITS.values()] + ["compare", "build-demo", "train-shadows", "analyze"]
    for audit in AUDITS.values():
        assert sub.choices[audit.command].description == f"{audit.description} {OPTIONS_POINTER}"
