"""The release gate of a canary audit: budgets on exposure and on the record-level epsilon lower bound.

Same three verdicts as the membership gate (:mod:`mlflow_mia.metrics.gate`):

- **exposure** ``<= max_exposure`` (bits), checked on the mean exposure of the
  *included* secret-format canaries at every repetition count: ``pass`` when every
  one-sided upper confidence bound (bootstrap over those canaries) is within it;
  ``fail`` when a one-sided lower bound exceeds the budget; ``inconclusive`` otherwise
  (also with fewer than two included canaries, or no bootstrap: no bound). Which mean: the
  **larger** of the headline mean (``exposure_mean``: the exact rank's exposure, or the
  skew-normal extrapolation of the Secret Sharer, Sec. 4.3, when candidates were
  sampled) and the rank-based mean (``exposure_rank_mean``: the sampled estimate,
  capped at ``log2(n_candidates + 1)`` and then a lower bound), and the larger of their
  bounds. Either lower bound over the budget fails (the capped ranks are lower bounds: a
  mean of them over the budget is not an artefact of the fit); a pass needs both within
  it, so neither a fit that undershoots the ranks nor a cap that hides the tail can pass
  a model on its own. A model that memorised
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

Two budgets state nothing and two sets prove nothing, so the options refuse them unless the
auditor says otherwise (:meth:`mlflow_mia.options.canary.CanaryOptions.gate`), and the verdict
and its record carry what was accepted (:attr:`CanaryGate.loose`, :attr:`CanaryGate.release`;
:mod:`mlflow_mia.metrics.loose`):

- an exposure budget above the candidate space's bits (``log2`` of the largest secret space
  of the set: no exposure can exceed it, so it never fails): ``allow_loose_budget``;
- a canary set drawn from an explicit seed (``make_canaries(seed=...)``: whoever knows or
  guesses the seed regenerates every secret and inclusion bit): ``allow_seeded_canaries``,
  which marks the audit as not a release audit (``release=False``).

References
----------
.. [1] N. Carlini, C. Liu, U. Erlingsson, J. Kos, D. Song, "The Secret Sharer", USENIX Security 2019, Sec. 4.
.. [2] T. Steinke, M. Nasr, M. Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlflow_mia.metrics.gate_record import GateRecord
from mlflow_mia.metrics.verdicts import FAIL, INCONCLUSIVE, PASS, ThreeStateResult, worst
from mlflow_mia.naming import fmt_number, nan_to_none

__all__ = ["CanaryGate", "NULL_EXPOSURE", "gate_points"]

#: Mean exposure of a canary the model knows nothing about: E[-log2 U] = 1 / ln 2 bits.
NULL_EXPOSURE = 1.0 / math.log(2.0)
EXPOSURE, EPSILON = "canary_exposure", "canary_epsilon"
#: ``CanaryGate.check(result)`` reads its points from the result (the older call passes them).
_FROM_RESULT = object()


def _fmt(x) -> str:
    return fmt_number(x, 3)


def _larger(a: float, b: float) -> float:
    """The larger of two bounds, ignoring a nan one (nan when both are)."""
    return a if math.isnan(b) else b if math.isnan(a) else max(a, b)


def gate_points(result) -> tuple[list[dict], dict | None]:
    """The gate's inputs from a :class:`~mlflow_mia.audits.canary.CanaryAuditResult`: per repetition count the
    headline mean exposure and the rank-based one (each with its one-sided bounds, and the number of capped
    canaries), and the record-level bound (None when no canary was inserted once).

    :meth:`CanaryGate.check` decides on the larger of the two means.
    """
    m = result.metrics
    points = [{"metric": f"canary/{g}/exposure_mean", "value": m[f"canary/{g}/exposure_mean"],
               "upper": m[f"canary/{g}/exposure_upper"], "lower": m.get(f"canary/{g}/exposure_lower", math.nan),
               "rank_lower": m.get(f"canary/{g}/exposure_rank_lower", math.nan),
               "rank_metric": f"canary/{g}/exposure_rank_mean",
               "rank_value": m.get(f"canary/{g}/exposure_rank_mean", math.nan),
               "rank_upper": m.get(f"canary/{g}/exposure_rank_upper", math.nan),
               "n_capped": int(m.get(f"canary/{g}/exposure_rank_n_capped", 0))}
              for g in sorted(set(result.table["group"]) - {"all"}, key=lambda s: int(s[1:]))
              if f"canary/{g}/exposure_mean" in m]
    bound = result.bounds.get("r1")
    eps = None if bound is None else {"metric": "canary/epsilon_lower_bound", "value": bound.epsilon,
                                      "ceiling": bound.max_epsilon, "m": bound.m}
    return points, eps


@dataclass(frozen=True)
class CanaryGateResult(ThreeStateResult):
    """Verdict of a canary gate.

    Attributes
    ----------
    status : {"pass", "fail", "inconclusive"}
        The worst verdict over the budgets (the value of the ``mia.gate`` tag).
    checks : tuple of dict
        One per budget and repetition count: ``kind`` (``canary_exposure`` or
        ``canary_epsilon``), ``metric`` (for exposure, the larger of the headline and the
        rank-based mean: ``exposure_mean`` or ``exposure_rank_mean``), ``value``,
        ``bound`` (upper bound of the mean exposure, or the ceiling of the epsilon bound),
        ``budget``, ``status``, ``unit``; exposure checks also hold ``headline``,
        ``rank_value`` and ``n_capped`` (nan / 0 when not given).
    confidence : float
    """

    def verdict(self) -> str:
        """One line: ``mia.gate=<status>: <metric> = <value> ... ok | OVER BUDGET | INCONCLUSIVE``."""
        parts = []
        for c in self.checks:
            mark = {PASS: "ok", FAIL: "OVER BUDGET", INCONCLUSIVE: "INCONCLUSIVE"}[c["status"]]
            if c["kind"] == EXPOSURE:
                beside = ""
                if not math.isnan(c.get("rank_value", math.nan)):
                    ge = ">= " if c.get("n_capped", 0) else ""
                    beside = f" (headline {_fmt(c['headline'])}, rank-based {ge}{_fmt(c['rank_value'])})"
                parts.append(f"{c['metric']} = {_fmt(c['value'])} bits{beside}, {self.confidence:.0%} upper bound "
                             f"{_fmt(c['bound'])} vs budget {c['budget']:g} {mark}")
            else:
                parts.append(f"{c['metric']} = {_fmt(c['value'])} (largest these canaries can show: "
                             f"{_fmt(c['bound'])}) vs budget {c['budget']:g} {mark}")
        return f"mia.gate={self.status}: " + "; ".join(parts)

    def message(self) -> str:
        """What the verdict means for a release; with the :meth:`~ThreeStateResult.caveats` (loose budgets, not a
        release audit) in parentheses."""
        return self.with_caveats(self._message())

    def _message(self) -> str:
        if self.status == PASS:
            return ("release gate passed: every canary budget holds at the audit's confidence (a lower bound within "
                    "budget is not a privacy guarantee: the audit found no violation it could find)")
        if self.status == FAIL:
            worst = [c for c in self.checks if c["status"] == FAIL][0]
            shown = (f"its {self.confidence:.0%} lower bound {_fmt(worst['lower'])}" if worst["kind"] == EXPOSURE
                     else "it")
            return (f"release gate failed: {worst['metric']} = {_fmt(worst['value'])}, {shown} exceeds its budget "
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
                            "loose": list(self.loose), "release": self.release,
                            "checks": [dict(c) for c in self.checks]})

    def record(self, *, n_included: int, n_excluded: int, canary_set: str | None = None,
               planted_in: str | None = None, delta: float | None = None, score: str | None = None,
               candidates: int | None = None) -> GateRecord:
        """The registry record (``mia.gate.run.<run_id>``): what was gated, on which canary set, how.

        Parameters
        ----------
        n_included, n_excluded : int
            Canaries on each side of the inclusion bits.
        canary_set : str, optional
            ``<digest>@<key check>``: the set's keyed digest
            (:meth:`~mlflow_mia.canaries.CanarySet.digest`) and the hash key's check
            (``random`` for a key not kept). A fail is cleared only by an audit of the same
            set (:meth:`GateRecord.shortfalls`).
        planted_in : str, optional
            Where the set was planted (the training data digest
            :func:`~mlflow_mia.canaries.insert` returns, or ``run:<run_id>``), as stated.
        delta : float, optional
            The delta of the epsilon lower bound.
        score : str, optional
            ``<attack>/<signal>`` (``/ref=<weights digest>`` with a reference).
        candidates : int, optional
            Candidate secrets per secret-format template.

        Returns
        -------
        GateRecord
            ``attacks`` are the gated budget kinds, ``canary_budgets`` their budgets;
            ``release`` and ``loose`` are this verdict's (an audit of a seeded set accepted
            with ``allow_seeded_canaries`` is not a release audit; the budgets accepted
            as loose with ``allow_loose_budget``).
        """
        kinds = tuple(dict.fromkeys(c["kind"] for c in self.checks))
        bounds = ",".join(f"{c['metric']} {_fmt(c['value'])}<={c['budget']:g}" for c in self.checks)
        budgets = tuple(dict.fromkeys((c["kind"], float(c["budget"])) for c in self.checks))
        return GateRecord(status=self.status, attacks=kinds, budgets=(), confidence=self.confidence,
                          members=n_included, non_members=n_excluded, bounds=bounds,
                          canary_sets=(canary_set,) if canary_set else (),
                          planted_in=(planted_in,) if planted_in else (), canary_budgets=budgets,
                          delta=None if delta is None else float(delta), canary_scores=(score,) if score else (),
                          candidates=None if candidates is None else int(candidates), release=self.release,
                          loose=tuple(self.loose))


@dataclass(frozen=True)
class CanaryGate:
    """Canary release budgets.

    Attributes
    ----------
    max_exposure : float or None
        Budget on the mean exposure (bits) of included secret-format canaries, at every
        repetition count; above :data:`NULL_EXPOSURE`. Checked on the larger of the
        headline mean and the rank-based mean (module docstring).
    max_epsilon : float or None
        Budget on the record-level one-run epsilon lower bound (canaries inserted once).
    loose : tuple of str
        The budgets accepted as loose (``canary_exposure:<budget>``,
        :func:`~mlflow_mia.metrics.loose.loose_exposure`),
        carried into the verdict and its record.
    release : bool
        False: not a release audit (the canary set was drawn from an explicit seed and
        accepted with ``allow_seeded_canaries``); carried into the verdict and its record.

    Raises
    ------
    ValueError
        Neither budget, a budget that is not finite or not > 0, or ``max_exposure <= 1 / ln 2``.
    """

    max_exposure: float | None = None
    max_epsilon: float | None = None
    loose: tuple = ()
    release: bool = True

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

    def check(self, result, epsilon_point=_FROM_RESULT, *, confidence: float | None = None) -> CanaryGateResult:
        """Decide the budgets on a finished canary audit (:class:`~mlflow_mia.metrics.verdicts.ReleaseGate`).

        ``check(result)`` reads the points from a ``CanaryAuditResult`` (:func:`gate_points`) and
        decides at the audit's confidence (``result.config.confidence``);
        ``check(exposure_points, epsilon_point, confidence=...)`` decides on points read already.

        Parameters
        ----------
        result : CanaryAuditResult, or the exposure points (sequence of dict)
            Per repetition count: ``metric``, ``value`` (headline mean exposure of included
            secret-format canaries, bits, nan when none), ``upper`` and ``lower`` (its one-sided
            bounds: a pass needs the upper bound within the budget, a fail the lower bound over
            it; nan bounds give inconclusive); optionally ``rank_lower``, ``rank_metric``, ``rank_value`` and ``rank_upper`` (the
            rank-based mean and its bound) and ``n_capped`` (canaries whose rank-based value
            holds the sample's cap). The gate decides on the larger value and the larger
            bound (module docstring).
        epsilon_point : dict or None, optional
            With exposure points: ``metric``, ``value`` (the record-level bound), ``ceiling`` (its largest
            possible value for these canaries) and ``m``; None when no canary was inserted once.
        confidence : float, optional
            Level of the bounds; required with exposure points, default the audit's with a result.

        Returns
        -------
        CanaryGateResult
            With this gate's ``loose`` and ``release``. With ``max_exposure`` and no exposure
            point (no included secret-format canary),
            the exposure check is ``inconclusive``, never a pass.

        Raises
        ------
        ValueError
            ``max_epsilon`` is set but no canary was inserted once.
        TypeError
            Exposure points without ``confidence``.
        """
        if epsilon_point is _FROM_RESULT:
            exposure_points, epsilon_point = gate_points(result)
            confidence = result.config.confidence if confidence is None else confidence
        else:
            exposure_points = result
        if confidence is None:
            raise TypeError("CanaryGate.check(exposure_points, epsilon_point) needs confidence=")
        checks = []
        if self.max_exposure is not None:
            if not exposure_points:  # nothing measured is no evidence that the budget holds
                exposure_points = [{"metric": "canary/exposure_mean", "value": math.nan, "upper": math.nan}]
            for p in exposure_points:
                headline, rank_value = float(p["value"]), float(p.get("rank_value", math.nan))
                metric, value = p["metric"], headline
                if rank_value > headline or (math.isnan(headline) and not math.isnan(rank_value)):
                    metric, value = p.get("rank_metric", p["metric"]), rank_value
                upper = _larger(float(p["upper"]), float(p.get("rank_upper", math.nan)))
                lower = _larger(float(p.get("lower", math.nan)), float(p.get("rank_lower", math.nan)))
                status = (PASS if upper <= self.max_exposure else FAIL if lower > self.max_exposure
                          else INCONCLUSIVE)
                if math.isnan(value):
                    status = INCONCLUSIVE
                checks.append({"kind": EXPOSURE, "metric": metric, "value": value, "bound": upper, "lower": lower,
                               "budget": float(self.max_exposure), "status": status, "headline": headline,
                               "rank_value": rank_value, "n_capped": int(p.get("n_capped", 0)),
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
        return CanaryGateResult(status=worst(c["status"] for c in checks), checks=tuple(checks), confidence=confidence, loose=tuple(self.loose),
                                release=self.release)
