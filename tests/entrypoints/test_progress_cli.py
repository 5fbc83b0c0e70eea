"""Progress as a user sees it: a bar under a terminal, one line per step with elapsed time off it and with --quiet."""

from __future__ import annotations

import fcntl
import logging
import os
import pty
import struct
import termios
import re
import subprocess
import sys
import time

from mlflow_mia.progress import PROGRESS_LOGGER, step

#: A command whose run is one short step (4 units), through the real ``mlflow-mia`` main: its terminal test,
#: ``--quiet`` and logging set-up; only the command itself is replaced.
SCRIPT = """
import sys, time
import mlflow_mia.progress as progress
from mlflow_mia.entrypoints import commands
from mlflow_mia.entrypoints.cli import main

progress.QUIET_BELOW = 0.0  # the step is short: say its line anyway

def fake_command(args):
    for _ in progress.bar(range(4), desc="train tiny", unit="step", progress=not args.no_progress):
        time.sleep(0.05)
    return 0

commands._command = fake_command
sys.exit(main(sys.argv[1:]))
"""


def _under_terminal(args) -> str:
    """Run :data:`SCRIPT` with stdout and stderr on a pseudo-terminal; all it wrote."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 24 x 100: a bar has room
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, *args], stdin=follower, stdout=follower,
                            stderr=follower, close_fds=True)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait(timeout=120) == 0
    return b"".join(chunks).decode("utf-8", "replace")


def test_a_terminal_gets_a_bar_and_no_lines():
    out = _under_terminal(["audit"])
    assert re.search(r"train tiny: +100%\|[^|]*\| 4/4", out), out  # tqdm's bar, redrawn to the end
    assert not re.search(r"train tiny: 4/4 steps in \d+ s", out), out


def test_quiet_on_a_terminal_drops_the_bar_and_keeps_the_line():
    out = _under_terminal(["audit", "--quiet"])
    assert "|" not in out and "100%" not in out
    assert re.search(r"INFO mlflow_mia\.progress: train tiny: 4/4 steps in \d+ s", out), out


def test_off_a_terminal_one_line_per_step():
    done = subprocess.run([sys.executable, "-c", SCRIPT, "audit"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    lines = [line for line in done.stderr.splitlines() if "train tiny" in line]
    assert len(lines) == 1 and re.search(r"mlflow_mia\.progress: train tiny: 4/4 steps in \d+ s$", lines[0]), lines
    assert done.stdout == ""


def test_a_step_without_a_count_says_it_is_still_running(caplog):
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        with step("load the target", every=0.05):
            time.sleep(0.3)
    said = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER]
    assert len(said) >= 3 and all(s == "load the target: still running, 0 s elapsed" for s in said)
