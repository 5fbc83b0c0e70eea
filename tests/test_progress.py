"""The demo's training says where it is when progress bars are off: one line per epoch (loss, time left)."""

from __future__ import annotations

import logging
import re

from mlflow_mia.progress import PROGRESS_LOGGER, log_epoch, time_left
from mlflow_mia.demo.train import TrainConfig, train_mlm
from mlflow_mia.signals.testing import tiny_bert


def test_time_left_scales_the_elapsed_time_to_the_remaining_steps():
    assert time_left(30.0, 10, 40) == 90.0
    assert time_left(30.0, 40, 40) == 0.0
    assert time_left(0.0, 0, 40) != time_left(0.0, 0, 40)  # nan before the first step


def test_the_line_gives_epoch_loss_elapsed_and_left(caplog):
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        line = log_epoch("train target", [4.2, 3.0], 10, 30, 5, 125.0)
    assert line == "train target: epoch 2/6, loss 3.000, 2 min 5 s elapsed, about 4 min 10 s left"
    assert [r.getMessage() for r in caplog.records] == [line]


def test_training_without_a_bar_logs_each_epoch(caplog):
    model, tok = tiny_bert(seed=0)
    texts = [f"word{i} word{i + 1} word{i + 2} and more" for i in range(12)]
    config = TrainConfig(epochs=3, batch_size=4, max_length=16, seed=0)
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        result = train_mlm(model, tok, texts, config, progress=False, desc="train tiny")
    lines = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER]
    assert len(lines) == len(result.epoch_losses) == 3
    for i, (line, loss) in enumerate(zip(lines, result.epoch_losses), 1):
        assert re.fullmatch(rf"train tiny: epoch {i}/3, loss {loss:.3f}, \d+ s elapsed, about .+ left", line), line
    assert lines[-1].endswith("about 0 s left")


def test_a_bar_replaces_the_lines(caplog):
    model, tok = tiny_bert(seed=0)
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        train_mlm(model, tok, ["one two three four"] * 4, TrainConfig(epochs=1, batch_size=4, max_length=8),
                  progress=True)
    assert not [r for r in caplog.records if r.name == PROGRESS_LOGGER]


def test_the_command_line_shows_the_lines_when_bars_are_off_quiet_or_not(monkeypatch, capsys):
    """The CLI logs at WARNING: quiet_output lets the per-step lines through when stdout is no terminal, and with
    --quiet (which drops bars, never the line per step)."""
    import io
    import sys

    from mlflow_mia.entrypoints.common import quiet_output

    progress = logging.getLogger(PROGRESS_LOGGER)
    before = progress.level
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # a log file: no bars
    err = io.StringIO()
    handler = logging.StreamHandler(err)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.WARNING)  # as the CLI's logging.basicConfig without --verbose
    try:
        with quiet_output(None):
            log_epoch("train target", [3.0], 5, 10, 5, 10.0)
        log_epoch("after", [3.0], 5, 10, 5, 10.0)  # level restored: not shown
        with quiet_output(True):
            log_epoch("quiet", [3.0], 5, 10, 5, 10.0)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    assert err.getvalue().splitlines() == ["train target: epoch 1/2, loss 3.000, 10 s elapsed, about 10 s left",
                                           "quiet: epoch 1/2, loss 3.000, 10 s elapsed, about 10 s left"]
    assert progress.level == before
