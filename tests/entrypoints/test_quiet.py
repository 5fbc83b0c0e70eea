"""``-q`` / ``--quiet``: progress bars off (also whenever stdout is no terminal), the libraries silenced."""

from __future__ import annotations

import io
import logging
import os
import sys
import warnings

from mlflow_mia.entrypoints.cli import build_parser
from mlflow_mia.entrypoints.common import quiet_output


def test_quiet_takes_a_value_for_mlproject_and_none_on_the_command_line():
    parse = build_parser().parse_args
    assert parse(["audit", "-q"]).quiet is True
    assert parse(["audit", "--quiet", "false"]).quiet is False
    assert parse(["audit", "--quiet", "true", "--num-masks", "3"]).quiet is True
    assert parse(["analyze", "--quiet", "true"]).quiet is True and parse(["build-demo", "-q"]).quiet is True


def test_quiet_silences_the_libraries_and_restores_them(monkeypatch):
    import datasets
    import transformers

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    level = transformers.utils.logging.get_verbosity()
    with quiet_output(True) as bars_off:
        assert bars_off
        assert os.environ["TQDM_DISABLE"] == "1"  # every tqdm bar, also in worker processes
        assert transformers.utils.logging.get_verbosity() == transformers.logging.ERROR
        assert datasets.utils.logging.get_verbosity() == datasets.logging.ERROR
        assert not datasets.is_progress_bar_enabled()
        assert logging.getLogger("huggingface_hub").level == logging.ERROR
        with warnings.catch_warnings(record=True) as caught:
            warnings.warn("library noise", UserWarning)
        assert caught == []  # ignored, not recorded
    assert "TQDM_DISABLE" not in os.environ
    assert transformers.utils.logging.get_verbosity() == level
    assert datasets.is_progress_bar_enabled()


def test_progress_bars_follow_the_terminal(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    import transformers

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    with quiet_output(None) as bars_off:
        assert bars_off  # a log file gets no progress bars, the libraries' neither
        assert os.environ["TQDM_DISABLE"] == "1" and not transformers.utils.logging.is_progress_bar_enabled()
        assert transformers.utils.logging.get_verbosity() != transformers.logging.ERROR  # warnings still shown
    monkeypatch.setattr(sys, "stdout", Tty())
    with quiet_output(None) as bars_off:
        assert not bars_off and "TQDM_DISABLE" not in os.environ
        assert transformers.utils.logging.is_progress_bar_enabled()


def test_library_notes_nobody_can_act_on_are_dropped_without_quiet():
    """MLflow's model-card and licence notes and its integer-schema hint: gone; other warnings stay."""
    import mlflow
    import pandas as pd

    note, seen = logging.getLogger("mlflow.transformers"), []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    note.addHandler(handler)  # MLflow's loggers do not propagate to the root (pytest's caplog)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning recorded, unless the command's own filters drop it
        with quiet_output(False):
            note.warning("The model card could not be retrieved from the hub due to Repo id must use ...")
            note.warning("Unable to find license information for this model. Please verify permissible usage ...")
            note.warning("a transformers note someone can act on")
            mlflow.models.infer_signature(pd.DataFrame({"n": [1, 2]}))  # MLflow's integer-schema hint
            warnings.warn("a warning someone can act on", UserWarning)
        mlflow.models.infer_signature(pd.DataFrame({"n": [1, 2]}))  # after the command: shown again
    assert seen == ["a transformers note someone can act on"]
    shown = [str(w.message) for w in caught]
    assert shown[0] == "a warning someone can act on" and len(shown) == 2
    assert shown[1].startswith("Hint: Inferred schema contains integer column(s)")
    note.warning("The model card could not be retrieved: shown again once the command is over")
    note.removeHandler(handler)
    assert seen[-1].startswith("The model card")


def test_the_evaluator_drops_the_unactionable_notes_and_the_loading_bars():
    """mlflow.models.evaluate(...) with the mia evaluator: no integer-schema hint, no "Loading weights" bars;
    both as before afterwards."""
    import transformers

    from mlflow_mia.entrypoints.common import unactionable_noise_off

    assert transformers.utils.logging.is_progress_bar_enabled()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with unactionable_noise_off(loading_bars=False):
            assert not transformers.utils.logging.is_progress_bar_enabled()
            warnings.warn("Hint: Inferred schema contains integer column(s). ...", UserWarning)
            warnings.warn("a warning that asks for an action", UserWarning)
    assert [str(w.message) for w in caught] == ["a warning that asks for an action"]
    assert transformers.utils.logging.is_progress_bar_enabled()
