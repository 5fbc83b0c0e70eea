"""The release gate of a canary audit: budgets on exposure and on the record-level epsilon lower bound.

Same three verdicts as the membership gate (:mod:`mlflow_mia.metrics.gate`):

- **exposure** ``<= max_exposure`` (bits), checked on the mean exposure of the
  *included* secret-format canaries at every repetition count: ``fail`` when a mean
  exceeds the budget; ``pass`` when every one-sided upper confidence bound (bootstrap
  over those canaries) is within it; ``inconclusive`` otherwise. A model that memorised
  nothing has a mean exposure of ``1 / ln 2 ~ 1.44`` bits (``-log2`` of a uniform rank),
  so a budget must lie above that.
- **record-level epsilon** ``<= max_epsilon``, checked on the one-run lower bound of the
  canaries inserted once: ``fail`` when the bound exceeds the budget (at the audit's
  confidence the model is *not* (budget, delta)-DP for one record); ``pass`` when it is
  within the budget and these canaries could have shown a larger value (the bound with
  every guess right exceeds the budget); ``inconclusive`` when even a perfect attack on
  these canaries could not certify the budget: the audit is too small to test it.

A lower bound within budget is not a privacy guarantee: ``pass`` means this audit found
no violation it was able to find.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlflow_mia.metrics.gate import FAIL, INCONCLUSIVE, PASS, ThreeStateResult
from mlflow_mia.metrics.gate_record import GateRecord
from mlflow_mia.naming import fmt_number, nan_to_none

__all__ = ["CanaryGate", "CanaryGateResult", "NULL_EXPOSURE", "EXPOSURE", "EPSILON"]

#: Mean exposure of a canary the model knows nothing about: E[-log2 U] = 1 / ln 2 bits.
NULL_EXPOSURE = 1.0 / math.log(2.0)
EXPOSURE, EPSILON = "canary_exposure", "canary_epsilon"
_RANK = {PASS: 0, INCONCLUSIVE: 1, FAIL: 2}


def _fmt(x) -> str:
    return fmt_number(x, 3, missing="nan")


@dataclass(frozen=True)
class CanaryGateResult(ThreeStateResult):
    """Verdict of a canary gate.

    Attributes
    ----------
    status : {"pass", "fail", "inconclusive"}
        The worst verdict over the budgets (the value of the ``mia.gate`` tag).
    checks : tuple of dict
        One per budget and repetition count: ``kind`` (``canary_exposure`` or
        ``canary_epsilon``), ``metric``, ``value``, ``bound`` (upper bound of the mean
        exposure, or the ceiling of the epsilon bound), ``budget``, ``status``, ``unit``.
    confidence : float
    """

    def verdict(self) -> str:
        """One line: ``mia.gate=<status>: <metric> = <value> ... ok | OVER BUDGET | INCONCLUSIVE``."""
        parts = []
        for c in self.checks:
            mark = {PASS: "ok", FAIL: "OVER BUDGET", INCONCLUSIVE: "INCONCLUSIVE"}[c["status"]]
            if c["kind"] == EXPOSURE:
                parts.append(f"{c['metric']} = {_fmt(c['value'])} bits, {self.confidence:.0%} upper bound "
                             f"{_fmt(c['bound'])} vs budget {c['budget']:g} {mark}")
            else:
                parts.append(f"{c['metric']} = {_fmt(c['value'])} (largest these canaries can show: "
                             f"{_fmt(c['bound'])}) vs budget {c['budget']:g} {mark}")
        return f"mia.gate={self.status}: " + "; ".join(parts)

    def message(self) -> str:
        """What the verdict means for a release."""
        if self.status == PASS:
            return ("release gate passed: every canary budget holds at the audit's confidence (a lower bound within "
                    "budget is not a privacy guarantee: the audit found no violation it could find)")
        if self.status == FAIL:
            worst = [c for c in self.checks if c["status"] == FAIL][0]
            return (f"release gate failed: {worst['metric']} = {_fmt(worst['value'])} exceeds its budget "
                    f"{worst['budget']:g} ({worst['unit']}); do not release this model")
        parts = []
        for c in self.checks:
            if c["status"] != INCONCLUSIVE:
                continue
            if c["kind"] == EPSILON:
                parts.append(f"{c['metric']}: {c['m']} canaries cannot certify an epsilon above {_fmt(c['bound'])}, "
                             f"so the budget {c['budget']:g} cannot be tested; plant more canaries inserted once")
            elif math.isnan(c["value"]):
                parts.append(f"{c['metric']}: no included secret-format canary to measure")
            else:
                parts.append(f"{c['metric']}: the upper bound {_fmt(c['bound'])} is above the budget; more "
                             "secret-format canaries at this repetition count would narrow it")
        return ("release gate inconclusive: no canary metric is over its budget, but the audit cannot show that "
                "the budgets hold, which blocks a release like a fail; " + "; ".join(parts))

    def to_dict(self) -> dict:
        return nan_to_none({"status": self.status, "confidence": self.confidence, "message": self.message(),
                            "checks": [dict(c) for c in self.checks]})

    def record(self, *, n_included: int, n_excluded: int) -> GateRecord:
        """The registry record (``mia.gate.run.<run_id>``): its budgets read as the gated metrics' names."""
        kinds = tuple(dict.fromkeys(c["kind"] for c in self.checks))
        bounds = ",".join(f"{c['metric']} {_fmt(c['value'])}<={c['budget']:g}" for c in self.checks)
        return GateRecord(status=self.status, attacks=kinds, budgets=(), confidence=self.confidence,
                          members=n_included, non_members=n_excluded, bounds=bounds)


