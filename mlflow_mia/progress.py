"""Progress of the long steps: a tqdm bar on a terminal, else one line per step with elapsed and remaining time.

Every step that can take more than a few seconds (demo and canary training, signals, neighbour
generation, the bootstrap) makes its bar with :func:`bar`. With ``progress=True`` that is a
tqdm bar; with ``progress=False`` (the commands turn bars off when stdout is not a terminal, and
with ``--quiet``) it is a :class:`LineProgress`: the same calls, but lines on the logger
:data:`PROGRESS_LOGGER` -- one when the step ends (``signals: 300/300 texts in 42 s``), and one
every :data:`LINE_EVERY` seconds while it runs (``..., 42 s elapsed, about 1 min 3 s left``), so
a command is never silent for half a minute. A step without a count (a model loading, a build)
says it is still running every :data:`LINE_EVERY` seconds (:func:`step`).

The logger is silent unless someone turns it on: the command line sets it to INFO for the
duration of a command (:func:`mlflow_mia.entrypoints.common.quiet_output`); a library user
sees the lines with ``logging.getLogger("mlflow_mia.progress").setLevel(logging.INFO)``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time

from tqdm.auto import tqdm

__all__ = ["PROGRESS_LOGGER", "bar", "log_epoch"]

#: The logger of the progress lines.
PROGRESS_LOGGER = "mlflow_mia.progress"
#: Seconds between two lines of one running step (below the 30 s a user waits before wondering).
LINE_EVERY = 20.0
#: Steps shorter than this end without a line (a cached signal, a tiny model): no noise.
QUIET_BELOW = 2.0

_log = logging.getLogger(PROGRESS_LOGGER)


def time_left(seconds: float, done: int, total: int) -> float:
    """Seconds left if the remaining ``total - done`` steps take as long as the ``done`` ones (nan before one).

    >>> time_left(30.0, 10, 40)
    90.0
    """
    return math.nan if done <= 0 else seconds / done * max(total - done, 0)


def duration(seconds: float) -> str:
    """``95.2`` -> ``1 min 35 s``; ``nan`` -> ``?``.

    >>> duration(95.2), duration(4.0), duration(float("nan"))
    ('1 min 35 s', '4 s', '?')
    """
    if not math.isfinite(seconds):
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


class LineProgress:
    """tqdm's interface (``update``, ``set_postfix``, ``refresh``, ``close``, ``total``, ``n``, iteration,
    ``with``) writing lines on :data:`PROGRESS_LOGGER` instead of a bar.

    A line when :data:`LINE_EVERY` seconds have passed since the last one (checked on ``update``), and
    one at ``close`` when the step took :data:`QUIET_BELOW` seconds or more, or said anything before.

    >>> import io, logging
    >>> stream = io.StringIO(); handler = logging.StreamHandler(stream)
    >>> log = logging.getLogger(PROGRESS_LOGGER); log.addHandler(handler); log.setLevel(logging.INFO)
    >>> p = LineProgress(total=4, desc="signals", unit="text", clock=iter([0.0, 30.0, 45.0]).__next__)
    >>> p.update(2); p.close(); log.removeHandler(handler); log.setLevel(logging.NOTSET)
    >>> stream.getvalue().splitlines()
    ['signals: 2/4 texts, 30 s elapsed, about 30 s left', 'signals: 2/4 texts in 45 s']
    """

    def __init__(self, iterable=None, *, total=None, desc: str = "", unit: str = "it", summary: bool = True,
                 clock=time.monotonic):
        self.iterable, self.desc, self.unit, self.clock = iterable, desc or "working", unit, clock
        self.summary = summary  # False: the caller logs its own closing line (the training's per-epoch lines)
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
        self.n, self.postfix, self.start = 0, "", clock()
        self.last, self.said, self.closed = self.start, False, False

    def _count(self) -> str:
        unit = self.unit if self.unit.endswith("s") or self.unit == "it" else self.unit + "s"
        return f"{self.n}/{self.total} {unit}" if self.total else f"{self.n} {unit}"

    def _say(self, text: str) -> None:
        _log.info(f"{self.desc}: {text}" + (f" ({self.postfix})" if self.postfix else ""))
        self.said = True

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= LINE_EVERY:
            elapsed = now - self.start
            left = time_left(elapsed, self.n, self.total) if self.total else math.nan
            self._say(f"{self._count()}, {duration(elapsed)} elapsed"
                      + (f", about {duration(left)} left" if math.isfinite(left) else ""))
            self.last = now

    def set_postfix(self, ordered_dict=None, refresh=True, **kwargs) -> None:
        items = {**(ordered_dict or {}), **kwargs}
        self.postfix = ", ".join(f"{k} {v}" for k, v in items.items())

    def refresh(self) -> None:
        """Nothing to redraw."""

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        elapsed = self.clock() - self.start
        if self.summary and (self.said or elapsed >= QUIET_BELOW):
            self._say(f"{self._count()} in {duration(elapsed)}")

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def bar(iterable=None, *, total=None, desc: str = "", unit: str = "it", progress: bool = True,
        summary: bool = True, **kwargs):
    """A tqdm bar when ``progress``, else a :class:`LineProgress` (lines on :data:`PROGRESS_LOGGER`).

    ``kwargs`` go to tqdm (``leave``, ``dynamic_ncols``, ...); ``summary=False`` drops the line's
    closing summary (a caller that logs its own). ``disable`` is not taken: the choice is ``progress``.
    """
    if progress:
        return tqdm(iterable, total=total, desc=desc, unit=unit, **kwargs)
    return LineProgress(iterable, total=total, desc=desc, unit=unit, summary=summary)


@contextlib.contextmanager
def step(desc: str, *, every: float = LINE_EVERY):
    """A step without a count: ``<desc>: still running, 40 s elapsed`` every ``every`` seconds while it runs,
    and ``<desc>: done in 52 s`` when it took :data:`QUIET_BELOW` seconds or more (lines on :data:`PROGRESS_LOGGER`).
    """
    start, stop = time.monotonic(), threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            _log.info(f"{desc}: still running, {duration(time.monotonic() - start)} elapsed")

    thread = threading.Thread(target=beat, name=f"progress: {desc}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        elapsed = time.monotonic() - start
        if elapsed >= QUIET_BELOW:
            _log.info(f"{desc}: done in {duration(elapsed)}")


def log_epoch(desc: str, epoch_losses, step: int, total_steps: int, per_epoch: int, seconds: float) -> str:
    """Log ``<desc>: epoch 2/5, loss 3.412, 42 s elapsed, about 1 min 3 s left`` at INFO and return it.

    Parameters
    ----------
    desc : str
        What is trained (the progress bar's label).
    epoch_losses : sequence of float
        Mean training loss (nats per token) of each epoch so far; the last is this epoch's.
    step, total_steps : int
        Optimizer steps done and planned.
    per_epoch : int
        Fewest steps an epoch makes (``ceil(n / batch_size)``): the epoch count is at most
        ``ceil(total_steps / per_epoch)``.
    seconds : float
        Wall-clock seconds since training began.

    >>> log_epoch("train target", [4.0, 3.4123], 20, 50, 10, 42.0)
    'train target: epoch 2/5, loss 3.412, 42 s elapsed, about 1 min 3 s left'
    """
    epochs = max(len(epoch_losses), math.ceil(total_steps / max(per_epoch, 1)))
    line = (f"{desc}: epoch {len(epoch_losses)}/{epochs}, loss {epoch_losses[-1]:.3f}, {duration(seconds)} elapsed, "
            f"about {duration(time_left(seconds, step, total_steps))} left")
    _log.info(line)
    return line


@contextlib.contextmanager
def library_bars_off():
    """``datasets``' own progress bars off for the duration, restored after: reading a table of a few hundred rows
    ("Generating train split") is one quick step of ours, not a job worth a bar."""
    from datasets.utils import logging as datasets_logging

    shown = datasets_logging.is_progress_bar_enabled()
    datasets_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            datasets_logging.enable_progress_bar()
