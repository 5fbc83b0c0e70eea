"""A timed walk of the commands the README and docs/getting-started.md show, as a new user runs them.

Usage (on a fresh clone; one command at a time, never two at once on the shared cores)::

    rm -rf /tmp/walk && git clone -q /work/main /tmp/walk/mlflow-mia && ln -s /work/shared /tmp/walk/shared
    export MLFLOW_MIA_CACHE=/tmp/walk/cache  # a new user's empty signal cache (the demo trains the same weights)
    python benchmarks/walk_docs.py --cwd /tmp/walk/mlflow-mia            # every command below, in order
    python benchmarks/walk_docs.py --cwd /tmp/walk/mlflow-mia --only ner_small,canary_small

Each command runs with ``bash -c`` in ``--cwd`` with the virtual environment ``--venv``
(default ``<cwd>/.venv``) activated (``VIRTUAL_ENV`` set, its ``bin`` first on ``PATH``),
under a pseudo-terminal of 120 x 40 by default (what a user at a terminal sees: line-buffered output,
progress bars on) or a pipe with ``--pipe`` (what a CI log sees). Its output is echoed line
by line with the seconds since the command started; a carriage return (a progress bar's
redraw) counts as a line end, ANSI escapes are dropped. Per command it records the exit code,
the wall time (s), the longest gap between two output lines ("silence", s, with the lines
around it, the start and the end counting as lines), the number of output lines, the last 5
lines and the load averages (``os.getloadavg``) at its start and end. A command with a
``split`` pattern is also timed in two phases: up to and including the first line that
matches it, and the rest (README command 1: the install, then the audit). The full logs go
to ``--log-dir``.

Writes ``benchmarks/results/walk_docs.json`` (``--out``) and prints a Markdown table.
Needs no GPU. Times are of one run on a shared machine: read them with the load beside them.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEMO = "mlflow run . -e audit --env-manager local -P demo_size=small --experiment-name mlflow-mia"
# name, shell text (verbatim from the doc), exit code the doc states, where the doc shows it.
COMMANDS = [
    dict(name="command_1", doc="README.md:15, docs/getting-started.md:9", expect=0,
         split=r"^Successfully installed ", phases=("install", "audit"),
         cmd='python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e ".[demo]" && '
             + DEMO),
    dict(name="ner_small", doc="README.md:81", expect=0,
         cmd="mlflow run . -e ner-audit --env-manager local -P demo_size=small --experiment-name mlflow-mia"),
    dict(name="canary_small", doc="README.md:82, docs/guides/canaries.md", expect=3,
         cmd="mlflow-mia canary-audit --demo-size small --quiet --max-epsilon-lower-bound 8"),
    dict(name="analyze_quick", doc="README.md:83, docs/guides/analyze.md", expect=0,
         cmd="mlflow run . -e analyze --env-manager local -P quick=true -P quiet=true"),
    dict(name="causal_small", doc="README.md:86", expect=0,
         cmd="mlflow run . -e audit --env-manager local -P demo_size=small -P demo_kind=causal "
             "--experiment-name mlflow-mia"),
    dict(name="lora_small", doc="README.md:90, docs/guides/lora.md:22", expect=0,
         cmd="mlflow run . -e audit --env-manager local -P demo_kind=lora -P demo_size=small "
             "--experiment-name mlflow-mia"),
    dict(name="readme_python", doc="README.md:124 (the evaluate block)", expect=0,
         cmd="python -c \"import re; t = open('README.md').read(); exec(re.search("
             "r'<!-- readme-test: evaluate -->\\n\\x60{3}\\w*\\n(.*?)\\n\\x60{3}', t, re.S)[1])\""),
    dict(name="compare_small", doc="docs/guides/own-model.md:35", expect=0,
         cmd="mlflow run . -e compare --env-manager local -P demo_size=small --experiment-name mlflow-mia"),
    dict(name="default_audit", doc="docs/getting-started.md:92", expect=0,
         cmd="mlflow run . -e audit --env-manager local --experiment-name mlflow-mia"),
    dict(name="default_ner", doc="docs/getting-started.md:93, README.md:81, docs/guides/ner.md", expect=0,
         cmd="mlflow run . -e ner-audit --env-manager local --experiment-name mlflow-mia"),
    dict(name="command_2_install", doc="README.md:18 (its install; the suite itself is the lead's)", expect=0,
         cmd='python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e ".[demo,test]"'),
    dict(name="docs_build", doc="README.md:164 (mkdocs build --strict in place of serve)", expect=0,
         cmd='pip install -e ".[docs]" && mkdocs build --strict'),
]
ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>]")


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded to 0.01."""
    return [round(x, 2) for x in os.getloadavg()]


