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

The rules (``docs/security.md``):

1. A fail belongs to the weights, not the version: it is also written on every
   version whose ``mia.weights_sha256`` equals the audited weights' digest, and a
   version audited later with those weights (the same logged model registered
   again) inherits a fail written after its own last verdict.
2. A fail stays until a passing audit run with ``clear_gate_fail`` that is at least
   as strong as every fail it clears (:meth:`GateRecord.shortfalls`: the same or
   more attacks, a budget at each failed alpha at least as tight, the same or a
   higher confidence, the same or larger pools); otherwise a warning says what is
   missing. ``inconclusive`` never clears a fail.
3. The version's tags are re-read just before writing; a verdict written since this
   audit began is kept (only a ``fail`` of this audit replaces a non-failing one).
4. A failing or inconclusive verdict is written even with ``headline=False``, so an
   old ``pass`` never stands beside a new blocking verdict.
5. A version deleted during the audit raises :class:`VersionDeletedError` once the
   other versions are tagged.

``mia.weights_sha256`` (the version's weights digest, checked before a folder or
a pyfunc may claim the version: :mod:`mlflow_mia.models.resolve`) is kept too.
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import replace

from mlflow_mia.metrics.gate import FAIL, INCONCLUSIVE, PASS
from mlflow_mia.metrics.gate_record import GateRecord
from mlflow_mia.models.resolve import WEIGHTS_TAG

__all__ = ["tag_model_version", "describe_versions", "version_pairs", "GATE_TAG", "WEIGHTS_TAG", "VersionDeletedError"]

log = logging.getLogger(__name__)

GATE_TAG = "mia.gate"
ATTACKS_TAG, RUN_ID_TAG = f"{GATE_TAG}.attacks", f"{GATE_TAG}.run_id"
WRITTEN_TAG, REQUIRES_TAG = f"{GATE_TAG}.written_at", f"{GATE_TAG}.requires"
INHERITED_TAG = f"{GATE_TAG}.inherited_from"
CANARY_PREFIX = "mia.canary."  # headline tags of canary audits (tracking/canary_log.py)
_KEPT = (GATE_TAG, WEIGHTS_TAG, CANARY_PREFIX)  # prefixes a membership audit never deletes
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


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
    from mlflow_mia.audits.membership import fmt_alpha

    tags = {"mia.audit_run_id": run_id, "mia.attacks": ",".join(result.attacks)}
    for name, rep in result.attacks.items():
        tags[f"mia.{name}.auc"] = _fmt_tag(rep.roc.auc)
        for alpha, tpr in rep.tpr_at_fpr.items():
            tags[f"mia.{name}.tpr_at_fpr_{fmt_alpha(alpha)}"] = _fmt_tag(tpr)
    for name, rep in result.user_attacks.items():
        tags[f"mia.user.{name}.auc"] = _fmt_tag(rep.roc.auc)
    return tags


def _written_at(tags: dict) -> int:
    try:
        return int(tags.get(WRITTEN_TAG) or 0)
    except ValueError:
        return 0


def _required(tags: dict) -> GateRecord:
    """What clearing the fail held in ``tags`` takes: ``mia.gate.requires``, else the failing run's record."""
    for value in (tags.get(REQUIRES_TAG), tags.get(f"{GATE_TAG}.run.{tags.get(RUN_ID_TAG)}")):
        if value:
            try:
                return GateRecord.from_tag(value)
            except ValueError:
                log.warning("unreadable gate record %r: only the attacks of the fail are required", value)
    return GateRecord(FAIL, attacks=tuple(a for a in (tags.get(ATTACKS_TAG) or "").split(",") if a))


def _same_weights(client, weights_id: str | None) -> list:
    """Registry versions tagged with the weights digest ``weights_id`` (every registered model)."""
    from mlflow.exceptions import MlflowException

    if not weights_id or not _DIGEST.fullmatch(weights_id):
        return []
    try:
        return list(client.search_model_versions(f"tags.`{WEIGHTS_TAG}` = '{weights_id}'"))
    except MlflowException as exc:  # a registry without tag search: scan (slower, same answer)
        log.debug("search by %s failed (%s); scanning every version", WEIGHTS_TAG, exc)
        return [mv for mv in client.search_model_versions() if (mv.tags or {}).get(WEIGHTS_TAG) == weights_id]


