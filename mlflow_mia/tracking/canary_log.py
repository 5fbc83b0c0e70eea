"""Log a :class:`~mlflow_mia.audits.canary.CanaryAuditResult` to an MLflow run.

What one canary audit writes (``prefix`` is prepended to every name):

- params: the settings (``canary.*``), counts (canaries, included, copies, per
  repetition count), the set's keyed digest, the hash key's check value, where the set's
  secrets came from (``secrets``, or ``seed``: never the seed itself) and, when stated,
  where it was planted (``canary.planted_in``);
- metrics: ``canary/...`` (see :func:`~mlflow_mia.audits.canary.canary_audit`) in one batch;
- ``tables/canary_summary.csv`` (one row per repetition count), ``canary_audit.json``
  (metrics, bounds with their guess grids and units, exposure settings, the gate);
  ``tables/canaries.csv`` only with ``log_samples=True`` (canary id, keyed hash,
  template, repetitions, inclusion bit, score, exposure, the rank-based exposure and
  whether it holds the sample's cap; the text only with ``log_texts=True``);
- ``plots/canary_exposure.png``, ``plots/canary_roc.png``, ``plots/canary_bound_vs_guesses.png``;
- ``report.md``; run tags ``mia.method=canaries`` and, with a gate, ``mia.gate``;
- on the target's registry version(s): ``mia.canary.*`` headline tags and the gate verdict
  under the same ``mia.gate`` tags as the membership gate (:mod:`.registry_tags`), with a
  record (:meth:`~mlflow_mia.metrics.canary_gate.CanaryGateResult.record`) naming the
  canary set by its keyed digest, the budgets, confidence, delta, score, candidates and
  where the set was planted: a canary fail is cleared only by an audit of the same set
  with budgets as tight (:meth:`~mlflow_mia.metrics.gate_record.GateRecord.shortfalls`).

The canaries are the auditor's secret: no canary text, secret or inclusion bit reaches
MLflow unless ``log_samples`` / ``log_texts`` asks for it.
"""

from __future__ import annotations

import logging
import math
import time
import pandas as pd

from mlflow_mia.tracking.log_settings import LogSettings
from mlflow_mia.tracking.artifacts import (active_run_id, check_metric_names, log_figures, log_files, to_json,
                                           write_text)
from mlflow_mia.hashing import require_hash_key
from mlflow_mia.metrics.canary_gate import NULL_EXPOSURE, gate_points  # gate_points: re-exported, its home is the gate
from mlflow_mia.metrics.gate_record import RANDOM_KEY
from mlflow_mia.naming import fmt_number, fmt_alpha
from mlflow_mia.plots.canary import plot_bound_vs_guesses, plot_canary_roc, plot_exposure_by_repetition
from mlflow_mia.tracking.scopes import CANARY_PREFIX
from mlflow_mia.tracking.version_verdict import record_verdict
from mlflow_mia.tracking.verdict import fmt_interval, canary_verdict, describe_run, run_description

__all__ = ["log_canary_audit", "headline_repetitions", "auc_text", "exposure_text"]

log = logging.getLogger(__name__)


def canary_set_id(canaries, hash_key) -> str:
    """``<digest>@<key check>``: the set's keyed digest and the check of the key it was made under (``random``
    for a key that was not kept), as a gate record names the set."""
    return f"{canaries.digest(hash_key)}@{RANDOM_KEY if hash_key.is_random else hash_key.check}"


def canary_score(result) -> str:
    """How the canaries were scored, as a gate record names it: ``<attack>/<signal>`` (``loss/pll``), the
    energy's masks (``energy-10x0.15``), and ``/ref=<weights digest>`` with a reference."""
    cfg = result.config
    signal = cfg.signal if cfg.signal != "energy" else f"energy-{cfg.num_masks}x{cfg.mask_rate:g}"
    out = f"{result.attack}/{signal}"
    weights = result.models.get("reference", {}).get("weights")
    return f"{out}/ref={weights}" if weights else out


