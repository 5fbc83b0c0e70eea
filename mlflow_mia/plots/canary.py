"""Figures of a canary audit: exposure by repetition count, ROC of included vs excluded canaries, the one-run
bound against the number of guesses. Each function returns a matplotlib Figure (never shown or saved here)."""

from __future__ import annotations

import math

import numpy as np

from mlflow_mia.plots.roc import plot_roc_comparison

__all__ = ["plot_exposure_by_repetition", "plot_canary_roc", "plot_bound_vs_guesses"]


def plot_exposure_by_repetition(repetitions, exposure, included, *, space_bits: float | None = None):
    """Exposure (bits) of secret-format canaries against their repetition count, included vs excluded.

    Parameters
    ----------
    repetitions : array-like of shape (m,)
    exposure : array-like of shape (m,)
        nan for canaries that are not secret-format (dropped).
    included : array-like of shape (m,), bool
    space_bits : float, optional
        ``log2 |R|``, drawn as the ceiling.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> fig = plot_exposure_by_repetition([1, 1, 2, 2], [1.0, 0.5, 6.0, 1.2], [True, False, True, False])
    >>> [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    ['included (mean)', 'excluded (mean)']
    """
    from matplotlib.figure import Figure

    reps = np.asarray(repetitions)
    expo = np.asarray(exposure, dtype=np.float64)
    inc = np.asarray(included, dtype=bool)
    ok = np.isfinite(expo)
    fig = Figure(figsize=(5.5, 4))
    ax = fig.subplots()
    levels = sorted(set(reps[ok].tolist()))
    for flag, label, colour, shift in ((True, "included", "#d55e00", 0.04), (False, "excluded", "#0072b2", -0.04)):
        sel = ok & (inc == flag)
        xs = reps[sel] * (1 + shift)
        ax.scatter(xs, expo[sel], s=8, alpha=0.3, color=colour)
        means = [expo[sel & (reps == r)].mean() if (sel & (reps == r)).any() else math.nan for r in levels]
        ax.plot(np.array(levels) * (1 + shift), means, marker="o", color=colour, label=f"{label} (mean)")
    if space_bits:
        ax.axhline(space_bits, color="grey", linestyle=":", linewidth=1)
    if levels and max(levels) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(r) for r in levels])
    ax.set_xlabel("repetitions of the canary in the training data")
    ax.set_ylabel("exposure (bits)")
    ax.set_title("Exposure of secret-format canaries")
    ax.legend(loc="upper left")
    return fig


def plot_canary_roc(rocs, *, log_scale: bool = False):
    """ROC of included vs excluded canaries, one curve per repetition count (``{"r1": RocResult, ...}``)."""
    return plot_roc_comparison(rocs, log_scale=log_scale, title="Included vs excluded canaries")


def plot_bound_vs_guesses(bounds):
    """The one-run epsilon lower bound against the number of guesses, per repetition count.

    Parameters
    ----------
    bounds : dict of str to OneRunBound
        Each holds the grid of guess counts tried and its bound at each.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5, 4))
    ax = fig.subplots()
    for name, bound in bounds.items():
        line, = ax.plot(bound.grid, bound.epsilons, marker="o", label=f"{name} (m = {bound.m})")
        ax.scatter([bound.n_guesses], [bound.epsilon], s=60, facecolors="none", edgecolors=line.get_color())
    ax.set_xscale("log")
    ax.set_xlabel("number of guesses r (the rest abstain)")
    ax.set_ylabel("epsilon lower bound (unit: one canary)")
    ax.set_title("One-run bound (Steinke et al. 2023) by guesses")
    ax.legend(loc="best")
    return fig
