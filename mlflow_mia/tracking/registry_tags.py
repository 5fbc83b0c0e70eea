"""Audit evidence on registered model versions: headline tags and a gate verdict that cannot be washed.

Two kinds of ``mia.*`` tags live on an audited version:

- **headline tags** describe the latest audit: ``mia.<attack>.auc``,
  ``mia.<attack>.tpr_at_fpr_<alpha>``, ``mia.user.<attack>.auc``, ``mia.attacks``,
  ``mia.audit_run_id``. A new audit replaces them (and drops those of attacks it
  did not run). ``tag_model_version=False`` leaves them alone.
- **gate tags** record release decisions and are never deleted:
  ``mia.gate.run.<run_id>`` (one per gated audit: a
  :class:`~mlflow_mia.metrics.gate.GateRecord` with the verdict, attacks,
  budgets, confidence, the deciding upper bounds and the pool sizes), and the
  current verdict ``mia.gate`` (``pass`` / ``fail`` / ``inconclusive``) with
  ``mia.gate.attacks``, ``mia.gate.run_id`` and ``mia.gate.written_at`` (ms since
  the epoch); while failing, ``mia.gate.requires`` (what an audit must match to
  clear the fail) and, for a fail that came from another version with the same
  weights, ``mia.gate.inherited_from`` (``name/version``).

The rules (``docs/explanations/security.md``):

1. Every gated audit first appends its record (``mia.gate.run.<run_id>``, with the
   weights digest, the references' digests, the pool's keyed digest and when it was
   written); nothing deletes a record.
2. The headline ``mia.gate`` is derived from every record of the version's weights, on
   every version of any name holding them (:func:`~mlflow_mia.tracking.gate_history.derive`):
   a fail stands until a passing audit run with ``clear_gate_fail``, begun after the fail
   was written, at least as strong (:meth:`GateRecord.shortfalls`: attacks, budgets,
   confidence, pool sizes, the same pool, the same references or more) clears it;
   ``inconclusive`` never clears a fail. A fail is copied to every version holding the
   weights, and any audit of a version (gated or not) derives its verdict again, so a
   version registered later with those weights inherits the fail.
3. After writing the headline, a writer derives again and rewrites until it stands: a
   concurrent pass cannot hide a fail.
4. A version whose recorded weights digest differs from the weights audited now is
   marked ``mia.verdict=stale`` (its ``mia.gate`` removed, the description says why)
   before the new result is written; earlier records belong to the old weights.
5. A failing or inconclusive record is written even with ``headline=False``, so an
   old ``pass`` never stands beside a new blocking verdict.
6. A version deleted during the audit raises :class:`VersionDeletedError` once the
   other versions are tagged.

``mia.weights_sha256`` (the version's weights digest, checked before a folder or
a pyfunc may claim the version: :mod:`mlflow_mia.models.resolve`) is kept too.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace


from mlflow_mia.metrics.gate import FAIL, INCONCLUSIVE, PASS
from mlflow_mia.metrics.gate_record import GateRecord
from mlflow_mia.tracking import gate_chain
from mlflow_mia.tracking.gate_history import RECORD_PREFIX, TAMPERED
from mlflow_mia.tracking.scopes import KIND_SCOPES
from mlflow_mia.tracking.gate_seal import (CHAIN_TAG, RUN_RECORD_TAG, RUN_VERSIONS_TAG, SealKey, Verifier, chain_tag,
                                           pointer, run_record_tag, seal)
from mlflow_mia.models.resolve import WEIGHTS_TAG
from mlflow_mia.audits.membership import fmt_alpha
from mlflow_mia.tracking.descriptions import DESCRIPTION_START, with_own_text
from mlflow_mia.tracking.verdict import VERDICT_TAG, LEAKS, Verdict, describe_version, run_description, verdict_of

__all__ = ["VersionDeletedError"]

log = logging.getLogger(__name__)

GATE_TAG = "mia.gate"
ATTACKS_TAG, RUN_ID_TAG = f"{GATE_TAG}.attacks", f"{GATE_TAG}.run_id"
WRITTEN_TAG, REQUIRES_TAG = f"{GATE_TAG}.written_at", f"{GATE_TAG}.requires"
INHERITED_TAG = f"{GATE_TAG}.inherited_from"
NOTES_TAG = f"{GATE_TAG}.notes"  # records not counted and tampering seen, for the description
STALE = "stale"  # mia.verdict of a version whose weights changed since its last audit


class VersionDeletedError(Exception):
    """A registry version was deleted while it was audited: its tags (and verdict) could not be written.

    Attributes
    ----------
    versions : tuple of (str, str)
        The deleted ``(name, version)`` pairs.
    status : str or None
        The audit's gate verdict (None without a gate).
    run_id : str
        The audit run, which keeps the verdict as its own ``mia.gate`` tag.
    """

    def __init__(self, versions, *, status: str | None, run_id: str):
        self.versions, self.status, self.run_id = tuple(versions), status, run_id
        which = ", ".join(f"models:/{n}/{v}" for n, v in self.versions)
        what = (f"its mia.gate={status} verdict could not be recorded on the version" if self.blocks
                else "its audit tags could not be written")
        super().__init__(f"registered model version {which} was deleted during the audit (run {run_id}): {what}; "
                         "the run keeps the verdict (run tag mia.gate) and its report")

    @property
    def blocks(self) -> bool:
        """The verdict that could not be recorded blocks a release (``fail`` or ``inconclusive``)."""
        return self.status in (FAIL, INCONCLUSIVE)


def _fmt_tag(value) -> str:
    return "nan" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{float(value):.4f}"


def version_pairs(registry) -> list[tuple[str, str]]:
    """``(name, version)`` pairs of a ModelVersion, one pair, or an iterable of pairs."""
    if hasattr(registry, "name") and hasattr(registry, "version"):
        return [(registry.name, str(registry.version))]
    if isinstance(registry, tuple) and len(registry) == 2 and isinstance(registry[0], str):
        return [(registry[0], str(registry[1]))]
    return [(name, str(version)) for name, version in registry]


def headline_tags(result, *, run_id: str) -> dict[str, str]:
    """The latest audit's numbers as registry tags (AUC and TPR at each FPR per attack)."""
    tags = {"mia.audit_run_id": run_id, "mia.attacks": ",".join(result.attacks)}
    for name, rep in result.attacks.items():
        tags[f"mia.{name}.auc"] = _fmt_tag(rep.roc.auc)
        for alpha, tpr in rep.tpr_at_fpr.items():
            tags[f"mia.{name}.tpr_at_fpr_{fmt_alpha(alpha)}"] = _fmt_tag(tpr)
    for name, rep in result.user_attacks.items():
        tags[f"mia.user.{name}.auc"] = _fmt_tag(rep.roc.auc)
    return tags


