"""No module reaches into another's private names: what two modules share is public (issue 46, item 7).

A name with a leading underscore is its module's own. An import of ``_name`` from another module of
the package, or ``module._name`` on an imported module, fails here with the places that do it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mlflow_mia

ROOT = Path(mlflow_mia.__file__).parent


def private_crossings(source: str, module: str) -> list[str]:
    """``"module:line imports other._name"`` for each private name ``source`` takes from another package module."""
    tree = ast.parse(source)
    out, imported = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mlflow_mia") \
                and node.module != module:
            out += [f"{module}:{node.lineno} imports {node.module}.{a.name}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
        elif isinstance(node, ast.Import):
            imported.update({a.asname or a.name: a.name for a in node.names if a.name.startswith("mlflow_mia")})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imported \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            out.append(f"{module}:{node.lineno} reads {imported[node.value.id]}.{node.attr}")
    return out


def test_the_check_finds_both_forms():
    source = "from mlflow_mia.signals.energy import _keep_rows, tokenize\nimport mlflow_mia.hashing as h\nh._as_bytes(1)\n"
    assert private_crossings(source, "mlflow_mia.x") == [
        "mlflow_mia.x:1 imports mlflow_mia.signals.energy._keep_rows", "mlflow_mia.x:3 reads mlflow_mia.hashing._as_bytes"]
    assert private_crossings("from mlflow_mia.x import _own\n", "mlflow_mia.x") == []


def test_no_module_imports_another_modules_private_names():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(("mlflow_mia", *path.relative_to(ROOT).with_suffix("").parts)).removesuffix(".__init__")
        found += private_crossings(path.read_text(encoding="utf-8"), module)
    assert found == []