def _inherited_fail(client, name: str, version: str, current: dict, weights_id: str | None):
    """Fails on other versions with these weights written after this version's own last verdict.

    Returns ``(requirement merged over them, the newest one's tags, the "name/version" where that fail was
    first recorded)``, or None.
    """
    fails = []
    for mv in _same_weights(client, weights_id):
        tags = dict(mv.tags or {})
        if ((mv.name, str(mv.version)) != (name, version) and tags.get(GATE_TAG) == FAIL
                and _written_at(tags) > _written_at(current)):
            fails.append((_written_at(tags), tags, tags.get(INHERITED_TAG) or f"{mv.name}/{mv.version}"))
    if not fails:
        return None
    fails.sort(key=lambda f: f[0])
    required = None
    for _, tags, _ in fails:
        required = _required(tags).merge(required)
    return required, fails[-1][1], fails[-1][2]


def _verdict_tags(client, name: str, version: str, current: dict, gate, record: GateRecord, *, run_id: str,
                  clear_gate_fail: bool, weights_id: str | None, started: int, now: int) -> dict[str, str]:
    """Gate tags for one version whose tags (re-read just now) are ``current``; see the module docstring."""
    where = f"models:/{name}/{version}"
    tags = {f"{GATE_TAG}.run.{run_id}": record.to_tag()}
    own = {GATE_TAG: gate.status, ATTACKS_TAG: ",".join(record.attacks), RUN_ID_TAG: run_id, WRITTEN_TAG: str(now)}
    failing = current.get(GATE_TAG) == FAIL
    if gate.status == FAIL:  # a fail is always recorded, its requirement merged with a standing one
        return {**tags, **own, REQUIRES_TAG: record.merge(_required(current) if failing else None).to_tag()}
    if current.get(GATE_TAG) and current.get(RUN_ID_TAG) != run_id and _written_at(current) > started:
        log.warning("%s: mia.gate=%s was written by run %s after this audit began; it is kept (this audit's "
                    "verdict, %s, is recorded in %s.run.%s only)", where, current[GATE_TAG],
                    current.get(RUN_ID_TAG), gate.status, GATE_TAG, run_id)
        return tags
    inherited = None if failing else _inherited_fail(client, name, version, current, weights_id)
    if not failing and inherited is None:
        return {**tags, **own}
    required, source_tags, source = (_required(current), current, where) if failing else inherited
    if gate.status == PASS and clear_gate_fail:
        short = record.shortfalls(required)
        if not short:
            log.warning("%s: mia.gate=fail (run %s) cleared by this passing audit", where,
                        source_tags.get(RUN_ID_TAG))
            return {**tags, **own}
        log.warning("%s keeps mia.gate=fail (run %s, %s): --clear-gate-fail (clear_gate_fail=True) needs an audit "
                    "at least as strong as the one that failed, and this one is weaker: %s", where,
                    source_tags.get(RUN_ID_TAG), source, "; ".join(short))
    else:
        log.warning("%s keeps mia.gate=fail (run %s, %s): only a passing audit at least as strong, run with "
                    "--clear-gate-fail (clear_gate_fail=True), clears it", where, source_tags.get(RUN_ID_TAG), source)
    if inherited is not None:
        fail_run = source_tags.get(RUN_ID_TAG)
        history = source_tags.get(f"{GATE_TAG}.run.{fail_run}")
        tags.update({GATE_TAG: FAIL, ATTACKS_TAG: source_tags.get(ATTACKS_TAG, ""), RUN_ID_TAG: fail_run,
                     WRITTEN_TAG: str(now), REQUIRES_TAG: required.to_tag(), INHERITED_TAG: source})
        if history:
            tags[f"{GATE_TAG}.run.{fail_run}"] = replace(GateRecord.from_tag(history), via=source).to_tag()
    return tags


def _propagate_fail(client, weights_id: str | None, record: GateRecord, *, done, source: str, run_id: str,
                    now: int) -> None:
    """Write this audit's fail on every other version that holds the same weights (rule 1)."""
    from mlflow.exceptions import MlflowException

    for mv in _same_weights(client, weights_id):
        name, version = mv.name, str(mv.version)
        if (name, version) in done:
            continue
        current = dict(mv.tags or {})
        required = record.merge(_required(current) if current.get(GATE_TAG) == FAIL else None)
        tags = {GATE_TAG: FAIL, ATTACKS_TAG: ",".join(record.attacks), RUN_ID_TAG: run_id, WRITTEN_TAG: str(now),
                REQUIRES_TAG: required.to_tag(), INHERITED_TAG: source,
                f"{GATE_TAG}.run.{run_id}": replace(record, via=source).to_tag()}
        try:
            for key, value in tags.items():
                client.set_model_version_tag(name, version, key, value)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            continue
        log.warning("models:/%s/%s holds the same weights (%s): mia.gate=fail recorded there too", name, version,
                    weights_id)


