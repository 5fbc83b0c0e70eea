"""The release gate: a budget on the TPR at a fixed FPR, decided on a one-sided confidence bound.

A budget "TPR at FPR alpha <= b" is checked for every attack at sample level and
(when groups are given) at user level, and gives one of three verdicts
(``docs/method.md``, "Intervals and the release gate"):

- ``pass``: the one-sided upper confidence bound of every TPR is <= b: the audit
  shows that the budget holds;
- ``fail``: some point estimate is > b: the model leaks more than its budget;
- ``inconclusive``: otherwise. The point estimates are within the budget but the
  audit is too small to show it (or a TPR could not be read at all: too few
  non-members for that alpha). It blocks a release like ``fail``.

The bound is the metric ``{attack}/tpr_at_fpr_{alpha}_upper`` when the audit
logged one (a bootstrap bound over the randomised unit), else the one-sided
Clopper-Pearson bound of ``k = round(TPR * n)`` out of the ``n`` members at that
level (Clopper and Pearson 1934). The bound only covers the member side of the
TPR: the threshold read off the non-members' scores is taken as given.

:class:`GateRecord` is what a gated audit leaves on a registry version
(``mia.gate.run.<run_id>``) and what a later audit must match to clear a fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping

from mlflow_mia.metrics.epsilon import clopper_pearson_upper
from mlflow_mia.naming import fmt_alpha, fmt_number, is_nan, nan_to_none

__all__ = ["Gate", "GateResult", "GateRecord", "ThreeStateResult", "members_needed",
           "PASS", "FAIL", "INCONCLUSIVE", "BOOTSTRAP", "CLOPPER_PEARSON"]

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
BOOTSTRAP, CLOPPER_PEARSON = "bootstrap", "clopper-pearson"
_RANK = {PASS: 0, INCONCLUSIVE: 1, FAIL: 2}
_LEVEL_NOUN = {"sample": ("members", "non-members"), "user": ("member users", "non-member users")}


def members_needed(tpr: float, max_tpr: float, confidence: float, *, limit: int = 10**9) -> int | None:
    """Smallest pool (members at that level) whose Clopper-Pearson bound at the observed TPR is <= ``max_tpr``.

    Solves ``clopper_pearson_upper(tpr * n, n, confidence=confidence, whole=False) <= max_tpr`` for the
    integer ``n`` (``k = tpr * n`` kept fractional, so the bound falls smoothly in n).

    Returns
    -------
    int or None
        None when no pool up to ``limit`` members gets there (``tpr >= max_tpr``:
        the bound never drops under the observed rate).
    """
    if not tpr < max_tpr:
        return None

    def ok(n: int) -> bool:
        return clopper_pearson_upper(tpr * n, n, confidence=confidence, whole=False) <= max_tpr

    high = 1
    while not ok(high):
        high *= 2
        if high > limit:
            return None
    low = high // 2  # not ok (or 0)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if ok(mid) else (mid, high)
    return high


def _count(metrics: Mapping, key: str) -> int | None:
    value = metrics.get(key)
    return None if is_nan(value) else int(value)


def _point(metrics: Mapping, key: str, alpha: float, max_tpr: float, confidence: float) -> dict:
    """The verdict of one metric ``[user/]{attack}/tpr_at_fpr_{alpha}`` against one budget."""
    from mlflow_mia.metrics.thresholds import min_population_size

    level = "user" if key.startswith("user/") else "sample"
    counts = "user/" if level == "user" else ""
    n, m = _count(metrics, f"{counts}n_members"), _count(metrics, f"{counts}n_non_members")
    value = float(metrics[key])
    point = {"metric": key, "level": level, "value": value, "upper": math.nan, "bound": None, "n_members": n,
             "n_non_members": m, "members_needed": None, "non_members_needed": None}
    if math.isnan(value):  # unresolvable: the ROC has fewer than 1 / alpha non-members at this level
        return {**point, "status": INCONCLUSIVE, "non_members_needed": min_population_size(alpha)}
    upper = metrics.get(f"{key}_upper")
    if not is_nan(upper):
        point.update(upper=float(upper), bound=BOOTSTRAP)
    elif n:
        point.update(upper=clopper_pearson_upper(min(max(round(value * n), 0), n), n, confidence=confidence),
                     bound=CLOPPER_PEARSON)
    if value > max_tpr:
        return {**point, "status": FAIL}
    if point["bound"] is None:
        raise ValueError(f"the gate needs the member count {counts}n_members (or the bound {key}_upper) to bound "
                         f"{key}; pass the audit's full metrics")
    if point["upper"] <= max_tpr:
        return {**point, "status": PASS}
    needed = members_needed(value, max_tpr, confidence)
    if needed is not None and point["bound"] == BOOTSTRAP and n:
        # A bootstrap bound over clusters can be wider than the binomial one: scale its width as 1 / sqrt(n).
        needed = max(needed, math.ceil(n * ((point["upper"] - value) / (max_tpr - value)) ** 2))
    return {**point, "status": INCONCLUSIVE, "members_needed": needed}


def _severity(point: dict) -> tuple:
    """Order of the points of one budget: fail > inconclusive > pass, then the worst value within each."""
    if point["status"] == FAIL:
        return (2, point["value"])
    if math.isnan(point["value"]):
        return (1, math.inf)
    return (_RANK[point["status"]], point["upper"])


def _fmt(value, digits: int = 3) -> str:
    return fmt_number(value, digits, missing="nan")


@dataclass(frozen=True)
class ThreeStateResult:
    """A gate's three-state verdict: ``status`` (pass, fail or inconclusive), its ``checks``, the ``confidence``."""

    status: str
    checks: tuple
    confidence: float = 0.95

    @property
    def passed(self) -> bool:
        """True only for ``pass``: ``fail`` and ``inconclusive`` both block a release."""
        return self.status == PASS


