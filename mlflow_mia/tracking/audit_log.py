"""Log an :class:`~mlflow_mia.audits.membership.AuditResult` to an MLflow run.

What one audit writes (``prefix`` is prepended to every name):

- params: the flattened :class:`~mlflow_mia.config.AuditConfig`, every model used
  (from ``result.models``: URIs, registry versions, identities), ``params=``,
  dataset sizes and keyed digests of the sorted text hashes (``pool.digest``,
  ``population.digest``), where the hash key came from (``audit.hash_key``) and, for a
  user key, a check value that identifies it without revealing it (``audit.hash_key_check``);
- metrics: ``result.metrics`` (less the raw score thresholds, which stay in
  ``audit_summary.json``) in one ``log_batch`` (step 0, one timestamp), unless
  ``log_metrics=False`` because ``mlflow.models.evaluate`` logs the returned
  metrics itself;
- figures: ``plots/roc.png``, ``plots/roc_loglog.png``, ``plots/user_roc.png``,
  ``plots/hist_<attack>.png``;
- tables: ``tables/samples.csv`` (keyed sample ids, keyed text hashes ``text_hmac``, keyed group
  ids, labels; the sample ids as given only with ``log_texts=True``; with ``log_samples=True`` also lengths, scores and flags; raw text only
  with ``log_texts=True``), ``tables/riskiest.csv`` (the members flagged at the lowest
  FPR, by keyed hash; with ``log_samples=True`` in score order with ids, lengths and scores),
  ``tables/memorization_features.csv`` (which features predict the flagged members, when
  computed),
  ``tables/neighbour_examples.csv`` (neighbourhood attack: the top-scored members and
  their neighbours with target energies; only with ``log_texts=True``);
- ``audit_summary.json``, ``audit_config.json`` (the config and ``models``: every model
  used, by role) and ``report.md``;
- run tags ``mia.gate`` (``pass`` / ``fail`` / ``inconclusive``, with a gate),
  ``mia.headline_attack``, and on the registered model version ``mia.<attack>.auc``,
  ``mia.<attack>.tpr_at_fpr_<alpha>``, ``mia.gate`` (and its history), ``mia.audit_run_id``
  (:mod:`~mlflow_mia.tracking.registry_tags`).

No per-sample score reaches a table beside a label unless ``log_samples=True``:
masks are drawn from the seed and the text, so anyone who can read the run and
load the target recomputes a candidate text's exact score, finds its row and reads
its label (issue 21, High 1). Token counts and the score order are recomputable
too, and are left out with the scores.
No raw text reaches params, metrics, tags or artifacts unless ``log_texts=True``.
No unkeyed hash of a text or group id does either: an unsalted sha256 next to a
label would let anyone who reads the run test a candidate text for membership.
Texts, group ids and sample ids (unless ``log_texts``) appear as ``HMAC-SHA256(key, sha256(value))``
(:mod:`mlflow_mia.hashing`); the key is the user's (key file or
``$MLFLOW_MIA_HASH_KEY``) or, without one, random per audit and not kept.
"""

from __future__ import annotations

import logging
import time
import pandas as pd

from mlflow_mia.tracking.artifacts import (SAMPLE_COLUMNS, active_run_id, artifact, check_metric_names,
                                           dataset_digest, keyed_table, log_figures, log_files, to_json, write_text)
from mlflow_mia.tracking.headline import (METRICS_TABLE, deciding_keys, headline_metrics, metrics_table,
                                          table_metrics, verdict_record)
from mlflow_mia.tracking.run_params import digest_tags, is_digest, new_params, setting_params
from mlflow_mia.tracking.gate_history import pool_digest, reference_digests
from mlflow_mia.tracking.log_settings import LogSettings
from mlflow_mia.metrics.gate_record import GateRecord, signal_digest
from mlflow_mia.tracking.registry_tags import version_pairs
from mlflow_mia.tracking.version_verdict import record_verdict
from mlflow_mia.audits.membership.report import in_brief, render_report
from mlflow_mia.hashing import HashKey, keyed_hash, require_hash_key
from mlflow_mia.tracking.records import dataset_inputs, model_inputs
from mlflow_mia.tracking.verdict import audit_verdict, describe_run, run_description

