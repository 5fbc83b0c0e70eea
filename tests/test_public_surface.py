"""Each module exports what a user or another package needs, no more (issue 46, item 8).

A name in a module's ``__all__`` must be taken from it by a module of another package of
``mlflow_mia`` (``from mlflow_mia.x.y import name``, or ``y.name`` on the imported module), or be
named in full (``mlflow_mia.x.y.name``) in the docs, README, benchmarks or examples: what a user
reads about. A name used only inside its own package stays public (no underscore: the package's
modules share it) but is not exported. Package ``__init__`` files are the curated surfaces and are
not checked here.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import mlflow_mia

ROOT = Path(mlflow_mia.__file__).parent
REPO = ROOT.parent


def module_name(path: Path, base: Path) -> str:
    return ".".join(path.relative_to(base).with_suffix("").parts).removesuffix(".__init__")


def taken_from(source: str, this: str) -> dict[str, set[str]]:
    """``{module: names}`` that ``source`` (module ``this``) takes from modules of other packages."""
    taken: dict[str, set[str]] = defaultdict(set)
    tree = ast.parse(source)
    aliases = {}
    package = this.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mlflow_mia"):
            for a in node.names:
                if node.module.rpartition(".")[0] != package:
                    taken[node.module].add(a.name)
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname and a.name.startswith("mlflow_mia")})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            module = aliases[node.value.id]
            if module.rpartition(".")[0] != package:
                taken[module].add(node.attr)
    return taken


def users_surface() -> dict[str, set[str]]:
    """What other packages, benchmarks and examples import, and what the docs name in full."""
    taken: dict[str, set[str]] = defaultdict(set)
    for path in ROOT.rglob("*.py"):
        for module, names in taken_from(path.read_text(encoding="utf-8"), module_name(path, REPO)).items():
            taken[module] |= names
    texts = [p.read_text(encoding="utf-8", errors="ignore")
             for folder in ("benchmarks", "examples", "docs") for p in (REPO / folder).rglob("*")
             if p.suffix in (".py", ".md") and p.is_file()]
    texts += [(REPO / f).read_text(encoding="utf-8") for f in ("README.md", "CHANGELOG.md") if (REPO / f).exists()]
    for text in texts:
        for dotted in re.findall(r"mlflow_mia(?:\.[A-Za-z_]\w*)+", text):
            module, _, name = dotted.rpartition(".")
            taken[module].add(name)
        for line in re.findall(r"from (mlflow_mia[\w.]*) import ([\w, ()]+)", text):
            taken[line[0]] |= {n.strip(" ()") for n in line[1].split(",")}
    return taken


def exports() -> dict[str, list[str]]:
    """``{module: __all__}`` of every module (not package) that declares one."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            if any(getattr(t, "id", None) == "__all__" for t in targets) and node.value is not None:
                out[module_name(path, REPO)] = list(ast.literal_eval(node.value))
    return out


def test_taken_from_counts_other_packages_only():
    source = ("from mlflow_mia.signals.energy import tokenize\nfrom mlflow_mia.attacks.base import ATTACKS\n"
              "import mlflow_mia.hashing as h\nh.keyed_hash(1)\n")
    taken = taken_from(source, "mlflow_mia.attacks.loss")
    assert taken["mlflow_mia.signals.energy"] == {"tokenize"} and "mlflow_mia.attacks.base" not in taken
    assert taken["mlflow_mia.hashing"] == {"keyed_hash"}


def test_every_exported_name_is_used_outside_its_package_or_documented():
    taken = users_surface()
    extra = {module: sorted(set(names) - taken[module]) for module, names in exports().items()}
    assert {module: names for module, names in extra.items() if names} == {}
