"""What every benchmark here shares: alternated repetitions, medians and spread, the load, a JSON result.

On a shared machine an absolute time says little: the load changes from one minute
to the next. A benchmark here therefore

* picks the anchor's best configuration first (e.g. the pipeline at its best batch
  size), so the ratio is against the strongest setting of the standard tool;
* then runs the contenders in alternated repetitions (anchor, ours, ours, anchor,
  ...), so both see the same load, and reports the per-pair ratios' median and
  spread (min, max) besides the medians of the times;
* records ``os.getloadavg()`` before and after, the command, the torch thread count
  and the machine's CPU count;
* writes ``benchmarks/results/<name>.json`` (:func:`write_result`), from which
  ``benchmarks/make_docs.py`` generates ``docs/benchmarks.md`` and against which
  ``benchmarks/check_regression.py`` compares a new run's ratios.

A ratio is always ``anchor time / our time``: above 1 means mlflow-mia is faster.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Mapping

RESULTS = Path(__file__).resolve().parent / "results"


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages (``os.getloadavg``), rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """``(seconds, fn())`` by ``time.perf_counter``."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def best_setting(settings: Mapping[str, Callable[[], object]], *, repeats: int = 1) -> tuple[str, dict]:
    """The fastest of the anchor's settings (best of ``repeats`` each): ``(name, {name: seconds})``."""
    times = {name: min(timed(fn)[0] for _ in range(repeats)) for name, fn in settings.items()}
    return min(times, key=times.get), {k: round(v, 4) for k, v in times.items()}


def alternate(anchor: Callable[[], object], ours: Callable[[], object], *, pairs: int) -> dict:
    """``pairs`` alternated repetitions (ABBA order) of ``anchor`` and ``ours``.

    Returns
    -------
    dict
        ``anchor_s`` and ``ours_s`` (lists of seconds), ``ratios`` (anchor / ours of
        each pair), and ``ratio`` (median), ``ratio_min``, ``ratio_max``,
        ``anchor_median_s``, ``ours_median_s``.
    """
    a_times, o_times = [], []
    for i in range(pairs):
        if i % 2 == 0:
            a_times.append(timed(anchor)[0])
            o_times.append(timed(ours)[0])
        else:
            o_times.append(timed(ours)[0])
            a_times.append(timed(anchor)[0])
    ratios = [a / o for a, o in zip(a_times, o_times)]
    return {"anchor_s": [round(x, 4) for x in a_times], "ours_s": [round(x, 4) for x in o_times],
            "ratios": [round(r, 3) for r in ratios], "ratio": round(statistics.median(ratios), 3),
            "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3),
            "anchor_median_s": round(statistics.median(a_times), 4),
            "ours_median_s": round(statistics.median(o_times), 4)}


def describe(name: str, anchor: str, row: dict) -> str:
    """One printed line: the ratio against the anchor's best, its spread and the medians."""
    return (f"{name}: {row['ratio']:.2f}x {anchor} (pairs {row['ratio_min']:.2f}-{row['ratio_max']:.2f}; "
            f"medians {row['anchor_median_s']:.2f} s vs {row['ours_median_s']:.2f} s)")


def write_result(name: str, payload: dict, *, quick: bool, path: Path | None = None, ci: bool = False) -> Path:
    """Write ``benchmarks/results/<name>[_quick|_ci].json`` with the command, load and machine added.

    ``payload["cases"]`` maps a case name to its :func:`alternate` row (plus what the
    benchmark adds); :mod:`check_regression` reads the ``ratio`` of each case.
    ``ci=True`` marks the CI-sized run (``<name>_ci.json``, the reference of
    ``check_regression.py --ci``).
    """
    import torch

    out = dict(payload)
    out.update({
        "benchmark": name, "quick": quick, "ci": ci,
        "command": "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0]), *sys.argv[1:]]),
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "load_end": load(),
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                    "python": platform.python_version(), "processor": platform.machine()},
    })
    path = path or RESULTS / f"{name}{'_ci' if ci else '_quick' if quick else ''}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")
    return path
