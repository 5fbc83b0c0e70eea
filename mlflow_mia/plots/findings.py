"""One figure per finding of ``mlflow-mia analyze``: our AUCs (with CIs) and TPRs next to the paper's."""

from __future__ import annotations

import math
import re
import numpy as np
from mlflow_mia.plots.roc import OKABE_ITO

__all__ = ["plot_finding"]

_PAPER_AUC = re.compile(r"AUC ([0-9.]+)")


def _paper_auc(text) -> float:
    match = _PAPER_AUC.search(str(text or ""))
    return float(match.group(1)) if match else math.nan


def _per_article_panel(ax, x, first) -> None:
    """The accountant's epsilon per article (group privacy) as black ticks; off-scale ones written at the top."""
    eps = first["dp_group_epsilon"].to_numpy(float)
    ceiling = first["group_epsilon_lower_bound_max_certifiable"].to_numpy(float)
    top = 1.25 * np.nanmax(np.r_[ceiling, first["group_epsilon_lower_bound"].to_numpy(float), 1.0])
    shown = np.where(eps <= top, eps, np.nan)
    ax.scatter(x, shown, marker="_", s=600, color="black", label="accountant's epsilon per article")
    for xi, e, d in zip(x, eps, first["dp_group_delta"].to_numpy(float)):
        if np.isfinite(e) and (e > top or not d < 1):
            note = f"{e:.0f} per article" + (", delta >= 1" if not d < 1 else "")
            ax.annotate(note, (xi, top), ha="center", va="top", fontsize=7, rotation=90)
    ax.set(ylim=(0, top), ylabel="epsilon",
           title="article-level bound vs DP epsilon per article")


def plot_finding(rows, *, title: str):
    """AUC (mean over seeds; error bars: 95 % CI of the mean; hollow diamonds: the paper's AUC; black
    ticks: the null target's value, the floor) and TPR at 1 % FPR by setting and attack.

    Parameters
    ----------
    rows : pandas.DataFrame
        The finding's rows of :func:`mlflow_mia.analyze.output.findings_table` (columns
        ``setting``, ``attack``, ``auc``, ``auc_ci_low``, ``auc_ci_high``,
        ``tpr_at_fpr_0.01``, ``paper``, and optionally ``null_auc`` and
        ``null_tpr_at_fpr_0.01`` (drawn as the floor); with ``dp_epsilon`` values a third panel shows the
        empirical epsilon lower bound against the accountant's epsilon: with ``dp_group_epsilon`` the
        article-level bound (``group_epsilon_lower_bound``, grey tick: its ceiling) against the epsilon per
        article (written above the panel when it is off the scale), else the bound in ``epsilon_lower_bound``
        (e.g. the canaries' record-level one) against ``dp_epsilon``).
    title : str

    Returns
    -------
    matplotlib.figure.Figure
        Not attached to pyplot; the caller logs or closes it.
    """
    from matplotlib.figure import Figure

    settings = list(dict.fromkeys(rows["setting"]))
    attacks = list(dict.fromkeys(rows["attack"]))
    dp = rows["dp_epsilon"].notna().any()
    per_article = dp and "dp_group_epsilon" in rows and rows["dp_group_epsilon"].notna().any()
    bound_column = "group_epsilon_lower_bound" if per_article else "epsilon_lower_bound"
    fig = Figure(figsize=(4.6 * (3 if dp else 2), 4.0), layout="constrained")
    axes = fig.subplots(1, 3 if dp else 2, squeeze=False)[0]
    x = np.arange(len(settings))
    width = 0.8 / max(len(attacks), 1)
    for i, attack in enumerate(attacks):
        sub = rows[rows["attack"] == attack].set_index("setting").reindex(settings)
        offset = x + (i - (len(attacks) - 1) / 2) * width
        auc = sub["auc"].to_numpy(float)
        err = np.vstack([auc - sub["auc_ci_low"].to_numpy(float), sub["auc_ci_high"].to_numpy(float) - auc])
        color = OKABE_ITO[i % len(OKABE_ITO)]
        axes[0].bar(offset, auc, width, yerr=np.nan_to_num(err), capsize=3, color=color, label=attack)
        paper = np.array([_paper_auc(p) for p in sub["paper"]])
        if np.isfinite(paper).any():
            axes[0].scatter(offset, paper, marker="D", facecolors="none", edgecolors="black", zorder=3,
                            label="paper" if i == 0 else None)
        axes[1].bar(offset, sub["tpr_at_fpr_0.01"].to_numpy(float), width, color=color)
        for ax, column in ((axes[0], "null_auc"), (axes[1], "null_tpr_at_fpr_0.01")):
            if column in sub and sub[column].notna().any():
                ax.scatter(offset, sub[column].to_numpy(float), marker="_", s=300, color="black", zorder=4,
                           label="null target" if (i == 0 and ax is axes[0]) else None)
        if dp:
            axes[2].bar(offset, sub[bound_column].to_numpy(float), width, color=color)
            if per_article:
                axes[2].scatter(offset, sub["group_epsilon_lower_bound_max_certifiable"].to_numpy(float),
                                marker="_", s=200, color="0.5", zorder=3,
                                label="ceiling (largest certifiable)" if i == 0 else None)
    axes[0].axhline(0.5, color="0.4", linestyle="--", linewidth=1)
    axes[0].set(ylim=(0, 1.05), ylabel="AUC", title="AUC, mean over seeds (95 % CI)")
    axes[1].set(ylabel="TPR", title="TPR at 1 % FPR")
    if dp:
        first = rows.drop_duplicates("setting").set_index("setting").reindex(settings)
        if per_article:
            _per_article_panel(axes[2], x, first)
        else:
            eps = first["dp_epsilon"].to_numpy(float)
            axes[2].scatter(x, eps, marker="_", s=600, color="black", label="accountant's epsilon")
            axes[2].set(ylabel="epsilon", title="empirical lower bound vs DP epsilon")
        axes[2].legend(fontsize=8)
    for ax in axes:
        ax.set_xticks(x, settings)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(title)
    return fig
