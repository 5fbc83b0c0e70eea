"""One membership audit run and logged: the shared core of the evaluator, the CLI, ``compare`` and ``analyze``.

:func:`audit_and_log` resolves the neighbour generator, runs
:func:`~mlflow_mia.audits.membership.run_audit` on the engine the options name,
checks the release gate and hands the result to :mod:`mlflow_mia.tracking`, which logs it
(:func:`~mlflow_mia.tracking.audit_log.log_audit`); :func:`model_records` says where each
model came from; :func:`evaluate_run` and :func:`evaluator_metrics` are the parts
:data:`mlflow_mia.pipeline.AUDITS` registers.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial
from typing import Any, Sequence

from mlflow_mia.engines.registry import get_engine
from mlflow_mia.hashing import HashKey
from mlflow_mia.options.audit import MiaOptions
from mlflow_mia.attacks import reference_roles, required_roles
from mlflow_mia.audits.base import Settings
from mlflow_mia.audits.membership import run_audit
from mlflow_mia.audits.membership.kind import MEMBERSHIP
from mlflow_mia.audits.membership.result import AuditResult
from mlflow_mia.config import AuditConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.models.resolve import ResolvedModel, resolve_model, resolve_reference
from mlflow_mia.progress import step
from mlflow_mia.signals import SignalCache
from mlflow_mia.tracking.audit_log import log_audit, mlflow_metrics
from mlflow_mia.tracking.gate_history import pool_digest
from mlflow_mia.tracking.log_settings import LogSettings
from mlflow_mia.attacks.shadow_record import ShadowRecord, check_shadow_record, shadow_membership

__all__ = ["audit_and_log", "model_records", "evaluate_run", "evaluator_metrics", "shadow_record_entry"]

log = logging.getLogger(__name__)


def audit_and_log(target, pool, population, config, options: MiaOptions, *, references: Sequence = (),
                  generator=None, run_id=None, log_metrics: bool = True, extra_params: dict | None = None, notes=(),
                  run_name: str | None = None, sources: dict | None = None):
    """Run one audit and log it: the shared core of the evaluator, the CLI and ``compare``.

    Parameters
    ----------
    target : ResolvedModel
        From :func:`mlflow_mia.models.resolve.resolve_model`.
    references : sequence of ResolvedModel
        The reference model(s): one audit over every model of the set (empty: attacks without a reference).
    generator : ResolvedModel, optional
        Neighbour generator of the ``neighbourhood`` attack. Default: resolved from
        ``config.neighbourhood.generator_model`` (any URI :func:`resolve_model`
        takes) when that attack runs, else the reference model.
    pool : AuditDataset
    population : PopulationSet
    config : AuditConfig
    options : MiaOptions
    run_id : str, optional
        Default: the active run.
    log_metrics : bool
        False when ``mlflow.models.evaluate`` logs the returned metrics itself.
    extra_params : dict, optional
    notes : sequence of str
        Warnings of the caller, added to the result's warnings (and so to the report).
    run_name : str, optional
        Name given to the run (:func:`~mlflow_mia.tracking.audit_log.log_audit`).
    sources : dict, optional
        ``{"pool": path, "population": path}``: sources of the run's datasets.

    Returns
    -------
    (AuditResult, GateResult or None, dict of artifacts)
    """
    generator = generator or resolve_generator(config, trust_remote_code=options.trust_remote_code)
    cache = SignalCache(options.cache_dir)  # None -> default_cache_dir()

    refs = list(references)
    engine = get_engine(options.engine, spark_master=options.spark_master, store=options.spark_store)
    record = checked_shadow_record(options, refs, pool=pool)  # before any model runs
    reader = None if record is None else partial(shadow_membership, record, key=options.hash_key)
    result = run_audit(target, pool, population, references=refs or None, generator=generator, config=config,
                       engine=engine, cache=cache, device=options.device, progress=options.progress,
                       shadow_membership=reader)
    models = model_records(result.models, target=target, generator=generator,
                           **dict(zip(reference_roles(len(refs)), refs)))
    if record is not None:  # which record decided lira_online and the OUT shadows: in the run and the gate record
        models["shadow_record"] = shadow_record_entry(record, options.shadow_record, pool=pool,
                                                      key=options.hash_key, result=result)
        extra_params = {**(extra_params or {}), "shadow_record.digest": record.digest}
    result = replace(result, models=models, warnings=(*result.warnings, *notes))  # the result is frozen
    budgets = MEMBERSHIP.gate(Settings(config, options), (pool, population))
    gate = budgets.check(result) if budgets is not None else None
    logged = LogSettings.from_options(
        options, texts=pool.texts, model_version=target.registry_versions or None, weights_id=target.lm.weights_id,
        log_metrics=log_metrics, params=extra_params, population=population, gate=gate,
        run_name=run_name, sources=sources)
    with step("logging to MLflow: metrics, figures, tables, report, registry tags"):
        artifacts = log_audit(result, run_id, settings=logged)
    if gate is not None:
        log.info(gate.verdict())
    return result, gate, artifacts


def checked_shadow_record(options: MiaOptions, references: Sequence, *, pool) -> ShadowRecord | None:
    """The shadow record ``options.shadow_record`` names, checked against the key, the references and the pool.

    Parameters
    ----------
    options : MiaOptions
        ``shadow_record`` (a path) and ``hash_key`` (the key the shadows' record was written under).
    references : sequence of ResolvedModel
        The audit's reference models: the record's shadows, in its order (their ``lm.weights_id`` is checked).
    pool : AuditDataset
        The audited pool: its keyed digest (:func:`~mlflow_mia.tracking.gate_history.pool_digest`)
        must be one the record was made for.

    Returns
    -------
    ShadowRecord or None
        None without a record. Read stage 1's input from it with
        ``functools.partial(shadow_membership, record, key=options.hash_key)``.

    Raises
    ------
    ValueError
        A key that is not the record's; a number or order of references that is not the
        record's shadows (by URI when both are known, always by weights digest); a record made
        for another pool, or one that names neither (written before records were bound:
        :func:`~mlflow_mia.attacks.shadow_record.check_shadow_record`, with how to re-create it).
    """
    if options.shadow_record is None:
        return None
    record = ShadowRecord.from_json(options.shadow_record)
    key = options.hash_key
    if key is None or key.check != record.key_check:
        how = ("no key was given (a random one)" if key is None or key.is_random
               else f"the audit's key has check {key.check}")
        raise ValueError(f"the shadow record {options.shadow_record} was written under the hash key with check "
                         f"{record.key_check}, but {how}: give the key the shadows were trained with "
                         "(hash_key_file / --hash-key-file, or MLFLOW_MIA_HASH_KEY)")
    used = [getattr(r, "resolved_uri", None) for r in references]
    if len(used) != record.k or (record.uris and all(used) and list(used) != list(record.uris)):
        raise ValueError(f"the shadow record's {record.k} shadows are {list(record.uris)}, but the audit's reference "
                         f"models are {used}: give the record's shadows as the references, in its order")
    check_shadow_record(record, weights=[r.lm.weights_id for r in references],
                        pool_digest=pool_digest(pool.text_hashes, pool.labels, key), where=str(options.shadow_record))
    return record


def shadow_record_entry(record: ShadowRecord, path, *, pool, key, result=None) -> dict:
    """``AuditResult.models["shadow_record"]``: which shadow record the audit used, for the run and the gate record.

    Returns
    -------
    dict
        ``digest`` (:func:`~mlflow_mia.attacks.shadow_record.shadow_record_digest`, 32 hex), ``path``,
        ``pool`` (the audited pool's keyed digest, one of the record's), ``shadows`` (k), ``weights``
        (the shadows' short weights digests, in order) and, when ``result`` ran the check,
        ``direction`` (the IN/OUT direction check's figures).
    """
    key = key if isinstance(key, HashKey) else HashKey.from_bytes(key, source="argument")
    out = {"digest": record.digest, "path": None if path is None else str(path),
           "pool": pool_digest(pool.text_hashes, pool.labels, key), "shadows": record.k,
           "weights": [str(w)[:23] for w in record.weights]}
    direction = (result.info.get("shadow_direction") if result is not None else None)
    if direction is not None:
        out["direction"] = direction
    return out


def model_records(models: dict, **resolved) -> dict:
    """``AuditResult.models`` with where each model came from: ``uri`` (version-pinned), ``requested``
    (as given), ``registered_model`` and ``version`` (registry models).

    Parameters
    ----------
    models : dict
        ``{role: {"identity": ..., "name": ...}}`` from the audit.
    **resolved : ResolvedModel or None
        By role (``target``, ``reference``, ``reference_2``, ..., ``generator``). A generator that is the
        reference model (same identity) gets the reference's record.
    """
    out = {role: dict(record) for role, record in models.items()}
    by_identity = {r.lm.model_id: r for r in resolved.values() if r is not None}
    for role, record in out.items():
        found = resolved.get(role) or by_identity.get(record.get("identity"))
        if found is None:
            continue
        record.update(uri=found.resolved_uri, requested=found.requested)
        if found.registry:
            record.update(registered_model=found.registered_name, version=str(found.version))
    return out


def resolve_generator(config, *, trust_remote_code: bool = False):
    """The neighbour generator named in ``config.neighbourhood.generator_model``, resolved.

    Returns None when no attack needs the generator role (the declared inputs of
    every neighbour attack, :func:`~mlflow_mia.attacks.required_roles`) or none is
    named (the reference model is then the generator). A registry URI
    (``models:/name@alias``), a run URI or a local folder are all accepted, as for
    the target and reference.
    """
    uri = config.neighbourhood.generator_model
    if not uri or "generator" not in required_roles(config.attacks):
        return None
    return resolve_model(uri, role="neighbour generator", trust_remote_code=trust_remote_code)


def evaluate_run(target: ResolvedModel, inputs: tuple[AuditDataset, PopulationSet],
                 settings: Settings[AuditConfig, MiaOptions], *, run_id: str | None = None, log_metrics: bool = True,
                 notes: Sequence[str] = ()) -> tuple[AuditResult, dict[str, Any]]:
    """The ``mia`` evaluator's audit: the one reference set the options name, then :func:`audit_and_log`.

    Parameters
    ----------
    target : ResolvedModel
    inputs : (AuditDataset, PopulationSet)
    settings : Settings
        ``(AuditConfig, MiaOptions)``.

    Returns
    -------
    (AuditResult, dict of artifacts)

    Raises
    ------
    ValueError
        ``reference_mode='each'`` with several references (one evaluate call logs one audit).
    """
    config, options = settings
    pool, population = inputs
    sets = options.reference_sets
    if len(sets) > 1:
        raise ValueError("reference_mode='each' runs one audit per reference, and one mlflow.models.evaluate "
                         "call logs one audit: call it once per reference, or use reference_mode='set'")
    references = [resolve_reference(uri, target=target, trust_remote_code=options.trust_remote_code)
                  for uri in sets[0]]
    result, _, artifacts = audit_and_log(target, pool, population, config, options, references=references,
                                         run_id=run_id, log_metrics=log_metrics, notes=notes)
    return result, artifacts


def evaluator_metrics(result: AuditResult, settings: Settings[AuditConfig, MiaOptions]) -> dict[str, float]:
    """The metrics logged to MLflow (:func:`~mlflow_mia.tracking.audit_log.mlflow_metrics`), prefixed."""
    return mlflow_metrics(result, prefix=settings.options.metric_prefix)
