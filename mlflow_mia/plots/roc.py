"""ROC curve figures, linear and log-log (low-FPR region).

Displays follow scikit-learn's pattern: ``__init__`` stores precomputed
arrays, ``plot`` draws them on a given axes (or a new, unregistered
:class:`matplotlib.figure.Figure`) and returns ``self``. Nothing here touches
pyplot state: no ``plt.figure``, ``plt.show``, ``savefig`` or ``rcParams``.

References
----------
.. [1] N. Carlini et al., "Membership Inference Attacks From First Principles",
   IEEE S&P 2022 (ROC curves on log-log axes).
.. [2] M. Okabe and K. Ito, "Color Universal Design (CUD)", 2008 (palette).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from mlflow_mia.metrics.roc import roc as _roc

__all__: list[str] = []

#: Okabe-Ito colourblind-safe palette, in the order used for successive curves.
OKABE_ITO = (
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#009E73",  # bluish green
    "#E69F00",  # orange
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#F0E442",  # yellow
    "#000000",  # black
)
_CHANCE_COLOR = "#7f7f7f"
_ROC_GID = "mlflow_mia_roc"
_CHANCE_GID = "mlflow_mia_chance"
FPR_LABEL = "False positive rate"
TPR_LABEL = "True positive rate"


def _new_axes():
    from matplotlib.figure import Figure

    fig = Figure(layout="constrained")
    return fig.add_subplot()


def _smallest_positive(x: np.ndarray) -> float:
    pos = x[np.isfinite(x) & (x > 0)]
    return float(pos.min()) if pos.size else float("nan")


def _log_lower_limit(ax) -> float:
    """Lower limit of log axes: about 1 / n_non_members (the first FPR step).

    Taken over every ROC curve on ``ax``, so curves drawn later on the same
    axes do not cut off earlier ones.
    """
    values = []
    for line in ax.get_lines():
        if line.get_gid() == _ROC_GID:
            for data in (line.get_xdata(), line.get_ydata()):
                v = _smallest_positive(np.asarray(data, dtype=np.float64))
                if np.isfinite(v):
                    values.append(v)
    return min(values + [0.1]) if values else 1e-3


def _refresh_legend(ax) -> None:
    """Legend of the labelled lines, ROC curves first and the chance line last."""
    handles = [h for h in ax.get_lines() if not h.get_label().startswith("_")]
    handles.sort(key=lambda h: h.get_gid() == _CHANCE_GID)
    if len(handles) > 4 or max(len(h.get_label()) for h in handles) > 40:
        # many or long labels would hide the curves: put the legend under the axes
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize="small",
                  frameon=False)
    else:
        ax.legend(handles=handles, loc="lower right")


class RocDisplay:
    """ROC curve visualisation of one attack.

    Parameters
    ----------
    fpr : ndarray of shape (n_thresholds,)
        Increasing false-positive rates (e.g. ``RocResult.fpr``).
    tpr : ndarray of shape (n_thresholds,)
        True-positive rates, same indexing.
    roc_auc : float
        Area under the curve, shown in the legend (may be nan).
    name : str or None
        Attack name, shown in the legend as ``name (AUC = 0.xxx)``.

    Attributes
    ----------
    line_ : matplotlib.lines.Line2D
        The ROC curve.
    chance_level_ : matplotlib.lines.Line2D or None
        The chance line ``y = x`` (None if not drawn by this call).
    ax_ : matplotlib.axes.Axes
        Axes holding the curve.
    figure_ : matplotlib.figure.Figure
        Figure holding the axes.

    References
    ----------
    .. [1] Carlini et al., "Membership Inference Attacks From First
       Principles", IEEE S&P 2022, Sec. IV (log-scale ROC).

    Examples
    --------
    >>> d = RocDisplay.from_predictions([1, 1, 0, 0], [0.9, 0.5, 0.5, 0.1], name="loss")
    >>> d.line_.get_label()
    'loss (AUC = 0.875)'
    >>> d.line_.get_xdata().tolist()
    [0.0, 0.0, 0.5, 1.0]
    """

    def __init__(self, fpr, tpr, roc_auc, name=None):
        self.fpr = np.asarray(fpr, dtype=np.float64)
        self.tpr = np.asarray(tpr, dtype=np.float64)
        if self.fpr.shape != self.tpr.shape or self.fpr.ndim != 1:
            raise ValueError(
                f"fpr and tpr must be 1-D of equal shape, got {self.fpr.shape} and {self.tpr.shape}"
            )
        self.roc_auc = float(roc_auc) if roc_auc is not None else float("nan")
        self.name = name

    def _label(self) -> str:
        auc = f"AUC = {self.roc_auc:.3f}"
        return f"{self.name} ({auc})" if self.name else auc

    def plot(self, ax=None, *, log_scale=False, plot_chance_level=True, **kwargs) -> "RocDisplay":
        """Draw the curve.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Axes to draw on; a new :class:`~matplotlib.figure.Figure` (not
            registered with pyplot) is made when None.
        log_scale : bool, default False
            Log-log axes for the low-FPR region: x from about
            ``1 / n_non_members`` (the first FPR step) to 1. Points with
            FPR or TPR equal to 0 lie off these axes.
        plot_chance_level : bool, default True
            Draw the chance line ``y = x`` (once per axes).
        **kwargs
            Passed to ``ax.plot`` for the curve, over the defaults
            (``label``, ``color``, ``linewidth``, ``drawstyle``).

        Returns
        -------
        RocDisplay
            ``self``, with ``line_``, ``chance_level_``, ``ax_`` and
            ``figure_`` set.
        """
        if ax is None:
            ax = _new_axes()
        n_existing = sum(1 for line in ax.get_lines() if line.get_gid() == _ROC_GID)
        defaults = {
            "label": self._label(),
            "color": OKABE_ITO[n_existing % len(OKABE_ITO)],
            "linewidth": 1.8,
        }
        line_kwargs = {**defaults, **kwargs}
        (self.line_,) = ax.plot(self.fpr, self.tpr, **line_kwargs)
        self.line_.set_gid(_ROC_GID)

        if log_scale:
            ax.set_xscale("log", nonpositive="clip")
            ax.set_yscale("log", nonpositive="clip")
            lo = _log_lower_limit(ax)
            ax.set_xlim(lo, 1.0)
            ax.set_ylim(lo, 1.05)
            chance_x = np.array([lo, 1.0])
        else:
            ax.set_xlim(-0.01, 1.01)
            ax.set_ylim(-0.01, 1.01)
            ax.set_aspect("equal", adjustable="box")
            chance_x = np.array([0.0, 1.0])

        self.chance_level_ = None
        has_chance = any(line.get_gid() == _CHANCE_GID for line in ax.get_lines())
        if plot_chance_level and not has_chance:
            (self.chance_level_,) = ax.plot(
                chance_x,
                chance_x,
                color=_CHANCE_COLOR,
                linestyle="--",
                linewidth=1.0,
                label="Chance level (AUC = 0.5)",
                gid=_CHANCE_GID,
            )
        elif plot_chance_level and log_scale:
            for line in ax.get_lines():
                if line.get_gid() == _CHANCE_GID:
                    line.set_data(chance_x, chance_x)

        ax.set_xlabel(FPR_LABEL)
        ax.set_ylabel(TPR_LABEL)
        _refresh_legend(ax)
        self.ax_ = ax
        self.figure_ = ax.figure
        return self

    @classmethod
    def from_roc(cls, roc_result, *, name=None, ax=None, log_scale=False) -> "RocDisplay":
        """Plot a precomputed :class:`~mlflow_mia.metrics.RocResult`.

        Parameters
        ----------
        roc_result : RocResult
            Exact curve and AUC from :func:`mlflow_mia.metrics.roc`.
        name : str, optional
            Attack name for the legend.
        ax : matplotlib.axes.Axes, optional
            Axes to draw on (a new figure when None).
        log_scale : bool, default False
            Log-log axes (low-FPR region).

        Returns
        -------
        RocDisplay
        """
        display = cls(roc_result.fpr, roc_result.tpr, roc_result.auc, name)
        return display.plot(ax=ax, log_scale=log_scale)

    @classmethod
    def from_predictions(cls, y_true, y_score, *, name=None, ax=None, log_scale=False) -> "RocDisplay":
        """Compute the exact ROC of ``(y_true, y_score)`` and plot it.

        Parameters
        ----------
        y_true : array-like of shape (n_samples,), 0/1 or bool
            Membership labels, 1 = member.
        y_score : array-like of shape (n_samples,), float
            Attack scores, higher = more likely a member.
        name, ax, log_scale
            As :meth:`from_roc`, which draws the curve.

        Returns
        -------
        RocDisplay

        Raises
        ------
        ValueError
            As :func:`mlflow_mia.metrics.roc`.
        """
        return cls.from_roc(_roc(y_true, y_score), name=name, ax=ax, log_scale=log_scale)


def plot_roc_comparison(rocs: Mapping[str, object], *, log_scale=False, title=None):
    """Several attacks' ROC curves on one axes.

    Parameters
    ----------
    rocs : mapping of str to RocResult
        Attack name -> exact ROC, drawn in the mapping's order with successive
        Okabe-Ito colours.
    log_scale : bool, default False
        Log-log axes (low-FPR region).
    title : str, optional
        Axes title.

    Returns
    -------
    matplotlib.figure.Figure
        A new figure, not registered with pyplot; the caller saves or logs
        it and may close it.

    Raises
    ------
    ValueError
        If ``rocs`` is empty.

    Examples
    --------
    >>> from mlflow_mia.metrics import roc
    >>> fig = plot_roc_comparison({"loss": roc([1, 0, 1, 0], [3, 1, 2, 2]),
    ...                            "likelihood_ratio": roc([1, 0, 1, 0], [3, 1, 2, 0])})
    >>> [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    ['loss (AUC = 0.875)', 'likelihood_ratio (AUC = 1.000)', 'Chance level (AUC = 0.5)']
    """
    if not rocs:
        raise ValueError("rocs is empty; give at least one attack name -> RocResult")
    ax = _new_axes()
    for name, result in rocs.items():
        RocDisplay.from_roc(result, name=name, ax=ax, log_scale=log_scale)
    if title:
        ax.set_title(title)
    return ax.figure
