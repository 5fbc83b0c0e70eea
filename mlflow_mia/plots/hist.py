"""Histograms of member vs non-member attack scores (paper Fig. 3).

References
----------
.. [1] F. Mireshghallah et al., "Quantifying Privacy Risks of Masked Language
   Models Using Membership Inference Attacks", EMNLP 2022, Fig. 3.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from mlflow_mia.metrics.validation import check_scores

__all__: list[str] = []

_MEMBER_COLOR = "#D55E00"  # Okabe-Ito vermillion
_NON_MEMBER_COLOR = "#0072B2"  # Okabe-Ito blue
_THRESHOLD_COLOR = "#000000"
_THRESHOLD_STYLES = ("--", ":", "-.", (0, (5, 1, 1, 1)))
X_LABEL = "attack score (higher = member)"


def _alpha_label(alpha: float) -> str:
    return f"threshold @ FPR {float(alpha) * 100:g}%"


class ScoreHistogramDisplay:
    """Overlaid density histograms of member and non-member scores.

    Parameters
    ----------
    member_scores : array-like of shape (n_members,), float
        Attack scores of the pool's members (finite, higher = member).
    non_member_scores : array-like of shape (n_non_members,), float
        Attack scores of the pool's non-members.
    thresholds : mapping of float to float, optional
        ``alpha -> threshold`` (e.g. population thresholds); one vertical line
        each, labelled ``"threshold @ FPR 1%"`` for ``alpha = 0.01``.
    name : str, optional
        Attack name, used as the axes title.

    Attributes
    ----------
    member_patches_, non_member_patches_ : list of matplotlib.patches.Patch
        Bars of the two histograms.
    bin_edges_ : ndarray of shape (n_bins + 1,)
        Bin edges shared by both histograms.
    threshold_lines_ : dict of float to matplotlib.lines.Line2D
        The vertical line of each alpha.
    ax_ : matplotlib.axes.Axes
    figure_ : matplotlib.figure.Figure

    Raises
    ------
    ValueError
        If a score array is empty, not 1-D or holds NaN/infinity, or a
        threshold is not finite.

    References
    ----------
    .. [1] Mireshghallah et al., "Quantifying Privacy Risks of Masked Language
       Models Using Membership Inference Attacks", EMNLP 2022, Fig. 3.

    Examples
    --------
    >>> d = ScoreHistogramDisplay.from_scores([2.0, 3.0, 4.0], [0.0, 1.0, 2.5],
    ...                                       thresholds={0.01: 2.5}, bins=5)
    >>> d.threshold_lines_[0.01].get_label()
    'threshold @ FPR 1%'
    >>> d.ax_.get_xlabel()
    'attack score (higher = member)'
    """

    def __init__(self, member_scores, non_member_scores, *, thresholds=None, name=None):
        self.member_scores = check_scores(member_scores, "member_scores")
        self.non_member_scores = check_scores(non_member_scores, "non_member_scores")
        thresholds = {} if thresholds is None else dict(thresholds)
        clean = {}
        for alpha, t in thresholds.items():
            t = float(t)
            if not np.isfinite(t):
                raise ValueError(f"thresholds[{alpha!r}] is not finite: {t!r}")
            clean[float(alpha)] = t
        self.thresholds = clean
        self.name = name

    def plot(self, ax=None, *, bins=50, **kwargs) -> "ScoreHistogramDisplay":
        """Draw both histograms and the threshold lines.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Axes to draw on; a new :class:`~matplotlib.figure.Figure` (not
            registered with pyplot) is made when None.
        bins : int or sequence of float, default 50
            Number of bins, or edges, shared by both histograms.
        **kwargs
            Passed to both ``ax.hist`` calls, over the defaults
            (``density=True``, ``alpha=0.5``, ``histtype="stepfilled"``).

        Returns
        -------
        ScoreHistogramDisplay
            ``self``, with the fitted attributes set.
        """
        if ax is None:
            from matplotlib.figure import Figure

            ax = Figure().add_subplot()
        both = np.concatenate([self.member_scores, self.non_member_scores])
        self.bin_edges_ = np.histogram_bin_edges(both, bins=bins)
        defaults = {"density": True, "alpha": 0.5, "histtype": "stepfilled", "bins": self.bin_edges_}
        member_kwargs = {**defaults, "color": _MEMBER_COLOR, "label": "members", **kwargs}
        non_member_kwargs = {**defaults, "color": _NON_MEMBER_COLOR, "label": "non-members", **kwargs}
        _, _, non_member_patches = ax.hist(self.non_member_scores, **non_member_kwargs)
        _, _, member_patches = ax.hist(self.member_scores, **member_kwargs)
        self.non_member_patches_ = list(non_member_patches)
        self.member_patches_ = list(member_patches)

        self.threshold_lines_ = {}
        for i, (alpha, t) in enumerate(sorted(self.thresholds.items(), reverse=True)):
            self.threshold_lines_[alpha] = ax.axvline(
                t,
                color=_THRESHOLD_COLOR,
                linestyle=_THRESHOLD_STYLES[i % len(_THRESHOLD_STYLES)],
                linewidth=1.2,
                label=_alpha_label(alpha),
            )
        ax.set_xlabel(X_LABEL)
        ax.set_ylabel("density")
        if self.name:
            ax.set_title(self.name)
        ax.legend(loc="best")
        self.ax_ = ax
        self.figure_ = ax.figure
        return self

    @classmethod
    def from_scores(
        cls,
        member_scores,
        non_member_scores,
        *,
        thresholds: Mapping[float, float] | None = None,
        name=None,
        ax=None,
        bins=50,
    ) -> "ScoreHistogramDisplay":
        """Build the display from raw scores and plot it.

        Parameters
        ----------
        member_scores : array-like of shape (n_members,), float
            Scores of the members.
        non_member_scores : array-like of shape (n_non_members,), float
            Scores of the non-members.
        thresholds : mapping of float to float, optional
            ``alpha -> threshold``; one vertical line per entry.
        name : str, optional
            Attack name (axes title).
        ax : matplotlib.axes.Axes, optional
            Axes to draw on (a new figure when None).
        bins : int or sequence of float, default 50
            Bins shared by both histograms.

        Returns
        -------
        ScoreHistogramDisplay

        Raises
        ------
        ValueError
            As the class.
        """
        display = cls(member_scores, non_member_scores, thresholds=thresholds, name=name)
        return display.plot(ax=ax, bins=bins)