def _tag_version(client, name: str, version: str, new: dict, gate, record, *, run_id: str, headline: bool,
                 clear_gate_fail: bool, weights_id: str | None, started: int, scope: str = "mia.") -> dict[str, str]:
    """Re-read one version's tags and write this audit's tags on it; returns what was written."""
    current = dict(client.get_model_version(name, version).tags or {})
    written = dict(new)
    if gate is not None and (headline or not gate.passed):
        written.update(_verdict_tags(client, name, version, current, gate, record, run_id=run_id,
                                     clear_gate_fail=clear_gate_fail, weights_id=weights_id, started=started,
                                     now=int(time.time() * 1000)))
        if weights_id:
            written[WEIGHTS_TAG] = weights_id
    kept = _KEPT if scope == "mia." else (GATE_TAG, WEIGHTS_TAG)
    stale = [key for key in current if headline and key.startswith(scope) and not key.startswith(kept)
             and key not in written]  # the headline describes this audit only
    if written.get(RUN_ID_TAG) == run_id and INHERITED_TAG in current:
        stale.append(INHERITED_TAG)  # this audit's own verdict replaces an inherited one
    for key in stale:
        client.delete_model_version_tag(name, version, key)
    for key, value in written.items():
        client.set_model_version_tag(name, version, key, value)
    log.info("tagged %s version %s with %d mia.* tags", name, version, len(written))
    return written


def tag_model_version(registry, result, *, run_id: str, gate=None, client=None, headline: bool = True,
                      clear_gate_fail: bool = False, weights_id: str | None = None,
                      audit_started: int | None = None, headline_tags_=None, record=None,
                      scope: str = "mia.") -> dict[str, str]:
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
    audit_started : int, optional
        When the audit began, ms since the epoch; a verdict written later is not
        overwritten (default: the run's start time).
    headline_tags_, record, scope : optional
        Another audit's headline tags, gate record and tag prefix (the canary audit:
        ``mia.canary.*`` tags, whose stale ones alone it replaces).

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
    if audit_started is None:
        audit_started = client.get_run(run_id).info.start_time
    new = ((headline_tags(result, run_id=run_id) if headline_tags_ is None else dict(headline_tags_))
           if headline else {})
    if weights_id and headline:
        new[WEIGHTS_TAG] = weights_id
    if record is None and gate is not None:
        record = GateRecord.of(gate, result.attacks, result.metrics)
    written: dict[str, str] = {}
    done, gone = [], []
    for name, version in version_pairs(registry):
        try:
            written = _tag_version(client, name, version, new, gate, record, run_id=run_id, headline=headline,
                                   clear_gate_fail=clear_gate_fail, weights_id=weights_id, started=audit_started,
                                   scope=scope)
            done.append((name, version))
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            gone.append((name, version))
    if gate is not None and gate.status == FAIL and weights_id:
        _propagate_fail(client, weights_id, record, done=set(done) | set(gone), run_id=run_id,
                        source="/".join((done + gone)[0]), now=int(time.time() * 1000))
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
        The audit run, linked from the description.
    """
    from mlflow.exceptions import MlflowException

    from mlflow_mia.tracking.verdict import Verdict, describe_version, run_description, verdict_of

    run = client.get_run(run_id)
    link = (f"[{run.info.run_name or run_id}](#/experiments/{run.info.experiment_id}/runs/{run_id}"
            "?workflowType=machine_learning)")
    own_gate = run.data.tags.get(GATE_TAG)
    for name, version in versions:
        try:
            tags = dict(client.get_model_version(name, version).tags or {})
            standing, mine = tags.get(GATE_TAG), verdict
            if standing and standing != own_gate:
                kept = verdict_of(gate_status=standing)
                mine = Verdict(kept.value, f"{kept.reason} (mia.gate={standing} kept from run "
                                           f"{tags.get(RUN_ID_TAG)}; this audit: {verdict.value})")
            describe_version(client, name, version, verdict=mine,
                             description=run_description(mine, paragraph, run_link=link))
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
