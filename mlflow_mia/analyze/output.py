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
import pandas as pd

from mlflow_mia.analyze.findings import FINDINGS, NAN, TPR, evaluate_finding, finding_values
from mlflow_mia.analyze.paired import paired_difference, seed_summary
from mlflow_mia.plots.findings import plot_finding

__all__ = ["differences_table", "findings_table"]


def _epsilon_check(v: dict) -> str:
    """Whether the article-level bound can test its run's accountant, per article: vacuous, informative or "".

    Vacuous when the accountant's epsilon converted to articles (group privacy) has a delta
    >= 1 or lies above the largest bound the audit's article counts could certify at that
    delta; "" when there is nothing to compare (no accountant, group size or article-level bound).
    """
    g_eps, g_delta = seed_summary(v["dp_group_epsilon"])[0], float(np.nanmax(np.r_[v["dp_group_delta"], -np.inf]))
    if math.isnan(g_eps):
        return ""
    if not g_delta < 1:
        return "vacuous"
    ceiling = float(np.nanmax(np.r_[v["group_ceiling_at_group_delta"], -np.inf]))
    if not math.isfinite(ceiling):
        return ""
    return "vacuous" if ceiling < g_eps else "informative"


def _largest(values) -> float:
    """The largest value over seeds (NaN when none is logged)."""
    values = np.asarray(values, dtype=float)
    return NAN if np.isnan(values).all() else float(np.nanmax(values))


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
            "null_auc_ci_low": float(v["null_auc_ci_low"][0]), "null_auc_ci_high": float(v["null_auc_ci_high"][0]),
            "null_auc_permutation_p": float(v["null_auc_permutation_p"][0]),
            "epsilon_lower_bound": _largest(v["epsilon_lower_bound"]),
            "epsilon_lower_bound_max_certifiable": seed_summary(v["epsilon_lower_bound_max_certifiable"])[0],
            "group_epsilon_lower_bound": _largest(v["group_epsilon_lower_bound"]),
            "group_epsilon_lower_bound_max_certifiable":
                seed_summary(v["group_epsilon_lower_bound_max_certifiable"])[0],
            "dp_epsilon": seed_summary(v["dp_epsilon"])[0], "dp_max_group_size": _largest(v["dp_max_group_size"]),
            "dp_group_epsilon": seed_summary(v["dp_group_epsilon"])[0], "dp_group_delta": _largest(v["dp_group_delta"]),
            "epsilon_check": _epsilon_check(v),
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
        base model audited as the target), ``null_auc_ci_low`` / ``null_auc_ci_high``
        (the null run's 95 % article-level interval) and ``null_auc_permutation_p`` (its
        article-label permutation p-value, two-sided: is the floor's distance from 0.5
        more than chance?); ``heldout_loss`` and ``null_heldout_loss`` (nats per masked
        token on held-out in-domain text); ``epsilon_lower_bound`` (sentence trials, the
        largest over seeds: descriptive, not a DP check),
        ``epsilon_lower_bound_max_certifiable``, ``group_epsilon_lower_bound`` and
        ``group_epsilon_lower_bound_max_certifiable`` (one trial per article, the unit
        whose membership was randomised; full-pool settings only), ``dp_epsilon`` (the
        accountant's, per sentence), ``dp_max_group_size`` (k: sentences of the largest
        training article), ``dp_group_epsilon`` and ``dp_group_delta`` (the guarantee
        per article by group privacy), ``epsilon_check`` (``"vacuous"``,
        ``"informative"`` or ``""``: can the article-level bound contradict the
        guarantee per article?), ``paper``,
        ``source``, ``reproduced`` (reproduced / not reproduced / not resolved / not
        run), ``why`` (the paired differences the verdict rests on), ``guard`` (the
        finding's check and guard notes: held-out losses, the DP check; "" for none), ``experiment``,
        ``run_id`` (the seeds' run ids, comma-separated).
    """
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


def _null(row) -> str:
    """The null's AUC [its interval] p (permutation p-value) / its TPR: ``"0.460 [0.430, 0.490] p 0.080 / 0.012"``."""
    if not _fmt(row.get("null_auc")):
        return ""
    ci = (f" [{_fmt(row['null_auc_ci_low'])}, {_fmt(row['null_auc_ci_high'])}]"
          if _fmt(row.get("null_auc_ci_low")) else "")
    p = f" p {_fmt(row['null_auc_permutation_p'])}" if _fmt(row.get("null_auc_permutation_p")) else ""
    return f"{_fmt(row['null_auc'])}{ci}{p} / {_fmt(row.get('null_tpr_at_fpr_0.01'))}"


def _bounds(row) -> str:
    """Sentence-trial bound; article-level bound [ceiling]: ``"0.00; 0.00 [3.11]"``."""
    text = _fmt(row.get("epsilon_lower_bound"), 2)
    group = _fmt(row.get("group_epsilon_lower_bound"), 2)
    if group:
        ceiling = _fmt(row.get("group_epsilon_lower_bound_max_certifiable"), 2)
        text += f"; {group}" + (f" [{ceiling}]" if ceiling else "")
    return text


def _dp_eps(row) -> str:
    """The accountant's epsilon per sentence; per article (k, delta): ``"1.00; 251.00 (k 251, delta >= 1)"``."""
    text = _fmt(row.get("dp_epsilon"), 2)
    group = _fmt(row.get("dp_group_epsilon"), 2)
    if text and group:
        delta = row["dp_group_delta"]
        delta = ">= 1" if not delta < 1 else f"{delta:.2g}"
        text += f"; {group} (k {row['dp_max_group_size']:.0f}, delta {delta})"
        if row.get("epsilon_check") == "vacuous":
            text += ", vacuous"
    return text


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
    """``findings.md``: the verdict line (how many findings reproduced, the others by verdict), then per
    finding the claim, the verdict with its paired differences, and the rows.

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`findings_table`.
    findings : sequence of Finding
    differences : pandas.DataFrame, optional
        :func:`differences_table`; a table per finding when given.
    """
    verdicts = table.drop_duplicates("finding").groupby("reproduced", sort=False)["finding"].apply(list).to_dict()
    others = "; ".join(f"{k}: {', '.join(v)}" for k, v in verdicts.items() if k != "reproduced")
    lines = ["# Findings of the BBC News demo target and its variants", "",
             f"**Verdict: {len(verdicts.get('reproduced', []))} of {table['finding'].nunique()} findings "
             f"reproduced** ({others or 'every one'}).", "", "Each finding of the papers, our numbers next to the paper's, and the verdict its "
             "paired differences give (reproduced / not reproduced / not resolved; the rule is in "
             "mlflow_mia/analyze/findings.py).",
             "AUC: mean ± sd over seeds, [95 % interval of the mean: seed spread and article-level bootstrap]; "
             "runs: each seed's AUC with its run's article-level interval. Null: the setting's base model audited "
             "as the target, the floor: AUC [its run's 95 % article-level interval] p (article-label permutation "
             "p-value, two-sided: how often shuffling the member labels of whole articles puts the AUC as far from "
             "0.5) / TPR at 1 % FPR. Held-out loss: nats per masked token on the "
             "population sentences (in-domain, in no training set); in parentheses, the null's (its base model's).",
             "Eps bound: the empirical epsilon lower bound (95 %, largest over seeds) from sentence trials, which is "
             "descriptive only (membership was randomised per article, so sentence trials are not independent), "
             "then from one trial per article with [the largest value the article counts could certify]. DP eps: "
             "the accountant's per sentence, then per article by group privacy (k eps, k e^((k-1) eps) delta; "
             "k the most sentences of one training article): the DP check compares the article-level bound with "
             "this (mlflow_mia/analyze/findings.py).",
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
                  "| setting | attack | AUC | runs | TPR@1% FPR | null AUC [CI] p / TPR | held-out loss | "
                  "eps bound: sentences; articles [ceiling] | DP eps: per sentence; per article | paper | run |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for _, r in rows.iterrows():
            ci = f" [{_fmt(r['auc_ci_low'])}, {_fmt(r['auc_ci_high'])}]" if _fmt(r["auc_ci_low"]) else ""
            lines.append(f"| {r['setting']} | {r['attack']} | {_pm(r['auc'], r['auc_sd'])}{ci} | {r['auc_runs']} | "
                         f"{_pm(r['tpr_at_fpr_0.01'], r['tpr_sd'])} | {_null(r)} | {_heldout(r)} | "
                         f"{_bounds(r)} | {_dp_eps(r)} | {r['paper']} | "
                         f"{','.join(i[:8] for i in str(r['run_id']).split(',') if i)} |")
        lines.append("")
        if differences is not None and not differences[differences["finding"] == finding.name].empty:
            lines += _difference_lines(differences[differences["finding"] == finding.name])
    return "\n".join(lines)


def log_findings(table, findings, *, run_id: str, client, differences=None) -> None:
    """Log ``tables/findings.csv``, ``tables/findings_differences.csv``, ``findings.md``,
    ``plots/findings/<name>.png`` and ``findings/<name>/reproduced`` (1 reproduced, 0 not
    reproduced; absent when not resolved or not run) to ``run_id``."""
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
