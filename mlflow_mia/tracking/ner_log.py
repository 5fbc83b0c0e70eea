"""Log a :class:`~mlflow_mia.audits.ner.scoring.NerAuditResult` to an MLflow run.

What one NER audit writes (``prefix`` is prepended to every name):

- params: ``ner_*`` settings, the resolved model URI and version, the number of
  names per class and a sha256 digest of the sorted keyed name hashes;
- metrics: ``ner/{type}/...`` in one ``log_batch`` (unless ``log_metrics=False``
  because ``mlflow.models.evaluate`` logs the returned metrics itself);
- ``tables/ner_prompts.csv`` (one row per prompt and type with its M-MEM on dev,
  test and all names), ``tables/ner_names.csv`` (keyed name hashes, types, labels and
  split; the best / worst / no-prompt confidences only with ``log_samples=True``, the raw
  ``name`` column only with ``log_texts=True``), ``ner_summary.json`` (best / worst /
  modified prompts, metrics);
- ``plots/ner_prompt_mmem.png``, ``plots/ner_mmem_by_sentence_type.png``,
  ``plots/ner_mmem_by_slot_position.png``, ``plots/ner_roc_best_worst.png``, and
  with a reference tagger ``plots/ner_roc_ratio.png`` (param ``ner.reference_model_id``);
- ``report.md`` (the NER section) and the run tag ``mia.method=ner_prompts``;
- with a release gate (:mod:`mlflow_mia.metrics.ner_gate`): the run tag ``mia.gate``, the param
  ``ner.gate`` and the metrics it decided on (``ner/{type}/{score}/tpr_at_fpr_{alpha}`` with
  ``_upper_binomial`` / ``_lower_binomial``);
- on the audited registry version(s) (``settings.model_version``), through the same code as the
  membership audit (:func:`~mlflow_mia.tracking.registry_tags.tag_model_version`): the headline tags
  ``mia.ner.*`` (:func:`ner_headline_tags`), the sealed gate record ``mia.gate.run.<run_id>`` and its
  chain, the derived ``mia.gate``, ``mia.verdict`` and the version's description.

Names are the sensitive data of this audit: no raw name reaches params, tags,
metrics or artifacts unless ``log_texts=True``. Prompts are logged. No per-name
confidence reaches ``ner_names.csv`` unless ``log_samples=True``: with the best
prompt (logged) and the model, anyone who can read the run recomputes a candidate
name's confidence, finds its row and reads ``is_member`` (issue 21, High 1).
"""

from __future__ import annotations

import time

from mlflow_mia.tracking.log_settings import LogSettings
from mlflow_mia.tracking.artifacts import (active_run_id, check_metric_names, dataset_digest, log_figures, log_files,
                                           to_json, write_text)
from mlflow_mia.audits.ner.report import render_ner_report
from mlflow_mia.metrics.ner_gate import gate_point_metrics, ner_gate_record
from mlflow_mia.plots.ner import plot_best_worst_roc, plot_mmem_by, plot_prompt_mmem_distribution, plot_ratio_roc
from mlflow_mia.tracking.gate_history import pool_digest
from mlflow_mia.tracking.scopes import NER_PREFIX
from mlflow_mia.tracking.version_verdict import record_verdict
from mlflow_mia.tracking.verdict import Verdict, fmt_interval, describe_run, ner_verdict, run_description, verdict_of

__all__ = ["log_ner_audit", "ner_run_verdict"]

#: Columns of ``tables/ner_names.csv`` by default: nothing recomputable from the model beside the label.
NAME_TABLE_COLUMNS = ("name_hash", "entity_type", "is_member", "split")


def ner_params(result) -> dict[str, str]:
    """Run params of an NER audit: settings, name counts and the names digest."""
    names = result.names
    out = {**result.config.to_params(), "ner.model_id": str(result.model_id),
           "ner.entity_types": ",".join(result.entity_types), "ner.names_digest": dataset_digest(names["name_hash"], key=result.hash_key),
           "ner.n_in_sample": str(int((names["is_member"] == 1).sum())),
           "ner.n_out_of_sample": str(int((names["is_member"] == 0).sum())),
           "ner.n_prompts": str(len(result.prompts_table))}
    if getattr(result, "reference_id", None):
        out["ner.reference_model_id"] = str(result.reference_id)
    return out