def gate_record(gate, result, canaries, hash_key, *, planted_in: str | None = None):
    """The registry record of a canary gate (:meth:`~mlflow_mia.metrics.canary_gate.CanaryGateResult.record`)."""
    return gate.record(n_included=int(canaries.included.sum()), n_excluded=int((~canaries.included).sum()),
                       canary_set=canary_set_id(canaries, hash_key), planted_in=planted_in,
                       delta=result.config.delta, score=canary_score(result), candidates=result.config.n_candidates)


def canary_params(result, canaries, hash_key, *, planted_in: str | None = None) -> dict[str, str]:
    """Run params: settings, counts, the keyed digest of the set, the hash key's check, where the set's secrets came
    from (never a seed), where it was planted (when stated), the models."""
    out = {**result.config.to_params(), "canary.attack": result.attack, "canary.set_digest": canaries.digest(hash_key),
           "canary.hash_key_check": "random (not kept)" if hash_key.is_random else hash_key.check,
           "canary.templates": ",".join(t.id for t in canaries.templates),
           "canary.set_drawn_from": "secrets" if canaries.seed is None else "seed"}
    if planted_in:
        out["canary.planted_in"] = planted_in
    out.update({f"canary.{k.replace('/', '.')}": str(v) for k, v in result.counts.items()})
    for role, record in result.models.items():
        out[f"canary.{role}_model"] = str(record.get("uri") or record.get("identity"))
    return out


def canary_headline_tags(result, *, run_id: str) -> dict[str, str]:
    """``mia.canary.*`` registry tags: AUC, record-level bound and the largest mean exposure."""
    def fmt(x):
        return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{float(x):.4f}"

    exposures = [v for k, v in result.metrics.items() if k.endswith("/exposure_mean") and not k.startswith(
        "canary/exposure")]
    return {"mia.canary.audit_run_id": run_id, "mia.canary.auc": fmt(result.metrics.get("canary/auc")),
            "mia.canary.epsilon_lower_bound": fmt(result.metrics.get("canary/epsilon_lower_bound")),
            "mia.canary.max_mean_exposure": fmt(max(exposures) if exposures else None)}


def headline_repetitions(result) -> list[int]:
    """The repetition counts a summary shows: 1 and the largest, among those with an AUC."""
    reps = sorted(int(g[1:]) for g in set(result.table["group"]) - {"all"} if f"canary/{g}/auc" in result.metrics)
    return list(dict.fromkeys(r for r in (1, max(reps, default=1)) if r in reps))


def auc_text(metrics: dict, r: int) -> str:
    """``0.563 [0.511, 0.612]``: the included-vs-excluded AUC of the canaries repeated r times, with its interval."""
    key = f"canary/r{r}/auc"
    return fmt_interval(metrics[key], (metrics.get(f"{key}_ci_low"), metrics.get(f"{key}_ci_high")))


def rank_exposure_text(metrics: dict, prefix: str, digits: int = 2) -> str:
    """The rank-based mean exposure under ``prefix`` (``canary/r4``): ``>= 9.97`` when it holds capped canaries
    (a lower bound), ``6.63`` when not, ``n/a`` when missing."""
    value = metrics.get(f"{prefix}/exposure_rank_mean")
    text = fmt_number(value, digits)
    return f">= {text}" if text != "n/a" and metrics.get(f"{prefix}/exposure_rank_n_capped", 0) > 0 else text


def exposure_text(metrics: dict, prefix: str, digits: int = 2) -> str:
    """The headline mean exposure under ``prefix`` in bits, with the rank-based one beside it when the headline
    is the skew-normal extrapolation: ``12.40 bits (rank-based >= 9.97)``, ``3.16 bits``, or ``n/a``."""
    head = fmt_number(metrics.get(f"{prefix}/exposure_mean"), digits)
    if head == "n/a":
        return head
    if metrics.get(f"{prefix}/exposure_n_extrapolated", 0) > 0:
        return f"{head} bits (rank-based {rank_exposure_text(metrics, prefix, digits)})"
    return f"{head} bits"


