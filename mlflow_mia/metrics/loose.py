"""Release budgets that state almost nothing, and what a verdict says of a budget or an audit accepted anyway.

A budget a model cannot fail shows nothing when it passes: a TPR budget above
:data:`LOOSE_MAX_TPR` (``0.01:0.9999`` passes a model whose attacks find nearly every
member) and a canary exposure budget above the candidate space's bits (``--max-exposure
1e308``: no exposure can exceed ``log2`` of the space). The options refuse them unless
the auditor accepts them (``allow_loose_budget``, :func:`check_loose_budgets`); an
accepted one is carried by the verdict (``loose``), said in its message
(:func:`caveats`) and kept in the gate record
(:attr:`~mlflow_mia.metrics.gate_record.GateRecord.loose`). An audit of a canary set drawn
from an explicit seed (``allow_seeded_canaries``) is likewise carried as not a release
audit (``release=False``).

Examples
--------
>>> loose_tpr([(0.01, 0.05), (0.001, 0.9999)])
('0.001:0.9999',)
>>> loose_exposure(1e308, 13.3), loose_exposure(4.0, 13.3), loose_exposure(4.0, None)
(('canary_exposure:1e+308',), (), ())
>>> check_loose_budgets(["0.01:0.9"], allowed=False, why="a TPR budget above 0.5")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: loose release budget(s) 0.01:0.9: a TPR budget above 0.5...
>>> caveats(("0.01:0.9",), True)  # doctest: +ELLIPSIS
'loose budget(s) 0.01:0.9 accepted with --allow-loose-budget: ...'
"""

from __future__ import annotations

__all__ = ["loose_exposure", "check_loose_budgets"]

#: A TPR budget above this states almost nothing (an attack that finds every other member passes it).
LOOSE_MAX_TPR = 0.5
#: The option that accepts a loose budget, as the messages name it.
ALLOW_LOOSE_FLAG = "--allow-loose-budget (evaluator key allow_loose_budget)"
#: The budget kind of a canary exposure budget (:data:`mlflow_mia.metrics.canary_gate.EXPOSURE`).
_EXPOSURE = "canary_exposure"


def loose_tpr(budgets) -> tuple:
    """``ALPHA:MAX`` of each ``(alpha, max_tpr)`` budget with ``max_tpr`` above :data:`LOOSE_MAX_TPR`."""
    return tuple(f"{a:g}:{b:g}" for a, b in budgets if b > LOOSE_MAX_TPR)


def loose_exposure(max_exposure: float | None, space_bits: float | None) -> tuple:
    """``("canary_exposure:<budget>",)`` when the exposure budget is above ``space_bits``, else ``()``.

    ``space_bits``: ``log2`` of the largest candidate space of the canary set's secret-format
    templates, the most exposure any canary can have (rank 1 of the whole space); None when
    the set has no secret-format canary.
    """
    if max_exposure is None or space_bits is None or not max_exposure > space_bits:
        return ()
    return (f"{_EXPOSURE}:{max_exposure:g}",)


def check_loose_budgets(loose, *, allowed: bool, why: str) -> tuple:
    """``loose`` (as ``ALPHA:MAX`` or ``kind:budget`` texts) when ``allowed``; to be carried by the verdict.

    Raises
    ------
    ValueError
        A loose budget without ``allowed``: the message names the budgets, ``why`` they are
        loose and :data:`ALLOW_LOOSE_FLAG`.
    """
    loose = tuple(loose)
    if loose and not allowed:
        raise ValueError(f"loose release budget(s) {', '.join(loose)}: {why}, so a pass shows almost nothing about "
                         f"the model; give a tighter budget, or accept it with {ALLOW_LOOSE_FLAG}: the verdict, the "
                         "report and the gate record then say that the budget was loose")
    return loose


def caveats(loose, release: bool) -> str:
    """What a verdict is worth beyond its status: the loose budgets, not a release audit; '' when nothing."""
    parts = []
    if loose:
        parts.append(f"loose budget(s) {', '.join(loose)} accepted with --allow-loose-budget: a pass shows almost "
                     "nothing about the model")
    if not release:
        parts.append("not a release audit: its canary set was drawn from an explicit seed (--allow-seeded-canaries), "
                     "so whoever knows or guesses the seed regenerates its secrets and inclusion bits; its pass "
                     "neither clears nor lifts a verdict")
    return "; ".join(parts)