@dataclass(frozen=True)
class GateResult(ThreeStateResult):
    """Verdict of a release gate.

    Attributes
    ----------
    status : {"pass", "fail", "inconclusive"}
        The value of the ``mia.gate`` tag: the worst verdict over all budgets.
    checks : tuple of dict
        One per budget: ``alpha``, ``max_tpr``, ``status``, ``passed`` and the deciding
        point's ``metric``, ``value`` (nan when unresolvable), ``upper`` (its upper
        bound), ``bound`` (``"bootstrap"`` or ``"clopper-pearson"``), ``members_needed``
        / ``non_members_needed`` (pool sizes that would resolve an inconclusive
        point); ``points`` holds every attack and level checked.
    confidence : float
        One-sided level of the upper bounds.
    """


    def _part(self, c: dict) -> str:
        if math.isnan(c["value"]):
            noun = _LEVEL_NOUN[c["level"]][1]
            return (f"{c['metric']} unresolvable ({c['n_non_members']} {noun}, needs {c['non_members_needed']}) "
                    "INCONCLUSIVE")
        if c["status"] == FAIL:
            return f"{c['metric']} = {_fmt(c['value'])} > budget {c['max_tpr']:g} OVER BUDGET"
        kind = {BOOTSTRAP: "bootstrap", CLOPPER_PEARSON: "Clopper-Pearson"}.get(c["bound"], "no bound")
        bound = f"{self.confidence:.0%} upper bound {_fmt(c['upper'])} ({kind})"
        if c["status"] == PASS:
            return f"{c['metric']} = {_fmt(c['value'])}, {bound} <= budget {c['max_tpr']:g} ok"
        return f"{c['metric']} = {_fmt(c['value'])}, {bound} > budget {c['max_tpr']:g} INCONCLUSIVE"

    def verdict(self) -> str:
        """One line for a terminal or a CI log: every budget's deciding metric, its bound and mark."""
        return f"mia.gate={self.status}: " + "; ".join(self._part(c) for c in self.checks)

    def needed(self) -> dict:
        """Pool sizes that would resolve an inconclusive verdict, by level.

        Returns
        -------
        dict
            ``{level: {"members": total or None, "non_members": total or None,
            "n_members": now, "n_non_members": now}}`` over the inconclusive
            points; ``members`` None with ``unbounded`` True when no pool size
            brings a bound under its budget at the observed rate.
        """
        out: dict = {}
        for c in self.checks:
            for p in c["points"]:
                if p["status"] != INCONCLUSIVE:
                    continue
                row = out.setdefault(p["level"], {"members": None, "non_members": None, "unbounded": False,
                                                  "n_members": p["n_members"], "n_non_members": p["n_non_members"]})
                if p["non_members_needed"] is not None:
                    row["non_members"] = max(row["non_members"] or 0, p["non_members_needed"])
                elif p["members_needed"] is None:
                    row["unbounded"] = True
                else:
                    row["members"] = max(row["members"] or 0, p["members_needed"])
        return out

    def message(self) -> str:
        """What the verdict means for a release, and for ``inconclusive`` the pool that would resolve it."""
        if self.status == PASS:
            return (f"release gate passed: every {self.confidence:.0%} upper confidence bound of the TPR is within "
                    "its budget")
        if self.status == FAIL:
            worst = max((c for c in self.checks if c["status"] == FAIL), key=lambda c: c["value"] - c["max_tpr"])
            return (f"release gate failed: the model leaks more than its budget ({worst['metric']} = "
                    f"{_fmt(worst['value'])} > {worst['max_tpr']:g} at FPR {fmt_alpha(worst['alpha'])}); do not "
                    "release it")
        parts = []
        for level, row in self.needed().items():
            members, non_members = _LEVEL_NOUN[level]
            if row["members"] is not None:
                parts.append(f"{row['members'] - (row['n_members'] or 0)} more {members} ({row['members']} in all) "
                             f"at the observed rate would bring the {level}-level bound under the budget")
            if row["unbounded"]:
                parts.append(f"at {level} level an observed TPR equals its budget: no pool size shows that it holds")
            if row["non_members"] is not None:
                have = row["n_non_members"] or 0
                parts.append(f"{max(row['non_members'] - have, 0)} more {non_members} ({row['non_members']} in all) "
                             f"would make the {level}-level TPR readable at that FPR")
        return ("release gate inconclusive: no TPR is over its budget, but the audit is too small to show that the "
                "budget holds, which blocks a release like a fail; " + "; ".join(parts))

    def to_dict(self) -> dict:
        """JSON-able form (nan as None) for ``audit_summary.json`` and the report."""
        return nan_to_none({"status": self.status, "confidence": self.confidence, "message": self.message(),
                            "checks": [{**c, "points": list(c["points"])} for c in self.checks]})


