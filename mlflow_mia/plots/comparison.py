"""Bar chart comparing attack metrics across model versions (``mlflow-mia compare``)."""

from __future__ import annotations
import numpy as np
from mlflow_mia.plots.roc import OKABE_ITO

__all__: list[str] = []


def plot_comparison_bars(table, *, metric_columns):
    """Grouped bars of a model comparison: one panel per metric, attacks on the x axis, one bar per model.

    Parameters
    ----------
    table : pandas.DataFrame
        One row per (model, attack, level) with columns ``model``, ``attack``,
        ``level`` (``"sample"`` rows are drawn) and each metric column.
    metric_columns : sequence of (str, str, float)
        ``(column, panel title, chance level)``; the chance level is drawn as a dashed line.

    Returns
    -------
    matplotlib.figure.Figure
        Not attached to pyplot; the caller closes or logs it.
    """
    from matplotlib.figure import Figure

    sample = table[table["level"] == "sample"]
    attacks = list(dict.fromkeys(sample["attack"]))
    models = list(dict.fromkeys(sample["model"]))
    fig = Figure(figsize=(5.2 * len(metric_columns), 4.2), layout="constrained")
    axes = fig.subplots(1, len(metric_columns), squeeze=False)[0]
    width = 0.8 / max(len(models), 1)
    x = np.arange(len(attacks))
    for ax, (column, title, chance) in zip(axes, metric_columns):
        for i, model in enumerate(models):
            rows = sample[sample["model"] == model].set_index("attack")
            values = [float(rows.loc[a, column]) if a in rows.index else np.nan for a in attacks]
            bars = ax.bar(x + (i - (len(models) - 1) / 2) * width, values, width, label=model,
                          color=OKABE_ITO[i % len(OKABE_ITO)])
            ax.bar_label(bars, fmt="%.2f", fontsize=8)
        ax.axhline(chance, color="0.4", linestyle="--", linewidth=1, label="random guessing")
        ax.set_xticks(x, attacks)
        ax.set_ylim(0, 1.08)
        ax.set_title(title)
        ax.set_xlabel("attack")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 4), fontsize=9, frameon=False)
    fig.suptitle("Membership leakage by model version (sample level; higher = more leakage)")
    return fig
