"""The path each of four settings takes from the command line to its use, measured by tracing a tiny audit.

``mlflow-mia audit`` (and ``mlflow-mia compare``) runs in process under :func:`sys.setprofile`; every call of a package function that
receives the setting (a parameter of its name or one of its keys, a flat dict holding it, a config or options
object holding it, up to three levels deep, or the parsed ``Gate``) is recorded with its module, up to the
first call where the setting is used:

- ``num_masks``: stage 1's signals (``mlflow_mia.signals``);
- ``fprs``: the population thresholds (``audits.membership.scoring._population``);
- ``references`` (the ``--reference`` models): stage 1's signals (``mlflow_mia.signals``);
- the gate budget (``--max-tpr-at-fpr``): its check (``metrics.gate.Gate.check``).

A *room* is a run of consecutive calls in one module; a module met again after another room is
*re-entered*. Issue 33 asks for none: each setting is parsed once at the command line's boundary
(``entrypoints.common.audit_settings`` -> ``options``) and the parsed settings go strictly down from
there. An object checking itself as it is built (a ``__post_init__`` and what it calls) belongs to the
call that builds it: it is the declaration checking its value, not a hand-off.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from collections.abc import Mapping
from pathlib import Path

import mlflow
import pandas as pd
import pytest

import mlflow_mia

ROOT = str(Path(mlflow_mia.__file__).parent)

#: The names a setting travels under (parameter names, flat keys, config fields).
NAMES = {"num_masks": ("num_masks",), "fprs": ("fprs",), "references": ("reference_model", "references", "reference"),
         "gate": ("max_tpr_at_fpr", "gate")}

#: Where each setting is used: a module prefix, or ``(module, function)``.
USE = {"num_masks": "mlflow_mia.signals.", "fprs": ("mlflow_mia.audits.membership.scoring", "_population"),
       "references": "mlflow_mia.signals.", "gate": ("mlflow_mia.metrics.gate", "check")}

_GENERATOR = 0x20 | 0x80 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR: a resumption is no new call


def _carries(value, names, depth=0) -> bool:
    if value is None or depth > 3:
        return False
    if type(value).__name__ == "Gate":
        return "gate" in names
    if type(value).__name__ == "Namespace":  # the parsed command line
        return any(getattr(value, n, None) is not None for n in names)
    if isinstance(value, Mapping):
        return any(isinstance(k, str) and k in names for k in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [(f.name, getattr(value, f.name, None)) for f in dataclasses.fields(value)]
        return any(n in names and v is not None for n, v in fields) or any(
            _carries(v, names, depth + 1) for _, v in fields if dataclasses.is_dataclass(v))
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # Settings(config, options)
        return any(_carries(v, names, depth + 1) for v in value)
    return False


def _used(key, module, function) -> bool:
    use = USE[key]
    return module.startswith(use) if isinstance(use, str) else (module, function) == use


def trace(run) -> dict[str, list[tuple[str, list[str]]]]:
    """Run ``run()`` under a profiler; each setting's rooms up to its use: ``[(module, ["f(param)", ...])]``."""
    calls = {key: [] for key in NAMES}
    done, resumed, checking = set(), set(), set()

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "return" and id(frame) in checking:
            checking.discard(id(frame))
            return
        if event != "call" or not code.co_filename.startswith(ROOT) or checking:
            return
        if code.co_name == "__post_init__":  # an object checking itself as it is built: part of the building call
            checking.add(id(frame))
            return
        if code.co_flags & _GENERATOR:
            if id(frame) in resumed:
                return
            resumed.add(id(frame))
        params = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        module = frame.f_globals.get("__name__", "?")
        for key, names in NAMES.items():
            if key in done:
                continue
            param = next((p for p in params if (p in names and frame.f_locals.get(p) is not None)
                          or _carries(frame.f_locals.get(p), names)), None)
            if param is not None:
                calls[key].append((module, f"{code.co_name}({param})"))
                if _used(key, module, code.co_name):
                    done.add(key)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    rooms = {}
    for key, seen in calls.items():
        assert key in done, f"{key} never reached its use {USE[key]}"
        out = []
        for module, call in seen:
            if not out or out[-1][0] != module:
                out.append((module, []))
            if call not in out[-1][1]:
                out[-1][1].append(call)
        rooms[key] = out
    return rooms


