"""Regression check for CI: rerun the quick benchmarks, fail only on a large drop of a speed ratio.

Run::

    python benchmarks/check_regression.py --quick             # bench_pll and bench_ner, --quick each
    python benchmarks/check_regression.py --quick --only ner  # one of them

Each quick benchmark writes its result to a temporary file; every case's ratio
(anchor time / mlflow-mia time, median of alternated pairs) is compared with the
committed ``benchmarks/results/<name>_quick.json``. The check fails when a ratio
falls below ``--tolerance`` (default 0.6) times the committed one: a drop that the
load of a shared machine does not explain (alternated pairs keep both sides under
the same load; the spread of the pairs is printed). Absolute times are never
compared. A case with no committed figure is reported and passes.

Quick runs: PLL on the MiniLM shape (12 sentences, 3 pairs) and NER (300 sentences,
3 pairs); about a minute each on 2 idle cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUICK = {"pll": "bench_pll", "ner": "bench_ner"}


def compare(name: str, committed: dict | None, new: dict, tolerance: float) -> list[str]:
    """Failure messages for the cases of ``new`` whose ratio fell below ``tolerance`` x the committed one."""
    failures = []
    for case, row in new["cases"].items():
        old = (committed or {}).get("cases", {}).get(case)
        if old is None:
            print(f"{name}/{case}: {row['ratio']:.2f}x (no committed figure to compare)")
            continue
        floor = tolerance * old["ratio"]
        status = "ok" if row["ratio"] >= floor else "FAIL"
        print(f"{name}/{case}: {row['ratio']:.2f}x (pairs {row['ratio_min']:.2f}-{row['ratio_max']:.2f}) vs committed "
              f"{old['ratio']:.2f}x; floor {floor:.2f}x: {status}")
        if status == "FAIL":
            failures.append(f"{name}/{case} ratio {row['ratio']:.2f}x < {floor:.2f}x ({tolerance} x committed "
                            f"{old['ratio']:.2f}x)")
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="run the quick benchmarks (the only mode)")
    parser.add_argument("--only", choices=sorted(QUICK), action="append", help="run only these (repeatable)")
    parser.add_argument("--tolerance", type=float, default=0.6, help="fail below this fraction of a committed ratio")
    args = parser.parse_args(argv)
    if not args.quick:
        parser.error("only the quick check exists: pass --quick")
    failures = []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")])))
    print(f"load {[round(x, 2) for x in os.getloadavg()]}")
    for key in args.only or sorted(QUICK):
        script = QUICK[key]
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / f"{script}.json"
            cmd = [sys.executable, str(HERE / f"{script}.py"), "--quick", "--write-to", str(out)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if done.returncode != 0 or not out.exists():
                print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
                failures.append(f"{script} --quick failed (exit {done.returncode})")
                continue
            new = json.loads(out.read_text())
        committed_path = HERE / "results" / f"{script}_quick.json"
        committed = json.loads(committed_path.read_text()) if committed_path.exists() else None
        failures += compare(script, committed, new, args.tolerance)
    if failures:
        print("speed regression:\n  " + "\n  ".join(failures))
        return 1
    print("no speed regression")
    return 0


if __name__ == "__main__":
    sys.exit(main())
