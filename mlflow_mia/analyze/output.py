"""What the parent run of ``mlflow-mia analyze`` logs: the findings table, a plot per finding, a summary."""

from __future__ import annotations

import math
import os
import tempfile

__all__ = ["log_findings", "render_findings"]


def _fmt(value, digits: int = 3) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def render_findings(table, findings) -> str:
    """``findings.md``: per finding, the claim, the verdict with its numbers, and the rows.

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`~mlflow_mia.analyze.findings.findings_table`.
    findings : sequence of Finding
    """
    lines = ["# Findings", "", "Each finding of the papers, our numbers next to the paper's, and whether it held.",
             "AUC with its 95 % bootstrap interval; TPR at 1 % FPR read off the pool's ROC; epsilon lower bound at "
             "the population thresholds (95 % confidence).", ""]
    for finding in findings:
        rows = table[table["finding"] == finding.name]
        if rows.empty:
            continue
        first = rows.iloc[0]
        lines += [f"## {finding.name}: {finding.claim}", "",
                  f"Source: {finding.source}. Reproduced: **{first['reproduced']}**: {first['why']}.", "",
                  "| setting | attack | AUC [95 % CI] | TPR@1% FPR | eps lower bound | DP eps | paper | run |",
                  "|---|---|---|---|---|---|---|---|"]
        for _, r in rows.iterrows():
            ci = f" [{_fmt(r['auc_ci_low'])}, {_fmt(r['auc_ci_high'])}]" if _fmt(r["auc_ci_low"]) else ""
            lines.append(f"| {r['setting']} | {r['attack']} | {_fmt(r['auc'])}{ci} | {_fmt(r['tpr_at_fpr_0.01'])} | "
                         f"{_fmt(r['epsilon_lower_bound'], 2)} | {_fmt(r['dp_epsilon'], 2)} | {r['paper']} | "
                         f"{r['run_id'][:8]} |")
        lines.append("")
    return "\n".join(lines)


def log_findings(table, findings, *, run_id: str, client) -> None:
    """Log ``tables/findings.csv``, ``findings.md``, ``plots/findings/<name>.png`` and
    ``findings/<name>/reproduced`` (1 yes, 0 no; absent when not run) to ``run_id``."""
    from mlflow_mia.plots.findings import plot_finding

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "findings.csv")
        table.to_csv(path, index=False)
        client.log_artifact(run_id, path, artifact_path="tables")
        path = os.path.join(tmp, "findings.md")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(render_findings(table, findings))
        client.log_artifact(run_id, path)
    for finding in findings:
        rows = table[table["finding"] == finding.name]
        if rows.empty:
            continue
        fig = plot_finding(rows, title=f"{finding.name}: {finding.source}")
        client.log_figure(run_id, fig, f"plots/findings/{finding.name}.png")
        verdict = rows.iloc[0]["reproduced"]
        if verdict in ("yes", "no"):
            client.log_metric(run_id, f"findings/{finding.name}/reproduced", 1.0 if verdict == "yes" else 0.0)
