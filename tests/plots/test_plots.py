"""Tests of mlflow_mia.plots: returned objects hold the data, and no global state."""

import io

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure

from mlflow_mia.metrics import population_threshold, roc
from mlflow_mia.plots import OKABE_ITO, RocDisplay, ScoreHistogramDisplay, plot_roc_comparison


@pytest.fixture(autouse=True)
def no_global_matplotlib_state():
    """Every test: no figure registered with pyplot, rcParams untouched."""
    fignums = plt.get_fignums()
    rc = dict(matplotlib.rcParams)
    yield
    assert plt.get_fignums() == fignums
    assert dict(matplotlib.rcParams) == rc


def pool(seed=0, n_members=200, n_non_members=300):
    rng = np.random.default_rng(seed)
    y = np.concatenate([np.ones(n_members, int), np.zeros(n_non_members, int)])
    s = rng.normal(size=y.size) + 1.0 * y
    return y, s


def roc_lines(ax):
    return [line for line in ax.get_lines() if not line.get_label().startswith("Chance")]


def test_roc_display_from_predictions_holds_the_curve():
    y, s = pool()
    r = roc(y, s)
    d = RocDisplay.from_predictions(y, s, name="loss")
    assert isinstance(d.figure_, Figure)
    assert d.ax_.figure is d.figure_
    np.testing.assert_array_equal(d.line_.get_xdata(), r.fpr)
    np.testing.assert_array_equal(d.line_.get_ydata(), r.tpr)
    assert d.roc_auc == r.auc
    assert d.line_.get_label() == f"loss (AUC = {r.auc:.3f})"
    assert d.ax_.get_xlabel() == "False positive rate"
    assert d.ax_.get_ylabel() == "True positive rate"
    assert d.ax_.get_xscale() == d.ax_.get_yscale() == "linear"
    legend = [t.get_text() for t in d.ax_.get_legend().get_texts()]
    assert legend[0] == f"loss (AUC = {r.auc:.3f})"


def test_chance_line_is_the_diagonal_and_optional():
    y, s = pool()
    d = RocDisplay.from_predictions(y, s)
    x, yy = d.chance_level_.get_data()
    np.testing.assert_array_equal(x, yy)
    d2 = RocDisplay(d.fpr, d.tpr, d.roc_auc, "x").plot(plot_chance_level=False)
    assert d2.chance_level_ is None
    assert len(d2.ax_.get_lines()) == 1


def test_roc_display_log_scale():
    y, s = pool(n_non_members=400)
    d = RocDisplay.from_roc(roc(y, s), name="likelihood_ratio", log_scale=True)
    assert d.ax_.get_xscale() == "log" and d.ax_.get_yscale() == "log"
    lo, hi = d.ax_.get_xlim()
    assert lo == pytest.approx(1 / 400) and hi == 1.0  # distinct scores: first FPR step is 1/n0
    x, yy = d.chance_level_.get_data()
    np.testing.assert_array_equal(x, yy)
    assert x[0] == pytest.approx(lo)
    np.testing.assert_array_equal(d.line_.get_xdata(), roc(y, s).fpr)


def test_user_kwargs_override_defaults():
    y, s = pool()
    r = roc(y, s)
    d = RocDisplay(r.fpr, r.tpr, r.auc, "loss").plot(color="red", label="custom", linestyle=":")
    assert d.line_.get_color() == "red"
    assert d.line_.get_label() == "custom"
    assert d.line_.get_linestyle() == ":"


def test_plot_on_given_axes():
    fig = Figure()
    ax = fig.add_subplot()
    y, s = pool()
    d = RocDisplay.from_predictions(y, s, ax=ax, name="a")
    assert d.ax_ is ax and d.figure_ is fig


