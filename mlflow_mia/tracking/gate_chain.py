"""A version's gate records as the derivation believes them: sealed, placed by their runs, chained.

:func:`derive_for` reads the records of a set of weights on every registry version that holds
them (found by the ``mia.weights_sha256`` tag), keeps those that verify
(:class:`~mlflow_mia.tracking.gate_seal.Verifier`: MAC, run, start time, the run's own copy),
checks the version's record chain under the audit's key, recovers deleted records from their
runs, and derives the standing verdict (:func:`~mlflow_mia.tracking.gate_history.derive`).
:func:`contained_pools` reads earlier blocking audits' pools back from their runs, so a larger
pool that contains them can lift their verdict. :mod:`mlflow_mia.tracking.registry_tags` writes.
"""

from __future__ import annotations

import logging
import re
import tempfile
from dataclasses import replace

import pandas as pd

from mlflow_mia.metrics.gate import PASS
from mlflow_mia.models.resolve import WEIGHTS_TAG
from mlflow_mia.tracking.gate_history import RECORD_PREFIX, Entry, derive, parsed_records, records_of
from mlflow_mia.tracking.gate_seal import BROKEN, NO_PREV, SealKey, Verifier, pointer, read_chain, seal

__all__: list[str] = []

log = logging.getLogger(__name__)

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def same_weights(client, weights_id: str | None) -> list:
    """Registry versions tagged with the weights digest ``weights_id`` (every registered model)."""
    from mlflow.exceptions import MlflowException

    if not weights_id or not _DIGEST.fullmatch(weights_id):
        return []
    try:
        return list(client.search_model_versions(f"tags.`{WEIGHTS_TAG}` = '{weights_id}'"))
    except MlflowException as exc:  # a registry without tag search: scan (slower, same answer)
        log.debug("search by %s failed (%s); scanning every version", WEIGHTS_TAG, exc)
        return [mv for mv in client.search_model_versions() if (mv.tags or {}).get(WEIGHTS_TAG) == weights_id]


def _versions_with(client, weights_id: str | None, name: str, version: str) -> list[tuple[str, str, dict]]:
    """``(name, version, tags)`` of this version (re-read) and every other holding the weights ``weights_id``."""
    out = {(name, version): dict(client.get_model_version(name, version).tags or {})}
    for mv in same_weights(client, weights_id):
        out.setdefault((mv.name, str(mv.version)), dict(mv.tags or {}))
    return [(n, v, tags) for (n, v), tags in out.items()]


def _believed(verifier: Verifier, name: str, version: str, weights_id: str | None, legacy: str | None):
    """The believed records of the weights of ``name/version`` on every version holding them.

    Returns ``(entries by run id, this version's tags, notes)``.
    """
    entries: dict = {}
    notes, mine = [], {}
    for n, v, tags in _versions_with(verifier.client, weights_id, name, version):
        own_version = (n, v) == (name, version)
        if own_version:
            mine = tags
        version_weights = legacy if own_version else tags.get(WEIGHTS_TAG)
        for run_id, record, at in records_of(tags, f"{n}/{v}", weights=weights_id, version_weights=version_weights):
            origin = record.via or at
            own = origin.rpartition("/")[0] == name
            problem = verifier.problem(run_id, record, origin)
            if problem and own and record.status != PASS and verifier.run(run_id) is not None:
                notes.append(f"the record of run {run_id} on {at} is counted as blocking although {problem} (a "
                             "blocking record of this model whose run exists can only make the verdict stricter)")
            elif problem:
                notes.append(f"the record of run {run_id} on {at} is not counted: {problem}")
                continue
            if run_id in entries and not record.via:
                continue  # the original was read already
            start, end = verifier.times(run_id)
            entries[run_id] = Entry(run_id, replace(record, via=None), origin, own=own, start=start, end=end)
    return entries, mine, notes


def _sealed_here(verifier: Verifier, where: str, tags: dict) -> dict:
    """``{pointer: (run_id, record)}`` of the records on ``where`` sealed under this audit's key (any weights)."""
    out = {}
    for run_id, record in parsed_records(tags):
        if not record.via and record.mac and record.mac == seal(record, run_id=run_id, where=where,
                                                                key=verifier.key).mac:
            out[pointer(run_id, record)] = (run_id, record)
    return out


