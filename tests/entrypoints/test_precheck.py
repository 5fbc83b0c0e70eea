"""Input files are checked before the heavy imports: a missing one is reported in about a second, by its option."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from mlflow_mia.entrypoints.precheck import INPUT_FILES, check_argv, spell_flag


def test_the_early_check_covers_every_declared_input_file():
    from mlflow_mia.entrypoints.commands import build_parser
    from mlflow_mia.options.schema import dest, entries

    declared = {"--" + dest(e).replace("_", "-") for e in entries() if e.field.option.metavar == "PATH"}
    parser = build_parser()
    extra = {a.option_strings[-1] for sub in parser.commands.values()
             for a in sub._actions if a.metavar == "PATH" and a.option_strings}
    written = {"--spark-store", "--record"}  # written by the command, not read
    assert set(INPUT_FILES) == (declared | extra) - written


def test_a_missing_file_is_named_by_its_option_with_close_names(tmp_path, monkeypatch):
    (tmp_path / "pool.csv").write_text("text,is_member\na,1\n")
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    assert check_argv(["audit", "--target", "x", "--data", str(tmp_path / "pool.cvs")]) == (
        "audit", f"the target pool file '{tmp_path / 'pool.cvs'}' does not exist (--data); did you mean 'pool.csv'?")
    assert check_argv(["audit", f"--population={tmp_path}"]) == (
        "audit", f"the population set file '{tmp_path}' is a folder (--population): give the file")
    assert check_argv(["audit", "--data", str(tmp_path / "pool.csv"), "--population", ""]) is None  # blank: unset
    monkeypatch.setenv("MLFLOW_RUN_ID", "abc")
    assert check_argv(["audit", "--data", "nowhere.csv"])[1] == "the target pool file 'nowhere.csv' does not exist (-P data=)"


def test_spelling_follows_the_front_end():
    assert spell_flag("--hash-key-file", mlproject=False) == "--hash-key-file"
    assert spell_flag("--hash-key-file", mlproject=True) == "-P hash_key_file="


def test_the_command_reports_a_missing_file_before_loading_torch(tmp_path):
    """The whole command, in a fresh interpreter: the error within 5 s, and torch, pandas and MLflow never loaded."""
    code = ("import sys; from mlflow_mia.entrypoints.cli import main; rc = main(['audit', '--data', 'missing.csv', "
            "'--target', 'x']); print(sorted({'torch', 'pandas', 'mlflow'} & set(sys.modules))); sys.exit(rc)")
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_RUN_ID"}
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert time.monotonic() - start < 5
    assert out.returncode == 2
    assert out.stdout.strip() == "[]"
    assert out.stderr.strip() == "mlflow-mia audit: error: the target pool file 'missing.csv' does not exist (--data)"