def test_roc_comparison_figure():
    rocs = {name: roc(*pool(seed)) for seed, name in enumerate(["loss", "likelihood_ratio", "min_k"])}
    fig = plot_roc_comparison(rocs, title="attacks")
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    lines = roc_lines(ax)
    assert [line.get_label() for line in lines] == [f"{n} (AUC = {r.auc:.3f})" for n, r in rocs.items()]
    for line, r in zip(lines, rocs.values()):
        np.testing.assert_array_equal(line.get_xdata(), r.fpr)
    assert [line.get_color() for line in lines] == list(OKABE_ITO[:3])
    assert sum(line.get_label().startswith("Chance") for line in ax.get_lines()) == 1
    assert ax.get_title() == "attacks"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[-1].startswith("Chance")

    fig_log = plot_roc_comparison(rocs, log_scale=True)
    ax = fig_log.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    with pytest.raises(ValueError, match="rocs"):
        plot_roc_comparison({})


def test_figure_can_be_saved_as_png():
    y, s = pool()
    buf = io.BytesIO()
    RocDisplay.from_predictions(y, s, log_scale=True).figure_.savefig(buf, format="png")
    assert buf.getvalue()[:4] == b"\x89PNG"


def test_score_histogram_threshold_lines_and_data():
    rng = np.random.default_rng(0)
    members = rng.normal(loc=1.0, size=300)
    non_members = rng.normal(size=400)
    population = rng.normal(size=1000)
    thresholds = {a: population_threshold(population, alpha=a) for a in (0.1, 0.01)}
    d = ScoreHistogramDisplay.from_scores(members, non_members, thresholds=thresholds, name="loss", bins=30)
    assert isinstance(d.figure_, Figure)
    assert d.ax_.get_xlabel() == "attack score (higher = member)"
    assert d.ax_.get_title() == "loss"
    assert set(d.threshold_lines_) == {0.1, 0.01}
    for alpha, t in thresholds.items():
        line = d.threshold_lines_[alpha]
        assert list(line.get_xdata()) == [t, t]
    assert d.threshold_lines_[0.01].get_label() == "threshold @ FPR 1%"
    assert d.threshold_lines_[0.1].get_label() == "threshold @ FPR 10%"
    assert d.bin_edges_.shape == (31,)
    assert d.bin_edges_[0] == min(members.min(), non_members.min())
    assert d.bin_edges_[-1] == max(members.max(), non_members.max())
    # densities: each histogram integrates to one over the shared bins
    widths = np.diff(d.bin_edges_)
    member_heights, _ = np.histogram(members, bins=d.bin_edges_, density=True)
    np.testing.assert_allclose(np.sum(member_heights * widths), 1.0)
    legend = [t.get_text() for t in d.ax_.get_legend().get_texts()]
    assert {"members", "non-members", "threshold @ FPR 1%"} <= set(legend)


def test_score_histogram_without_thresholds_and_errors():
    d = ScoreHistogramDisplay.from_scores([1.0, 2.0], [0.0, 1.5])
    assert d.threshold_lines_ == {}
    with pytest.raises(ValueError, match="member_scores"):
        ScoreHistogramDisplay.from_scores([np.nan], [0.0])
    with pytest.raises(ValueError, match="non_member_scores"):
        ScoreHistogramDisplay.from_scores([1.0], [])
    with pytest.raises(ValueError, match="thresholds"):
        ScoreHistogramDisplay.from_scores([1.0], [0.0], thresholds={0.01: np.inf})


def test_plot_modules_import_matplotlib_only_inside_functions():
    import ast
    import inspect

    import mlflow_mia.plots.hist as hist_module
    import mlflow_mia.plots.roc as roc_module

    for module in (roc_module, hist_module):
        tree = ast.parse(inspect.getsource(module))
        top_level = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        names = [a.name for node in top_level if isinstance(node, ast.Import) for a in node.names]
        names += [node.module or "" for node in top_level if isinstance(node, ast.ImportFrom)]
        assert not [n for n in names if n.startswith("matplotlib")], module.__name__
