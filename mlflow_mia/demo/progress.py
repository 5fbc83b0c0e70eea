"""One line per training epoch on stderr when progress bars are off (the output is not a terminal).

Progress bars (tqdm) are off when the output is not a terminal, and the command line
logs at WARNING unless ``--verbose``: a demo build would then be silent for minutes.
:func:`log_epoch` writes its line to the logger :data:`PROGRESS_LOGGER`, which the command
line sets to INFO unless ``--quiet`` (:func:`mlflow_mia.entrypoints.common.quiet_output`).
"""

from __future__ import annotations

import logging
import math

__all__ = ["PROGRESS_LOGGER", "log_epoch", "time_left"]

#: The logger of the per-epoch lines.
PROGRESS_LOGGER = "mlflow_mia.progress"


def time_left(seconds: float, done: int, total: int) -> float:
    """Seconds left if the remaining ``total - done`` steps take as long as the ``done`` ones (nan before one).

    >>> time_left(30.0, 10, 40)
    90.0
    """
    return math.nan if done <= 0 else seconds / done * max(total - done, 0)


def _duration(seconds: float) -> str:
    """``95.2`` -> ``1 min 35 s``; ``nan`` -> ``?``."""
    if not math.isfinite(seconds):
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


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
    line = (f"{desc}: epoch {len(epoch_losses)}/{epochs}, loss {epoch_losses[-1]:.3f}, {_duration(seconds)} elapsed, "
            f"about {_duration(time_left(seconds, step, total_steps))} left")
    logging.getLogger(PROGRESS_LOGGER).info(line)
    return line
