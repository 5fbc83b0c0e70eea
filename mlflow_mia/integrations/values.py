"""Reading option values from any front end: the CLI, MLproject parameters, evaluator config dicts.

MLproject passes every parameter as a string and an empty string for "not
given"; the evaluator config may hold real numbers and booleans. Each reader
takes either form and raises ``ValueError`` naming the option on bad input.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["blank", "opt_str", "parse_bool", "parse_int", "parse_float", "parse_list"]

_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no", "")


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


def opt_str(value) -> str | None:
    """``str(value)`` stripped, or None when empty."""
    if value is None:
        return None
    value = str(value).strip()
    return value or None


def parse_bool(value, key: str) -> bool:
    """``True`` / ``False`` from a bool, 0 / 1, or ``true|1|yes`` / ``false|0|no|''`` (any case).

    Raises
    ------
    ValueError
        Anything else; the message names ``key``.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{key} must be true or false, got {value!r}")


def parse_int(value, key: str) -> int:
    """An int from an int, a whole float (``10.0``, as MLproject float parameters arrive) or a string of either.

    Raises
    ------
    ValueError
        A bool, a fractional number or text that is not a number; the message names ``key``.
    """
    if isinstance(value, bool):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    if isinstance(value, str):
        try:
            value = float(value.strip()) if value.strip() else value
        except ValueError:
            raise ValueError(f"{key} must be an integer, got {value!r}") from None
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        raise ValueError(f"{key} must be an integer, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be an integer, got {value!r}") from None


def parse_float(value, key: str) -> float:
    """A float from a number or a numeric string.

    Raises
    ------
    ValueError
        A bool or text that is not a number; the message names ``key``.
    """
    if isinstance(value, bool):
        raise ValueError(f"{key} must be a number, got {value!r}")
    try:
        return float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a number, got {value!r}") from None


def parse_list(value, *, what: str, cast=str) -> tuple:
    """Turn a list, tuple or comma-separated string into a tuple of ``cast`` values.

    Raises
    ------
    ValueError
        An element cannot be converted.
    """
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    try:
        return tuple(cast(v) for v in items)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: cannot read {value!r} as a list of {cast.__name__}") from None