def canary_brief(result) -> str:
    """The report's "In brief" paragraph (also the run's description): the record-level bound with its unit, the
    mean exposure at r = 1 and at the largest r, and the included-vs-excluded AUC with its interval at both.

    No canary text, secret or inclusion bit: only aggregates over canaries.
    """
    m, cfg = result.metrics, result.config
    level = f"{cfg.confidence:.0%}"
    shown = headline_repetitions(result)
    eps = m.get("canary/epsilon_lower_bound")
    parts = [f"Record-level epsilon lower bound {fmt_number(eps)} (unit: one canary inserted once = one record; "
             f"delta {cfg.delta:g}, {level} confidence; largest these canaries can show: "
             f"{fmt_number(m.get('canary/epsilon_max'))}); a lower bound, not a privacy guarantee."
             if "canary/epsilon_lower_bound" in m else "No canary was inserted once: no record-level bound."]
    exposures = [f"{exposure_text(m, f'canary/r{r}')} at r = {r} (excluded "
                 f"{fmt_number(m.get(f'canary/r{r}/exposure_excluded_mean'), 2)})"
                 for r in shown if f"canary/r{r}/exposure_mean" in m]
    if exposures:
        sampled = any(m.get(f"canary/r{r}/exposure_n_extrapolated", 0) > 0 for r in shown)
        parts.append(f"Mean exposure of the included secret-format canaries: {' and '.join(exposures)}; a canary "
                     f"the model never saw averages {NULL_EXPOSURE:.2f} bits."
                     + (" With sampled candidates the exposure is the skew-normal extrapolation (Carlini et al. "
                        "2019, Sec. 4.3); the rank-based value beside it is capped at what the sample resolves, "
                        "log2(candidates + 1), and marked >= where that cap holds." if sampled else ""))
    aucs = [f"{auc_text(m, r)} at r = {r}" for r in shown]
    if aucs:
        parts.append(f"Included vs excluded canaries ({result.attack} score): AUC {' and '.join(aucs)} ({level} "
                     "intervals, bootstrap over canaries; 0.5 = no separation).")
    return " ".join(parts)


def _figures(result, canaries) -> dict:
    spaces = [r.space_size for r in result.exposures.values()]
    figs = {}
    if result.exposures:
        figs["plots/canary_exposure.png"] = plot_exposure_by_repetition(
            canaries.repetitions, result.exposure, canaries.included,
            space_bits=math.log2(min(spaces)) if spaces else None)
    rocs = {k: v for k, v in result.rocs.items() if k != "all"}
    if rocs:
        figs["plots/canary_roc.png"] = plot_canary_roc(rocs)
    if result.bounds:
        figs["plots/canary_bound_vs_guesses.png"] = plot_bound_vs_guesses(result.bounds)
    return figs


def _samples_table(result, canaries, hash_key, log_texts: bool):
    table = pd.DataFrame({"canary_id": canaries.ids, "text_hmac": canaries.keyed_hashes(hash_key),
                          "template": canaries.template_ids, "repetitions": canaries.repetitions,
                          "included": canaries.included.astype(int), "score": result.scores,
                          "exposure": result.exposure, "exposure_rank": result.exposure_rank,
                          "exposure_rank_capped": result.exposure_capped.astype(int)})
    if log_texts:
        table["text"] = list(canaries.texts)
    return table


def _exposure_note(result) -> list[str]:
    """How each template's exposure was measured: exact ranks, or sampled candidates with the extrapolation."""
    lines = []
    for tid, res in result.exposures.items():
        if res.exact:
            lines.append(f"- template `{tid}`: all {res.space_size:,} secrets scored; exact ranks (ties count "
                         f"against the secret), at most {res.resolution:.2f} bits.")
        else:
            lines.append(f"- template `{tid}`: {res.n_candidates:,} of {res.space_size:,} secrets sampled; the "
                         "exposure is the skew-normal extrapolation (Carlini et al. 2019, Sec. 4.3); the rank-based "
                         f"estimate resolves at most log2({res.n_candidates:,} + 1) = {res.resolution:.2f} bits "
                         f"(canaries at that cap, shown >=: {int(res.capped.sum())} of {res.capped.size}).")
    return (["", "Exposure (bits):", ""] + lines) if lines else []