def _set_tag(client, name: str, version: str, key: str, value: str, *, attempts: int = 6) -> None:
    """Set one version tag; retried when another writer set the same key at the same moment.

    MLflow's SQL stores insert a new tag after checking it is absent, so two writers of one
    key can collide (a unique-constraint error): the tag exists then, and writing it again
    replaces it. A deleted version (``RESOURCE_DOES_NOT_EXIST``) is raised at once.
    """
    from mlflow.exceptions import MlflowException

    for attempt in range(attempts):
        try:
            client.set_model_version_tag(name, version, key, value)
            return
        except MlflowException as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST" or attempt == attempts - 1:
                raise
            time.sleep(0.02 * 2 ** attempt)


def _delete_tag(client, name: str, version: str, key: str) -> None:
    """Delete one version tag; one another writer deleted already is gone, as asked (a deleted version raises)."""
    from mlflow.exceptions import MlflowException

    try:
        client.delete_model_version_tag(name, version, key)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        client.get_model_version(name, version)  # raises when the version itself is gone


def _gate_tags(derived, where: str) -> dict[str, str | None]:
    """The headline gate tags of a derived verdict (None: delete the tag)."""
    if derived is None:
        return {GATE_TAG: None, ATTACKS_TAG: None, RUN_ID_TAG: None, WRITTEN_TAG: None, REQUIRES_TAG: None,
                INHERITED_TAG: None, NOTES_TAG: None}
    blocking = derived.blocking and derived.required is not None
    return {GATE_TAG: derived.status, ATTACKS_TAG: ",".join(derived.record.attacks), RUN_ID_TAG: derived.run_id,
            WRITTEN_TAG: str(derived.record.written or 0),
            REQUIRES_TAG: derived.required.to_tag() if blocking else None,
            INHERITED_TAG: derived.where if derived.blocking and derived.where != where else None,
            NOTES_TAG: " | ".join(derived.notes)[:4000] or None}


