"""What a gated audit leaves on a registry version, and what a later audit must match to clear its fail.

:class:`GateRecord` is kept in the history tag ``mia.gate.run.<run_id>`` of the version
(:mod:`mlflow_mia.tracking.registry_tags`); :meth:`GateRecord.shortfalls` says why an
audit is weaker than the fail it would clear.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping

from mlflow_mia.metrics.gate import FAIL, GateResult, count_metric, fmt_bound

__all__ = ["GateRecord"]

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

    @classmethod
    def of(cls, gate: GateResult, attacks, metrics: Mapping, **provenance) -> "GateRecord":
        """The record of a finished gated audit (``attacks``: its sample-level attack names).

        ``provenance``: ``weights``, ``references``, ``pool``, ``started``, ``clear``, ``parent``.
        """
        bounds = ",".join(f"{c['alpha']:g}:{fmt_bound(c['upper'], 4)} {c['bound'] or 'unresolvable'}"
                          for c in gate.checks)
        counts = {name: count_metric(metrics, key) for name, key, _ in _COUNTS}
        return cls(status=gate.status, attacks=tuple(attacks),
                   budgets=tuple((c["alpha"], c["max_tpr"]) for c in gate.checks), confidence=gate.confidence,
                   bounds=bounds, **counts, **provenance)

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
        if self.references:
            parts.append(f"references {','.join(self.references)}")
        if self.clear:
            parts.append("clear 1")
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
               "bounds": found.get("bounds", ""), "via": found.get("via"), "weights": found.get("weights"),
               "pool": found.get("pool"), "parent": found.get("parent"), "clear": found.get("clear") == "1",
               "references": tuple(r for r in found.get("references", "").split(",") if r)}
        out.update({name: int(found[name]) for name, _, _ in _COUNTS if name in found})
        out.update({name: int(found[name]) for name in ("started", "written") if name in found})
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
        references = tuple(dict.fromkeys(self.references + other.references))
        pools = {p for p in (self.pool, other.pool) if p}
        return replace(self, status=FAIL, attacks=attacks, budgets=tuple(sorted(budgets.items(), reverse=True)),
                       confidence=max(confidences) if confidences else None, via=None, references=references,
                       pool=",".join(sorted(pools)) or None, **counts)

    def shortfalls(self, required: "GateRecord") -> list[str]:
        """Why this audit is weaker than ``required`` (the fail to clear); empty when it is at least as strong.

        At least as strong: every attack of the fail ran; each failed budget has a
        budget at the same alpha that is as tight or tighter (a budget at another
        FPR shows something else: the TPR at a smaller FPR is never larger, so it is
        easier to meet); the confidence is as high; every pool is as large; every
        reference of the fail was used (by weights digest: a reference that is the
        target, or a twin of it, makes every attack weak); the pool is the same (by
        keyed digest).
        """
        out = []
        missing_refs = [r for r in required.references if r not in self.references]
        if missing_refs:
            out.append(f"reference(s) {','.join(missing_refs)} of the failed audit were not used (this audit used "
                       f"{','.join(self.references) or 'none'}; a fail is cleared only against the same references "
                       "or more)")
        if required.pool and self.pool not in required.pool.split(","):
            out.append(f"another pool (keyed digest {self.pool or 'unknown'}, the failed audit's {required.pool})")
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
