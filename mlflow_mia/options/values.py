"""What every front end (the CLI, MLproject parameters, evaluator config dicts) shares before parsing.

MLproject passes every parameter as a string and an empty string for "not
given"; the evaluator config may hold real numbers and booleans. Values are read
by their declarations (:func:`mlflow_mia.option.coerce`, a pydantic ``TypeAdapter``
per option), not here: this module only says what "not given" is and where the
flat keys sit.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["blank", "mia_section"]


def blank(value):
    """``value``, or None when it is None or an empty / whitespace string (an unset MLproject parameter)."""
    if isinstance(value, str) and not value.strip():
        return None
    return value


def mia_section(config) -> dict:
    """The flat ``evaluator_config["mia"]`` keys: ``config`` itself, or its ``"mia"`` entry when that is all it holds."""
    config = dict(config or {})
    if set(config) == {"mia"} and isinstance(config["mia"], Mapping):
        config = dict(config["mia"])
    return config
