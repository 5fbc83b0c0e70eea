"""The NER audit's inputs: the names table (member and non-member entity names), checked before a model loads."""

from __future__ import annotations

import pandas as pd

from mlflow_mia.audits.base import Settings
from mlflow_mia.audits.ner.names import check_names_table

__all__: list[str] = []


def load_names(frame, settings: Settings):
    """The names table (``name``, ``entity_type``, ``is_member``, optional ``split``), checked before a model loads.

    The label column of the options is renamed ``is_member``.

    Raises
    ------
    ValueError
        Not a DataFrame, or as :func:`~mlflow_mia.audits.ner.names.check_names_table`.
    """
    if not isinstance(frame, pd.DataFrame):
        raise ValueError("the NER audit needs `data` as a pandas DataFrame with columns name, entity_type and the "
                         "membership label")
    label = settings.options.label_column
    names = frame.rename(columns={label: "is_member"}) if label != "is_member" else frame.copy()
    check_names_table(names, entity_types=settings.config.entity_types)
    return names