def _env(venv: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONHOME", None)
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def _reader(cmd: str, cwd: Path, env: dict[str, str], use_pty: bool):
    """Start ``bash -c cmd`` with its stdout and stderr on one pty or pipe; return the Popen and the fd to read."""
    if use_pty:
        master, slave = pty.openpty()  # a real terminal's size: tqdm draws nothing on a 0-column pty
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        proc = subprocess.Popen(["bash", "-c", cmd], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=slave, stderr=slave, start_new_session=True)
        os.close(slave)
        fd = master
    else:
        proc = subprocess.Popen(["bash", "-c", cmd], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        fd = proc.stdout.fileno()
    return proc, fd


def run_one(spec: dict, cwd: Path, venv: Path, use_pty: bool, log_dir: Path) -> dict:
    """Run one command (``spec`` as in COMMANDS); return its record. Raises nothing for a failing command."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = (log_dir / f"{spec['name']}.log").open("w")
    load_start, t0 = load(), time.monotonic()
    proc, fd = _reader(spec["cmd"], cwd, _env(venv), use_pty)
    print(f"\n=== {spec['name']}: {spec['cmd']}", flush=True)
    lines: list[tuple[float, str]] = []
    buf = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the pty's other side closed
            chunk = b""
        if not chunk:
            break
        now = time.monotonic() - t0
        parts = re.split(rb"\r\n|\r|\n", buf + chunk)
        buf = parts.pop()
        for raw in parts:
            text = ANSI.sub(b"", raw).decode("utf-8", "replace").rstrip()
            if text.strip():
                lines.append((now, text))
                print(f"[{now:7.1f}] {text}", flush=True)
                log.write(f"[{now:7.1f}] {text}\n")
    rc = proc.wait()
    wall = time.monotonic() - t0
    if buf.strip():
        lines.append((wall, ANSI.sub(b"", buf).decode("utf-8", "replace").rstrip()))
    os.close(fd) if use_pty else proc.stdout.close()
    log.close()
    record = dict(name=spec["name"], command=spec["cmd"], doc=spec["doc"], expected_exit=spec["expect"],
                  exit=rc, wall_s=round(wall, 1), lines=len(lines), load_start=load_start, load_end=load(),
                  **_silence(lines, 0.0, wall), last_lines=[t for _, t in lines[-5:]])
    if spec.get("split"):
        cut = next((t for t, s in lines if re.search(spec["split"], s)), None)
        if cut is not None:
            first, second = spec["phases"]
            record["phases"] = {
                first: dict(wall_s=round(cut, 1), **_silence([x for x in lines if x[0] <= cut], 0.0, cut)),
                second: dict(wall_s=round(wall - cut, 1),
                             **_silence([x for x in lines if x[0] > cut], cut, wall))}
    return record


def _silence(lines: list[tuple[float, str]], start: float, end: float) -> dict:
    """The longest gap between consecutive output times in [start, end] (start and end count), and the lines around it."""
    times = [start] + [t for t, _ in lines] + [end]
    texts = ["(start)"] + [s for _, s in lines] + ["(end)"]
    gaps = [(times[i + 1] - times[i], i) for i in range(len(times) - 1)]
    gap, i = max(gaps)
    return dict(silence_s=round(gap, 1), silence_after=texts[i][:200], silence_before=texts[i + 1][:200],
                silence_at_s=round(times[i], 1))


def table(records: list[dict]) -> str:
    """A Markdown table of the records: command, exit (expected), wall, longest silence, load at start/end."""
    rows = ["| command | exit (docs) | wall | longest silence | load 1-min start / end |", "|---|---|---|---|---|"]
    for r in records:
        wall = f"{r['wall_s']:.0f} s" + "".join(f"; {k} {v['wall_s']:.0f} s" for k, v in r.get("phases", {}).items())
        flag = "" if r["exit"] == r["expected_exit"] else " **differs**"
        sil = f"{r['silence_s']:.0f} s" + (" **>= 30 s**" if r["silence_s"] >= 30 else "")
        rows.append(f"| {r['name']} | {r['exit']} ({r['expected_exit']}){flag} | {wall} | {sil} | "
                    f"{r['load_start'][0]} / {r['load_end'][0]} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Run the chosen commands in order, write the JSON, print the table; exit 0 (the table says what failed)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cwd", type=Path, required=True, help="the fresh clone to run in")
    ap.add_argument("--venv", type=Path, help="virtual environment to activate (default: <cwd>/.venv)")
    ap.add_argument("--only", help="comma-separated command names (default: all, in order)")
    ap.add_argument("--pipe", action="store_true", help="run under a pipe instead of a pseudo-terminal")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "walk_docs.json")
    ap.add_argument("--log-dir", type=Path, default=Path("/tmp/walk_docs_logs"))
    ap.add_argument("--append", action="store_true", help="keep the records already in --out (replacing same names)")
    args = ap.parse_args(argv)
    cwd = args.cwd.resolve()
    names = [n.strip() for n in args.only.split(",")] if args.only else [c["name"] for c in COMMANDS]
    unknown = sorted(set(names) - {c["name"] for c in COMMANDS})
    if unknown:
        ap.error(f"unknown command name(s) {unknown}; choose from {[c['name'] for c in COMMANDS]}")
    old = json.loads(args.out.read_text()) if args.append and args.out.exists() else {"records": []}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True).stdout.strip()
    result = dict(cwd=str(cwd), commit=commit, mlflow_mia_cache=os.environ.get("MLFLOW_MIA_CACHE"), cpus=os.cpu_count(), terminal="pipe" if args.pipe else "pty",
                  load_start=load(), records=[r for r in old["records"] if r["name"] not in names])
    for spec in [c for c in COMMANDS if c["name"] in names]:
        result["records"].append(run_one(spec, cwd, (args.venv or cwd / ".venv").resolve(), not args.pipe,
                                          args.log_dir))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result | {"load_end": load()}, indent=1) + "\n")
    order = {c["name"]: i for i, c in enumerate(COMMANDS)}
    result["records"].sort(key=lambda r: order[r["name"]])
    args.out.write_text(json.dumps(result | {"load_end": load()}, indent=1) + "\n")
    print("\n" + table(result["records"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
