"""The canary audit's inputs: the auditor's canary set, from a file or the evaluator's id table, checked."""

from __future__ import annotations

from typing import Any

import pandas as pd

from mlflow_mia.audits.base import Settings
from mlflow_mia.canaries import CanarySet

__all__ = ["load_canary_set"]


def load_canary_set(source) -> CanarySet:
    """A :class:`~mlflow_mia.canaries.CanarySet` from one, or from the path of its secret file.

    Raises
    ------
    ValueError
        No canary set given.
    """
    if isinstance(source, CanarySet):
        return source
    if source is None or (isinstance(source, str) and not source.strip()):
        raise ValueError("the canary audit needs the auditor's canary set: --canaries PATH (the file written by "
                         "CanarySet.save), or evaluator key 'canaries'")
    return CanarySet.load(str(source))


def load_canary_inputs(frame: Any, settings: Settings[Any, Any]) -> CanarySet:
    """The canary set the ``canaries`` key names, checked against ``frame`` (its id table, in order).

    ``frame`` must be :meth:`CanarySet.id_frame` of that set: its ``canary_id`` column lists the
    set's ids in order, so the audited data is the set named by the key (no text, secret or bit
    passes through ``mlflow.models.evaluate``).

    Raises
    ------
    ValueError
        No canary set named, or ``frame`` is not the set's id table; a gate the set refuses
        (:meth:`~mlflow_mia.options.canary.CanaryOptions.gate`: a seeded set, a loose exposure budget).
    """
    canaries = load_canary_set(settings.options.canaries)
    if not isinstance(frame, pd.DataFrame) or "canary_id" not in frame or list(frame["canary_id"]) != list(
            canaries.ids):
        raise ValueError("method='canaries' takes data=canary_set.id_frame() (the set's canary ids in order, no texts "
                         "or bits), for the set named by the 'canaries' key")
    settings.options.gate(canaries)  # before the model loads
    return canaries
