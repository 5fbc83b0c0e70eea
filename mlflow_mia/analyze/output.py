"""What the parent run of ``mlflow-mia analyze`` logs: the findings tables, a plot per finding, a summary.

:func:`findings_table` and :func:`differences_table` read the metrics of finished runs
(never recompute them) and apply the rule of :mod:`mlflow_mia.analyze.findings`, so a
resumed suite and a fresh one give the same tables; :func:`render_findings` writes them
as ``findings.md`` and :func:`log_findings` logs it all to the parent run.
"""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np

from mlflow_mia.analyze.findings import FINDINGS, NAN, TPR, evaluate_finding, finding_values
from mlflow_mia.analyze.paired import paired_difference, seed_summary

__all__ = ["differences_table", "findings_table", "log_findings", "render_findings"]


def _epsilon_check(v: dict) -> str:
    """How a bound compares with its run's accountant epsilon: vacuous, informative, or "" (nothing to compare)."""
    ceiling, dp = seed_summary(v["epsilon_lower_bound_max_certifiable"])[0], seed_summary(v["dp_epsilon"])[0]
    if math.isnan(dp) or math.isnan(ceiling):
        return ""
    return "vacuous" if ceiling < dp else "informative"


def _runs_text(v: dict) -> str:
    """Each seed's AUC with its run's 95 % article-level interval: ``"0.886 [0.871, 0.900]; ..."``."""
    return "; ".join(f"{a:.3f} [{lo:.3f}, {hi:.3f}]" for a, lo, hi in zip(v["auc"], v["auc_ci_low"], v["auc_ci_high"])
                     if not math.isnan(a))


def _row(finding, s, attack, v, verdict, why, guard, run_ids) -> dict:
    mean = paired_difference(np.zeros_like(v["auc"]), v["auc"], b_ci=np.c_[v["auc_ci_low"], v["auc_ci_high"]])
    auc, auc_sd, n = seed_summary(v["auc"])
    tpr, tpr_sd, _ = seed_summary(v[TPR])
    return {"finding": finding.name, "setting": s.label, "attack": attack, "n_seeds": n, "auc": auc, "auc_sd": auc_sd,
            "auc_ci_low": mean.low, "auc_ci_high": mean.high, "auc_runs": _runs_text(v), TPR: tpr, "tpr_sd": tpr_sd,
            "null_auc": float(v["null_auc"][0]), f"null_{TPR}": float(v[f"null_{TPR}"][0]),
            "heldout_loss": seed_summary(v["heldout_loss"])[0],
            "null_heldout_loss": float(v["null_heldout_loss"][0]),
            "epsilon_lower_bound": float(np.nanmax(np.r_[v["epsilon_lower_bound"], -np.inf]))
            if not np.isnan(v["epsilon_lower_bound"]).all() else NAN,
            "epsilon_lower_bound_max_certifiable": seed_summary(v["epsilon_lower_bound_max_certifiable"])[0],
            "dp_epsilon": seed_summary(v["dp_epsilon"])[0], "epsilon_check": _epsilon_check(v),
            "paper": s.paper_figure(attack), "source": finding.source, "reproduced": verdict, "why": why,
            "guard": guard, "experiment": s.experiment, "run_id": run_ids}


def findings_table(runs: dict, size, findings=FINDINGS):
    """One row per finding, setting and attack, from the experiments' logged metrics.

    Parameters
    ----------
    runs : dict of str to (str, dict)
        Run name (:func:`~mlflow_mia.analyze.plan.run_name`: experiment and seed, or a
        null experiment) -> (run id, ``run.data.metrics``) of its finished run; a missing
        run leaves its values NaN, a setting with none gives ``reproduced="not run"``.
    size : AnalysisSize
    findings : sequence of Finding

    Returns
    -------
    pandas.DataFrame
        Columns ``finding``, ``setting``, ``attack``, ``n_seeds``; ``auc`` (mean over
        seeds), ``auc_sd`` (sample standard deviation over seeds), ``auc_ci_low`` /
        ``auc_ci_high`` (95 % interval of the mean: seed spread and the runs'
        article-level bootstrap, :func:`~mlflow_mia.analyze.paired.paired_difference`),
        ``auc_runs`` (each seed's AUC with its run's interval); ``tpr_at_fpr_0.01`` and
        ``tpr_sd``; ``null_auc`` and ``null_tpr_at_fpr_0.01`` (the floor: the setting's
        base model audited as the target); ``heldout_loss`` and ``null_heldout_loss``
        (nats per masked token on held-out in-domain text); ``epsilon_lower_bound`` (the
        largest over seeds), ``epsilon_lower_bound_max_certifiable``, ``dp_epsilon``,
        ``epsilon_check`` (``"vacuous"``, ``"informative"`` or ``""``), ``paper``,
        ``source``, ``reproduced`` (reproduced / not reproduced / not resolved / not
        run), ``why`` (the paired differences the verdict rests on), ``guard`` (the
        finding's guard note: held-out losses, epsilon bounds; "" for none), ``experiment``,
        ``run_id`` (the seeds' run ids, comma-separated).
    """
    import pandas as pd

    rows = []
    for finding in findings:
        values, ids = finding_values(finding, runs, size)
        verdict, why, _, note = evaluate_finding(finding, finding.comparisons(size), values)
        for s in finding.settings(size):
            for attack in finding.attacks:
                rows.append(_row(finding, s, attack, values[(s.label, attack)], verdict, why, note, ids[s.label]))
    return pd.DataFrame(rows)