def _settle(client, name: str, version: str, weights_id: str | None, legacy: str | None, verifier: Verifier):
    """Write the headline gate tags derived from every record, and derive again until they stand.

    Each writer derives again after its own write, so the last derivation of any writer
    sees every record written before it: a concurrent pass cannot leave a fail hidden.
    """
    where = f"{name}/{version}"
    derived = None
    for _ in range(5):
        derived, current, _, _ = gate_chain.derive_for(client, name, version, weights_id, legacy, Verifier(
            client, verifier.key, verifier.own_run_id))
        copy = f"{RECORD_PREFIX}{derived.run_id}" if derived is not None else None
        if derived is not None and derived.blocking and derived.where != where and copy not in current:
            # the inherited blocking record, for whoever reads this version's history (sealed for its origin)
            _set_tag(client, name, version, copy, replace(derived.record, via=derived.where).to_tag())
        for key, value in _gate_tags(derived, where).items():
            if value is None and key in current:
                _delete_tag(client, name, version, key)
            elif value is not None and current.get(key) != value:
                _set_tag(client, name, version, key, value)
        if derived is not None and derived.status == TAMPERED and current.get(VERDICT_TAG) != TAMPERED:
            _set_tag(client, name, version, VERDICT_TAG, TAMPERED)
        again = gate_chain.derive_for(client, name, version, weights_id, legacy,
                            Verifier(client, verifier.key, verifier.own_run_id))[0]
        if (again and (again.status, again.run_id)) == (derived and (derived.status, derived.run_id)):
            break
    return derived


def _explain(where: str, derived, record: GateRecord | None, run_id: str, before) -> None:
    """Say why this audit's verdict is not the version's (or that it lifted a blocking one), and what was not counted."""
    for note in derived.notes if derived is not None else ():
        log.warning("%s: %s", where, note)
    if record is None or derived is None:
        return
    if derived.blocking and derived.run_id != run_id:
        status = derived.status
        flag = " (and --clear-gate-fail, clear_gate_fail=True)" if status == FAIL else ""
        if record.status == PASS and derived.fail_written > (record.started or 0):
            log.warning("%s: mia.gate=%s was written by run %s, which ended after this audit began (or still runs); it is kept (this audit's "
                        "verdict, %s, is recorded in %s%s only)", where, status, derived.run_id, record.status,
                        RECORD_PREFIX, run_id)
        elif record.status == PASS and (record.clear or status != FAIL) and derived.required is not None:
            shortfalls = record.shortfalls(derived.required) or ["it began before the blocking audit ended"]
            log.warning("%s keeps mia.gate=%s (run %s, %s): lifting it needs an audit at least as strong%s, and this "
                        "one is weaker: %s", where, status, derived.run_id, derived.where, flag, "; ".join(shortfalls))
        elif record.status == PASS:
            log.warning("%s keeps mia.gate=%s (run %s, %s): only a passing audit at least as strong, run with "
                        "--clear-gate-fail (clear_gate_fail=True), clears it", where, status, derived.run_id,
                        derived.where)
    elif derived.status == PASS and derived.run_id == run_id and before is not None and before.blocking:
        log.warning("%s: mia.gate=%s (run %s) lifted by this passing audit", where, before.status, before.run_id)


def _mark_stale(client, name: str, version: str, current: dict, weights_id: str) -> None:
    """The version's weights changed since its last audit: its verdict goes (``mia.verdict=stale``)."""
    old = current.get(WEIGHTS_TAG)
    reason = (f"the weights of models:/{name}/{version} changed since its last audit (recorded {old}, now "
              f"{weights_id}): earlier verdicts belong to the old weights")
    for key in (GATE_TAG, ATTACKS_TAG, RUN_ID_TAG, WRITTEN_TAG, REQUIRES_TAG, INHERITED_TAG, NOTES_TAG):
        if key in current:
            _delete_tag(client, name, version, key)
    _set_tag(client, name, version, VERDICT_TAG, STALE)
    _set_tag(client, name, version, f"{VERDICT_TAG}.reason", reason)
    _set_tag(client, name, version, WEIGHTS_TAG, weights_id)
    earlier = client.get_model_version(name, version).description
    client.update_model_version(name, version, description=with_own_text(f"{DESCRIPTION_START} stale**: {reason}.",
                                                                         earlier))
    log.warning("models:/%s/%s: %s; mia.verdict=stale until this audit's result is written", name, version, reason)


