"""Figures of the NER prompt memorization audit (Xia et al. 2025, Figs. 3-4).

Each function takes the prompt table of :func:`mlflow_mia.audits.ner.run.ner_audit`
(``entity_type``, ``sentence_type``, ``slot_position``, ``mmem_*`` columns) or its
ROC scores, and returns a new matplotlib figure that the caller saves or logs.
"""

from __future__ import annotations

import numpy as np
from mlflow_mia.plots.roc import RocDisplay

__all__ = ["plot_prompt_mmem_distribution", "plot_mmem_by", "plot_best_worst_roc", "plot_ratio_roc"]

_OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")


def _figure(n_panels: int, width: float = 4.0):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(width * n_panels, 4.0), 3.6), layout="constrained")
    axes = fig.subplots(1, n_panels, squeeze=False)[0]
    return fig, axes


def _check(table, column: str):
    if table is None or len(table) == 0:
        raise ValueError("the prompt table is empty")
    if column not in table.columns:
        raise ValueError(f"the prompt table has no column {column!r}; columns: {list(table.columns)}")


def plot_prompt_mmem_distribution(table, *, column: str = "mmem_test", bins: int = 20):
    """Histogram of the prompts' M-MEM, one panel per entity type, with the 0.5 chance line.

    Parameters
    ----------
    table : pandas.DataFrame
        One row per prompt and type.
    column : str
        ``mmem_dev``, ``mmem_test`` or ``mmem_all``.

    Returns
    -------
    matplotlib.figure.Figure
    """
    _check(table, column)
    types = list(dict.fromkeys(table["entity_type"]))
    fig, axes = _figure(len(types), width=3.2)
    for ax, kind, colour in zip(axes, types, _OKABE_ITO):
        x = table.loc[table["entity_type"] == kind, column].to_numpy(dtype=float)
        ax.hist(x, bins=bins, color=colour, alpha=0.85)
        ax.axvline(0.5, color="grey", linestyle="--", linewidth=1, label="chance")
        ax.axvline(float(np.mean(x)), color="black", linewidth=1, label=f"mean {np.mean(x):.3f}")
        ax.set_title(f"{kind} ({len(x)} prompts)")
        ax.set_xlabel(f"M-MEM ({column.replace('mmem_', '')})")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("prompts")
    return fig


def plot_mmem_by(table, by: str, *, column: str = "mmem_test"):
    """Box plots of the prompts' M-MEM grouped by ``by`` (e.g. ``sentence_type``, ``slot_position``), per type.

    Returns
    -------
    matplotlib.figure.Figure
    """
    _check(table, column)
    _check(table, by)
    types = list(dict.fromkeys(table["entity_type"]))
    fig, axes = _figure(len(types), width=3.6)
    for ax, kind in zip(axes, types):
        sub = table[table["entity_type"] == kind]
        groups = sorted(set(sub[by]), key=str)
        ax.boxplot([sub.loc[sub[by] == g, column].to_numpy(dtype=float) for g in groups],
                   tick_labels=[f"{g}\n(n={int((sub[by] == g).sum())})" for g in groups])
        ax.axhline(0.5, color="grey", linestyle="--", linewidth=1)
        ax.set_title(kind)
        ax.tick_params(axis="x", labelsize=7)
    axes[0].set_ylabel(f"M-MEM ({column.replace('mmem_', '')})")
    fig.suptitle(f"M-MEM by {by.replace('_', ' ')}")
    return fig


def plot_best_worst_roc(rocs: dict, *, labels=("best", "worst")):
    """ROC on test of the best and worst prompt (chosen on dev), one panel per type.

    Parameters
    ----------
    rocs : dict of str to dict
        ``type -> {"best": (y_true, scores), "worst": (y_true, scores)}``.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if not rocs:
        raise ValueError("no ROC scores to plot")
    fig, axes = _figure(len(rocs), width=3.4)
    for ax, (kind, pair) in zip(axes, rocs.items()):
        for i, label in enumerate(labels):
            y, s = pair[label]
            RocDisplay.from_predictions(y, s, name=f"{label} prompt", ax=ax)
        ax.set_title(kind)
    return fig


def plot_ratio_roc(rocs: dict):
    """ROC on test of the target alone (AVG-C) and of the ratio score against the reference tagger, per type.

    Parameters
    ----------
    rocs : dict of str to dict
        ``type -> {"avg_c": (y_true, scores), "ratio": (y_true, scores)}``: the mean
        confidence over prompts of the target, and the mean over prompts of
        ``log C(e; target) - log C(e; reference)``, on the test names.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        ``rocs`` is empty or a type lacks ``"avg_c"`` or ``"ratio"``.
    """
    if not rocs:
        raise ValueError("no ROC scores to plot")
    missing = [k for k, pair in rocs.items() if not {"avg_c", "ratio"} <= set(pair)]
    if missing:
        raise ValueError(f"types {missing} have no ratio scores: audit with a reference tagger")
    fig, axes = _figure(len(rocs), width=3.4)
    for ax, (kind, pair) in zip(axes, rocs.items()):
        RocDisplay.from_predictions(*pair["avg_c"], name="target alone (AVG-C)", ax=ax)
        RocDisplay.from_predictions(*pair["ratio"], name="ratio to reference", ax=ax)
        ax.set_title(kind)
    return fig