def differences_table(runs: dict, size, findings=FINDINGS):
    """One row per comparison of each finding: the paired difference, its interval and verdict.

    Parameters
    ----------
    runs, size, findings
        As for :func:`findings_table`.

    Returns
    -------
    pandas.DataFrame
        Columns ``finding``, ``a``, ``b``, ``attack``, ``metric``, ``expect``,
        ``margin``, ``decides``, ``mean`` (mean over seeds of ``b - a``), ``low``,
        ``high`` (95 %), ``n_seeds``, ``seed_sd``, ``pool_se``, ``verdict``; empty for a
        finding not run.
    """
    import pandas as pd

    rows = []
    for finding in findings:
        values, _ = finding_values(finding, runs, size)
        for c, d, v in evaluate_finding(finding, finding.comparisons(size), values)[2]:
            rows.append({"finding": finding.name, "a": c.a, "b": c.b, "attack": c.attack, "metric": c.metric,
                         "expect": c.expect, "margin": c.margin, "decides": c.decides, "mean": d.mean, "low": d.low,
                         "high": d.high, "n_seeds": d.n_seeds, "seed_sd": d.seed_sd, "pool_se": d.pool_se,
                         "verdict": v})
    return pd.DataFrame(rows, columns=["finding", "a", "b", "attack", "metric", "expect", "margin", "decides", "mean",
                                       "low", "high", "n_seeds", "seed_sd", "pool_se", "verdict"])


def _fmt(value, digits: int = 3) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _pm(mean, sd, digits: int = 3) -> str:
    return f"{_fmt(mean, digits)} ± {_fmt(sd, digits)}" if _fmt(sd) else _fmt(mean, digits)


def _heldout(row) -> str:
    """The target's held-out loss, and its null's in parentheses: ``"6.558 (6.612)"``."""
    null = _fmt(row.get("null_heldout_loss"))
    return f"{_fmt(row['heldout_loss'])} ({null})" if null else _fmt(row["heldout_loss"])


def _difference_lines(diffs) -> list[str]:
    lines = ["| comparison (b - a) | metric | mean over seeds [95 % CI] | seeds | seed sd | pool se | verdict |",
             "|---|---|---|---|---|---|---|"]
    for _, d in diffs.iterrows():
        verdict = d["verdict"] if d["decides"] else f"({d['verdict']}; not deciding)"
        lines.append(f"| {d['a']} -> {d['b']} | {d['attack']} {d['metric']} | {d['mean']:+.3f} "
                     f"[{d['low']:+.3f}, {d['high']:+.3f}] | {d['n_seeds']} | {_fmt(d['seed_sd'])} | "
                     f"{_fmt(d['pool_se'])} | {verdict} |")
    return lines + [""]


def _summary_lines(table, findings, differences) -> list[str]:
    """The verdicts first: one row per finding with the paired differences it was decided on."""
    lines = ["| finding | source | verdict | decided on (paired difference b - a, mean over seeds [95 % CI]) |",
             "|---|---|---|---|"]
    for finding in findings:
        rows = table[table["finding"] == finding.name]
        if rows.empty:
            continue
        deciding = []
        if differences is not None:
            for _, d in differences[(differences["finding"] == finding.name) & differences["decides"]].iterrows():
                deciding.append(f"{d['attack']} {d['metric']} {d['a']} -> {d['b']}: {d['mean']:+.3f} "
                                f"[{d['low']:+.3f}, {d['high']:+.3f}]")
        guard = rows.iloc[0].get("guard")
        if isinstance(guard, str) and guard:  # NaN when read back from a CSV
            deciding.append(guard)
        lines.append(f"| {finding.name} | {finding.source} | **{rows.iloc[0]['reproduced']}** | "
                     f"{'; '.join(deciding) or rows.iloc[0]['why']} |")
    return lines + [""]