def reentered(rooms) -> list[str]:
    modules = [module for module, _ in rooms]
    return sorted({m for m in modules if modules.count(m) > 1})


@pytest.fixture
def tiny_audit(tmp_path, monkeypatch):
    """``mlflow-mia audit`` argv for two tiny random BERTs in folders, a 60-text pool and a 60-text population."""
    from mlflow_mia.signals.testing import WORDS, tiny_bert

    rng = random.Random(0)
    words = [w for w in WORDS if w.isalpha()]
    texts = list(dict.fromkeys(" ".join(rng.choice(words) for _ in range(rng.randint(6, 10))) for _ in range(300)))
    pd.DataFrame({"text": texts[:60], "is_member": [1] * 30 + [0] * 30,
                  "article_id": [f"a{i // 2}" for i in range(60)]}).to_csv(tmp_path / "pool.csv", index=False)
    pd.DataFrame({"text": texts[60:120]}).to_csv(tmp_path / "population.csv", index=False)
    for name, seed in (("target", 1), ("reference", 2)):
        model, tok = tiny_bert(seed=seed)
        model.save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    old = mlflow.get_tracking_uri()
    yield ["audit", "--target", str(tmp_path / "target"), "--reference", str(tmp_path / "reference"),
           "--data", str(tmp_path / "pool.csv"), "--population", str(tmp_path / "population.csv"),
           "--group-column", "article_id", "--num-masks", "2", "--fprs", "0.1,0.05", "--bootstrap-rounds", "0",
           "--max-tpr-at-fpr", "0.1:0.99", "--allow-loose-budget", "--cache-dir", str(tmp_path / "cache"), "--quiet",
           "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--no-tag-model-version"]
    while mlflow.active_run() is not None:
        mlflow.end_run()
    mlflow.set_tracking_uri(old)


def test_each_setting_passes_through_each_module_once(tiny_audit):
    from mlflow_mia.entrypoints.cli import main

    codes = []
    rooms = trace(lambda: codes.append(main(tiny_audit)))
    assert codes == [0]
    measured = {key: reentered(r) for key, r in rooms.items()}
    paths = "\n".join(f"{key}: " + " -> ".join(m.removeprefix("mlflow_mia.") for m, _ in r) for key, r in rooms.items())
    assert measured == {key: [] for key in NAMES}, f"the measured paths:\n{paths}"
    # Parsed once: the command line's values reach the option parser through one call, and no module of the
    # front end (entrypoints) or of the parser (options) is met after the audit starts (pipeline).
    for key, r in rooms.items():
        modules = [m for m, _ in r]
        start = modules.index("mlflow_mia.pipeline.membership")
        assert not [m for m in modules[start:] if m.startswith(("mlflow_mia.entrypoints", "mlflow_mia.options"))], key
    # Each path starts at the command line and ends where the setting is used.
    for key, r in rooms.items():
        assert r[0][0].startswith("mlflow_mia.") and _used(key, r[-1][0], r[-1][1][-1].split("(")[0]), key


def test_compare_passes_each_setting_through_each_module_once(tracking):
    """``mlflow-mia compare`` over two registered versions: its first audit's path (the trace stops at each
    setting's first use) enters each module once too, through ``pipeline.compare``."""
    from mlflow_mia.entrypoints.cli import main

    argv = ["compare", "--models", "tgt", *tracking.cli_args("--max-tpr-at-fpr", "0.1:0.99", "--allow-loose-budget",
                                                        "--run-name", "paths")]
    codes = []
    rooms = trace(lambda: codes.append(main(argv)))
    assert codes[0] in (0, 3)  # the gate may pass or be inconclusive on the tiny pool; its check ran either way
    paths = "\n".join(f"{key}: " + " -> ".join(m.removeprefix("mlflow_mia.") for m, _ in r) for key, r in rooms.items())
    assert {key: reentered(r) for key, r in rooms.items()} == {key: [] for key in NAMES}, paths
    for key, r in rooms.items():
        modules = [m for m, _ in r]
        assert "mlflow_mia.pipeline.compare" in modules, paths