def _chain(verifier: Verifier, name: str, version: str, entries: dict, mine: dict, weights_id: str | None):
    """Check this version's record chain (under this audit's key); recover deleted records from their runs.

    Returns ``(entries with breaks marked and recovered records added, tampering evidence
    as (time, reason), the pointer the next record names as its previous one)``.
    """
    where = f"{name}/{version}"
    sealed = _sealed_here(verifier, where, mine)
    runs = {run_id for run_id, _ in sealed.values()}
    tampering: list = []

    def recover(run_id: str, why: str) -> None:
        record = verifier.recover(run_id, where) if run_id else None
        if record is None or (weights_id and record.weights not in (None, weights_id)):
            tampering.append((record.started or 0 if record else 0, why))
            return
        start, end = verifier.times(run_id)
        entries.setdefault(run_id, Entry(run_id, record, where, start=start, end=end))
        tampering.append((start, f"{why}; recovered from its run"))

    for run_id, record in sealed.values():
        if record.prev == BROKEN or (record.prev not in (None, NO_PREV) and record.prev not in sealed):
            if run_id in entries:
                entries[run_id] = replace(entries[run_id], breaks=True)
            else:
                tampering.append((record.started or 0, f"the record chain of {where} is broken before run {run_id}"))
            gone = (record.prev or "").partition(":")[0]
            if record.prev != BROKEN and gone not in runs and gone not in entries:
                recover(gone, f"the record of run {gone} on {where} was deleted (run {run_id}'s record names it)")
    head, problem = read_chain(mine, where, verifier.key)
    latest = max((r.started or 0 for _, r in sealed.values()), default=0)
    if sealed and problem:
        tampering.append((latest, f"{where}: {problem}"))
    elif sealed and head is None:
        tampering.append((latest, f"{where} holds sealed records but its record chain tag was deleted"))
    elif head is not None and head not in sealed:
        gone = head.partition(":")[0]
        recover(gone, f"the latest record of {where} (run {gone}) was deleted")
    for run_id in verifier.runs_naming(where):
        present = f"{RECORD_PREFIX}{run_id}" in mine  # a record there, of any key (another key's is no deletion)
        if not present and run_id != verifier.own_run_id and run_id not in entries and verifier.sealed_here(run_id):
            recover(run_id, f"the record of run {run_id} on {where} was deleted (the run names the version)")
    unanswered = [t for t, _ in tampering if not any(e.breaks and e.start > t for e in entries.values())]
    prev = BROKEN if unanswered or (sealed and (problem or head not in sealed)) else head or NO_PREV
    return entries, tampering, prev


def derive_for(client, name: str, version: str, weights_id: str | None, legacy: str | None, verifier=None):
    """The standing verdict of the weights of ``name/version`` over every version holding them.

    Returns ``(Derived or None, this version's tags, the pointer the next record names, entries)``.
    ``legacy``: the weights a record without a digest on this version belongs to (the
    version's weights tag before this audit).
    """
    verifier = verifier or Verifier(client, SealKey.of())
    entries, mine, notes = _believed(verifier, name, version, weights_id, legacy)
    entries, tampering, prev = _chain(verifier, name, version, entries, mine, weights_id)
    derived = derive(entries.values(), tampering=tampering, notes=notes)
    return derived, mine, prev, entries


def contained_pools(client, entries, pool: str | None, pairs) -> tuple:
    """Keyed digests of the blocking records' pools that the audited pool contains.

    ``pairs``: the audited pool's ``(keyed text hash, label)`` pairs. Each blocking record's
    own pool is read back from its run's ``tables/samples.csv`` (keyed hashes and labels,
    logged by every audit): it is contained when every one of its pairs is among ``pairs``.
    """
    from mlflow.exceptions import MlflowException

    out: list = []
    for e in entries:
        if e.record.status == PASS or not e.record.pool or e.record.pool in (pool, *out):
            continue
        try:
            with tempfile.TemporaryDirectory() as folder:
                path = client.download_artifacts(e.run_id, "tables/samples.csv", folder)
                theirs = pd.read_csv(path, usecols=["text_hmac", "label"])
        except (MlflowException, OSError, ValueError) as exc:
            log.debug("pool of run %s not read back: %s", e.run_id, exc)
            continue
        if set(zip(theirs["text_hmac"], theirs["label"].astype(int))) <= pairs:
            out.append(e.record.pool)
    return tuple(out)


def entries_of(client, name: str, version: str, weights_id: str | None, verifier: Verifier) -> list:
    """The believed records of a version's weights (none when the version was deleted)."""
    from mlflow.exceptions import MlflowException

    try:
        return list(derive_for(client, name, version, weights_id, None, verifier)[3].values())
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        return []