def render_findings(table, findings, differences=None) -> str:
    """``findings.md``: per finding, the claim, the verdict with its paired differences, and the rows.

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`findings_table`.
    findings : sequence of Finding
    differences : pandas.DataFrame, optional
        :func:`differences_table`; a table per finding when given.
    """
    lines = ["# Findings", "", "Each finding of the papers, our numbers next to the paper's, and the verdict its "
             "paired differences give (reproduced / not reproduced / not resolved; the rule is in "
             "mlflow_mia/analyze/findings.py).",
             "AUC: mean ± sd over seeds, [95 % interval of the mean: seed spread and article-level bootstrap]; "
             "runs: each seed's AUC with its run's article-level interval. Null: the setting's base model audited "
             "as the target (AUC / TPR at 1 % FPR), the floor. Held-out loss: nats per masked token on the "
             "population sentences (in-domain, in no training set); in parentheses, the null's (its base model's).",
             ""]
    if not table.empty and table["n_seeds"].max() <= 1:
        lines += ["**One seed per setting** (the quick size): the intervals hold the article-level bootstrap only, "
                  "not the seed spread, so these verdicts back no claim.", ""]
    lines += _summary_lines(table, findings, differences)
    for finding in findings:
        rows = table[table["finding"] == finding.name]
        if rows.empty:
            continue
        first = rows.iloc[0]
        lines += [f"## {finding.name}: {finding.claim}", "",
                  f"Source: {finding.source}. Verdict: **{first['reproduced']}**: {first['why']}.", "",
                  "| setting | attack | AUC | runs | TPR@1% FPR | null AUC / TPR | held-out loss | eps lower bound | "
                  "DP eps | paper | run |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for _, r in rows.iterrows():
            ci = f" [{_fmt(r['auc_ci_low'])}, {_fmt(r['auc_ci_high'])}]" if _fmt(r["auc_ci_low"]) else ""
            null = f"{_fmt(r['null_auc'])} / {_fmt(r['null_tpr_at_fpr_0.01'])}" if _fmt(r["null_auc"]) else ""
            lines.append(f"| {r['setting']} | {r['attack']} | {_pm(r['auc'], r['auc_sd'])}{ci} | {r['auc_runs']} | "
                         f"{_pm(r['tpr_at_fpr_0.01'], r['tpr_sd'])} | {null} | {_heldout(r)} | "
                         f"{_fmt(r['epsilon_lower_bound'], 2)} | {_fmt(r['dp_epsilon'], 2)} | {r['paper']} | "
                         f"{','.join(i[:8] for i in str(r['run_id']).split(',') if i)} |")
        lines.append("")
        if differences is not None and not differences[differences["finding"] == finding.name].empty:
            lines += _difference_lines(differences[differences["finding"] == finding.name])
    return "\n".join(lines)


def log_findings(table, findings, *, run_id: str, client, differences=None) -> None:
    """Log ``tables/findings.csv``, ``tables/findings_differences.csv``, ``findings.md``,
    ``plots/findings/<name>.png`` and ``findings/<name>/reproduced`` (1 reproduced, 0 not
    reproduced; absent when not resolved or not run) to ``run_id``."""
    from mlflow_mia.plots.findings import plot_finding

    with tempfile.TemporaryDirectory() as tmp:
        for name, frame in (("findings.csv", table), ("findings_differences.csv", differences)):
            if frame is not None:
                path = os.path.join(tmp, name)
                frame.to_csv(path, index=False)
                client.log_artifact(run_id, path, artifact_path="tables")
        path = os.path.join(tmp, "findings.md")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(render_findings(table, findings, differences))
        client.log_artifact(run_id, path)
    for finding in findings:
        rows = table[table["finding"] == finding.name]
        if rows.empty:
            continue
        fig = plot_finding(rows, title=f"{finding.name}: {finding.source}")
        client.log_figure(run_id, fig, f"plots/findings/{finding.name}.png")
        verdict = rows.iloc[0]["reproduced"]
        if verdict in ("reproduced", "not reproduced"):
            client.log_metric(run_id, f"findings/{finding.name}/reproduced", 1.0 if verdict == "reproduced" else 0.0)