def _report(result, gate, canaries, verdict, record=None) -> str:
    fprs = result.config.fprs
    target = (getattr(result, "models", None) or {}).get("target", {}).get("uri") or "the target model"
    lines = [f"# Canary audit of {target} ({result.attack})", "", verdict.markdown(), "", "## In brief", "",
             canary_brief(result), "", "## Results", "",
             f"{len(canaries)} canaries, {int(canaries.included.sum())} included ({canaries.n_copies} records "
             "inserted); inclusion bits drawn independently with probability "
             f"{canaries.p_include:g}. Intervals resample canaries (the unit) within each inclusion class.", "",
             "| repetitions | canaries | included | AUC | " + "".join(f"TPR at FPR {a:g} | " for a in fprs)
             + "mean exposure (included) | rank-based (included) | excluded | epsilon lower bound "
             "(unit: one canary = r records) | guesses r / correct v |",
             "|---|---|---|---|" + "---|" * len(fprs) + "---|---|---|---|---|"]
    for _, row in result.table.iterrows():
        g = lambda k: row.get(k, math.nan)  # noqa: E731
        guesses = (f"{int(g('epsilon_n_guesses'))} / {int(g('epsilon_n_correct'))}"
                   if not math.isnan(g("epsilon_n_guesses")) else "")
        prefix = "canary" if row["group"] == "all" else f"canary/{row['group']}"
        tprs = "".join(f"{fmt_number(g(f'tpr_at_fpr_{fmt_alpha(a)}'))} | " for a in fprs)
        lines.append(f"| {row['group']} | {row['n_canaries']} | {row['n_included']} | {fmt_number(g('auc'))} | "
                     f"{tprs}{fmt_number(g('exposure_mean'), 2)} | {rank_exposure_text(result.metrics, prefix)} | "
                     f"{fmt_number(g('exposure_excluded_mean'), 2)} | {fmt_number(g('epsilon_lower_bound'))} | "
                     f"{guesses} |")
    if result.unresolved:
        lines += ["", "Not resolved, shown as n/a: " + "; ".join(f"{k} ({why})" for k, why in
                                                                 result.unresolved.items()) + "."]
    lines += _exposure_note(result)
    eps = result.record_level_epsilon
    lines += ["", f"Record-level epsilon lower bound (canaries inserted once, delta {result.config.delta:g}, "
              f"{result.config.confidence:.0%} confidence, Steinke et al. 2023): {fmt_number(eps)}. A lower bound: "
              "a small value is not a privacy guarantee."]
    if gate is not None:
        lines += ["", "## Release gate", "", gate.verdict(), "", gate.message()]
        if record is not None:
            digest, _, check = record.canary_sets[0].partition("@")
            key = "a random key, not kept" if check == "random" else f"the hash key with check {check}"
            lines += ["", f"Canary set: keyed digest {digest} (under {key}); planted in: "
                      f"{', '.join(record.planted_in) or 'not stated (--planted-in)'}. A fail on this version is "
                      "cleared only by an audit of this set with budgets as tight (`mia.gate.requires`)."]
    if result.warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in result.warnings]
    return "\n".join(lines) + "\n"


