"""Types are checked: mypy accepts the packages ``[tool.mypy]`` in pyproject.toml names, with no ``# type: ignore``.

The README's test command (what CI runs) runs this file, so a change that breaks an annotation (an
``Audit`` part that takes what its neighbour does not give, a ``run`` or ``metrics`` of another result
type, an Optional passed where a value is needed) fails the suite with mypy's report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api", reason="mypy comes with the test extra: pip install -e '.[test]'")

REPO = Path(__file__).resolve().parents[1]
CHECKED = ["mlflow_mia/audits", "mlflow_mia/attacks", "mlflow_mia/metrics", "mlflow_mia/pipeline"]


def test_the_checked_packages_are_the_audit_contract_and_its_neighbours():
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["tool"]["mypy"]["files"] == CHECKED
    assert project["project"]["requires-python"] == f">={project['tool']['mypy']['python_version']}"


def test_no_checked_module_silences_the_checker():
    silenced = [f"{path.relative_to(REPO)}:{n}" for folder in CHECKED
                for path in sorted((REPO / folder).rglob("*.py"))
                for n, line in enumerate(path.read_text().splitlines(), 1) if "type: ignore" in line]
    assert silenced == [], "fix the types instead of silencing mypy"


def test_mypy_accepts_the_checked_packages(monkeypatch):
    monkeypatch.chdir(REPO)  # mypy reads [tool.mypy] (files, overrides) from ./pyproject.toml
    # The cache (.mypy_cache, git-ignored) keeps a re-run to seconds; the first run takes about a minute.
    stdout, stderr, status = api.run(["--config-file", "pyproject.toml", "--cache-dir", ".mypy_cache",
                                      "--no-error-summary", "--show-error-codes"])
    assert status == 0, f"mypy found type errors (run `.venv/bin/mypy` to see them):\n{stdout}{stderr}"


def test_mypy_refuses_parts_of_another_audit_kind(monkeypatch, tmp_path):
    """The registration is typed: the canary audit's ``metrics`` or ``run`` on the membership audit is an error."""
    monkeypatch.chdir(REPO)
    registration = tmp_path / "registration.py"
    registration.write_text("\n".join([
        "from mlflow_mia.audits.membership.kind import MEMBERSHIP",
        "from mlflow_mia.pipeline import canary, membership, register_audit",
        "from mlflow_mia.tracking.audit_log import log_audit",
        "register_audit(MEMBERSHIP, run=membership.evaluate_run, log=log_audit, metrics=canary.evaluator_metrics, scope='mia.')",
        "register_audit(MEMBERSHIP, run=canary.evaluate_run, log=log_audit, metrics=membership.evaluator_metrics, scope='mia.')",
        "register_audit(MEMBERSHIP, run=membership.evaluate_run, log=log_audit, metrics=membership.evaluator_metrics, scope='mia.')",
    ]) + "\n")
    stdout, stderr, status = api.run(["--config-file", "pyproject.toml", "--cache-dir", ".mypy_cache",
                                      "--no-error-summary", "--hide-error-context", str(registration)])
    errors = [line for line in stdout.splitlines() if ": error: " in line]
    assert status == 1, stdout + stderr
    lines = sorted({int(e.split(".py:")[1].split(":")[0]) for e in errors})
    assert lines == [4, 5], stdout  # the last line, whose parts agree, passes
    assert ('Argument "metrics" to "register_audit" has incompatible type "Callable[[CanaryAuditResult, '
            'Settings[CanaryAuditConfig, CanaryOptions]], dict[str, float]]"; expected "Callable[[AuditResult, '
            'Settings[AuditConfig, MiaOptions]], dict[str, float]]"') in errors[0]
    assert any('Cannot infer value of type parameter "InputsT" of "register_audit"' in e for e in errors[1:])
