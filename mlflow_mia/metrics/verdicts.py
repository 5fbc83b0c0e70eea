"""What every release gate answers, and the one contract they share: ``gate.check(result) -> verdict``.

The three audits' gates (the membership gate :class:`~mlflow_mia.metrics.gate.Gate`, the
canary gate :class:`~mlflow_mia.metrics.canary_gate.CanaryGate` and the NER gate
:class:`~mlflow_mia.metrics.ner_gate.NerGate`) implement :class:`ReleaseGate`: each reads what it
decides on from a finished audit's result and returns a :class:`ThreeStateResult`
(``pass``, ``fail`` or ``inconclusive``; ``docs/guides/release-gate.md``). A pipeline
calls every one of them the same way::

    verdict = gate.check(result)
    verdict.status, verdict.verdict(), verdict.message()

:data:`SEVERITY` orders the statuses for every place that combines verdicts (the points of
one budget, the budgets of one gate, the records of one registry version,
:mod:`mlflow_mia.tracking.gate_history`): ``tampered``, which only a registry version's
record history can be, sits between ``inconclusive`` and ``fail``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from mlflow_mia.metrics.loose import caveats

__all__ = ["PASS", "FAIL", "INCONCLUSIVE", "TAMPERED", "SEVERITY"]

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
#: A registry version whose gate records were deleted or edited (:mod:`mlflow_mia.tracking.gate_chain`).
TAMPERED = "tampered"
#: How severe each status is, mildest first: wherever verdicts are combined, the most severe stands.
SEVERITY = {PASS: 0, INCONCLUSIVE: 1, TAMPERED: 2, FAIL: 3}


def worst(statuses, *, default: str = PASS) -> str:
    """The most severe of ``statuses`` by :data:`SEVERITY` (``default`` when there are none).

    Raises
    ------
    KeyError
        A status that is not one of :data:`SEVERITY`.

    >>> worst(["pass", "inconclusive", "pass"]), worst([])
    ('inconclusive', 'pass')
    """
    return max(statuses, key=SEVERITY.__getitem__, default=default)


@dataclass(frozen=True)
class ThreeStateResult:
    """A gate's three-state verdict: ``status`` (pass, fail or inconclusive), its ``checks``, the ``confidence``;
    the budgets accepted as ``loose`` and whether it is a ``release`` audit (:mod:`mlflow_mia.metrics.loose`),
    which its message says and its gate record keeps."""

    status: str
    checks: tuple
    confidence: float = 0.95
    loose: tuple = ()
    release: bool = True

    @property
    def passed(self) -> bool:
        """True only for ``pass``: ``fail`` and ``inconclusive`` both block a release."""
        return self.status == PASS

    def caveats(self) -> str:
        """:func:`mlflow_mia.metrics.loose.caveats` of this verdict ('' when nothing)."""
        return caveats(self.loose, self.release)

    def with_caveats(self, text: str) -> str:
        """``text`` followed by the :meth:`caveats` in parentheses, when there are any."""
        said = self.caveats()
        return f"{text} ({said})" if said else text

    def verdict(self) -> str:
        """One line, ``mia.gate=<status>: ...`` with what decided it, as each gate's result subclass says it.
        Raises NotImplementedError on a bare ``ThreeStateResult``."""
        raise NotImplementedError(f"{type(self).__name__} does not say its verdict(); a gate returns a subclass")

    def message(self) -> str:
        """What the verdict means for a release, in a few sentences, as each gate's result subclass says it.
        Raises NotImplementedError on a bare ``ThreeStateResult``."""
        raise NotImplementedError(f"{type(self).__name__} does not say its message(); a gate returns a subclass")


@runtime_checkable
class ReleaseGate(Protocol):
    """A release gate: budgets decided on a finished audit's result.

    ``check(result)`` reads what the gate decides on from ``result`` (the membership audit's
    ``AuditResult``: its metrics and bounds; the canary audit's ``CanaryAuditResult``: its
    exposures and epsilon bound; the NER audit's ``NerAuditResult``: its per-name scores) and
    returns the verdict, a :class:`ThreeStateResult` with ``verdict()`` (one line),
    ``message()`` (what it means for a release) and ``to_dict()``.
    """

    def check(self, result) -> ThreeStateResult:
        ...
