"""The package's layers import downwards only: the folder layout reads top to bottom.

data and configs -> canaries (planted records) -> signals (per model) -> attacks -> metrics -> plots -> options ->
models (where models come from) -> engines (where stage 1 runs) -> audits (membership,
NER, canary) -> tracking (MLflow logging and registry tags) -> pipeline (runs an audit, hands the
result to tracking; the AUDITS registry) -> demo -> analyze -> entry points.
A module may import its own layer and the ones below it, never one above (not even
inside a function): a new capability then has one obvious home. No two modules import
each other, directly or through others, even inside one folder (module-level and
in-function imports both count), and no file is longer than :data:`MAX_LINES` lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mlflow_mia

ROOT = Path(mlflow_mia.__file__).parent

#: Bottom to top. Top-level modules of the package count as the bottom layer.
LAYERS = ("core", "canaries", "signals", "attacks", "metrics", "plots", "options", "models", "engines", "audits", "tracking",
          "pipeline", "demo", "analyze", "entrypoints")
CORE = {"__init__", "config", "data", "hashing", "naming", "option"}
#: The house rule on file length.
MAX_LINES = 450


def layer_of(module: str) -> str:
    """``mlflow_mia.a.b`` -> ``a`` (a package) or ``core`` (a top-level module)."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in CORE:
        return "core"
    return parts[1]


def imports(path: Path, module: str = "", known=frozenset()):
    """Every ``mlflow_mia`` module imported in ``path``, at any depth, with its line.

    Relative imports (``from .roc import x``) are resolved against ``module``, the
    dotted name of ``path``; without it they are skipped. ``from a import b`` yields
    ``a.b`` when that is one of the ``known`` module names, else ``a``.
    """
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if not module:
                    continue
                package = module.split(".")
                package = package[:len(package) - node.level + (path.name == "__init__.py")]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in dict.fromkeys(names):
            if name == "mlflow_mia" or name.startswith("mlflow_mia."):
                yield name, node.lineno


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        yield ".".join(rel.parts).removesuffix(".__init__"), path


def upward_imports(modules) -> list[str]:
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad = []
    for module, path in modules:
        here = layer_of(module)
        for target, line in imports(path):
            there = layer_of(target)
            if module == "mlflow_mia" and target.startswith("mlflow_mia."):
                continue  # the package's lazy public names (mlflow_mia.__getattr__) point anywhere
            if rank[there] > rank[here]:
                bad.append(f"{module}:{line} ({here}) imports {target} ({there})")
    return bad


def import_circles(modules) -> list[str]:
    """Each set of modules that import one another, directly or through others, as ``a <-> b <-> c``.

    The graph's strongly connected components (Tarjan) of more than one module, or a module
    that imports itself; ``mlflow_mia``'s lazy public names (``importlib``, no import
    statement) make no edge. Sorted, so the list reads the same on every run.
    """
    modules = list(modules)
    known = {module for module, _ in modules}
    graph = {module: sorted({t for t, _ in imports(path, module, known) if t in known}) for module, path in modules}
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                circles.append(" <-> ".join(sorted(component)))

    for v in graph:
        if v not in index:
            visit(v)
    return sorted(circles)


def long_files(modules, limit: int = MAX_LINES) -> list[str]:
    """``module (N lines)`` for each file longer than ``limit`` lines."""
    out = []
    for module, path in modules:
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            out.append(f"{module} ({n} lines)")
    return out


def test_every_folder_is_a_known_layer():
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(LAYERS) - {"core"}


def test_no_module_imports_a_layer_above_its_own():
    assert upward_imports(_modules()) == []


def test_the_check_finds_an_upward_import(tmp_path):
    fake = tmp_path / "fake.py"
    fake.write_text("def f():\n    from mlflow_mia.tracking.audit_log import log_audit\n")
    assert upward_imports([("mlflow_mia.signals.fake", fake)]) == [
        "mlflow_mia.signals.fake:2 (signals) imports mlflow_mia.tracking.audit_log (tracking)"]
    assert upward_imports([("mlflow_mia.entrypoints.fake", fake)]) == []


def test_no_import_circles():
    assert import_circles(_modules()) == []


def test_no_file_is_over_the_line_limit():
    assert long_files(_modules()) == []


def _fake_package(tmp_path, files: dict[str, str]):
    """``(module, path)`` pairs of fake modules under ``mlflow_mia.engines`` holding ``files``' code."""
    out = []
    for name, code in files.items():
        path = tmp_path / f"{name}.py"
        path.write_text(code)
        out.append((f"mlflow_mia.engines.{name}", path))
    return out


def test_the_check_finds_an_import_circle_inside_one_folder(tmp_path):
    pair = _fake_package(tmp_path, {
        "fake_a": "from mlflow_mia.engines.fake_b import g\n",
        "fake_b": "def g():\n    from mlflow_mia.engines import fake_a\n",  # in a function: counts as well
        "fake_c": "from .fake_a import f\n",  # imports the circle, is not part of it
    })
    assert import_circles(pair) == ["mlflow_mia.engines.fake_a <-> mlflow_mia.engines.fake_b"]
    assert import_circles(pair[:1] + pair[2:]) == []
    selfish = _fake_package(tmp_path, {"fake_d": "from . import fake_d\n"})
    assert import_circles(selfish) == ["mlflow_mia.engines.fake_d"]


def test_the_check_finds_a_file_over_the_line_limit(tmp_path):
    files = _fake_package(tmp_path, {"fake_long": "x = 1\n" * (MAX_LINES + 1), "fake_short": "x = 1\n" * MAX_LINES})
    assert long_files(files) == [f"mlflow_mia.engines.fake_long ({MAX_LINES + 1} lines)"]


def test_the_check_finds_a_circle_through_a_third_module(tmp_path):
    files = _fake_package(tmp_path, {
        "fake_a": "from mlflow_mia.engines.fake_b import f\n",
        "fake_b": "def g():\n    import mlflow_mia.engines.fake_c\n",
        "fake_c": "from mlflow_mia.engines.fake_a import h\n",
        "fake_d": "from mlflow_mia.engines.fake_a import h\n"})
    assert import_circles(files) == [
        "mlflow_mia.engines.fake_a <-> mlflow_mia.engines.fake_b <-> mlflow_mia.engines.fake_c"]
