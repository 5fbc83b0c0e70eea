"""The release gate: a budget on the TPR at a fixed FPR, decided on one-sided confidence bounds.

A budget "TPR at FPR alpha <= b" is checked for every attack at sample level and
(when groups are given) at user level, and gives one of three verdicts
(``docs/guides/release-gate.md``: the rule of a pass as a reviewer can quote it):

- ``pass``: the one-sided upper confidence bound of every TPR is <= b: the audit
  shows that the budget holds;
- ``fail``: some one-sided lower confidence bound is > b: the audit shows that the
  model leaks more than its budget;
- ``inconclusive``: otherwise (a point estimate over the budget with its lower bound
  under it, an upper bound over the budget, a TPR that could not be read at all: too
  few non-members for that alpha). It blocks a release like ``fail``.

The upper bound is the larger of two, the lower bound the smaller of two, each at the
audit's confidence (:func:`~mlflow_mia.audits.membership.scoring.attack_report` logs them):

- **binomial** (``..._upper_binomial`` / ``..._lower_binomial``): Clopper-Pearson on
  the member units at a threshold placed by a Clopper-Pearson bound on the non-member
  units, the two Bonferroni-combined (:func:`~mlflow_mia.metrics.binomial.tpr_bounds_at_fpr`);
  member groups of unequal size count as Kish's effective number of groups,
  ``(sum n_i) ** 2 / sum n_i ** 2`` (:func:`~mlflow_mia.metrics.binomial.kish_effective_units`).
  It holds with few members, where a percentile bootstrap collapses to the observed
  value (3 members, 0 caught: bootstrap bound 0, binomial 0.71), and it carries the
  threshold's noise without a bootstrap;
- **bootstrap** (``..._upper_bootstrap`` / ``..._lower_bootstrap``): the percentile
  bound of the cluster bootstrap over the randomised unit.

The units are the groups when a group column was given (articles, users), else the
samples. Metrics without the binomial bounds (an audit of an earlier release) can
neither pass nor fail: such a point is ``inconclusive``.

:class:`~mlflow_mia.metrics.gate_record.GateRecord` is what a gated audit leaves on a
registry version and what a later audit must match to clear a fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from mlflow_mia.config import MIN_FPR
from mlflow_mia.metrics.binomial import members_needed, per_side_confidence
from mlflow_mia.metrics.loose import LOOSE_MAX_TPR, check_loose_budgets, loose_tpr
from mlflow_mia.metrics.verdicts import FAIL, INCONCLUSIVE, PASS, SEVERITY, ThreeStateResult, worst
from mlflow_mia.naming import fmt_alpha, fmt_number, is_nan, nan_to_none
from mlflow_mia.metrics.thresholds import min_population_size

__all__ = ["Gate", "GateResult", "check_gate_confidence", "PASS", "FAIL", "INCONCLUSIVE"]

BOOTSTRAP, BINOMIAL = "bootstrap", "binomial"
_UNIT_NOUN = {"sample": ("members", "non-members"), "group": ("member groups", "non-member groups"),
              "user": ("member users", "non-member users"), "name": ("member names", "non-member names")}

#: The lowest confidence a release gate may be decided at.
MIN_GATE_CONFIDENCE = 0.95


def check_gate_confidence(confidence, *, option: str = "confidence") -> float:
    """``confidence`` as a float, checked for a release gate: in [0.95, 1).

    Raises
    ------
    ValueError
        Below 0.95 (a pass at a lower level is one a reviewer cannot defend), at or
        above 1, or not a number; the message names ``option``.
    """
    try:
        value = float(confidence)
    except (TypeError, ValueError):
        raise ValueError(f"{option} must be a number in [{MIN_GATE_CONFIDENCE}, 1), got {confidence!r}") from None
    if not MIN_GATE_CONFIDENCE <= value < 1.0:
        raise ValueError(f"{option} {value:g} is not allowed with a release gate: a gate is decided at a confidence "
                         f"in [{MIN_GATE_CONFIDENCE}, 1) (e.g. {option} 0.95 or 0.99), so that a pass is one a "
                         "reviewer can defend")
    return value


def count_metric(metrics: Mapping, key: str) -> int | None:
    """``metrics[key]`` as an int; None when missing or nan."""
    value = metrics.get(key)
    return None if value is None or is_nan(value) else int(value)


def _bound_pair(metrics: Mapping, key: str, side: str, pick) -> tuple[float, str | None]:
    """The deciding bound of one side (``upper``: the larger, ``lower``: the smaller) and its kind."""
    found = {kind: float(metrics[f"{key}_{side}_{kind}"]) for kind in (BINOMIAL, BOOTSTRAP)
             if not is_nan(metrics.get(f"{key}_{side}_{kind}"))}
    if BINOMIAL not in found:
        return math.nan, None
    kind = pick(found, key=found.get)
    return found[kind], kind


def _point(metrics: Mapping, key: str, alpha: float, max_tpr: float, confidence: float) -> dict:
    """The verdict of one metric ``[user/]{attack}/tpr_at_fpr_{alpha}`` against one budget."""
    scope = key.rpartition("/tpr_at_fpr_")[0]
    if count_metric(metrics, f"{scope}/n_members") is not None:  # a score with counts of its own: NER names
        level = unit = "name"
        n, m = count_metric(metrics, f"{scope}/n_members"), count_metric(metrics, f"{scope}/n_non_members")
        n_units, m_units = n, m
    else:
        level = "user" if key.startswith("user/") else "sample"
        counts = "user/" if level == "user" else ""
        n, m = count_metric(metrics, f"{counts}n_members"), count_metric(metrics, f"{counts}n_non_members")
        # The trials of the bounds: the groups when there are groups (their counts are the user-level ones).
        unit = ("user" if level == "user" else
                "group" if count_metric(metrics, "user/n_members") is not None else "sample")
        n_units, m_units = (n, m) if unit != "group" else (count_metric(metrics, "user/n_members"),
                                                           count_metric(metrics, "user/n_non_members"))
    value = float(metrics[key])
    point = {"metric": key, "level": level, "unit": unit, "value": value, "upper": math.nan, "bound": None,
             "lower": math.nan, "lower_bound": None, "n_members": n, "n_non_members": m, "n_member_units": n_units,
             "n_non_member_units": m_units, "members_needed": None, "non_members_needed": None, "unbounded": False}
    if math.isnan(value):  # unresolvable: the ROC has fewer than 1 / alpha non-members at this level
        return {**point, "status": INCONCLUSIVE, "non_members_needed": min_population_size(alpha)}
    upper, bound = _bound_pair(metrics, key, "upper", max)
    lower, lower_bound = _bound_pair(metrics, key, "lower", min)
    point.update(upper=upper, bound=bound, lower=lower, lower_bound=lower_bound)
    if bound is None:  # no bound with the threshold's noise: neither a pass nor a fail can be shown
        return {**point, "status": INCONCLUSIVE}
    if upper <= max_tpr:
        return {**point, "status": PASS}
    if lower_bound is not None and lower > max_tpr:
        return {**point, "status": FAIL}
    rate = metrics.get(f"{key}_upper_at_tpr")
    needed = (None if rate is None or is_nan(rate) or not n_units
              else members_needed(float(rate), max_tpr, per_side_confidence(confidence)))
    if needed is not None and n_units and bound == BOOTSTRAP and value < max_tpr:
        # A bootstrap bound over clusters can be wider than the binomial one: scale its width as 1 / sqrt(n).
        needed = max(needed, math.ceil(n_units * ((upper - value) / (max_tpr - value)) ** 2))
    return {**point, "status": INCONCLUSIVE, "members_needed": needed, "unbounded": needed is None}


def _severity(point: dict) -> tuple:
    """Order of the points of one budget: fail > inconclusive > pass, then the worst value within each."""
    if point["status"] == FAIL:
        return (SEVERITY[FAIL], point["lower"])
    if math.isnan(point["value"]) or point["bound"] is None:
        return (SEVERITY[INCONCLUSIVE], math.inf)
    return (SEVERITY[point["status"]], point["upper"])


def fmt_bound(value, digits: int = 3) -> str:
    """A rate or bound for a verdict line (``nan`` when missing)."""
    return fmt_number(value, digits, missing="n/a")


@dataclass(frozen=True)
class GateResult(ThreeStateResult):
    """Verdict of a release gate.

    Attributes
    ----------
    status : {"pass", "fail", "inconclusive"}
        The value of the ``mia.gate`` tag: the worst verdict over all budgets.
    checks : tuple of dict
        One per budget: ``alpha``, ``max_tpr``, ``status``, ``passed`` and the deciding
        point's ``metric``, ``value`` (nan when unresolvable), ``upper`` / ``lower``
        (its one-sided bounds), ``bound`` / ``lower_bound`` (which decided:
        ``"binomial"`` or ``"bootstrap"``), ``unit`` (``"sample"``, ``"group"`` or
        ``"user"``: the trials of the bounds), ``members_needed`` (member units that
        would bring the upper bound under the budget at the observed rate; None with
        ``unbounded`` when no member count would at this number of non-members) /
        ``non_members_needed`` (to make the TPR readable); ``points`` holds every
        attack and level checked.
    confidence : float
        One-sided level of the bounds.
    """

    def _part(self, c: dict) -> str:
        head = f"{c['metric']} = {fmt_bound(c['value'])}"
        if math.isnan(c["value"]):
            noun = _UNIT_NOUN[c["level"]][1]
            return (f"{c['metric']} unresolvable ({c['n_non_members']} {noun}, needs {c['non_members_needed']}) "
                    "INCONCLUSIVE")
        if c["bound"] is None:
            return f"{head}, no bound with the threshold's noise (an audit of an earlier release) INCONCLUSIVE"
        upper = f"{self.confidence:.0%} upper bound {fmt_bound(c['upper'])} ({c['bound']})"
        lower = f"{self.confidence:.0%} lower bound {fmt_bound(c['lower'])} ({c['lower_bound']})"
        if c["status"] == PASS:
            return f"{head}, {upper} <= budget {c['max_tpr']:g} ok"
        if c["status"] == FAIL:
            return f"{head}, {lower} > budget {c['max_tpr']:g} OVER BUDGET"
        if c["value"] > c["max_tpr"]:
            return f"{head} > budget {c['max_tpr']:g} but {lower} is not: INCONCLUSIVE"
        return f"{head}, {upper} > budget {c['max_tpr']:g} INCONCLUSIVE"

    def verdict(self) -> str:
        """One line for a terminal or a CI log: every budget's deciding metric, its bound and mark."""
        return f"mia.gate={self.status}: " + "; ".join(self._part(c) for c in self.checks)

    def needed(self) -> dict:
        """Pool sizes that would resolve an inconclusive verdict, by unit.

        Returns
        -------
        dict
            ``{unit: {"members": total or None, "non_members": total or None,
            "unbounded": bool, "n_members": now, "n_non_members": now}}`` over the
            inconclusive points (unit ``"sample"``, ``"group"`` or ``"user"``);
            ``unbounded`` when no member count brings a bound under its budget with
            this many non-members (the rate at the threshold the bound is read at is
            at or over the budget). A score with counts of its own (unit ``"name"``: the
            NER gate's names of one entity type) has a row of its own, keyed by the score
            (``ner/{type}/{score}``).
        """
        out: dict = {}
        for c in self.checks:
            for p in c["points"]:
                if p["status"] != INCONCLUSIVE or p["bound"] is None and not math.isnan(p["value"]):
                    continue
                unit = p["unit"] if not math.isnan(p["value"]) else p["level"]
                units = unit == p["unit"]
                key = p["metric"].rpartition("/tpr_at_fpr_")[0] if unit == "name" else unit
                row = out.setdefault(key, {"members": None, "non_members": None, "unbounded": False,
                                            "n_members": p["n_member_units" if units else "n_members"],
                                            "n_non_members": p["n_non_member_units" if units else "n_non_members"]})
                if p["non_members_needed"] is not None:
                    row["non_members"] = max(row["non_members"] or 0, p["non_members_needed"])
                elif p["unbounded"]:
                    row["unbounded"] = True
                elif p["members_needed"] is not None:
                    row["members"] = max(row["members"] or 0, p["members_needed"])
        return out

    def message(self) -> str:
        """What the verdict means for a release, and for ``inconclusive`` what would resolve it; with the
        :meth:`~ThreeStateResult.caveats` (loose budgets) in parentheses."""
        return self.with_caveats(self._message())

    def _message(self) -> str:
        if self.status == PASS:
            return (f"release gate passed: every {self.confidence:.0%} upper confidence bound of the TPR is within "
                    "its budget")
        if self.status == FAIL:
            worst = max((c for c in self.checks if c["status"] == FAIL), key=lambda c: c["lower"] - c["max_tpr"])
            return (f"release gate failed: the model leaks more than its budget ({worst['metric']} = "
                    f"{fmt_bound(worst['value'])}, its {self.confidence:.0%} lower bound {fmt_bound(worst['lower'])} > "
                    f"{worst['max_tpr']:g} at FPR {fmt_alpha(worst['alpha'])}); do not release it")
        over = [p for c in self.checks for p in c["points"]
                if p["status"] == INCONCLUSIVE and not math.isnan(p["value"]) and p["value"] > c["max_tpr"]]
        parts = [f"{p['metric']} = {fmt_bound(p['value'])} is over its budget, but its {self.confidence:.0%} lower bound "
                 f"{fmt_bound(p['lower'])} is not: the audit does not show that it leaks beyond the budget either"
                 for p in over[:3]]
        if any(p["bound"] is None and not math.isnan(p["value"]) for c in self.checks for p in c["points"]):
            parts.append("some TPRs have no bound that includes the threshold's noise (metrics of an earlier "
                         "release): audit again")
        for key, row in self.needed().items():
            members, non_members = _UNIT_NOUN.get(key, _UNIT_NOUN["name"])
            which = "" if key in _UNIT_NOUN else f"{key}: "  # a score with counts of its own (NER names of one type)
            if row["members"] is not None:
                parts.append(f"{which}{max(row['members'] - (row['n_members'] or 0), 0)} more {members} "
                             f"({row['members']} in all) at the observed rate would bring the upper bound under the "
                             "budget")
            if row["unbounded"]:
                parts.append(f"{which}no number of {members} passes with {row['n_non_members']} {non_members}: at "
                             f"the threshold their count can place, the observed TPR is at or over the budget; add "
                             f"{non_members}")
            if row["non_members"] is not None:
                have = row["n_non_members"] or 0
                parts.append(f"{which}{max(row['non_members'] - have, 0)} more {non_members} ({row['non_members']} "
                             "in all) would make the TPR readable at that FPR")
        head = ("release gate inconclusive: the audit shows neither that the budget holds nor that it is exceeded, "
                "which blocks a release like a fail")
        return head + ("; " + "; ".join(parts) if parts else "")

    def to_dict(self) -> dict:
        """JSON-able form (nan as None) for ``audit_summary.json`` and the report."""
        return nan_to_none({"status": self.status, "confidence": self.confidence, "message": self.message(),
                            "loose": list(self.loose), "release": self.release,
                            "checks": [{**c, "points": list(c["points"])} for c in self.checks]})