def _figures(result) -> dict:
    table = result.prompts_table
    rocs = {k: v["rocs"] for k, v in result.summaries.items()}
    ratio = {"plots/ner_roc_ratio.png": plot_ratio_roc(rocs)} if getattr(result, "reference_id", None) else {}
    return {"plots/ner_prompt_mmem.png": plot_prompt_mmem_distribution(table),
            "plots/ner_mmem_by_sentence_type.png": plot_mmem_by(table, "sentence_type"),
            "plots/ner_mmem_by_slot_position.png": plot_mmem_by(table, "slot_position"),
            "plots/ner_roc_best_worst.png": plot_best_worst_roc(rocs), **ratio}


def _ner_brief(result) -> str:
    """One sentence per entity type: the best dev prompt's test M-MEM with its interval (no names)."""
    parts = []
    for kind in result.entity_types:
        key = f"ner/{kind}/best_prompt_mmem"
        m = result.metrics
        parts.append(f"For `{kind}` names, the prompt that best separates in-sample from out-of-sample names on the "
                     f"dev split reaches M-MEM (an AUC; 0.5 = no memorization) "
                     f"{fmt_interval(m.get(key), (m.get(key + '_ci_low'), m.get(key + '_ci_high')))} on the test "
                     "split.")
    return " ".join(parts)


def ner_headline_tags(result, *, run_id: str) -> dict[str, str]:
    """The latest NER audit's numbers as registry tags: ``mia.ner.audit_run_id``, ``mia.ner.entity_types`` and per
    type the best prompt's test M-MEM (``mia.ner.<type>.best_prompt_mmem``) and, with a reference tagger, the ratio
    score's (``mia.ner.<type>.ratio_avg_mmem``); four decimals, ``nan`` when undefined. No name."""
    def fmt(value) -> str:
        return "nan" if value is None or value != value else f"{float(value):.4f}"

    tags = {f"{NER_PREFIX}audit_run_id": run_id, f"{NER_PREFIX}entity_types": ",".join(result.entity_types)}
    for kind in result.entity_types:
        for key in ("best_prompt_mmem", "ratio_avg_mmem"):
            if f"ner/{kind}/{key}" in result.metrics:
                tags[f"{NER_PREFIX}{kind}.{key}"] = fmt(result.metrics[f"ner/{kind}/{key}"])
    return tags


def ner_run_verdict(result, gate=None) -> Verdict:
    """The ``mia.verdict`` of a NER audit: its release gate's (with the gate's caveats) when it has one
    (:meth:`~mlflow_mia.metrics.ner_gate.NerGate.check`), else :func:`~mlflow_mia.tracking.verdict.ner_verdict`."""
    if gate is None:
        return ner_verdict(result.metrics, result.entity_types)
    verdict = verdict_of(gate_status=gate.status)
    return Verdict(verdict.value, gate.with_caveats(verdict.reason))


def _tag_versions(client, result, run_id: str, settings: LogSettings, verdict: Verdict) -> None:
    """Tag the audited registry version(s) through the membership audit's code: headline ``mia.ner.*`` tags, the
    sealed gate record and derived ``mia.gate``, then ``mia.verdict`` and the description."""
    gate, names = settings.gate, result.names
    pool = pool_digest([f"{t}:{h}" for t, h in zip(names["entity_type"], names["name_hash"])], names["is_member"],
                       settings.hash_key)
    record_verdict(client, result, run_id=run_id, settings=settings, verdict=verdict, brief=_ner_brief(result),
                   record=None if gate is None else ner_gate_record(gate, result),
                   headline_tags=ner_headline_tags(result, run_id=run_id), scope=NER_PREFIX, pool=pool)


