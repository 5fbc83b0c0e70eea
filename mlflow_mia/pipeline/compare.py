"""``compare``: several registry versions audited against the same reference(s), and the comparison logged.

:func:`audit_versions` runs one nested, logged audit per (version, reference) pair
(:func:`~mlflow_mia.pipeline.membership.audit_and_log`); :func:`log_comparison` gives the
parent run the comparison table (``tables/comparison.csv``), a bar chart and ROC curves by
version (``plots/``), and a Markdown report. The command ``mlflow-mia compare``
(:mod:`mlflow_mia.entrypoints.compare`) parses, resolves the models and prints.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any

import mlflow
import numpy as np
import pandas as pd
from matplotlib import pyplot as plt
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from mlflow_mia.audits.membership.report import render_comparison
from mlflow_mia.metrics.gate import GateResult
from mlflow_mia.models.resolve import resolve_model
from mlflow_mia.naming import fmt_alpha
from mlflow_mia.pipeline.membership import audit_and_log, resolve_generator
from mlflow_mia.plots import plot_comparison_bars, plot_roc_comparison
from mlflow_mia.tracking.audit_log import audit_digests, audit_params
from mlflow_mia.tracking.run_params import digest_tags, new_params
from mlflow_mia.tracking.runs import mlflow_run
from mlflow_mia.tracking.verdict import Verdict, audit_verdict, describe_nested, worst_verdict

__all__ = ["audit_versions", "log_comparison", "compare_gate", "compare_targets"]


def audit_versions(targets, references, parent_run_id: str, pool, population, config, options, *,
                   on_result=None) -> dict[str, Any]:
    """One nested, logged audit per (version, reference) under the active run; the rows, curves and scores to
    compare them.

    Parameters
    ----------
    targets : list of (str, str, tuple of str)
        ``(model name, version, aliases)`` from :func:`compare_targets`.
    references : list
        One entry per audit of each version: a ResolvedModel, a tuple of them (a reference set) or None.
    parent_run_id : str
        Tagged on each nested run as ``mia.compare_parent``.
    pool, population, config, options
        As for :func:`~mlflow_mia.pipeline.membership.audit_and_log`.
    on_result : callable, optional
        ``on_result(label, result, run, gate)`` after each audit (the command prints it).

    Returns
    -------
    dict
        ``table`` (DataFrame: one row per audit, attack and level), ``rocs``, ``scores``, ``gates``,
        ``verdicts`` (``(label, Verdict)``) and the last ``result``.
    """
    rows: list[dict[str, Any]] = []
    rocs: dict[str, dict[str, Any]] = {}
    scores: dict[tuple[str, str], np.ndarray] = {}
    gates: list[GateResult | None] = []
    verdicts: list[tuple[str, Verdict]] = []
    result = None
    generator = resolve_generator(config, trust_remote_code=options.trust_remote_code)  # once, for every audit
    client = mlflow.MlflowClient()
    for name, version, version_aliases in targets:
        target = resolve_model(f"models:/{name}/{version}", role="target",
                               trust_remote_code=options.trust_remote_code)
        for reference in references:
            label = version_label(name, version, version_aliases)
            if len(references) > 1:
                label += f" vs {reference_label(reference)}"
            with mlflow_run(label, nested=True) as child:
                client.set_tag(child.info.run_id, "mia.compare_parent", parent_run_id)
                result, gate, _ = audit_and_log(
                    target, pool, population, config, options, generator=generator,
                    references=(list(reference) if isinstance(reference, tuple)
                                else [] if reference is None else [reference]),
                    run_id=child.info.run_id, extra_params={"target_model_aliases": ",".join(version_aliases)},
                    run_name=label)  # named again with the verdict in front (tracking.verdict.describe_run)
            if on_result is not None:
                on_result(label, result, child, gate)
            gates.append(gate)
            verdicts.append((label, audit_verdict(result, gate)))
            base = {"model": label, "registered_model": name, "version": int(version),
                    "aliases": ",".join(version_aliases),
                    "reference": _uri(reference)}
            rows += _rows(result, base, gate, child.info.run_id)
            for attack, rep in result.attacks.items():
                rocs.setdefault(attack, {})[label] = rep.roc
                scores[(attack, label)] = result.samples[f"score_{attack}"].to_numpy()
        del target
    return {"rows": rows, "rocs": rocs, "scores": scores, "gates": gates, "result": result, "verdicts": verdicts,
            "table": pd.DataFrame(rows)}


def _rows(result, base: dict, gate, run_id: str) -> list[dict]:
    """Rows of the comparison table for one audit: one per attack and level."""
    nan = float("nan")
    rows = []
    for level, reports in (("sample", result.attacks), ("user", result.user_attacks)):
        for attack, rep in reports.items():
            low, high = rep.ci.get("auc", (nan, nan))
            row = {**base, "attack": attack, "level": level, "auc": rep.roc.auc, "auc_ci_low": low,
                   "auc_ci_high": high}
            row.update({f"tpr_at_fpr_{fmt_alpha(a)}": v for a, v in rep.tpr_at_fpr.items()})
            row["gate"] = gate.status if gate is not None else ""
            row["run_id"] = run_id
            rows.append(row)
    return rows


def log_comparison(found, names, aliases, targets, references, alpha, population, *, hash_key) -> None:
    """Log the comparison to the active (parent) run: params, digest tags (``mia.pool.digest``, ...),
    ``tables/comparison.csv``, figures and ``report.md``.

    ``found`` is :func:`audit_versions`' return; ``alpha`` the FPR of the bar chart's TPR column.
    """
    result, table, rocs = found["result"], found["table"], found["rocs"]
    params = {k: v for k, v in audit_params(result, population=population, hash_key=hash_key).items()
              if not k.startswith("target_")}
    params.update({"compared_models": ",".join(names), "compared_aliases": ",".join(aliases) or "all",
                   "compared_versions": ",".join(version_label(n, v, a) for n, v, a in targets)[:6000]})
    if len(references) > 1:
        params["compared_references"] = ",".join(_uri(r) for r in references)[:6000]
    active = mlflow.active_run()
    if active is None:
        raise RuntimeError("log_comparison logs to the active (parent) run: call it inside mlflow_run(...)")
    held = MlflowClient().get_run(active.info.run_id).data.params  # mlflow run's, when under it
    mlflow.log_params(new_params({k: str(v) for k, v in params.items()}, held))
    mlflow.set_tags(digest_tags(audit_digests(result, population=population, hash_key=hash_key)))
    a = fmt_alpha(alpha)
    with _tmp_csv(table) as path:
        mlflow.log_artifact(path, "tables")
    figures = {"plots/comparison.png": plot_comparison_bars(
        table, metric_columns=[("auc", "AUC", 0.5), (f"tpr_at_fpr_{a}", f"TPR at FPR {a}", alpha)])}
    for attack, curves in rocs.items():
        figures[f"plots/roc_{attack}_by_version.png"] = plot_roc_comparison(
            curves, log_scale=True, title=f"{attack}: ROC by model version (log-log)")
    distinct = distinct_curves(rocs, found["scores"], one_target=len(targets) == 1)
    if len(distinct) > 1:
        for log_scale, suffix in ((False, ""), (True, "_log")):
            figures[f"plots/roc_all{suffix}.png"] = plot_roc_comparison(
                distinct, log_scale=log_scale,
                title="All attacks and models: ROC" + (" (log-log)" if log_scale else ""))
    for path, fig in figures.items():
        mlflow.log_figure(fig, path)
        plt.close(fig)
    m = result.metrics
    pool_line = (f"{int(m['n_members'])} members, {int(m['n_non_members'])} non-members; population "
                 f"{int(m['n_population'])} texts")
    uris = [_uri(r) or None for r in references]
    verdict = worst_verdict(found["verdicts"])
    mlflow.log_text(render_comparison(table, alpha=a, references=uris, pool=pool_line, verdict=verdict,
                                      models=names), "report.md")


def compare_gate(found, parent_run_id: str, run_name: str):
    """The comparison's release gate and verdict, recorded on the parent run.

    The worst version decides: ``fail`` when some version's gate failed, else ``inconclusive``
    when some was, else ``pass``; tagged ``mia.gate`` on the parent when any audit had a gate. The
    parent's verdict and description summarise the nested runs
    (:func:`~mlflow_mia.tracking.verdict.describe_nested`).

    Returns
    -------
    (str or None, Verdict)
        The gate's status (None without a gate) and the parent's verdict.
    """
    gates = [g for g in found["gates"] if g is not None]
    statuses = {g.status for g in gates}
    overall = None
    if gates:
        overall = "fail" if "fail" in statuses else "inconclusive" if "inconclusive" in statuses else "pass"
        mlflow.set_tag("mia.gate", overall)
    verdict = describe_nested(mlflow.MlflowClient(), parent_run_id, found["verdicts"], name=run_name,
                              heading="One nested run per audited version:")
    return overall, verdict


@contextlib.contextmanager
def _tmp_csv(table):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "comparison.csv")
        table.to_csv(path, index=False)
        yield path


def compare_targets(names, aliases) -> list[tuple[str, str, tuple[str, ...]]]:
    """``[(model name, version, aliases), ...]`` in name order, then ascending version."""
    client = MlflowClient()
    out = []
    for name in names:
        if aliases:
            found: dict[str, list[str]] = {}
            for alias in aliases:
                try:
                    mv = client.get_model_version_by_alias(name, alias)
                except MlflowException as exc:
                    raise ValueError(f"model {name!r} has no alias {alias!r}: {exc.message}") from None
                found.setdefault(str(mv.version), []).append(alias)
            versions = {v: tuple(a) for v, a in found.items()}
        else:
            mvs = client.search_model_versions(f"name='{name}'")
            if not mvs:
                raise ValueError(f"registered model {name!r} has no versions at {client.tracking_uri}")
            by_version: dict[str, list[str]] = {str(mv.version): [] for mv in mvs}
            # search_model_versions leaves aliases empty on some stores; the registered model has them all.
            for alias, version in (client.get_registered_model(name).aliases or {}).items():
                by_version.setdefault(str(version), []).append(alias)
            versions = {v: tuple(sorted(a)) for v, a in by_version.items()}
        out += [(name, v, versions[v]) for v in sorted(versions, key=int)]
    return out


def _uri(reference) -> str:
    """The reference's URI; a reference set's URIs joined by ``+``; ``""`` for none."""
    if isinstance(reference, tuple):
        return "+".join(r.resolved_uri for r in reference)
    return reference.resolved_uri if reference is not None else ""


def reference_label(reference) -> str:
    """``ref bbc-reference v1 (@champion)``, or the folder / URI of an unregistered reference.

    A reference set (a tuple): ``ref set of k (<first label> + k-1)``.
    """
    if reference is None:
        return "no reference"
    if isinstance(reference, tuple):
        return f"ref set of {len(reference)} ({reference_label(reference[0])[4:]} + {len(reference) - 1})"
    if reference.registered_name:
        alias = reference.requested.rsplit("@", 1)[1] if "@" in reference.requested else None
        return f"ref {reference.registered_name} v{reference.version}" + (f" (@{alias})" if alias else "")
    return f"ref {os.path.basename(str(reference.resolved_uri).rstrip('/'))}"

def distinct_curves(rocs: dict, scores: dict, *, one_target: bool) -> dict:
    """``{legend label: roc}`` over all attacks, one curve per distinct score vector.

    An attack that does not use the reference (loss, or neighbourhood with a fixed
    generator) scores a target alike in every run; it is drawn once, labelled without
    the reference. With one target the labels leave the target out.
    """
    out = {}
    for attack, curves in rocs.items():
        groups: list[tuple[np.ndarray, list[str]]] = []
        for label in curves:
            vector = scores[(attack, label)]
            for seen, labels in groups:
                if np.array_equal(seen, vector, equal_nan=True):
                    labels.append(label)
                    break
            else:
                groups.append((vector, [label]))
        for _, labels in groups:
            target_part, _, reference_part = labels[0].partition(" vs ")
            if one_target:
                who = "" if len(labels) > 1 else reference_part
            else:
                who = target_part if len(labels) > 1 else labels[0]
            out[f"{attack} ({who})" if who else attack] = curves[labels[0]]
    return out

def version_label(name: str, version: str, aliases) -> str:
    return f"{name} v{version}" + (f" (@{', @'.join(aliases)})" if aliases else "")
