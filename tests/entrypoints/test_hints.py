"""Hints name the option as the user's front end spells it and suggest the close name (issue 48, item 3)."""

from __future__ import annotations

import pandas as pd
import pytest

from mlflow_mia.attacks import check_attack_names
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.entrypoints.cli import main
from mlflow_mia.entrypoints.commands import spelled_for
from mlflow_mia.option import OptionError
from mlflow_mia.options.audit import parse_options
from mlflow_mia.signal_kinds import signal_kind

POOL = pd.DataFrame({"text": ["a b c", "d e f"], "is_member": [1, 0], "article_id": ["x", "y"]})


def test_a_missing_column_names_the_option_in_each_spelling(monkeypatch):
    with pytest.raises(OptionError) as caught:
        AuditDataset.from_frame(POOL, group_column="patient_id")
    assert str(caught.value) == ("the target pool has no column 'patient_id'; did you mean 'article_id'?; its columns "
                                 "are ['text', 'is_member', 'article_id']: name the right column with "
                                 "\"group_column\"")  # the evaluator key
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    assert spelled_for(caught.value, "audit").endswith("name the right column with --group-column")
    monkeypatch.setenv("MLFLOW_RUN_ID", "abc")
    assert spelled_for(caught.value, "audit").endswith("name the right column with -P group_column=")
    assert spelled_for(ValueError("plain"), "audit") == "plain"


def test_a_close_column_name_is_suggested_and_a_non_text_column_is_named():
    with pytest.raises(OptionError, match=r"no column 'txt'; did you mean 'text'\?"):
        AuditDataset.from_frame(POOL, text_column="txt")
    with pytest.raises(OptionError) as caught:
        PopulationSet.from_frame(pd.DataFrame({"text": ["a"], "n": [5]}), text_column="n")
    assert caught.value.key == "population_text_column"
    assert str(caught.value) == ("the population set's text column 'n' has 1 non-string value(s) (first at row 0: 5): "
                                 "name the text column with \"population_text_column\", or convert it to str")


def test_close_names_for_keys_attacks_and_signal_kinds():
    with pytest.raises(ValueError, match=r"for 'grup_column' did you mean \"group_column\"\?"):
        parse_options({"grup_column": "g"})
    with pytest.raises(ValueError, match=r"for 'lossy' did you mean 'loss'\?; for 'zlb' did you mean 'zlib'\?"):
        check_attack_names(["lossy", "zlb"])
    with pytest.raises(ValueError, match=r"unknown signal kind 'enrgy'; did you mean 'energy'\?"):
        signal_kind("enrgy")


def test_the_command_line_suggests_its_own_flag_and_names_the_column_option(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    assert main(["audit", "--grup-column", "g"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "unrecognized arguments: --grup-column g; for --grup-column did you mean --group-column?")
    POOL.to_csv(tmp_path / "pool.csv", index=False)
    POOL[["text"]].to_csv(tmp_path / "population.csv", index=False)
    assert main(["audit", "--target", "x", "--data", str(tmp_path / "pool.csv"), "--population",
                 str(tmp_path / "population.csv"), "--group-column", "patient_id",
                 "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"]) == 2
    assert capsys.readouterr().err.strip().endswith("name the right column with --group-column")