_NOT_A_BUDGET = ("max_tpr_at_fpr {!r} is not a budget: give ALPHA:MAX, e.g. '0.01:0.05' (the TPR at FPR 0.01 may be "
                 "at most 0.05), a list of those or a dict {{alpha: max}}")


def _budget_pair(item) -> tuple:
    """``(alpha, max_tpr)`` of a non-string budget: a pair of numbers (or numeric strings, as JSON keys are),
    else the error naming the key and the form."""
    if isinstance(item, (list, tuple)) and len(item) == 2 and not any(isinstance(v, bool) for v in item):
        try:
            return float(item[0]), float(item[1])
        except (TypeError, ValueError):
            pass
    raise ValueError(_NOT_A_BUDGET.format(item))


@dataclass(frozen=True)
class Gate:
    """Release budget: the TPR at FPR ``alpha`` may not exceed ``max_tpr``.

    Every attack is checked, at sample level and (when groups are given) at user
    level; the worst one decides (see the module docstring for the three verdicts).

    Attributes
    ----------
    budgets : tuple of (float, float)
        ``(alpha, max_tpr)`` pairs, alpha in [:data:`~mlflow_mia.config.MIN_FPR`, 1),
        ``alpha < max_tpr < 1``. A ``max_tpr`` above 0.5 is loose (:attr:`loose`,
        :mod:`mlflow_mia.metrics.loose`): refused by the options unless ``allow_loose_budget``.

    Raises
    ------
    ValueError
        No budget, alpha out of [1e-9, 1), max_tpr out of [0, 1) or not finite, or ``max_tpr <= alpha``
        (a model that leaks nothing has TPR = alpha at FPR alpha, so such a budget
        fails every model).
    """

    budgets: tuple
    #: The budgets' FPRs, highest first (set at construction from ``budgets``).
    alphas: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if not self.budgets:
            raise ValueError("a gate needs at least one ALPHA:MAX budget, e.g. '0.01:0.05'")
        clean = []
        for alpha, max_tpr in self.budgets:
            alpha, max_tpr = float(alpha), float(max_tpr)
            if not MIN_FPR <= alpha < 1.0:  # nan fails too
                raise ValueError(f"gate budget {alpha:g}:{max_tpr:g}: the FPR alpha must be in [{MIN_FPR:g}, 1) (a "
                                 f"threshold at FPR alpha needs ceil(1 / alpha) population texts); e.g. 0.01:0.05")
            if not 0.0 <= max_tpr < 1.0:  # nan fails too
                raise ValueError(f"gate budget {alpha:g}:{max_tpr:g}: the maximum TPR must be a finite number in "
                                 "[0, 1) (a budget of 1 or more lets every model pass); e.g. 0.01:0.05")
            if max_tpr <= alpha:
                raise ValueError(f"gate budget {alpha:g}:{max_tpr:g} is at or below its FPR: a model that leaks "
                                 f"nothing has TPR = {alpha:g} at FPR {alpha:g} (a random guess), so every model "
                                 f"would fail; give a maximum TPR above {alpha:g}, e.g. "
                                 f"{alpha:g}:{min(5 * alpha, 1.0):g}")
            clean.append((alpha, max_tpr))
        object.__setattr__(self, "budgets", tuple(sorted(set(clean), reverse=True)))
        object.__setattr__(self, "alphas", tuple(a for a, _ in self.budgets))

    @property
    def loose(self) -> tuple:
        """The budgets above :data:`~mlflow_mia.metrics.loose.LOOSE_MAX_TPR`, as ``ALPHA:MAX`` texts."""
        return loose_tpr(self.budgets)

    def check_loose(self, *, allowed: bool) -> tuple:
        """:attr:`loose`, refused (``ValueError``) unless ``allowed`` (``allow_loose_budget``)."""
        return check_loose_budgets(self.loose, allowed=allowed, why=f"a TPR budget above {LOOSE_MAX_TPR:g} passes a "
                                   "model whose attacks find every other member")

    @classmethod
    def parse(cls, spec) -> "Gate | None":
        """Build a gate from ``"0.01:0.05"``, ``"0.01:0.05,0.001:0.01"``, a list of those,
        a dict ``{alpha: max}`` or ``(alpha, max)`` pairs; None or empty gives None.

        Raises
        ------
        ValueError
            A budget is not of the form ``ALPHA:MAX`` (a lone number such as ``0.05``, a
            pair that is not two numbers: the message names ``max_tpr_at_fpr`` and the
            form), out of range or not above its alpha.

        Examples
        --------
        >>> Gate.parse("0.01:0.05").budgets
        ((0.01, 0.05),)
        >>> Gate.parse(0.05)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: max_tpr_at_fpr 0.05 is not a budget: give ALPHA:MAX, e.g. '0.01:0.05' (the TPR at FPR 0.01 ...
        """
        if spec is None or spec == "" or spec == [] or spec == ():
            return None
        if isinstance(spec, Gate):
            return spec
        if isinstance(spec, Mapping):
            return cls(tuple(_budget_pair(item) for item in spec.items()))
        if isinstance(spec, str):
            spec = [s for s in spec.split(",") if s.strip()]
        elif not isinstance(spec, (list, tuple)):
            raise ValueError(_NOT_A_BUDGET.format(spec))
        budgets = []
        for item in spec:
            if isinstance(item, str):
                alpha, sep, max_tpr = item.strip().partition(":")
                if not sep:
                    raise ValueError(f"gate budget {item!r} must look like ALPHA:MAX, e.g. 0.01:0.05 (the TPR "
                                     "at FPR 0.01 may be at most 0.05)")
                try:
                    budgets.append((float(alpha), float(max_tpr)))
                except ValueError:
                    raise ValueError(f"gate budget {item!r}: ALPHA and MAX must be numbers") from None
            else:
                budgets.append(_budget_pair(item))
        return cls(tuple(budgets)) if budgets else None

    def check(self, result, *, confidence: float | None = None) -> GateResult:
        """Decide the budgets on a finished membership audit (:class:`~mlflow_mia.metrics.verdicts.ReleaseGate`).

        Parameters
        ----------
        result : AuditResult or mapping of str to float
            The audit's result: its ``metrics`` are decided at the confidence its bounds were
            computed at (``result.config.metrics.confidence``). Or the flat metrics alone
            (``AuditResult.metrics``; confidence 0.95 unless given):
            ``[user/]{attack}/tpr_at_fpr_{alpha}`` with its bounds
            ``..._upper_binomial``, ``..._lower_binomial`` (and optionally
            ``..._upper_bootstrap``, ``..._lower_bootstrap``, ``..._upper_at_tpr``),
            and the counts ``n_members``, ``n_non_members`` (``user/...`` at user
            level, and the units at sample level when there are groups); a score with counts
            of its own (``{scope}/n_members``, ``{scope}/n_non_members`` beside
            ``{scope}/tpr_at_fpr_{alpha}``: the NER gate's names, :mod:`mlflow_mia.metrics.ner_gate`)
            is counted in those units.
        confidence : float in [0.95, 1), optional
            One-sided level of the bounds; default the audit's ``confidence`` (0.95 for bare metrics).

        Returns
        -------
        GateResult
            Its ``loose`` holds :attr:`loose`.

        Raises
        ------
        ValueError
            No ``tpr_at_fpr_<alpha>`` metric exists for a budget's alpha, or
            ``confidence`` is out of [0.95, 1) (:func:`check_gate_confidence`).
        """
        if isinstance(result, Mapping):
            metrics = result
            confidence = 0.95 if confidence is None else confidence
        else:
            metrics = result.metrics
            confidence = result.config.metrics.confidence if confidence is None else confidence
        confidence = check_gate_confidence(confidence)
        checks = []
        for alpha, max_tpr in self.budgets:
            suffix = f"/tpr_at_fpr_{fmt_alpha(alpha)}"
            keys = [k for k in metrics if k.endswith(suffix)]
            if not keys:
                raise ValueError(f"no metric ends with {suffix!r}: the audit did not report FPR {fmt_alpha(alpha)}")
            points = tuple(_point(metrics, k, alpha, max_tpr, confidence) for k in keys)
            deciding = max(points, key=_severity)
            checks.append({**deciding, "alpha": alpha, "max_tpr": max_tpr, "passed": deciding["status"] == PASS,
                           "points": points})
        return GateResult(status=worst(c["status"] for c in checks), checks=tuple(checks), confidence=confidence,
                          loose=self.loose)