def log_ner_audit(result, run_id: str | None = None, *, settings: LogSettings, title: str | None = None,
                  client=None) -> dict:
    """Log an NER audit to an MLflow run.

    Parameters
    ----------
    result : NerAuditResult
    run_id : str, optional
        Default: the active run.
    settings : LogSettings, optional
        What is logged and how (:class:`~mlflow_mia.tracking.log_settings.LogSettings`): ``log_texts`` adds
        the raw names to ``tables/ner_names.csv`` (default: hashes only); ``log_samples`` adds each name's
        confidences under the best, the worst and no prompt (``c_best``, ``c_worst``, ``c_no_prompt``;
        default False: recomputable from the model and the logged prompts, they would let a reader of the
        run find a candidate name's label); ``log_metrics`` (False when ``mlflow.models.evaluate`` logs
        them); ``params`` (extra params, e.g. the model's registry version); ``prefix`` (metric, param and
        artifact names); ``gate`` (the NER gate's verdict, :meth:`~mlflow_mia.metrics.ner_gate.NerGate.check`:
        it decides ``mia.verdict``); ``model_version``, ``weights_id``, ``tag_headline``, ``clear_gate_fail``
        (the registry version(s) audited, tagged as the module docstring says).
    title : str, optional
        The report's title.
    client : MlflowClient, optional

    Returns
    -------
    dict of str to mlflow.models.EvaluationArtifact

    Raises
    ------
    ValueError
        No run and no ``run_id``; a metric name MLflow would reject.
    VersionDeletedError
        A registry version in ``model_version`` was deleted during the audit (raised after everything else is
        logged; :mod:`~mlflow_mia.tracking.registry_tags`).
    """
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    log_texts, log_samples, log_metrics = settings.log_texts, settings.log_samples, settings.log_metrics
    params, prefix = settings.params, settings.prefix
    client = client or MlflowClient()
    run_id = active_run_id(run_id, "log_ner_audit")
    gate = settings.gate
    metrics = {f"{prefix}{k}": float(v) for k, v in result.metrics.items()}
    check_metric_names(metrics)
    metrics = metrics if log_metrics else {}
    # the gate's points are not among the evaluator's returned metrics: logged here either way
    metrics.update({f"{prefix}{k}": v for k, v in (gate_point_metrics(gate) if gate is not None else {}).items()})
    check_metric_names(metrics)
    all_params = {**ner_params(result), **(params or {}), "ner.log_texts": str(bool(log_texts)),
                  "ner.log_samples": str(bool(log_samples))}
    tags = {f"{prefix}mia.method": "ner_prompts"}
    if gate is not None:
        all_params["ner.gate"] = ",".join(f"{c['alpha']:g}:{c['max_tpr']:g}" for c in gate.checks)
        tags[f"{prefix}mia.gate"] = gate.status
    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()],
                     params=[Param(f"{prefix}{k}", str(v)[:6000]) for k, v in all_params.items()],
                     tags=[RunTag(k, v) for k, v in tags.items()])
    verdict = ner_run_verdict(result, gate)
    describe_run(client, run_id, verdict=verdict, prefix=prefix, name=settings.run_name,
                 description=run_description(verdict, _ner_brief(result), gate=gate))
    figures = _figures(result)
    logged = [prefix + path for path in figures]
    artifacts = log_figures(client, run_id, figures, prefix=prefix)
    names = result.names.copy()
    if not log_samples:
        names = names[[c for c in NAME_TABLE_COLUMNS if c in names]]
    if log_texts:
        names.insert(1, "name", list(result.raw_names))
    summary = {"model_id": result.model_id, "gate": gate.to_dict() if gate is not None else None,
               "metrics": result.metrics, "log_texts": bool(log_texts),
               "log_samples": bool(log_samples), "warnings": list(getattr(result, "warnings", [])),
               "types": {k: {kk: vv for kk, vv in v.items() if kk != "rocs"} for k, v in result.summaries.items()}}
    files = {"tables/ner_prompts.csv": ("csv", "ner_prompts", lambda p: result.prompts_table.to_csv(p, index=False)),
             "tables/ner_names.csv": ("csv", "ner_names", lambda p: names.to_csv(p, index=False)),
             "ner_summary.json": ("json", "ner_summary", lambda p: write_text(p, to_json(summary)))}
    logged += [prefix + rel for rel in files] + [prefix + "report.md"]
    report = render_ner_report(result, title=title, artifacts=logged, level=1, log_samples=log_samples,
                               verdict=verdict, gate=gate)
    files["report.md"] = ("text", "report", lambda p: write_text(p, report))
    artifacts.update(log_files(client, run_id, files, prefix=prefix))
    if settings.model_version is not None:
        _tag_versions(client, result, run_id, settings, verdict)
    return artifacts