@dataclass(frozen=True)
class CanaryGate:
    """Canary release budgets.

    Attributes
    ----------
    max_exposure : float or None
        Budget on the mean exposure (bits) of included secret-format canaries, at every
        repetition count; above :data:`NULL_EXPOSURE`.
    max_epsilon : float or None
        Budget on the record-level one-run epsilon lower bound (canaries inserted once).

    Raises
    ------
    ValueError
        Neither budget, a budget that is not finite or not > 0, or ``max_exposure <= 1 / ln 2``.
    """

    max_exposure: float | None = None
    max_epsilon: float | None = None

    def __post_init__(self):
        if self.max_exposure is None and self.max_epsilon is None:
            raise ValueError("a canary gate needs max_exposure and/or max_epsilon_lower_bound")
        for name, value in (("max_exposure", self.max_exposure), ("max_epsilon_lower_bound", self.max_epsilon)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}: an infinite budget lets every "
                                 "model pass")
        if self.max_exposure is not None and not self.max_exposure > NULL_EXPOSURE:
            raise ValueError(f"max_exposure {self.max_exposure:g} is at or below {NULL_EXPOSURE:.3f} bits, the mean "
                             "exposure of a canary the model never saw (1 / ln 2): every model would fail; give a "
                             "budget above it, e.g. 4")

    def check(self, exposure_points, epsilon_point, *, confidence: float) -> CanaryGateResult:
        """Decide the budgets.

        Parameters
        ----------
        exposure_points : sequence of dict
            Per repetition count: ``metric``, ``value`` (mean exposure of included
            secret-format canaries, nan when none) and ``upper`` (its one-sided upper bound).
        epsilon_point : dict or None
            ``metric``, ``value`` (the record-level bound), ``ceiling`` (its largest
            possible value for these canaries) and ``m``; None when no canary was inserted once.
        confidence : float

        Raises
        ------
        ValueError
            ``max_epsilon`` is set but no canary was inserted once.
        """
        checks = []
        if self.max_exposure is not None:
            for p in exposure_points:
                value, upper = float(p["value"]), float(p["upper"])
                status = (FAIL if value > self.max_exposure else PASS if upper <= self.max_exposure
                          else INCONCLUSIVE)
                if math.isnan(value):
                    status = INCONCLUSIVE
                checks.append({"kind": EXPOSURE, "metric": p["metric"], "value": value, "bound": upper,
                               "budget": float(self.max_exposure), "status": status,
                               "unit": "bits, mean over included secret-format canaries"})
        if self.max_epsilon is not None:
            if epsilon_point is None:
                raise ValueError("max_epsilon_lower_bound needs canaries inserted once (repetition count 1): the "
                                 "record-level bound comes from them")
            value, ceiling = float(epsilon_point["value"]), float(epsilon_point["ceiling"])
            status = FAIL if value > self.max_epsilon else PASS if ceiling > self.max_epsilon else INCONCLUSIVE
            checks.append({"kind": EPSILON, "metric": epsilon_point["metric"], "value": value, "bound": ceiling,
                           "budget": float(self.max_epsilon), "status": status, "m": int(epsilon_point["m"]),
                           "unit": "record-level epsilon lower bound, one canary = one record"})
        status = max((c["status"] for c in checks), key=_RANK.get, default=PASS)
        return CanaryGateResult(status=status, checks=tuple(checks), confidence=confidence)