__all__ = ["log_audit", "audit_params", "audit_digests", "mlflow_metrics"]

log = logging.getLogger(__name__)
#: Non-empty once the random-key warning was given in this process (it explains itself once).
_RANDOM_KEY_EXPLAINED: list = []


def _random_key_logged_before(client, run_id: str) -> bool:
    """True when another run of ``run_id``'s experiment logged hashes under a random key: the user was told then."""
    try:
        experiment = client.get_run(run_id).info.experiment_id
        found = client.search_runs([experiment], "params.hash_key = 'random (not kept)'", max_results=2)
    except Exception:  # noqa: BLE001 - a store that cannot be searched: say it (once per process)
        return False
    return any(r.info.run_id != run_id for r in found)



def mlflow_metrics(result, *, prefix: str = "", gate=None, verdict=None) -> dict[str, float]:
    """The metrics logged to MLflow: the headline set (:func:`~mlflow_mia.tracking.headline.headline_metrics`),
    rounded, the headline attack's AUC first (the MLflow UI's run comparison plots a run's first metric).

    ``gate`` adds its deciding metrics (else the headline attack's AUC interval), ``verdict`` the
    verdict code. Every metric (to 10 decimals) is in the run's metrics table
    (:data:`~mlflow_mia.tracking.headline.METRICS_TABLE`).
    """
    return headline_metrics(result, gate=gate, verdict=verdict, prefix=prefix)


def model_params(models: dict) -> dict[str, str]:
    """Run params naming every model of an audit (``AuditResult.models``), each written once.

    ``target_model`` and ``reference_model`` (``reference_2_model``, ... for a reference
    set; the version-pinned URI, else the
    model identity), ``{role}_model_requested`` (when it differs),
    ``{role}_registered_model`` and ``{role}_model_version`` (registry models),
    and ``neighbourhood.generator`` (the generator's identity).
    """
    out: dict[str, str] = {}
    references = [r for r in models if r == "reference" or r.startswith("reference_")]  # reference, reference_2, ...
    for role in ("target", *references):
        record = models.get(role) or {}
        if role != "target" and not record:
            continue
        uri = record.get("uri") or record.get("identity")
        out[f"{role}_model"] = str(uri)
        if record.get("requested") and record["requested"] != uri:
            out[f"{role}_model_requested"] = str(record["requested"])
        if record.get("registered_model"):
            out[f"{role}_registered_model"] = str(record["registered_model"])
            out[f"{role}_model_version"] = str(record["version"])
    if models.get("generator"):
        out["neighbourhood.generator"] = str(models["generator"]["identity"])
    return out


def audit_params(result, *, hash_key: HashKey, population=None) -> dict[str, str]:
    """Params of an audit: its settings (:func:`~mlflow_mia.tracking.run_params.setting_params`), every model
    used (:func:`model_params`), dataset sizes and where the hash key came from (``hash_key``).

    Parameters
    ----------
    result : AuditResult
    population : PopulationSet, optional
        Its size in groups is logged when given.
    hash_key : HashKey
        Only its source is logged (``env``, ``file``, ``random (not kept)``); its check value is a tag
        (:func:`audit_digests`).

    Raises
    ------
    TypeError
        ``hash_key`` is not a :class:`~mlflow_mia.hashing.HashKey`.
    """
    hash_key = require_hash_key(hash_key, "audit_params")
    out = setting_params(result.config)
    out.update(model_params(result.models))
    samples = result.samples
    out["pool.n_samples"] = str(len(samples))
    out["pool.n_members"] = str(int((samples["label"] == 1).sum()))
    out["pool.n_non_members"] = str(int((samples["label"] == 0).sum()))
    if "group" in samples and samples["group"].notna().any():
        out["pool.n_groups"] = str(int(samples["group"].nunique()))
    out["population.n_samples"] = str(result.info.get("n_population", ""))
    if population is not None and population.groups is not None:
        out["population.n_groups"] = str(len(set(population.groups)))
    out["hash_key"] = "random (not kept)" if hash_key.is_random else hash_key.source
    return out


