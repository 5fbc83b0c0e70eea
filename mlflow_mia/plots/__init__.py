"""Figures of audit results, returned and never shown.

Every plot builds on :class:`matplotlib.figure.Figure` (not pyplot), so no
figure is registered globally; matplotlib is imported only when plotting.
"""

from .comparison import plot_comparison_bars
from .findings import plot_finding
from .hist import ScoreHistogramDisplay
from .roc import OKABE_ITO, RocDisplay, plot_roc_comparison

__all__ = ["OKABE_ITO", "RocDisplay", "ScoreHistogramDisplay", "plot_comparison_bars", "plot_finding",
           "plot_roc_comparison"]
