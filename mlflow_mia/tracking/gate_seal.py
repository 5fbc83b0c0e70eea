"""Sealed gate records: a registry verdict that only the tool's own audits can set.

A registry tag can be written by anyone with write access to the version, and a
``mia.weights_sha256`` tag by anyone with write access to *some* model. A gate record
(``mia.gate.run.<run_id>``, :class:`~mlflow_mia.metrics.gate_record.GateRecord`) is
therefore believed only when all of these hold (:class:`Verifier`):

1. **its MAC verifies**: ``HMAC-SHA256(K, run_id, name/version, record)`` under the
   audit's seal key ``K`` (:class:`SealKey`: derived from the hash key when one is kept,
   else from the account's store key), over everything the record claims (verdict,
   attacks, budgets, confidence, pool sizes, weights, references and pool digests, the
   shadow record, the signal settings, the run's start time, the previous record). A
   record copied to another version, another run id, or edited fails it;
2. **its run exists** on the tracking server, started at the time the record claims
   (order comes from the server's run times, never from a record's own fields), and
   **carries the same record** in its run tag ``mia.gate.record`` (sealed on its own);
3. a **pass** counts only from a run that is FINISHED (or the writing audit's own run); a
   blocking record (fail, inconclusive) counts from a run in any state, since it can only
   make the verdict stricter.

The records of one version form a **chain**: each record names the previous one
(``prev <run_id>:<mac prefix>``) and the version's ``mia.gate.chain`` tag names the
latest, sealed too (one chain per seal key: ``mia.gate.chain.<key check>``). A deleted record leaves a pointer to nothing (or a run whose
``mia.gate.versions`` tag names the version without a record on it): the version's
verdict becomes ``tampered`` until an audit at least as strong as the standing verdict
runs (:func:`mlflow_mia.tracking.gate_history.derive`). The deleted record itself is
recovered from its run.

What remains possible: someone who holds the seal key *and* may write the victim's tags
can forge anything; records are signed, not hidden.

References
----------
.. [1] H. Krawczyk, M. Bellare, R. Canetti, "HMAC: Keyed-Hashing for Message Authentication", RFC 2104, 1997.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass, field, replace

from mlflow_mia.metrics.gate import PASS
from mlflow_mia.metrics.gate_record import GateRecord
from mlflow_mia.signals.store_key import derive_key, load_store_key

__all__: list[str] = []

log = logging.getLogger(__name__)

RUN_RECORD_TAG = "mia.gate.record"  # on the audit run: the record it wrote, sealed
RUN_VERSIONS_TAG = "mia.gate.versions"  # on the audit run: ",name/version,..." it wrote records on
CHAIN_TAG = "mia.gate.chain"  # + ".<key check>" on the version: the pointer to its latest record, sealed
NO_PREV, BROKEN = "none", "broken"  # the first record of a chain; a record written after a break was seen


@dataclass(frozen=True)
class SealKey:
    """The secret gate records are sealed under, and its public check.

    Attributes
    ----------
    key : bytes
        ``HMAC-SHA256(secret, "mlflow-mia/gate records")`` of the hash key when one is
        kept (``--hash-key-file``, ``$MLFLOW_MIA_HASH_KEY``), else of the account's store
        key (:func:`mlflow_mia.signals.store_key.load_store_key`), so a default audit's
        records verify in later audits of the same account.
    check : str
        16 hex characters naming the key without revealing it.
    source : str
        ``"hash key"`` or ``"store key"``.
    """

    key: bytes = field(repr=False)
    check: str
    source: str

    @classmethod
    def of(cls, hash_key=None) -> "SealKey":
        """The seal key of an audit with ``hash_key`` (a :class:`~mlflow_mia.hashing.HashKey` or None)."""
        if hash_key is not None and not hash_key.is_random:
            secret, source = hash_key.key, "hash key"
        else:
            secret, source = load_store_key(), "store key"
        key = derive_key(secret, "gate records")
        return cls(key=key, check=_mac(key, "check")[:16], source=source)


def _mac(key: bytes, *parts: str) -> str:
    return hmac.new(key, "\n".join(("mlflow-mia gate", *parts)).encode("utf-8"), hashlib.sha256).hexdigest()


def _body(record: GateRecord) -> str:
    """What a version record's MAC covers: everything but the copy's ``via`` and the MAC itself."""
    return replace(record, via=None, mac=None).to_tag()


def seal(record: GateRecord, *, run_id: str, where: str, key: SealKey) -> GateRecord:
    """``record`` signed for the version ``where`` (``name/version``) by the audit run ``run_id``."""
    record = replace(record, key=key.check, mac=None)
    return replace(record, mac=_mac(key.key, "record", run_id, where, _body(record))[:32])


def pointer(run_id: str, record: GateRecord) -> str:
    """How the next record names ``record`` (``<run_id>:<first 16 MAC characters>``)."""
    return f"{run_id}:{(record.mac or '')[:16]}"


def _run_body(record: GateRecord) -> GateRecord:
    return replace(record, via=None, prev=None, mac=None)


def run_record_tag(record: GateRecord, *, run_id: str, key: SealKey) -> str:
    """The audit run's own copy of its record (no version, no chain), sealed to the run."""
    body = _run_body(replace(record, key=key.check)).to_tag()
    return f"{body}; mac {_mac(key.key, 'run record', run_id, body)[:32]}"