def audit_digests(result, *, hash_key: HashKey, population=None) -> dict[str, str]:
    """What identifies the audited data, keyed (:func:`~mlflow_mia.tracking.artifacts.dataset_digest`), logged as
    run tags ``mia.<name>`` (:func:`~mlflow_mia.tracking.run_params.digest_tags`): ``pool.digest``,
    ``population.digest`` (with ``population``), and for a user's key ``hash_key_check`` (identifies the key
    without revealing it)."""
    hash_key = require_hash_key(hash_key, "audit_digests")
    out = {"pool.digest": dataset_digest(result.samples["text_hash"].tolist(), key=hash_key)}
    if population is not None:
        out["population.digest"] = dataset_digest(population.text_hashes, key=hash_key)
    if not hash_key.is_random:
        out["hash_key_check"] = hash_key.check
    return out


#: Above this many pool rows the per-sample table is written as Parquet (columnar, compressed), not CSV.
LARGE_TABLE_ROWS = 200_000


#: Columns of the riskiest-records table by default: the flagged members by keyed hash, sorted by it (no rank).
RISKY_COLUMNS = ("attack", "flagged_at_fpr", "group", "text_hmac")
_FIRST = ("attack", "sample_id", "text", "label", "flagged_at_fpr", "score")
_LAST = ("n_tokens", "truncated", "group", "text_hmac")


def readable_order(table):
    """``table`` with its columns in reading order: ids, text (only with ``log_texts``), label, scores and
    flags, then token counts, keyed groups and keyed text hashes (64 hex characters) last."""
    cols = list(table.columns)
    scores = [c for c in cols if c.startswith(("score_", "flagged_")) and c not in _FIRST]
    first = [c for c in _FIRST if c in cols] + scores
    last = [c for c in _LAST if c in cols and c not in first]
    middle = [c for c in cols if c not in first and c not in last]
    return table[first + middle + last]


def _without_scores(samples, riskiest):
    """The default tables: :data:`SAMPLE_COLUMNS` and :data:`RISKY_COLUMNS`, riskiest rows sorted by keyed hash."""
    samples = samples[[c for c in SAMPLE_COLUMNS if c in samples]]
    parts = [part.sort_values("text_hmac", kind="stable") for _, part in riskiest.groupby("attack", sort=False)]
    riskiest = pd.concat(parts, ignore_index=True) if parts else riskiest
    return samples, riskiest[[c for c in RISKY_COLUMNS if c in riskiest]]


def _table_files(result, *, log_texts: bool, texts, hash_key, log_samples: bool = False) -> dict:
    """``{path: (artifact kind, artifact name, writer)}`` of the audit's tables (raw text only with ``log_texts``).

    Text hashes, group ids and sample ids are keyed with ``hash_key`` (:func:`keyed_table`): no
    plain sha256 of a text leaves the process, and sample ids appear as given only with ``log_texts``. Without ``log_samples`` the tables hold no
    score, flag, rank or token count (see the module docstring). A pool of more than
    :data:`LARGE_TABLE_ROWS` rows (an audit on Spark, say) gets ``tables/samples.parquet``
    instead of the CSV.
    """
    samples = keyed_table(result.samples, hash_key, raw_ids=log_texts)
    riskiest = keyed_table(result.riskiest, hash_key, raw_ids=log_texts)
    by_hmac = dict(zip(samples["text_hmac"], texts)) if log_texts else {}
    if not log_samples:
        samples, riskiest = _without_scores(samples, riskiest)
    if log_texts:
        samples.insert(1, "text", list(texts))
        riskiest.insert(1, "text", [by_hmac.get(h) for h in riskiest["text_hmac"]])
    samples, riskiest = readable_order(samples), readable_order(riskiest)
    if len(samples) > LARGE_TABLE_ROWS:
        files = {"tables/samples.parquet": ("parquet", "samples", lambda p: samples.to_parquet(p, index=False))}
    else:
        files = {"tables/samples.csv": ("csv", "samples", lambda p: samples.to_csv(p, index=False))}
    files["tables/riskiest.csv"] = ("csv", "riskiest", lambda p: riskiest.to_csv(p, index=False))
    if log_texts and result.neighbour_examples is not None:  # raw text: only when asked
        files["tables/neighbour_examples.csv"] = ("csv", "neighbour_examples",
                                                  lambda p: keyed_table(result.neighbour_examples, hash_key,
                                                                        raw_ids=True).to_csv(p, index=False))
    table = result.memorization_features
    if table is not None:  # memorization-feature analysis (paper Sec. 4.6)
        files["tables/memorization_features.csv"] = ("csv", "memorization_features",
                                                     lambda p: table.to_csv(p, index=False))
    return files


