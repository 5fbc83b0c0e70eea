"""The gate verdict of a set of weights, derived from its append-only audit records.

Every gated audit appends one record to each registry version it audited
(``mia.gate.run.<run_id>``: a :class:`~mlflow_mia.metrics.gate_record.GateRecord` with the
weights digest, the references, the pool's keyed digest and when it was written). The
headline ``mia.gate`` of a version is never decided by the last writer: it is derived
from every record of the version's weights, on every version (of any name) that holds
them, by :func:`derive`:

- records are read in the order they were written;
- a ``fail`` stands, its requirement merged with earlier standing fails;
- while a fail stands, only a ``pass`` run to clear it (``clear_gate_fail``), begun
  after every standing fail was written, and at least as strong
  (:meth:`~mlflow_mia.metrics.gate_record.GateRecord.shortfalls`: attacks, budgets,
  confidence, pool size, the same pool, the same references or more) clears it;
- otherwise the latest record decides; records that share a parent run (one audit per
  reference, ``reference_mode=each``) count as one audit, the most severe of them.

Because the records are only appended, and every writer derives again after its own
headline write (:func:`settle`), a concurrent pass can never leave a fail hidden: the
last derivation sees every record written before it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from mlflow_mia.hashing import keyed_hash
from mlflow_mia.metrics.gate import FAIL, INCONCLUSIVE, PASS
from mlflow_mia.metrics.gate_record import GateRecord

__all__ = ["Derived", "RECORD_PREFIX", "derive", "pool_digest", "records_of", "reference_digests"]

RECORD_PREFIX = "mia.gate.run."
_SEVERITY = {PASS: 0, INCONCLUSIVE: 1, FAIL: 2}


@dataclass(frozen=True)
class Derived:
    """The standing gate verdict of a set of weights.

    Attributes
    ----------
    status : {"pass", "fail", "inconclusive"}
    run_id : str
        The audit whose record decides (for a fail: the latest standing fail).
    record : GateRecord
        Its record.
    where : str
        ``name/version`` the deciding record was written on.
    required : GateRecord or None
        While failing: what an audit must match to clear it (every standing fail merged).
    fail_written : int
        When the latest standing fail was written (0 when none).
    """

    status: str
    run_id: str
    record: GateRecord
    where: str
    required: GateRecord | None = None
    fail_written: int = 0


def records_of(tags: dict, where: str, *, weights: str | None, version_weights: str | None) -> list[tuple]:
    """The records in one version's ``tags`` that belong to ``weights``: ``[(run_id, record, where)]``.

    A record names its weights; one without (an earlier release, or an audit whose
    weights were not checked) belongs to the version's weights tag ``version_weights``
    as it was before this audit, or to any weights when the version had none (a fail of
    unknown weights blocks). An unreadable record is skipped.
    """
    out = []
    for key, value in tags.items():
        if not key.startswith(RECORD_PREFIX):
            continue
        try:
            record = GateRecord.from_tag(value)
        except (ValueError, TypeError):
            continue
        belongs = (record.weights == weights if record.weights
                   else weights is None or version_weights is None or version_weights == weights)
        if belongs and record.status in _SEVERITY:
            out.append((key[len(RECORD_PREFIX):], record, where))
    return out


def derive(records) -> Derived | None:
    """The standing verdict of ``records`` (``(run_id, GateRecord, where)``, any order); None when empty."""
    state: Derived | None = None
    for run_id, record, where in sorted(records, key=lambda r: (r[1].written or 0, r[0])):
        written = record.written or 0
        if record.status == FAIL:
            standing = state is not None and state.status == FAIL
            required = record.merge(state.required if standing else None)
            state = Derived(FAIL, run_id, record, where, required, max(written, state.fail_written if standing else 0))
        elif state is not None and state.status == FAIL:
            clears = (record.status == PASS and record.clear and (record.started or 0) > state.fail_written
                      and not record.shortfalls(state.required))
            if clears:
                state = Derived(PASS, run_id, record, where)
        elif (state is not None and record.parent and state.record.parent == record.parent
              and _SEVERITY[state.status] > _SEVERITY[record.status]):
            continue  # a sibling of the same audit: the most severe stands
        else:
            state = Derived(record.status, run_id, record, where)
    return state


def reference_digests(models: dict) -> tuple[str, ...]:
    """Short weights digests (``sha256:`` and 16 hex characters) of an audit's reference models, by role order.

    ``models``: ``AuditResult.models`` (``{role: {"weights": "sha256:<hex>", ...}}``); a
    reference without a recorded digest is left out.
    """
    roles = sorted((r for r in models if r == "reference" or r.startswith("reference_")),
                   key=lambda r: 1 if r == "reference" else int(r.rsplit("_", 1)[1]))
    return tuple(models[r]["weights"][:23] for r in roles if (models[r] or {}).get("weights"))


def pool_digest(text_hashes, labels, key) -> str:
    """Keyed digest of an audited pool: HMAC of its (text hash, label) pairs in sorted order, 16 hex characters.

    Two audits of the same texts with the same labels (in any order) and the same hash
    key give the same digest; nobody without the key can test a text against it.
    """
    lines = sorted(f"{h}:{int(y)}" for h, y in zip(text_hashes, labels))
    return keyed_hash(hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest(), key)[:16]