def chain_tag(where: str, head: str, key: SealKey) -> str:
    """``mia.gate.chain`` of the version ``where``: its latest record's pointer, sealed."""
    return f"{head} {_mac(key.key, 'chain', where, head)[:32]}"


def read_chain(tags: dict, where: str, key: SealKey) -> tuple[str | None, str | None]:
    """``(head pointer, problem)`` of a version's chain tag: ``(None, None)`` when it has none."""
    value = tags.get(f"{CHAIN_TAG}.{key.check}")
    if value is None:
        return None, None
    head, _, mac = value.rpartition(" ")
    if not head or not hmac.compare_digest(mac, _mac(key.key, "chain", where, head)[:32]):
        return None, f"its {CHAIN_TAG}.{key.check} tag does not verify (edited)"
    return head, None


class Verifier:
    """Checks gate records against their MAC and their runs, caching each run once per derivation.

    Parameters
    ----------
    client : mlflow.MlflowClient
    key : SealKey
    own_run_id : str, optional
        The audit writing now: its run is RUNNING, and its pass counts.
    """

    def __init__(self, client, key: SealKey, own_run_id: str | None = None):
        self.client, self.key, self.own_run_id = client, key, own_run_id
        self._runs: dict = {}

    def run(self, run_id: str):
        """The run ``run_id``, or None when the tracking server has none."""
        from mlflow.exceptions import MlflowException

        if run_id not in self._runs:
            try:
                self._runs[run_id] = self.client.get_run(run_id)
            except MlflowException:
                self._runs[run_id] = None
        return self._runs[run_id]

    def times(self, run_id: str) -> tuple[int, float]:
        """``(start, end)`` of the run as the tracking server recorded them (end: infinity while it runs)."""
        info = self.run(run_id).info
        return int(info.start_time or 0), float(info.end_time) if info.end_time else float("inf")

    def problem(self, run_id: str, record: GateRecord, where: str) -> str | None:
        """Why ``record`` (found as ``mia.gate.run.<run_id>``, written for ``where``) is not believed; None if it is."""
        if record.mac is None:
            return "unsealed (written by hand or by an earlier release)"
        if record.key != self.key.check:
            return (f"sealed under another key (check {record.key}; this audit's {self.key.source} has check "
                    f"{self.key.check})")
        if not hmac.compare_digest(record.mac, seal(record, run_id=run_id, where=where, key=self.key).mac):
            return "its MAC does not verify (edited, or copied from another version or run)"
        run = self.run(run_id)
        if run is None:
            return f"its run {run_id} does not exist on this tracking server"
        if int(run.info.start_time or 0) != (record.started or 0):
            return (f"it claims its run began at {record.started}, the tracking server says "
                    f"{run.info.start_time}")
        carried = run.data.tags.get(RUN_RECORD_TAG)
        if carried is None or carried != run_record_tag(record, run_id=run_id, key=self.key):
            return f"its run does not carry the same record ({RUN_RECORD_TAG})"
        if record.status == PASS and run_id != self.own_run_id:
            if run.info.lifecycle_stage == "deleted":
                return "its run was deleted (a pass counts only from a finished run)"
            if run.info.status != "FINISHED":
                return f"its run is {run.info.status} (a pass counts only from a finished run)"
        return None

    def recover(self, run_id: str, where: str) -> GateRecord | None:
        """The record the run ``run_id`` wrote (its sealed run tag), when the run names ``where``; else None."""
        run = self.run(run_id)
        if run is None or f",{where}," not in run.data.tags.get(RUN_VERSIONS_TAG, ""):
            return None
        carried = run.data.tags.get(RUN_RECORD_TAG, "")
        try:
            record = GateRecord.from_tag(carried)
        except (ValueError, TypeError):
            return None
        if carried != run_record_tag(record, run_id=run_id, key=self.key) or record.started != run.info.start_time:
            return None
        return replace(record, mac=None)

    def sealed_here(self, run_id: str) -> bool:
        """Whether the run's own record (``mia.gate.record``) was sealed under this audit's key."""
        run = self.run(run_id)
        try:
            return run is not None and GateRecord.from_tag(run.data.tags.get(RUN_RECORD_TAG, "")).key == self.key.check
        except (ValueError, TypeError):
            return False

    def runs_naming(self, where: str) -> list[str]:
        """Ids of the finished audit runs whose ``mia.gate.versions`` names ``where`` (any experiment)."""
        from mlflow.entities import ViewType
        from mlflow.exceptions import MlflowException

        if "'" in where:
            return []
        try:
            experiments = [e.experiment_id for e in self.client.search_experiments(view_type=ViewType.ALL)]
            runs = []
            for start in range(0, len(experiments), 100):
                runs += self.client.search_runs(experiments[start:start + 100], run_view_type=ViewType.ALL,
                                                filter_string=f"tags.`{RUN_VERSIONS_TAG}` LIKE '%,{where},%'")
        except MlflowException as exc:
            log.debug("search for runs naming %s failed: %s", where, exc)
            return []
        out = []
        for run in runs:
            self._runs.setdefault(run.info.run_id, run)
            if f",{where}," in run.data.tags.get(RUN_VERSIONS_TAG, "") and run.info.status != "RUNNING":
                out.append(run.info.run_id)
        return out
