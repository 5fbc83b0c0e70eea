"""How numbers and attacks are named in metrics, params, tables and reports.

One home for the small formatting rules that several layers share: the
false-positive rate in a metric name, NaN in JSON and Markdown, and which
attack an audit reports first.
"""

from __future__ import annotations

import difflib
import math

__all__ = ["DEFAULT_EXPERIMENT", "did_you_mean", "fmt_alpha", "is_nan", "nan_to_none", "fmt_number",
           "headline_attack"]

#: The attack reported first when it ran; otherwise the first attack of the config.
HEADLINE_PREFERENCE = "likelihood_ratio"

#: The MLflow experiment of every mlflow-mia command (audits, demo builds, analyses) unless the user names one.
DEFAULT_EXPERIMENT = "mlflow-mia"


def fmt_alpha(alpha: float) -> str:
    """How a false-positive rate appears in metric names.

    >>> fmt_alpha(0.01), fmt_alpha(0.1), fmt_alpha(1e-3)
    ('0.01', '0.1', '0.001')
    """
    return f"{alpha:g}"


def is_nan(value) -> bool:
    """True for None and for a float NaN (an undefined metric)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def nan_to_none(value):
    """``value`` with float NaN and infinities replaced by None, recursively through dicts, lists and tuples.

    JSON has no NaN: a metric that is undefined is written as ``null``.

    >>> nan_to_none({"a": float("nan"), "b": [1.0, float("inf")]})
    {'a': None, 'b': [1.0, None]}
    """
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): nan_to_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [nan_to_none(v) for v in value]
    return value


def fmt_number(value, digits: int = 3, *, missing: str = "n/a") -> str:
    """``value`` with ``digits`` decimals, or ``missing`` when it is None or NaN.

    >>> fmt_number(0.51234), fmt_number(float("nan")), fmt_number(None, missing="nan")
    ('0.512', 'n/a', 'nan')
    """
    return missing if is_nan(value) else f"{float(value):.{digits}f}"


def headline_attack(attacks) -> str:
    """The attack reported first among ``attacks`` (names in config order).

    The likelihood ratio when it ran (the strongest attack of Mireshghallah et
    al. 2022, Table 2), else the first attack.

    Raises
    ------
    ValueError
        ``attacks`` is empty.
    """
    names = list(attacks)
    if not names:
        raise ValueError("no attack ran: there is no headline attack")
    return HEADLINE_PREFERENCE if HEADLINE_PREFERENCE in names else names[0]


def did_you_mean(word: str, choices, *, quote=repr, n: int = 1) -> str:
    """``"; did you mean 'x'?"`` with the close matches of ``word`` among ``choices`` (difflib, ratio >= 0.6),
    the ``n`` closest; ``""`` when none is close.

    >>> did_you_mean("grup_column", ["group_column", "seed", "attacks"])
    "; did you mean 'group_column'?"
    >>> did_you_mean("zzz", ["group_column"])
    ''
    """
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=n, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(quote(c) for c in close) + "?"
