"""``mlflow-mia compare``: audit several registry versions against one or more references.

One nested run per (version, reference) pair, each logged as a single audit;
the parent run gets the comparison table (``tables/comparison.csv``), a bar
chart and ROC curves by version (``plots/``), and a Markdown report.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
import tempfile
import numpy as np
import pandas as pd
from matplotlib import pyplot as plt
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
import mlflow

from mlflow_mia.entrypoints.common import audit_settings, build_demo_for_audit, print_links, print_result
from mlflow_mia.tracking.runs import mlflow_run
from mlflow_mia.options.values import blank
from mlflow_mia.naming import fmt_alpha
from mlflow_mia.audits.membership.report import render_comparison
from mlflow_mia.demo.references import expand_demo_references
from mlflow_mia.models.resolve import resolve_model
from mlflow_mia.pipeline.membership import resolve_generator, audit_and_log
from mlflow_mia.plots import plot_comparison_bars, plot_roc_comparison
from mlflow_mia.tracking.audit_log import audit_params
from mlflow_mia.tracking.verdict import audit_verdict, describe_nested, worst_verdict

__all__ = ["compare", "compare_targets", "distinct_curves", "reference_label", "version_label"]


def compare(args) -> bool:
    """Run ``mlflow-mia compare`` from parsed CLI ``args``; True when no version failed the release gate or
    left it inconclusive.

    Parameters
    ----------
    args : argparse.Namespace
        The ``compare`` options (``models``, ``aliases``, ``data``, ``demo_size``, ``run_name``, ``quiet``, ...).

    Raises
    ------
    ValueError
        ``--data`` without ``--models``, an unknown alias, a model without versions, bad options.
    """
    names = [n.strip() for n in (blank(args.models) or "").split(",") if n.strip()]
    aliases = [a.strip().lstrip("@") for a in (blank(args.aliases) or "").split(",") if a.strip()]
    data, demo = blank(args.data), None
    if data is None:  # the demo's data (and target model, unless given)
        demo = build_demo_for_audit(args.demo_size, progress=not args.no_progress, experiment=args.experiment)
        names = names or [demo.target_uri[len("models:/"):].split("@")[0].split("/")[0]]
        data = str(demo.pool_path)
    elif not names:
        raise ValueError("--data was given without --models: name the registered model(s) to compare")
    config, options, pool, population = audit_settings(args, data=data, demo=demo)
    targets = compare_targets(names, aliases)
    trust = options.trust_remote_code
    if demo is not None:  # demo:oracle, demo:base, demo:shadows, ... (mlflow_mia.demo.references)

        options = replace(options, reference_model=expand_demo_references(options.references, demo.size,
                                                                          progress=not args.quiet) or None)
    # One entry per audit of each version: a model, a tuple (a reference set, --reference-mode set) or None.
    references = [tuple(refs) if len(refs) > 1 else refs[0] if refs else None
                  for refs in ([resolve_model(uri, role="reference", trust_remote_code=trust) for uri in uris]
                               for uris in options.reference_sets)]
    generator = resolve_generator(config, trust_remote_code=trust)
    alpha = 0.01 if 0.01 in config.metrics.fprs else min(config.metrics.fprs)
    with mlflow_run(blank(args.run_name) or f"compare {', '.join(names)}") as parent:
        found = _audit_every_pair(targets, references, generator, parent, pool, population, config, options)
        _log_parent(found, names, aliases, targets, references, alpha, population, hash_key=options.hash_key)
        gates = [g for g in found["gates"] if g is not None]
        failed = [g for g in gates if g.status == "fail"]
        inconclusive = [g for g in gates if g.status == "inconclusive"]
        overall = "fail" if failed else "inconclusive" if inconclusive else "pass"  # the worst version decides
        if gates:
            mlflow.set_tag("mia.gate", overall)
        run_name = blank(args.run_name) or f"compare {', '.join(names)}"
        verdict = describe_nested(mlflow.MlflowClient(), parent.info.run_id, found["verdicts"], name=run_name,
                                  heading="One nested run per audited version:")
    a = fmt_alpha(alpha)
    print(f"comparison logged to run {parent.info.run_id}: tables/comparison.csv, plots/comparison.png")
    table = found["table"]
    sample = table[table["level"] == "sample"][["model", "attack", "auc", f"tpr_at_fpr_{a}"]]
    print(sample.to_string(index=False, float_format="{:.3f}".format, na_rep="n/a"))
    if gates:
        print(f"mia.gate={overall}: {len(failed)} of {len(gates)} version(s) over budget, {len(inconclusive)} "
              "inconclusive (the audit shows neither that the budget holds nor that it is exceeded)")
    print(verdict.line())
    experiment = mlflow.MlflowClient().get_experiment(parent.info.experiment_id).name
    print_links(parent.info.run_id, parent.info.experiment_id, experiment, run_name)
    return not failed and not inconclusive


def _audit_every_pair(targets, references, generator, parent, pool, population, config, options) -> dict:
    """One nested, logged audit per (version, reference); the rows, curves and scores to compare them."""
    found = {"rows": [], "rocs": {}, "scores": {}, "gates": [], "result": None, "verdicts": []}
    client = mlflow.MlflowClient()
    for name, version, version_aliases in targets:
        target = resolve_model(f"models:/{name}/{version}", role="target",
                               trust_remote_code=options.trust_remote_code)
        for reference in references:
            label = version_label(name, version, version_aliases)
            if len(references) > 1:
                label += f" vs {reference_label(reference)}"
            with mlflow_run(label, nested=True) as child:
                client.set_tag(child.info.run_id, "mia.compare_parent", parent.info.run_id)
                result, gate, _ = audit_and_log(
                    target, pool, population, config, options, generator=generator,
                    references=(list(reference) if isinstance(reference, tuple)
                                else [] if reference is None else [reference]),
                    run_id=child.info.run_id, extra_params={"target_model_aliases": ",".join(version_aliases)},
                    run_name=label)  # named again with the verdict in front (tracking.verdict.describe_run)
            print(f"{label}:")
            print_result(result, child, gate)
            found["gates"].append(gate)
            found["verdicts"].append((label, audit_verdict(result, gate)))
            base = {"model": label, "registered_model": name, "version": int(version),
                    "aliases": ",".join(version_aliases),
                    "reference": _uri(reference)}
            found["rows"] += _rows(result, base, gate, child.info.run_id)
            for attack, rep in result.attacks.items():
                found["rocs"].setdefault(attack, {})[label] = rep.roc
                found["scores"][(attack, label)] = result.samples[f"score_{attack}"].to_numpy()
            found["result"] = result
        del target
    found["table"] = pd.DataFrame(found["rows"])
    return found


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


def _log_parent(found, names, aliases, targets, references, alpha, population, *, hash_key) -> None:
    """Params, ``tables/comparison.csv``, figures and ``report.md`` of the parent run."""
    result, table, rocs = found["result"], found["table"], found["rocs"]
    params = {k: v for k, v in audit_params(result, population=population, hash_key=hash_key).items()
              if not k.startswith("target_")}
    params.update({"compared_models": ",".join(names), "compared_aliases": ",".join(aliases) or "all",
                   "compared_versions": ",".join(version_label(n, v, a) for n, v, a in targets)[:6000]})
    if len(references) > 1:
        params["compared_references"] = ",".join(_uri(r) for r in references)[:6000]
    mlflow.log_params(params)
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