def _gate_record(result, gate):
    """The gate record of a membership audit: its verdict, attacks, signal settings and shadow record (None ungated)."""
    if gate is None:
        return None
    shadows = (result.models or {}).get("shadow_record") or {}
    return GateRecord.of(gate, result.attacks, result.metrics, signal=signal_digest(result.config.signal),
                         shadow_record=shadows.get("digest"))


def _pool_provenance(result, hash_key) -> dict:
    """What identifies the audited pool and references in the gate record: their digests, and the pool's keyed pairs
    (to show that it contains an earlier audit's pool; none under a random key, whose hashes match nothing)."""
    texts, labels = result.samples["text_hash"], result.samples["label"]
    pairs = None if hash_key.is_random else [(keyed_hash(h, hash_key), int(y)) for h, y in zip(texts, labels)]
    return {"references": reference_digests(result.models), "pool": pool_digest(texts, labels, hash_key),
            "pool_pairs": pairs}


def _explain_random_key(client, run_id: str, hash_key) -> None:
    """Warn, once per process and once per experiment of the store, that a random hash key is not kept."""
    if hash_key.is_random and not _RANDOM_KEY_EXPLAINED:
        _RANDOM_KEY_EXPLAINED.append(True)  # once per process: an analyze suite runs many audits
        if not _random_key_logged_before(client, run_id):  # and once per experiment of the store
            log.warning("no hash key set: the logged hashes use a random key that is not kept, so no later run can "
                        "look a sample up; keep one with --hash-key-file or MLFLOW_MIA_HASH_KEY "
                        "(docs/guides/inputs.md; said once)")


def _params_and_tags(client, run_id: str, result, settings: LogSettings, hash_key) -> tuple[dict, dict]:
    """The run's new params (each setting once, those ``mlflow run`` already logged left out) and its tags
    (the headline attack, the digests, the gate's status), prefixed."""
    prefix, gate, population = settings.prefix, settings.gate, settings.population
    extra = {k: str(v) for k, v in (settings.params or {}).items()}
    all_params = {**audit_params(result, population=population, hash_key=hash_key),
                  **{k: v for k, v in extra.items() if not is_digest(k)},
                  "log_texts": str(bool(settings.log_texts)), "log_samples": str(bool(settings.log_samples))}
    if gate is not None:
        all_params["max_tpr_at_fpr"] = ",".join(f"{c['alpha']:g}:{c['max_tpr']:g}" for c in gate.checks)
    digests = {**audit_digests(result, population=population, hash_key=hash_key),
               **{k: v for k, v in extra.items() if is_digest(k)}}
    held = client.get_run(run_id).data.params  # mlflow run logged the MLproject parameters it was given
    fresh = new_params({f"{prefix}{k}": str(v)[:6000] for k, v in all_params.items()}, held)
    tags = {f"{prefix}mia.headline_attack": result.headline_attack, **digest_tags(digests, prefix=prefix)}
    if gate is not None:
        tags[f"{prefix}mia.gate"] = gate.status
    return fresh, tags