def _tag_version(client, name: str, version: str, new: dict, gate, record, *, run_id: str, headline: bool,
                 weights_id: str | None, verifier: Verifier, scope: str = "mia.") -> dict[str, str]:
    """Append this audit's sealed record to one version, write its headline tags, and derive its gate verdict."""
    current = dict(client.get_model_version(name, version).tags or {})
    where = f"{name}/{version}"
    legacy = current.get(WEIGHTS_TAG)
    if weights_id and legacy and legacy != weights_id:
        _mark_stale(client, name, version, current, weights_id)
        current = dict(client.get_model_version(name, version).tags or {})
        legacy = weights_id
    weights = weights_id or legacy
    before, _, prev, _ = gate_chain.derive_for(client, name, version, weights, legacy, verifier)
    if VERDICT_TAG not in current and (headline or (gate is not None and not gate.passed)):  # the version page
        _set_tag(client, name, version, VERDICT_TAG, "pending")  # lists tags as first written: the verdict first
    written = dict(new)
    if record is not None and (headline or gate is None or not gate.passed):  # the record first: append-only
        sealed = seal(replace(record, prev=prev), run_id=run_id, where=where, key=verifier.key)
        _set_tag(client, name, version, f"{RECORD_PREFIX}{run_id}", sealed.to_tag())
        _set_tag(client, name, version, f"{CHAIN_TAG}.{verifier.key.check}",
                 chain_tag(where, pointer(run_id, sealed), verifier.key))
        written[f"{RECORD_PREFIX}{run_id}"] = sealed.to_tag()
    if weights_id and (headline or record is not None):
        written[WEIGHTS_TAG] = weights_id
    kept = (GATE_TAG, WEIGHTS_TAG, *sorted(KIND_SCOPES)) if scope == "mia." else (GATE_TAG, WEIGHTS_TAG)
    stale = [key for key in current if headline and key.startswith(scope) and not key.startswith(kept)
             and key not in written and not key.startswith(VERDICT_TAG)]  # the headline describes this audit only
    for key in stale:
        _delete_tag(client, name, version, key)
    for key, value in written.items():
        if not key.startswith(RECORD_PREFIX):
            _set_tag(client, name, version, key, value)
    derived = _settle(client, name, version, weights, legacy, verifier)
    _explain(f"models:/{where}", derived, record, run_id, before)
    if derived is not None:
        written.update({k: v for k, v in _gate_tags(derived, where).items() if v is not None})
    log.info("tagged %s version %s with %d mia.* tags", name, version, len(written))
    return written


def _propagate(client, weights_id: str | None, record: GateRecord, *, done, source: str, run_id: str,
               verifier: Verifier) -> None:
    """Copy this audit's blocking record to every other version holding the same weights, and derive their verdicts."""
    from mlflow.exceptions import MlflowException

    for mv in gate_chain.same_weights(client, weights_id):
        name, version = mv.name, str(mv.version)
        if (name, version) in done:
            continue
        try:
            _set_tag(client, name, version, f"{RECORD_PREFIX}{run_id}", replace(record, via=source).to_tag())
            _settle(client, name, version, weights_id, (mv.tags or {}).get(WEIGHTS_TAG), verifier)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            continue
        log.warning("models:/%s/%s holds the same weights (%s): mia.gate=%s recorded there too", name, version,
                    weights_id, record.status)


