"""The gate verdict of a set of weights, derived from its sealed, append-only audit records.

Every gated audit appends one record to each registry version it audited
(``mia.gate.run.<run_id>``: a :class:`~mlflow_mia.metrics.gate_record.GateRecord`, sealed
by :mod:`mlflow_mia.tracking.gate_seal`). The headline ``mia.gate`` of a version is never
decided by the last writer: it is derived by :func:`derive` from the believed records
(:class:`Entry`) of the version's weights, on every version that holds them:

- records are read in the order their runs began on the tracking server (never by a
  record's own fields);
- a ``fail`` or an ``inconclusive`` blocks, its requirement merged with the blocking
  records before it (a fail is the more severe);
- a blocking verdict is lifted only by a ``pass`` begun after every blocking record's run
  ended and at least as strong
  (:meth:`~mlflow_mia.metrics.gate_record.GateRecord.shortfalls`: attacks, budgets,
  confidence, pool sizes, the same pool or one that contains it, the same references or
  more, the same signal settings and shadow record); a ``fail`` also needs the audit to be
  run to clear it (``clear_gate_fail``);
- a pass counts only from the version's own registered model and from a release audit; a
  blocking record on another model with the same weights makes the verdict stricter;
- records that share a parent run (one audit per reference, ``reference_mode=each``)
  count as one audit, the most severe of them;
- a broken chain (a deleted record) sets ``tampered``, lifted like an inconclusive by an
  audit at least as strong as the verdict that stood (and as every record recovered).

Because the records are only appended, and every writer derives again after its own
headline write, a concurrent pass can never leave a fail hidden.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from mlflow_mia.hashing import keyed_hash
from mlflow_mia.metrics.gate_record import GateRecord
from mlflow_mia.metrics.verdicts import FAIL, INCONCLUSIVE, PASS, SEVERITY, TAMPERED  # tampered: a broken chain

__all__ = ["derive", "pool_digest"]

RECORD_PREFIX = "mia.gate.run."
#: Gate verdicts that block a release.
BLOCKING = (FAIL, INCONCLUSIVE, TAMPERED)


@dataclass(frozen=True)
class Entry:
    """One believed gate record, placed in time by its run.

    Attributes
    ----------
    run_id : str
    record : GateRecord
    where : str
        ``name/version`` the record was written for.
    own : bool
        ``where`` is a version of the registered model whose verdict is derived.
    start, end : float
        The run's start and end on the tracking server (ms since the epoch; end is
        infinity while the run has not ended).
    breaks : bool
        The version's record chain was found broken before this record (it names a
        previous record that is gone, or its writer saw a break).
    """

    run_id: str
    record: GateRecord
    where: str
    own: bool = True
    start: float = 0
    end: float = 0
    breaks: bool = False


@dataclass(frozen=True)
class Derived:
    """The standing gate verdict of a set of weights.

    Attributes
    ----------
    status : {"pass", "fail", "inconclusive", "tampered"}
    run_id : str
        The audit whose record decides (while blocking: the latest, most severe blocking record).
    record : GateRecord
        Its record.
    where : str
        ``name/version`` the deciding record was written on.
    required : GateRecord or None
        While blocking: what an audit must match to lift it (every blocking record merged).
    fail_written : float
        While blocking: when the latest blocking record's run ended (infinity while it
        runs); only a pass begun later lifts it.
    notes : tuple of str
        Why records were not counted and where tampering was seen, for the description.
    """

    status: str
    run_id: str
    record: GateRecord
    where: str
    required: GateRecord | None = None
    fail_written: float = 0
    notes: tuple = ()

    @property
    def blocking(self) -> bool:
        return self.status in BLOCKING


def records_of(tags: dict, where: str, *, weights: str | None, version_weights: str | None) -> list[tuple]:
    """The records in one version's ``tags`` that belong to ``weights``: ``[(run_id, record, where)]``.

    A record names its weights; one without (an earlier release, or an audit whose
    weights were not checked) belongs to the version's weights tag ``version_weights``
    as it was before this audit, or to any weights when the version had none. An
    unreadable record is skipped.
    """
    out = []
    for run_id, record in parsed_records(tags):
        belongs = (record.weights == weights if record.weights
                   else weights is None or version_weights is None or version_weights == weights)
        if belongs and record.status in SEVERITY:
            out.append((run_id, record, where))
    return out


def parsed_records(tags: dict):
    """``(run_id, GateRecord)`` of each readable ``mia.gate.run.<run_id>`` tag in ``tags`` (unreadable ones skipped)."""
    for key, value in tags.items():
        if not key.startswith(RECORD_PREFIX):
            continue
        try:
            yield key[len(RECORD_PREFIX):], GateRecord.from_tag(value)
        except (ValueError, TypeError):
            continue


def _block(state: Derived | None, e: Entry) -> Derived:
    """``state`` after the blocking record ``e``: the requirements merged, the most severe status standing."""
    end = e.end if e.end else math.inf
    if state is None or not state.blocking:
        return Derived(e.record.status, e.run_id, e.record, e.where, e.record, end, state.notes if state else ())
    worse = SEVERITY[e.record.status] >= SEVERITY[state.status]
    return Derived(e.record.status if worse else state.status, e.run_id if worse else state.run_id,
                   e.record if worse else state.record, e.where if worse else state.where,
                   e.record.merge(state.required), max(end, state.fail_written), state.notes)


def _lifts(state: Derived, e: Entry) -> bool:
    """Whether the pass ``e`` lifts the blocking ``state``."""
    if e.record.parent and state.record.parent == e.record.parent:
        return False  # a sibling of the same audit: the most severe stands
    flag = e.record.clear or state.status != FAIL
    return flag and e.start > state.fail_written and not e.record.shortfalls(state.required)


def _tamper(state: Derived | None, since: float, reason: str) -> Derived | None:
    """``state`` once tampering was seen at ``since``: ``tampered`` unless a fail stands (it stays, noted)."""
    if state is None:
        return None
    notes = (*state.notes, reason)
    if state.status == FAIL:
        return Derived(FAIL, state.run_id, state.record, state.where, state.required, state.fail_written, notes)
    required = state.required if state.blocking else state.record
    return Derived(TAMPERED, state.run_id, state.record, state.where, required,
                   max(since, state.fail_written if state.blocking else 0), notes)


def derive(entries, *, tampering=(), notes=()) -> Derived | None:
    """The standing verdict of the believed records ``entries`` (:class:`Entry`, any order); None when none.

    Parameters
    ----------
    entries : iterable of Entry
    tampering : iterable of (float, str)
        Evidence of a deleted record or chain head not tied to a record: ``(time, reason)``.
        It is answered by a later record that saw the break (``Entry.breaks``); otherwise
        the verdict ends ``tampered``.
    notes : iterable of str
        Why records were not believed, kept on the result for the description.
    """
    ordered = sorted(entries, key=lambda e: (e.start, e.run_id))
    state: Derived | None = None
    extra = [*notes, *(reason for _, reason in tampering)]
    for e in ordered:
        if e.breaks:
            state = _tamper(state, e.start - 1, f"the record chain was broken before run {e.run_id}")
        if e.record.status in (FAIL, INCONCLUSIVE):
            state = _block(state, e)
        elif not e.own:
            extra.append(f"the pass of run {e.run_id} on {e.where} does not count here (another registered model: "
                         "only its blocking verdicts carry over)")
        elif not e.record.release:
            extra.append(f"the pass of run {e.run_id} is not a release audit (release 0)")
        elif state is None or not state.blocking:
            state = Derived(PASS, e.run_id, e.record, e.where, notes=state.notes if state else ())
        elif _lifts(state, e):
            state = Derived(PASS, e.run_id, e.record, e.where, notes=state.notes)
    breaks = [e.start for e in ordered if e.breaks]
    for since, reason in tampering:
        if not any(b > since for b in breaks):
            state = _tamper(state, math.inf, f"not answered by a later audit: {reason}")
    if state is not None and extra:
        state = Derived(state.status, state.run_id, state.record, state.where, state.required, state.fail_written,
                        (*extra, *state.notes))
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