def log_audit(result, run_id: str | None = None, *, settings: LogSettings, client=None) -> dict:
    """Log an audit to an MLflow run.

    Parameters
    ----------
    result : AuditResult
        A finished audit.
    run_id : str, optional
        Target run; default the active run.
    settings : LogSettings, optional
        What is logged and how (:class:`~mlflow_mia.tracking.log_settings.LogSettings`: raw texts,
        per-sample scores, the prefix, the gate, the registry versions, ...), built from the audit's
        options with :meth:`~mlflow_mia.tracking.log_settings.LogSettings.from_options`. Default:
        metrics, figures, keyed tables and the report; no raw text, per-sample score or registry tag.
    client : MlflowClient, optional

    The run also gets the verdict (``mia.verdict``, :mod:`~mlflow_mia.tracking.verdict`)
    and, unless it has one of the user's, the description: the verdict and the report's
    "In brief" paragraph; the pool and population appear under the run's datasets
    (:func:`~mlflow_mia.tracking.records.dataset_inputs`), the audited registry
    versions' logged models as its model inputs, and each version gets ``mia.verdict``
    and the same description with a link to the run.

    Returns
    -------
    dict of str to mlflow.models.EvaluationArtifact
        Logged artifacts by name (``report``, ``samples``, ``roc``, ...), prefixed.

    Raises
    ------
    ValueError
        No run is active and no ``run_id`` is given; ``log_texts`` without texts; a
        metric name MLflow would reject.
    VersionDeletedError
        A registry version in ``model_version`` was deleted during the audit (raised
        after everything else is logged; see :mod:`~mlflow_mia.tracking.registry_tags`).
    """
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    log_texts, texts, log_samples, log_metrics = (settings.log_texts, settings.texts, settings.log_samples,
                                                  settings.log_metrics)
    prefix, population, gate = settings.prefix, settings.population, settings.gate
    model_version, hash_key = settings.model_version, settings.hash_key
    run_name, sources, group_column = settings.run_name, settings.sources, settings.group_column
    hash_key = require_hash_key(hash_key, "log_audit")
    client = client or MlflowClient()
    run_id = active_run_id(run_id, "log_audit")
    _explain_random_key(client, run_id, hash_key)
    if log_texts and (texts is None or len(texts) != len(result.samples)):
        raise ValueError("log_texts=True needs texts=<the pool texts in pool order>, one per sample")

    verdict = audit_verdict(result, gate)
    metrics = mlflow_metrics(result, prefix=prefix, gate=gate, verdict=verdict)
    check_metric_names(metrics)
    fresh, tags = _params_and_tags(client, run_id, result, settings, hash_key)
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(k, v, now, 0) for k, v in metrics.items()] if log_metrics else [],
        params=[Param(k, v) for k, v in fresh.items()],
        tags=[RunTag(k, v) for k, v in tags.items()])
    client.log_table(run_id, metrics_table(table_metrics(result.metrics)), prefix + METRICS_TABLE)

    dataset_inputs(client, run_id, result, hash_key=hash_key, population=population, prefix=prefix,
                   texts=texts if log_texts else None, sources=sources)
    describe_run(client, run_id, verdict=verdict, name=run_name, prefix=prefix,
                 description=run_description(verdict, in_brief(result), gate=gate))

    figures = result.figures()
    logged = [prefix + path for path in figures]
    artifacts = log_figures(client, run_id, figures, prefix=prefix)

    summary = {"verdict": {"value": verdict.value, "reason": verdict.reason},  # results first, settings last
               "gate": gate.to_dict() if gate is not None else None, **result.summary(),
               "log_texts": bool(log_texts), "log_samples": bool(log_samples),
               "hash_key": {"source": hash_key.source, "check": None if hash_key.is_random else hash_key.check}}
    summary["config"] = summary.pop("config")
    files = {  # path -> (artifact kind, artifact name, writer)
        **_table_files(result, log_texts=log_texts, texts=texts, hash_key=hash_key, log_samples=log_samples),
        "audit_summary.json": ("json", "audit_summary", lambda p: write_text(p, to_json(summary, sort_keys=False))),
        "audit_config.json": ("json", "audit_config", lambda p: write_text(p, to_json(result.config_record()))),
    }
    record = verdict_record(verdict, result.metrics, deciding_keys(result, gate), gate=gate)
    files["verdict.json"] = ("json", "verdict", lambda p: write_text(p, to_json(record, sort_keys=False)))
    logged += [prefix + rel for rel in files] + [prefix + "report.md", prefix + METRICS_TABLE]
    report = render_report(result, gate=gate, artifacts=sorted(logged), group_column=group_column,
                           hashing=hash_key.describe(), log_samples=log_samples, verdict=verdict)
    files["report.md"] = ("text", "report", lambda p: write_text(p, report))
    artifacts.update(log_files(client, run_id, files, prefix=prefix))
    artifacts[f"{prefix}verdict"] = artifact("json", run_id, f"{prefix}verdict.json", content=record)

    if model_version is not None:
        model_inputs(client, run_id, version_pairs(model_version))
        record_verdict(client, result, run_id=run_id, settings=settings, verdict=verdict, brief=in_brief(result),
                       record=_gate_record(result, gate), **_pool_provenance(result, hash_key))
    return artifacts
