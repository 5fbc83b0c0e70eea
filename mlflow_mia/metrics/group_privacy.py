"""Group privacy: what an (eps, delta)-DP guarantee per record says about a group of k records.

When membership was decided per group (an article, a patient), an audit's trials are the
groups, and its epsilon lower bound is about groups: it can only be compared with the
accountant's guarantee converted to groups (Dwork and Roth 2014, Theorem 2.2).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .validation import check_rate

__all__ = ["group_privacy"]


class GroupPrivacy(NamedTuple):
    """An (epsilon, delta) guarantee for groups of ``group_size`` records (see :func:`group_privacy`)."""

    epsilon: float
    delta: float
    group_size: int


def group_privacy(epsilon: float, delta: float, *, group_size: int) -> GroupPrivacy:
    """The (epsilon, delta) guarantee per group of ``group_size`` records of an (epsilon, delta)-DP mechanism.

    A mechanism that is (eps, delta)-DP for datasets that differ in one record is
    (k eps, k e^((k - 1) eps) delta)-DP for datasets that differ in ``k`` records,
    e.g. all sentences of one article when membership was decided per article.

    Parameters
    ----------
    epsilon : float
        Record-level epsilon (nats), >= 0 and finite (the accountant's).
    delta : float in [0, 1)
        Record-level delta.
    group_size : int
        Records per group, ``k >= 1``: the largest group of the training data, so that
        the guarantee covers every group.

    Returns
    -------
    GroupPrivacy
        ``epsilon = k * epsilon`` (nats) and ``delta = k * exp((k - 1) * epsilon) * delta``
        (``inf`` when it overflows a float; 0 when ``delta`` is 0). A ``delta >= 1``
        guarantees nothing for the group (every membership test is allowed).

    Raises
    ------
    ValueError
        ``epsilon`` negative, NaN or infinite; ``delta`` outside [0, 1); ``group_size``
        not an int >= 1.

    Notes
    -----
    Chaining the (eps, delta) inequality through the ``k - 1`` intermediate datasets
    gives ``Pr[M(D) in S] <= e^(k eps) Pr[M(D') in S] + delta * sum_{i<k} e^(i eps)``,
    and the sum is at most ``k e^((k - 1) eps)``: the proof of Dwork and Roth's
    Theorem 2.2 (pure DP, ``delta = 0``) carried over to ``delta > 0``. The bound is
    generic; an accountant run with the group as the unit (e.g. one Poisson-sampled
    unit per article) is usually much tighter.

    References
    ----------
    .. [1] Dwork and Roth, Found. Trends Theor. Comput. Sci. 9(3-4), 2014, Sec. 2.3,
       Theorem 2.2.

    Examples
    --------
    >>> g = group_privacy(1.0, 1e-5, group_size=10)  # 10 sentences per article
    >>> g.epsilon, round(g.delta, 4)  # (10, 10 e^9 1e-5)
    (10.0, 0.8103)
    >>> group_privacy(8.0, 1e-5, group_size=1)  # one record per group: unchanged
    GroupPrivacy(epsilon=8.0, delta=1e-05, group_size=1)
    """
    if not (isinstance(epsilon, (int, float, np.floating, np.integer)) and math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    delta = check_rate(delta, "delta", low_closed=True, high_closed=False)
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) or group_size < 1:
        raise ValueError(f"group_size must be an int >= 1 (records of the largest group), got {group_size!r}")
    k, epsilon = int(group_size), float(epsilon)
    try:
        growth = math.exp((k - 1) * epsilon)
    except OverflowError:
        growth = math.inf
    return GroupPrivacy(k * epsilon, k * growth * delta if delta > 0 else 0.0, k)
