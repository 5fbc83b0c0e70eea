"""Every ``Examples`` section of the package runs: doctest on each module of mlflow_mia that has one.

Modules are found from the files (nothing is imported to list them). A module whose
import needs an optional extra that is not installed (pyspark, evaluate, ...) is
skipped with a reason naming the module and the missing package.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest

PACKAGE = Path(importlib.util.find_spec("mlflow_mia").origin).parent
PROMPT = re.compile(r"^\s*>>>", re.MULTILINE)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules_with_examples() -> list[tuple[str, int]]:
    """``(module name, number of >>> lines in its source)`` of every package module that has examples."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        n_examples = len(PROMPT.findall(path.read_text(encoding="utf-8")))
        if n_examples:
            found.append((_module_name(path), n_examples))
    return found


MODULES = _modules_with_examples()


def test_the_package_has_examples_in_every_layer():
    names = {name for name, _ in MODULES}
    for module in ("mlflow_mia.metrics.roc", "mlflow_mia.signals.energy", "mlflow_mia.attacks.loss",
                   "mlflow_mia.plots.roc", "mlflow_mia.config"):
        assert module in names


@pytest.mark.parametrize(("module_name", "n_examples"), MODULES, ids=[name for name, _ in MODULES])
def test_examples_run(module_name, n_examples):
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.split(".")[0] == "mlflow_mia":
            raise
        pytest.skip(f"{module_name} needs the optional package {exc.name!r}, which is not installed")
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    try:
        for test in doctest.DocTestFinder().find(module, module_name):
            runner.run(test, out=report.append)
    finally:
        if "matplotlib.pyplot" in sys.modules:  # the plot examples leave their figures open
            sys.modules["matplotlib.pyplot"].close("all")
    assert runner.failures == 0, "".join(report)
    # every >>> line of the source is an example doctest ran (none sits where doctest cannot see it)
    assert runner.tries == n_examples