def tag_model_version(registry, result, *, run_id: str, gate=None, client=None, headline: bool = True,
                      clear_gate_fail: bool = False, weights_id: str | None = None,
                      headline_tags_=None, record=None, scope: str = "mia.", references=(),
                      pool: str | None = None, pool_pairs=None, hash_key=None) -> dict[str, str]:
    """Tag registry version(s) with an audit's evidence (see the module docstring).

    Parameters
    ----------
    registry : (name, version), iterable of them, or a ModelVersion
    result : AuditResult
    run_id : str
        The audit run.
    gate : GateResult, optional
    headline : bool
        Write the headline tags (False: only a gate verdict, and only a blocking one).
    clear_gate_fail : bool
        Let a passing audit at least as strong as the failed one replace a
        ``mia.gate=fail`` verdict.
    weights_id : str, optional
        Digest of the audited weights (``sha256:<hex>``), stored as
        ``mia.weights_sha256`` (callers pass it only for versions whose weights they
        loaded or checked); a fail is recorded against it.
    headline_tags_, record, scope : optional
        Another audit's headline tags, gate record and tag prefix (the canary audit:
        ``mia.canary.*`` tags, whose stale ones alone it replaces).
    references : sequence of str
        Weights digests of the reference models (kept in the gate record: a fail is
        cleared only against the same references or more).
    pool : str, optional
        Keyed digest of the audited pool (:func:`pool_digest`).
    pool_pairs : iterable of (str, int), optional
        The pool's ``(keyed text hash, label)`` pairs: an earlier blocking audit's pool that
        they contain (read back from its run) is recorded in ``contains``.
    hash_key : HashKey, optional
        The audit's hash key: records are sealed under a key derived from it when it is
        kept, else from the account's store key (:class:`~mlflow_mia.tracking.gate_seal.SealKey`).

    Returns
    -------
    dict of str to str
        The tags set on the last version.

    Raises
    ------
    VersionDeletedError
        A version no longer exists (deleted during the audit); the others are tagged first.
    """
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = client or MlflowClient()
    verifier = Verifier(client, SealKey.of(hash_key), own_run_id=run_id)
    run = client.get_run(run_id)
    new = ((headline_tags(result, run_id=run_id) if headline_tags_ is None else dict(headline_tags_))
           if headline else {})
    if weights_id and headline:
        new[WEIGHTS_TAG] = weights_id
    if record is None and gate is not None:
        record = GateRecord.of(gate, result.attacks, result.metrics)
    pairs = version_pairs(registry)
    if record is not None:
        record = replace(record, weights=record.weights or weights_id, started=run.info.start_time,
                         clear=clear_gate_fail, written=int(time.time() * 1000),
                         parent=run.data.tags.get("mlflow.parentRunId"),
                         references=record.references or tuple(references), pool=record.pool or pool,
                         key=verifier.key.check)
        if pool_pairs:
            entries = [e for name, version in pairs for e in gate_chain.entries_of(client, name, version, weights_id, verifier)]
            record = replace(record, contains=gate_chain.contained_pools(client, entries, record.pool, set(pool_pairs)))
        client.set_tag(run_id, RUN_VERSIONS_TAG, "," + ",".join(f"{n}/{v}" for n, v in pairs) + ",")
        client.set_tag(run_id, RUN_RECORD_TAG, run_record_tag(record, run_id=run_id, key=verifier.key))
        verifier = Verifier(client, verifier.key, own_run_id=run_id)  # the run's tags changed
    written: dict[str, str] = {}
    done, gone = [], []
    for name, version in pairs:
        try:
            written = _tag_version(client, name, version, new, gate, record, run_id=run_id, headline=headline,
                                   weights_id=weights_id, scope=scope, verifier=verifier)
            done.append((name, version))
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            gone.append((name, version))
    origin = written.get(f"{RECORD_PREFIX}{run_id}")
    if record is not None and record.status != PASS and weights_id and origin:
        _propagate(client, weights_id, GateRecord.from_tag(origin), done=set(done) | set(gone), run_id=run_id,
                   source="/".join(done[-1]), verifier=verifier)
    if gone:
        raise VersionDeletedError(gone, status=gate.status if gate is not None else None, run_id=run_id)
    return written


def describe_versions(client, versions, *, verdict, paragraph: str, run_id: str) -> None:
    """Write ``mia.verdict`` and the description (with a link to the audit run) on registry versions.

    A version whose ``mia.gate`` tag (after :func:`tag_model_version`) differs from this
    audit's (a standing fail that a passing audit could not clear, a verdict written by
    another audit since this one began) gets the verdict of that tag, so ``mia.verdict``
    and ``mia.gate`` never disagree. A deleted version is skipped.

    Parameters
    ----------
    versions : iterable of (str, str)
    verdict : Verdict
        This audit's (:func:`mlflow_mia.tracking.verdict.audit_verdict`).
    paragraph : str
        The report's "In brief" paragraph.
    run_id : str
        The audit run linked from the description (``mia.gate.run_id``'s when a version keeps its verdict).
    """
    from mlflow.exceptions import MlflowException

    def link(rid: str) -> str:  # the audit run that set the verdict, by name (its id if it is gone)
        try:
            r = client.get_run(rid)
        except MlflowException:
            return rid
        return f"[{r.info.run_name}](#/experiments/{r.info.experiment_id}/runs/{rid}?workflowType=machine_learning)"
    own_gate = client.get_run(run_id).data.tags.get(GATE_TAG)
    for name, version in versions:
        try:
            tags = dict(client.get_model_version(name, version).tags or {})
            standing, mine, setter = tags.get(GATE_TAG), verdict, run_id
            if standing and standing != own_gate and verdict.value != LEAKS:  # a newer audit's leak always shows
                kept, setter = verdict_of(gate_status=standing), tags.get(RUN_ID_TAG) or run_id
                mine = Verdict(kept.value, f"{kept.reason} (mia.gate={standing} kept from run "
                                           f"{tags.get(RUN_ID_TAG)}; this audit: {verdict.value})")
            notes = tags.get(NOTES_TAG)
            text = paragraph if not notes else (f"{paragraph}\n\nGate records not counted, and tampering seen "
                                                f"(mia.gate.notes): {notes}")
            describe_version(client, name, version, verdict=mine,
                             description=run_description(mine, text, run_link=link(setter)))
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
