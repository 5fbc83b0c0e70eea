"""What a gated audit leaves on a registry version, and what a later audit must match to clear its fail.

:class:`GateRecord` is kept in the history tag ``mia.gate.run.<run_id>`` of the version
(:mod:`mlflow_mia.tracking.registry_tags`); :meth:`GateRecord.shortfalls` says why an
audit is weaker than the fail it would clear.

A canary gate's record (:meth:`mlflow_mia.metrics.canary_gate.CanaryGateResult.record`)
also names the canary set it audited, by a keyed digest, and where the set was planted
when the auditor said so: a canary fail is evidence about that set only, so it is
cleared only by an audit of the same set, with budgets as tight (Steinke, Nasr and
Jagielski 2023, Sec. 3: the bound holds for the inclusion bits used in training, which
the tool cannot see; a set never planted passes any budget).

References
----------
.. [1] T. Steinke, M. Nasr, M. Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023, Sec. 3.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from typing import Mapping

from mlflow_mia.metrics.gate import FAIL, GateResult, count_metric, fmt_bound

__all__ = ["GateRecord", "signal_digest", "PLANTED_IN_PATTERN", "RANDOM_KEY"]

_COUNTS = (("members", "n_members", "members"), ("non_members", "n_non_members", "non-members"),
           ("user_members", "user/n_members", "member users"),
           ("user_non_members", "user/n_non_members", "non-member users"))
#: Canary budget kinds (:mod:`mlflow_mia.metrics.canary_gate`) and the option that sets each.
CANARY_BUDGET_OPTIONS = {"canary_exposure": "--max-exposure", "canary_epsilon": "--max-epsilon-lower-bound"}
#: The hash key check a canary-set digest made under a random (not kept) key is recorded with.
RANDOM_KEY = "random"
#: What a ``planted_in`` value may hold: it is written into a ``;``-separated tag.
PLANTED_IN_PATTERN = r"[A-Za-z0-9_.:/@+=-]{1,200}"


def signal_digest(signal) -> str:
    """16 hex characters naming the value-relevant settings of a :class:`~mlflow_mia.config.SignalConfig`.

    Two audits with the same digest computed their signals the same way (kind, masks,
    mask rate, seed, length: :meth:`~mlflow_mia.config.SignalConfig.cache_spec`).
    """
    text = json.dumps(signal.cache_spec(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _num(value: float) -> str:
    """A float as text that reads back to the same float (``repr``: ``0.5``, ``1e-05``)."""
    return repr(float(value))


def _items(text: str) -> tuple:
    return tuple(item for item in text.split(",") if item)


def _union(a: tuple, b: tuple) -> tuple:
    return tuple(dict.fromkeys(a + b))


def _tightest(pairs) -> dict:
    """``{key: smallest budget}`` over ``(key, budget)`` pairs, in first-seen order."""
    out: dict = {}
    for key, budget in pairs:
        out[key] = min(budget, out.get(key, budget))
    return out


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
    weights : str or None
        Digest of the audited weights (``sha256:<hex>``): the verdict belongs to them.
    references : tuple of str
        Digests of the reference models' weights (``sha256:`` and 16 hex characters).
        An audit that clears a fail needs the same references or a superset.
    pool : str or None
        Keyed digest of the audited pool (its texts and labels, HMAC with the audit's
        hash key): an audit that clears a fail needs the same pool.
    started, written : int or None
        When the audit began and when this record was written (ms since the epoch):
        a pass clears only fails written before it began.
    clear : bool
        The audit was run to clear a fail (``clear_gate_fail``).
    parent : str or None
        The parent run of an audit that is one of several (``reference_mode=each``):
        such siblings count as one audit, the most severe of them.
    canary_sets : tuple of str
        Canary audits only: ``<digest>@<key check>`` of each canary set audited, where the
        digest is :meth:`~mlflow_mia.canaries.CanarySet.digest` (an HMAC of the texts,
        repetition counts and inclusion bits under the audit's hash key) and the key
        check is :attr:`~mlflow_mia.hashing.HashKey.check`, or ``random`` for a key that
        was not kept. One per audit; a merged requirement may hold several.
    planted_in : tuple of str
        Where the set was planted, as the auditor stated it (``--planted-in``): the
        training data digest :func:`~mlflow_mia.canaries.insert` returns, or the training
        run (``run:<run_id>``). Empty when not stated.
    canary_budgets : tuple of (str, float)
        ``(kind, budget)``: ``canary_exposure`` (bits) and ``canary_epsilon`` (the
        record-level bound).
    delta : float or None
        The delta of the epsilon lower bound (a larger delta gives a smaller bound).
    canary_scores : tuple of str
        ``<attack>/<signal>`` that scored the canaries (``loss/pll``), with ``/ref=<weights
        digest>`` for the likelihood ratio.
    candidates : int or None
        Candidate secrets scored per secret-format template (``--n-candidates``).
    shadow_record : str or None
        Digest of the shadow record that decided ``lira_online`` and the OUT shadows of
        ``lira_offline`` / ``rmia`` (:mod:`mlflow_mia.attacks.shadow_record`); a fail
        found with one record is cleared only by an audit with the same record.
    release : bool
        False for an audit its auditor marked as not a release audit (a canary set drawn
        from an explicit seed): its pass never clears or lifts anything.
    loose : tuple of str
        Budgets the auditor accepted as loose (``0.01:0.9``: a TPR budget above 0.5, an
        exposure budget above the candidate space's bits), as given on the command line.
    signal : str or None
        Digest of the value-relevant signal settings (kind, masks, mask rate, seed): a
        pass lifts a blocking verdict only with the same settings.
    contains : tuple of str
        Keyed pool digests of earlier audits whose pools this audit's pool contains
        (checked against their logged keyed text hashes when the record was written).
    key, prev, mac : str or None
        The check of the key the record is signed under, the previous record of the
        version's chain (``<run_id>:<mac prefix>``, ``none`` for the first) and the
        record's MAC (:mod:`mlflow_mia.tracking.gate_seal`).
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
    weights: str | None = None
    references: tuple = ()
    pool: str | None = None
    started: int | None = None
    written: int | None = None
    clear: bool = False
    parent: str | None = None
    canary_sets: tuple = ()
    planted_in: tuple = ()
    canary_budgets: tuple = ()
    delta: float | None = None
    canary_scores: tuple = ()
    candidates: int | None = None
    shadow_record: str | None = None
    release: bool = True
    loose: tuple = ()
    signal: str | None = None
    contains: tuple = ()
    key: str | None = None
    prev: str | None = None
    mac: str | None = None

    @property
    def is_canary(self) -> bool:
        """A canary gate's record (its attacks are canary budget kinds)."""
        return any(a in CANARY_BUDGET_OPTIONS for a in self.attacks)

    @classmethod
    def of(cls, gate: GateResult, attacks, metrics: Mapping, **provenance) -> "GateRecord":
        """The record of a finished gated audit (``attacks``: its sample-level attack names).

        ``provenance``: ``weights``, ``references``, ``pool``, ``started``, ``clear``, ``parent``, ``signal``,
        ``shadow_record``; ``loose`` defaults to the gate's loose budgets.
        """
        bounds = ",".join(f"{c['alpha']:g}:{fmt_bound(c['upper'], 4)} {c['bound'] or 'unresolvable'}"
                          for c in gate.checks)
        counts = {name: count_metric(metrics, key) for name, key, _ in _COUNTS}
        provenance.setdefault("loose", tuple(getattr(gate, "loose", ()) or ()))
        provenance.setdefault("release", bool(getattr(gate, "release", True)))
        return cls(status=gate.status, attacks=tuple(attacks),
                   budgets=tuple((c["alpha"], c["max_tpr"]) for c in gate.checks), confidence=gate.confidence,
                   bounds=bounds, members=counts["members"], non_members=counts["non_members"],
                   user_members=counts["user_members"], user_non_members=counts["user_non_members"], **provenance)

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
        for name in ("weights", "pool", "started", "written", "parent"):
            if getattr(self, name) is not None:
                parts.append(f"{name} {getattr(self, name)}")
        if self.clear:
            parts.append("clear 1")
        for name in ("references", "canary_sets", "planted_in", "canary_scores"):
            if getattr(self, name):
                parts.append(f"{name} {','.join(getattr(self, name))}")
        if self.canary_budgets:
            parts.append("canary_budgets " + ",".join(f"{k}:{_num(b)}" for k, b in self.canary_budgets))
        if self.delta is not None:
            parts.append(f"delta {_num(self.delta)}")
        if self.candidates is not None:
            parts.append(f"candidates {self.candidates}")
        for name in ("shadow_record", "signal"):
            if getattr(self, name) is not None:
                parts.append(f"{name} {getattr(self, name)}")
        if not self.release:
            parts.append("release 0")
        for name in ("loose", "contains"):
            if getattr(self, name):
                parts.append(f"{name} {','.join(getattr(self, name))}")
        for name in ("key", "prev", "mac"):  # the seal last: the MAC covers everything before it
            if getattr(self, name) is not None:
                parts.append(f"{name} {getattr(self, name)}")
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
               "attacks": _items(found.get("attacks", "")),
               "budgets": tuple((float(a), float(b)) for a, _, b in
                                (item.partition(":") for item in _items(found.get("budgets", "")))),
               "confidence": float(found["confidence"]) if "confidence" in found else None,
               "bounds": found.get("bounds", ""), "via": found.get("via"), "weights": found.get("weights"),
               "pool": found.get("pool"), "parent": found.get("parent"), "clear": found.get("clear") == "1"}
        out.update({name: int(found[name]) for name, _, _ in _COUNTS if name in found})
        out.update({name: int(found[name]) for name in ("started", "written") if name in found})
        out.update({name: _items(found.get(name, ""))
                    for name in ("references", "canary_sets", "planted_in", "canary_scores")})
        out["canary_budgets"] = tuple((k, float(b)) for k, _, b in
                                      (item.partition(":") for item in _items(found.get("canary_budgets", ""))))
        out["delta"] = float(found["delta"]) if "delta" in found else None
        out["candidates"] = int(found["candidates"]) if "candidates" in found else None
        out.update({name: found.get(name) for name in ("shadow_record", "signal", "key", "prev", "mac")})
        out["release"] = found.get("release") != "0"
        out.update({name: _items(found.get(name, "")) for name in ("loose", "contains")})
        return cls(**out)

    def merge(self, other: "GateRecord | None") -> "GateRecord":
        """A requirement as strong as both: every attack, the tightest budget per alpha, the larger pools."""
        if other is None:
            return self
        budgets = _tightest(self.budgets + other.budgets)
        counts: dict[str, int | None] = {
            name: max((v for v in (getattr(self, name), getattr(other, name)) if v is not None), default=None)
            for name, _, _ in _COUNTS}
        joined = {name: ",".join(dict.fromkeys(v for r in (self, other) for v in (getattr(r, name) or "").split(",")
                                               if v)) or None
                  for name in ("signal", "shadow_record")}
        confidences = [c for c in (self.confidence, other.confidence) if c is not None]
        pools = {p for p in (self.pool, other.pool) if p}
        deltas = [d for d in (self.delta, other.delta) if d is not None]
        candidates = [c for c in (self.candidates, other.candidates) if c is not None]
        return replace(self, status=FAIL, attacks=_union(self.attacks, other.attacks),
                       budgets=tuple(sorted(budgets.items(), reverse=True)),
                       confidence=max(confidences) if confidences else None, via=None,
                       references=_union(self.references, other.references),
                       pool=",".join(sorted(pools)) or None, members=counts["members"],
                       non_members=counts["non_members"], user_members=counts["user_members"],
                       user_non_members=counts["user_non_members"],
                       canary_sets=_union(self.canary_sets, other.canary_sets),
                       planted_in=_union(self.planted_in, other.planted_in),
                       canary_budgets=tuple(_tightest(self.canary_budgets + other.canary_budgets).items()), delta=min(deltas) if deltas else None,
                       canary_scores=_union(self.canary_scores, other.canary_scores),
                       candidates=max(candidates) if candidates else None,
                       signal=joined["signal"], shadow_record=joined["shadow_record"],
                       contains=(), key=None, prev=None, mac=None)

    def shortfalls(self, required: "GateRecord") -> list[str]:
        """Why this audit is weaker than ``required`` (the fail to clear); empty when it is at least as strong.

        At least as strong: every attack of the fail ran; each failed budget has a
        budget at the same alpha that is as tight or tighter (a budget at another
        FPR shows something else: the TPR at a smaller FPR is never larger, so it is
        easier to meet); the confidence is as high; every pool is as large; every
        reference of the fail was used (by weights digest: a reference that is the
        target, or a twin of it, makes every attack weak); the pool is the same (by
        keyed digest) or contains it (``contains``, checked against the earlier audit's
        logged keyed hashes when this record was written); the signal settings and the
        shadow record are the same.
        """
        out = []
        missing_refs = [r for r in required.references if r not in self.references]
        if missing_refs:
            out.append(f"reference(s) {','.join(missing_refs)} of the failed audit were not used (this audit used "
                       f"{','.join(self.references) or 'none'}; a fail is cleared only against the same references "
                       "or more)")
        pools = [p for p in (required.pool or "").split(",") if p and p != self.pool and p not in self.contains]
        if pools:
            out.append(f"another pool (keyed digest {self.pool or 'unknown'}; the failed audit's {','.join(pools)}, "
                       "which this pool neither equals nor contains under the same hash key)")
        for name, what in (("signal", "signal settings"), ("shadow_record", "shadow record")):
            need = [v for v in (getattr(required, name) or "").split(",") if v]
            if any(v != getattr(self, name) for v in need):
                out.append(f"other {what} (digest {getattr(self, name) or 'none'}, the failed audit's "
                           f"{','.join(need)}): a blocking verdict is lifted only with the same {what}")
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
        if required.is_canary:
            out += self._canary_shortfalls(required, missing)
        return out

    def _canary_shortfalls(self, required: "GateRecord", missing: list) -> list[str]:
        """Why this audit cannot clear the canary fail ``required``: another set, a looser budget, ..."""
        out = []
        if not required.canary_sets:
            out.append("the failed canary audit's record names no canary set (recorded by an earlier release): no "
                       "audit can show that it used the same canaries")
        for entry in required.canary_sets:  # a digest under a random key matches nothing, itself included
            if entry not in self.canary_sets or entry.endswith(f"@{RANDOM_KEY}"):
                out.append(_other_set(entry, self.canary_sets))
        for place in required.planted_in:
            if place not in self.planted_in:
                mine = ",".join(self.planted_in) or "not stated"
                out.append(f"planted in {mine}, not in {place} where the failed audit's canary set was planted "
                           "(--planted-in, evaluator key planted_in)")
        for kind, budget in required.canary_budgets:
            option = CANARY_BUDGET_OPTIONS.get(kind, kind)
            budgets = [b for k, b in self.canary_budgets if k == kind]
            if not budgets and kind not in missing:
                out.append(f"no {option} budget (the failed audit's was {budget:g})")
            elif budgets and min(budgets) > budget:
                out.append(f"{option} {min(budgets):g} is looser than the failed audit's {budget:g}")
        if (required.delta is not None and any(k == "canary_epsilon" for k, _ in required.canary_budgets)
                and (self.delta is None or self.delta > required.delta)):
            out.append(f"--delta {self.delta if self.delta is None else f'{self.delta:g}'} is larger than the failed "
                       f"audit's {required.delta:g} (a larger delta gives a smaller epsilon lower bound)")
        absent = [s for s in required.canary_scores if s not in self.canary_scores]
        if absent:
            out.append(f"the canaries were scored by {','.join(self.canary_scores) or 'nothing recorded'}, not by "
                       f"{','.join(absent)} as in the failed audit (--signal, --reference: the same reference "
                       "weights)")
        if required.candidates is not None and (self.candidates or 0) < required.candidates:
            out.append(f"{self.candidates or 0} candidate secrets per template, fewer than the failed audit's "
                       f"{required.candidates} (--n-candidates)")
        return out


def _other_set(entry: str, mine: tuple) -> str:
    """Why the canary set(s) ``mine`` (``digest@check``) do not show the failed audit's set ``entry``."""
    digest, _, check = entry.partition("@")
    checks = {m.partition("@")[2] for m in mine}
    if check == RANDOM_KEY:
        return (f"the failed audit's canary set (digest {digest}) was digested under a random hash key that was not "
                "kept, so no audit can show that it used the same set; the fail stands (a gated canary audit "
                "should run with --hash-key-file or MLFLOW_MIA_HASH_KEY)")
    if check not in checks:
        have = ", ".join(sorted(checks)) or "none"
        return (f"this audit's hash key (check {have}) is not the failed audit's (check {check}): the canary set "
                "digests cannot be compared; audit with the failed audit's key (--hash-key-file, MLFLOW_MIA_HASH_KEY)")
    have = ", ".join(m.partition("@")[0] for m in mine)
    return (f"another canary set (digest {have}) than the failed audit's ({digest}): a canary fail is cleared only by "
            "an audit of the set it was found with (a set never planted in training passes any budget)")
