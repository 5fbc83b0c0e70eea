"""The one writer of an audit's verdict on the registry versions it audited, for every audit kind.

:func:`record_verdict` is what the membership, NER and canary logs
(:mod:`.audit_log`, :mod:`.ner_log`, :mod:`.canary_log`) call, and what a new audit kind's
log calls: the kind hands over its gate's verdict, its sealed gate record
(:class:`~mlflow_mia.metrics.gate_record.GateRecord`), its headline tags and the tag scope
(``mia.``, ``mia.ner.``, ``mia.canary.``), and gets the same registry evidence as every other
kind: the record in the version's sealed chain (``mia.gate.run.<run_id>``), the derived
``mia.gate`` that only the tool's own records can set (a weaker audit never lifts a blocking
verdict, :mod:`.gate_history`), ``mia.verdict`` and the version's description with a link to
the run (:func:`~mlflow_mia.tracking.registry_tags.tag_model_version`,
:func:`~mlflow_mia.tracking.registry_tags.describe_versions`).
"""

from __future__ import annotations

from collections.abc import Mapping

from mlflow_mia.metrics.gate_record import GateRecord
from mlflow_mia.metrics.verdicts import ThreeStateResult
from mlflow_mia.tracking.verdict import Verdict
from mlflow_mia.tracking.log_settings import LogSettings
from mlflow_mia.tracking.registry_tags import describe_versions, tag_model_version, version_pairs

__all__ = ["record_verdict"]


def record_verdict(client, result, *, run_id: str, settings: LogSettings, verdict: Verdict, brief: str,
                   record: GateRecord | None, headline_tags: Mapping[str, str] | None = None, scope: str = "mia.",
                   **provenance) -> None:
    """Write one audit's evidence on the registry versions of ``settings.model_version`` (nothing without any).

    The headline tags (unless ``settings.tag_headline`` is off), the gate ``record`` sealed into each version's
    chain and the derived ``mia.gate``; then, where headline tags were written or the gate did not pass,
    ``mia.verdict`` and the description (the run's ``verdict`` and ``brief``, with a link to the run).

    Parameters
    ----------
    client : MlflowClient
    result : object
        The audit's result; read only when ``headline_tags`` is None (the membership audit's
        :func:`~mlflow_mia.tracking.registry_tags.headline_tags` of an ``AuditResult``).
    run_id : str
        The audit run.
    settings : LogSettings
        ``model_version`` (the versions), ``gate`` (the kind's :class:`~mlflow_mia.metrics.verdicts.ThreeStateResult`
        or None), ``tag_headline``, ``clear_gate_fail``, ``weights_id`` (the audited weights' digest: a fail is
        recorded against it, on every version with the same weights), ``hash_key`` (seals the records).
    verdict : Verdict
        The run's verdict (``mia.verdict``), as its log decided it.
    brief : str
        The description's paragraph ("In brief" of the report).
    record : GateRecord or None
        The gate's record (None ungated; a gated membership audit may pass None for
        :meth:`GateRecord.of` of its result).
    headline_tags : mapping of str to str, optional
        The kind's headline tags (``mia.<kind>.*``); None: the membership audit's.
    scope : str
        The kind's tag prefix: only its own stale headline tags are replaced.
    **provenance
        ``references``, ``pool``, ``pool_pairs``: what an audit clearing a fail must match
        (:func:`~mlflow_mia.tracking.registry_tags.tag_model_version`).

    Raises
    ------
    VersionDeletedError
        A version was deleted during the audit: raised after the others are tagged and described.
    """
    if settings.model_version is None:
        return
    gate: ThreeStateResult | None = settings.gate
    try:
        tag_model_version(settings.model_version, result, run_id=run_id, gate=gate, client=client,
                          headline=settings.tag_headline, headline_tags_=headline_tags, record=record, scope=scope,
                          clear_gate_fail=settings.clear_gate_fail, weights_id=settings.weights_id,
                          hash_key=settings.hash_key, **provenance)
    finally:  # a deleted version raises after the others are tagged: describe those too
        if settings.tag_headline or (gate is not None and not gate.passed):
            describe_versions(client, version_pairs(settings.model_version), verdict=verdict, paragraph=brief,
                              run_id=run_id)