@dataclass(frozen=True)
class Gate:
    """Release budget: the TPR at FPR ``alpha`` may not exceed ``max_tpr``.

    Every attack is checked, at sample level and (when groups are given) at user
    level; the worst one decides (see the module docstring for the three verdicts).

    Attributes
    ----------
    budgets : tuple of (float, float)
        ``(alpha, max_tpr)`` pairs, alpha in (0, 1), ``alpha < max_tpr <= 1``.

    Raises
    ------
    ValueError
        No budget, alpha out of (0, 1), max_tpr out of [0, 1], or ``max_tpr <= alpha``
        (a model that leaks nothing has TPR = alpha at FPR alpha, so such a budget
        fails every model).
    """

    budgets: tuple

    def __post_init__(self):
        if not self.budgets:
            raise ValueError("a gate needs at least one ALPHA:MAX budget, e.g. '0.01:0.05'")
        clean = []
        for alpha, max_tpr in self.budgets:
            alpha, max_tpr = float(alpha), float(max_tpr)
            if not 0.0 < alpha < 1.0:
                raise ValueError(f"gate FPR alpha must be in (0, 1), got {alpha}")
            if not 0.0 <= max_tpr <= 1.0:
                raise ValueError(f"gate budget (maximum TPR) must be in [0, 1], got {max_tpr}")
            if max_tpr <= alpha:
                raise ValueError(f"gate budget {alpha:g}:{max_tpr:g} is at or below its FPR: a model that leaks "
                                 f"nothing has TPR = {alpha:g} at FPR {alpha:g} (a random guess), so every model "
                                 f"would fail; give a maximum TPR above {alpha:g}, e.g. "
                                 f"{alpha:g}:{min(5 * alpha, 1.0):g}")
            clean.append((alpha, max_tpr))
        object.__setattr__(self, "budgets", tuple(sorted(set(clean), reverse=True)))

    @property
    def alphas(self) -> tuple[float, ...]:
        return tuple(a for a, _ in self.budgets)

    @classmethod
    def parse(cls, spec) -> "Gate | None":
        """Build a gate from ``"0.01:0.05"``, ``"0.01:0.05,0.001:0.01"``, a list of those,
        a dict ``{alpha: max}`` or ``(alpha, max)`` pairs; None or empty gives None.

        Raises
        ------
        ValueError
            A budget is not of the form ``ALPHA:MAX``, out of range or not above its alpha.
        """
        if spec is None or spec == "" or spec == [] or spec == ():
            return None
        if isinstance(spec, Gate):
            return spec
        if isinstance(spec, Mapping):
            return cls(tuple(spec.items()))
        if isinstance(spec, str):
            spec = [s for s in spec.split(",") if s.strip()]
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
                alpha, max_tpr = item
                budgets.append((alpha, max_tpr))
        return cls(tuple(budgets)) if budgets else None

    def check(self, metrics: Mapping[str, float], *, confidence: float = 0.95) -> GateResult:
        """Decide the budgets on an audit's flat metrics (``AuditResult.metrics``).

        Parameters
        ----------
        metrics : mapping of str to float
            ``[user/]{attack}/tpr_at_fpr_{alpha}``, optionally ``..._upper``, and the
            counts ``n_members``, ``n_non_members`` (``user/...`` at user level).
        confidence : float in (0, 1)
            One-sided level of the upper bounds (the audit's ``confidence``).

        Returns
        -------
        GateResult

        Raises
        ------
        ValueError
            No ``tpr_at_fpr_<alpha>`` metric exists for a budget's alpha, a bound
            needs a member count that is missing, or ``confidence`` is out of (0, 1).
        """
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"gate confidence must be in (0, 1), got {confidence!r}")
        checks, status = [], PASS
        for alpha, max_tpr in self.budgets:
            suffix = f"/tpr_at_fpr_{fmt_alpha(alpha)}"
            keys = [k for k in metrics if k.endswith(suffix)]
            if not keys:
                raise ValueError(f"no metric ends with {suffix!r}: the audit did not report FPR {fmt_alpha(alpha)}")
            points = tuple(_point(metrics, k, alpha, max_tpr, confidence) for k in keys)
            worst = max(points, key=_severity)
            checks.append({**worst, "alpha": alpha, "max_tpr": max_tpr, "passed": worst["status"] == PASS,
                           "points": points})
            status = max(status, worst["status"], key=_RANK.get)
        return GateResult(status=status, checks=tuple(checks), confidence=confidence)


