"""MLproject and docs/reference/options.md are generated from the option declarations, and kept up to date."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from mlflow_mia.entrypoints.cli import build_parser
from mlflow_mia.options.generate import ENTRY_POINTS, REGENERATE, generated_files, main, mlproject_text
from mlflow_mia.options.schema import COMMANDS, options_for

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", ["MLproject", "docs/reference/options.md"])
def test_committed_generated_file_is_up_to_date(path):
    expected = generated_files(REPO)[REPO / path]
    committed = (REPO / path).read_text(encoding="utf-8")
    assert committed == expected, f"{path} is out of date with the option declarations; regenerate it: {REGENERATE}"


def test_check_reports_a_stale_file_and_names_the_command(tmp_path, capsys):
    for path, text in generated_files(tmp_path).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / "MLproject").write_text(mlproject_text().replace("num_masks", "n_masks"), encoding="utf-8")
    assert main(["--root", str(tmp_path), "--check"]) == 1
    assert f"MLproject is out of date; run: {REGENERATE}" in capsys.readouterr().out


def test_mlproject_has_every_entry_point_and_its_defaults_parse():
    from mlflow.projects._project_spec import load_project

    project = load_project(str(REPO))
    assert set(project._entry_points) == set(ENTRY_POINTS) == set(COMMANDS)
    for name in ENTRY_POINTS:
        entry = project.get_entry_point(name)
        args = build_parser().parse_args(shlex.split(entry.compute_command({}, storage_dir=None))[1:])
        assert args.command == name
    demo = project.get_entry_point("build-demo")
    args = build_parser().parse_args(shlex.split(demo.compute_command({"size": "small"}, storage_dir=None))[1:])
    assert (args.size, args.quiet) == ("small", False)


def test_mlproject_keeps_the_parameter_names_and_defaults_of_the_hand_written_file():
    """The parameters with a default (names, types, defaults) of the last hand-written MLproject, still the same.

    Except the options of one model kind or one attack (``signal``, ``num_masks``, ...): ``mlflow run`` logs
    every declared parameter, so they are passed on when given (``-P num_masks=5``) with the same defaults.
    """
    from mlflow.projects._project_spec import load_project

    from mlflow_mia.options.generate import passed_on_options
    from mlflow_mia.options.schema import options_for

    project = load_project(str(REPO))
    audit = project.get_entry_point("audit").parameters
    assert {"num_masks", "signal", "min_k_fraction"} <= passed_on_options("audit") and not {"num_masks", "signal"} & set(audit)
    declared = options_for("audit")
    assert (declared["num_masks"].field.default, declared["signal"].field.default) == (10, "energy")
    assert (audit["delta"].type, float(audit["delta"].default)) == ("float", 1e-5)
    assert audit["attacks"].default == "loss,likelihood_ratio"
    assert project.get_entry_point("canary-audit").parameters["signal"].default == "pll"
    assert project.get_entry_point("ner-audit").parameters["fprs"].default == "0.1,0.01"
    assert project.get_entry_point("canary-audit").parameters["fprs"].default == "0.1,0.01"
    assert {"demo_size", "quiet", "engine"} <= set(audit)
    assert set(project.get_entry_point("build-demo").parameters) == {"size", "quiet"}


def test_options_without_a_default_are_no_parameters_and_reach_the_cli_when_given(tmp_path):
    """MLflow logs every declared parameter (a blank one as ''); undeclared -P values come as --name value."""
    from mlflow.projects._project_spec import load_project

    from mlflow_mia.entrypoints.cli import dashed_flags

    audit = load_project(str(REPO)).get_entry_point("audit")
    blank = {"target", "data", "reference", "population", "text_column", "fprs", "hash_key_file", "max_tpr_at_fpr",
             "rmia_offline_a"}
    assert not blank & set(audit.parameters)  # the demo picks fprs and text_column when they are not given
    key = tmp_path / "my key.bin"
    key.write_bytes(bytes(range(32)))
    key.chmod(0o600)
    given = {"text_column": "body", "hash_key_file": str(key)}
    params, extra = audit.compute_parameters(given, storage_dir=None)
    assert "text_column" not in params and set(extra) == set(given)  # MLflow logs both, as given
    command = shlex.split(audit.compute_command(given, None))
    assert command[-4:] == ["--text_column", "body", "--hash_key_file", str(key)]
    args = build_parser().parse_args(dashed_flags(command[1:]))
    assert (args.command, args.text_column) == ("audit", "body") and args.hash_key_file is not None
    assert build_parser().parse_args(dashed_flags(shlex.split(audit.compute_command({}, None))[1:])).target is None


def test_options_reference_lists_every_key_once_with_its_audit_defaults():
    text = generated_files(REPO)[REPO / "docs" / "reference" / "options.md"]
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    keys = [row.split("`")[1] for row in rows]
    every = {k for surface in (*COMMANDS, "mia", "ner_prompts", "canaries") for k in options_for(surface)}
    assert sorted(keys) == sorted(every)
    fprs = next(row for row in rows if row.startswith("| `fprs`"))
    assert "0.1,0.01,0.001 (`audit`, `compare`, `mia`)" in fprs
    assert "0.1,0.01 (`ner-audit`, `canary-audit`, `ner_prompts`, `canaries`)" in fprs