def log_canary_audit(result, run_id: str | None = None, *, settings: LogSettings, client=None) -> dict:
    """Log a canary audit to an MLflow run (see the module docstring); returns the artifacts by name.

    The run also gets the verdict (``mia.verdict`` and ``mia.verdict.reason``,
    :func:`~mlflow_mia.tracking.verdict.canary_verdict`), ``run_name`` when given, and,
    unless it has one of the user's, the description: the verdict and the report's "In
    brief" paragraph (:func:`canary_brief`). Registry versions tagged here (headline tags,
    or a gate that did not pass) get ``mia.verdict`` and that description with a link to the run.

    Parameters
    ----------
    result : CanaryAuditResult
    run_id : str, optional
        Default: the active run.
    settings : LogSettings, optional
        What is logged and how (:class:`~mlflow_mia.tracking.log_settings.LogSettings`: the audited
        ``canaries`` (its digest and counts are logged, never its texts unless ``log_texts``), the gate
        verdict, ``log_texts``, ``log_samples``, the prefix, the registry versions, ``planted_in``, ...).
    client : MlflowClient, optional

    Raises
    ------
    ValueError
        No ``settings.canaries``; no active run and no ``run_id``; ``log_texts`` without ``log_samples``;
        a metric name MLflow rejects.
    VersionDeletedError
        A registry version was deleted during the audit (after everything else is logged).
    """
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    log_texts, log_samples, log_metrics, prefix = (settings.log_texts, settings.log_samples, settings.log_metrics,
                                                   settings.prefix)
    gate, params, planted_in, run_name = settings.gate, settings.params, settings.planted_in, settings.run_name
    hash_key, canaries = settings.hash_key, settings.canaries
    if canaries is None:
        raise ValueError("log_canary_audit needs the audited canary set: pass LogSettings(canaries=...)")
    if log_texts and not log_samples:
        raise ValueError("log_texts writes canary texts into the per-canary table, which only log_samples=True "
                         "writes; set both")
    hash_key = require_hash_key(hash_key, "log_canary_audit")
    client = client or MlflowClient()
    run_id = active_run_id(run_id, "log_canary_audit")
    metrics = {f"{prefix}{k}": float(v) for k, v in result.metrics.items() if v is not None and not math.isnan(v)}
    check_metric_names(metrics)
    all_params = {**canary_params(result, canaries, hash_key, planted_in=planted_in), **(params or {}),
                  "canary.log_texts": str(bool(log_texts)), "canary.log_samples": str(bool(log_samples))}
    tags = {f"{prefix}mia.method": "canaries"}
    if gate is not None:
        tags[f"{prefix}mia.gate"] = gate.status
    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()] if log_metrics else [],
                     params=[Param(f"{prefix}{k}", str(v)[:6000]) for k, v in all_params.items()],
                     tags=[RunTag(k, v) for k, v in tags.items()])
    verdict, brief = canary_verdict(result.metrics, gate, confidence=result.config.confidence), canary_brief(result)
    describe_run(client, run_id, verdict=verdict, name=run_name, prefix=prefix,
                 description=run_description(verdict, brief, gate=gate))
    artifacts = log_figures(client, run_id, _figures(result, canaries), prefix=prefix)
    record = None if gate is None else gate_record(gate, result, canaries, hash_key, planted_in=planted_in)
    summary = {"verdict": {"value": verdict.value, "reason": verdict.reason}, "attack": result.attack,
               "metrics": result.metrics, "counts": result.counts,
               "units": {"bounds": "one canary (a canary repeated r times is a group of r records); canary/"
                                   "epsilon_lower_bound is the record-level bound of the canaries inserted once",
                         "intervals": "percentile bootstrap over canaries, stratified by inclusion bit",
                         "exposure": "bits; rank among the candidates of the canary's format, ties against the "
                                     "secret; exposure_mean is the skew-normal extrapolation where candidates were "
                                     "sampled, exposure_rank_mean the rank estimate capped at log2(n_candidates + 1) "
                                     "(a lower bound where exposure_rank_n_capped > 0)",
                         "unresolved": "a TPR at FPR alpha needs ceil(1 / alpha) excluded canaries; else nan"},
               "bounds": {k: b.to_dict() for k, b in result.bounds.items()},
               "exposure": {k: {"space_size": r.space_size, "n_candidates": r.n_candidates, "exact": r.exact,
                                "resolution_bits": r.resolution, "n_capped": int(r.capped.sum()),
                                "headline": "exact rank" if r.exact else "skew-normal extrapolation"}
                            for k, r in result.exposures.items()},
               "unresolved": dict(result.unresolved),
               "gate": gate.to_dict() if gate is not None else None,
               "gate_record": record.to_tag() if record is not None else None, "warnings": result.warnings}
    files = {"tables/canary_summary.csv": ("csv", "canary_summary",
                                           lambda p: result.table.to_csv(p, index=False)),
             "canary_audit.json": ("json", "canary_audit", lambda p: write_text(p, to_json(summary))),
             "report.md": ("text", "report", lambda p: write_text(p, _report(result, gate, canaries, verdict,
                                                                              record)))}
    if log_samples:
        table = _samples_table(result, canaries, hash_key, log_texts)
        files["tables/canaries.csv"] = ("csv", "canaries", lambda p: table.to_csv(p, index=False))
    artifacts.update(log_files(client, run_id, files, prefix=prefix))
    record_verdict(client, result, run_id=run_id, settings=settings, verdict=verdict, brief=brief, record=record,
                   headline_tags=canary_headline_tags(result, run_id=run_id), scope=CANARY_PREFIX)
    return artifacts