_COUNTS = (("members", "n_members", "members"), ("non_members", "n_non_members", "non-members"),
           ("user_members", "user/n_members", "member users"),
           ("user_non_members", "user/n_non_members", "non-member users"))


@dataclass(frozen=True)
class GateRecord:
    """What a gated audit showed, as kept in a registry history tag; and what clearing its fail takes.

    Attributes
    ----------
    status, attacks, budgets, confidence
        The verdict, the attacks it covers, its ``(alpha, max_tpr)`` budgets, the bounds' level.
    members, non_members, user_members, user_non_members : int or None
        Pool sizes (units) at sample and user level.
    bounds : str
        Per budget: the deciding upper bound and its kind (for reading, not parsed).
    via : str or None
        ``name/version`` a fail was inherited from (same weights digest).
    """

    status: str
    attacks: tuple = ()
    budgets: tuple = ()
    confidence: float | None = None
    members: int | None = None
    non_members: int | None = None
    user_members: int | None = None
    user_non_members: int | None = None
    bounds: str = ""
    via: str | None = None

    @classmethod
    def of(cls, gate: GateResult, attacks, metrics: Mapping) -> "GateRecord":
        """The record of a finished gated audit (``attacks``: its sample-level attack names)."""
        bounds = ",".join(f"{c['alpha']:g}:{_fmt(c['upper'], 4)} {c['bound'] or 'unresolvable'}"
                          for c in gate.checks)
        counts = {name: _count(metrics, key) for name, key, _ in _COUNTS}
        return cls(status=gate.status, attacks=tuple(attacks),
                   budgets=tuple((c["alpha"], c["max_tpr"]) for c in gate.checks), confidence=gate.confidence,
                   bounds=bounds, **counts)

    def to_tag(self) -> str:
        """``fail; attacks loss,likelihood_ratio; budgets 0.01:0.05; confidence 0.95; bounds ...; members 985; ...``"""
        parts = [self.status, f"attacks {','.join(self.attacks)}",
                 "budgets " + ",".join(f"{a:g}:{b:g}" for a, b in self.budgets)]
        if self.confidence is not None:
            parts.append(f"confidence {self.confidence:g}")
        if self.bounds:
            parts.append(f"bounds {self.bounds}")
        parts += [f"{name} {getattr(self, name)}" for name, _, _ in _COUNTS if getattr(self, name) is not None]
        if self.via:
            parts.append(f"via {self.via}")
        return "; ".join(parts)

    @classmethod
    def from_tag(cls, value: str) -> "GateRecord":
        """Parse :meth:`to_tag` (and the shorter ``status; attacks ...; budgets ...`` of earlier releases)."""
        status, *rest = [p.strip() for p in str(value).split(";")]
        found: dict = {}
        for part in rest:
            key, _, text = part.partition(" ")
            found[key] = text.strip()
        out = {"status": status,
               "attacks": tuple(a for a in found.get("attacks", "").split(",") if a),
               "budgets": tuple((float(a), float(b)) for a, _, b in
                                (item.partition(":") for item in found.get("budgets", "").split(",") if item)),
               "confidence": float(found["confidence"]) if "confidence" in found else None,
               "bounds": found.get("bounds", ""), "via": found.get("via")}
        out.update({name: int(found[name]) for name, _, _ in _COUNTS if name in found})
        return cls(**out)

    def merge(self, other: "GateRecord | None") -> "GateRecord":
        """A requirement as strong as both: every attack, the tightest budget per alpha, the larger pools."""
        if other is None:
            return self
        attacks = tuple(dict.fromkeys(self.attacks + other.attacks))
        budgets: dict = {}
        for alpha, max_tpr in self.budgets + other.budgets:
            budgets[alpha] = min(max_tpr, budgets.get(alpha, max_tpr))
        counts = {name: max((v for v in (getattr(self, name), getattr(other, name)) if v is not None), default=None)
                  for name, _, _ in _COUNTS}
        confidences = [c for c in (self.confidence, other.confidence) if c is not None]
        return replace(self, status=FAIL, attacks=attacks, budgets=tuple(sorted(budgets.items(), reverse=True)),
                       confidence=max(confidences) if confidences else None, via=None, **counts)

    def shortfalls(self, required: "GateRecord") -> list[str]:
        """Why this audit is weaker than ``required`` (the fail to clear); empty when it is at least as strong.

        At least as strong: every attack of the fail ran; each failed budget has a
        budget at the same alpha that is as tight or tighter (a budget at another
        FPR shows something else: the TPR at a smaller FPR is never larger, so it is
        easier to meet); the confidence is as high; every pool is as large.
        """
        out = []
        missing = [a for a in required.attacks if a not in self.attacks]
        if missing:
            out.append(f"attack(s) {','.join(missing)} did not run (the failed audit ran "
                       f"{','.join(required.attacks)})")
        for alpha, max_tpr in required.budgets:
            mine = [b for a, b in self.budgets if math.isclose(a, alpha, rel_tol=1e-9)]
            if not mine:
                out.append(f"no budget at FPR {alpha:g} (the failed audit's budget was {alpha:g}:{max_tpr:g}; a "
                           "budget at another FPR does not show the same)")
            elif min(mine) > max_tpr:
                out.append(f"budget {alpha:g}:{min(mine):g} is looser than the failed audit's {alpha:g}:{max_tpr:g}")
        if required.confidence is not None and (self.confidence or 0.0) < required.confidence:
            out.append(f"confidence {self.confidence} is lower than the failed audit's {required.confidence:g}")
        for name, _, noun in _COUNTS:
            need, have = getattr(required, name), getattr(self, name)
            if need is not None and (have or 0) < need:
                out.append(f"{have or 0} {noun}, fewer than the failed audit's {need}")
        return out
