"""The `evaluate` module in mlflow_mia/hf_metric: loaded offline, it scores exactly as an audit does."""

from __future__ import annotations

import doctest
import importlib
import math
import random
import re
import socket
from pathlib import Path

import numpy as np
import pytest

evaluate = pytest.importorskip("evaluate")

from mlflow_mia.entrypoints.hf_metric import METRIC_PATH  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any connection attempt fails the test: loading must work offline."""
    def refuse(*args, **kwargs):
        raise OSError("network access attempted in an offline test")

    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.fixture(scope="module")
def metric():
    return evaluate.load(METRIC_PATH, keep_in_memory=True)


@pytest.fixture(scope="module")
def audit():
    from mlflow_mia.audits.membership import run_audit
    from mlflow_mia.config import AuditConfig
    from mlflow_mia.data import AuditDataset, PopulationSet
    from mlflow_mia.signals import MaskedLM
    from mlflow_mia.signals.testing import WORDS, tiny_bert

    rng = random.Random(3)
    words = [w for w in WORDS if w.isalpha()]
    texts = list(dict.fromkeys(" ".join(rng.choice(words) for _ in range(rng.randint(5, 10))) for _ in range(200)))
    pool = AuditDataset(texts=texts[:40], labels=[1] * 20 + [0] * 20)
    population = PopulationSet(texts=texts[40:140])
    model, tok = tiny_bert(seed=1)
    config = AuditConfig.from_dict({"signal": {"num_masks": 2},
                                    "metrics": {"fprs": [0.1, 0.05], "bootstrap_rounds": 30, "delta": 1e-3,
                                                "confidence": 0.9, "seed": 4}})
    return run_audit(MaskedLM(model, tok), pool, population, references=[MaskedLM(tiny_bert(tok, seed=2)[0], tok)],
                     config=config, progress=False)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_metric_equals_the_audit_metrics_exactly(metric, audit):
    mc = audit.config.metrics
    labels = audit.samples["label"].to_numpy()
    only_in_audit = re.compile(r"auc_len_|_at_mean_member_loss$|n_unscored$")
    for name in audit.config.attacks:
        out = metric.compute(predictions=audit.samples[f"score_{name}"].to_numpy(), references=labels,
                             population_scores=audit.population_scores[name], fprs=list(mc.fprs), delta=mc.delta,
                             confidence=mc.confidence, bootstrap_rounds=mc.bootstrap_rounds, seed=mc.seed)
        expected = {k[len(name) + 1:]: v for k, v in audit.metrics.items()
                    if k.startswith(f"{name}/") and not only_in_audit.search(k)}
        assert set(out) == set(expected)
        assert "epsilon_lower_bound" in out and "tpr_at_fpr_0.05_ci_high" in out
        bad = {k: (out[k], expected[k]) for k in out if not _same(out[k], expected[k])}
        assert not bad


def test_metric_equals_the_metrics_functions(metric):
    from mlflow_mia.metrics import epsilon_lower_bound, population_threshold_metrics, roc, tpr_at_fpr

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    s = rng.normal(size=300) + 1.2 * y + 1e-9 * rng.normal(size=300)  # float32 would round these
    pop = rng.normal(size=500)
    out = metric.compute(predictions=s, references=y, population_scores=pop, fprs=[0.1, 0.01], delta=1e-5)
    assert out["auc"] == roc(y, s).auc
    assert out["tpr_at_fpr_0.01"] == tpr_at_fpr(y, s, alpha=0.01)
    thresholds = population_threshold_metrics(y, s, pop, alphas=[0.1, 0.01])
    assert [out["threshold_at_pop_fpr_0.1"], out["threshold_at_pop_fpr_0.01"]] == [t.threshold for t in thresholds]
    assert out["precision_at_pop_fpr_0.01"] == thresholds[1].precision
    assert out["recall_at_pop_fpr_0.1"] == thresholds[0].tpr
    b = epsilon_lower_bound(thresholds, delta=1e-5, confidence=0.95)
    assert (out["epsilon_lower_bound"], out["epsilon_lower_bound_point"]) == (b.epsilon, b.epsilon_point)
    assert "auc_ci_low" not in out  # no bootstrap unless asked


def test_loads_from_the_script_path_and_has_metadata():
    m = evaluate.load(str(Path(METRIC_PATH) / "hf_metric.py"), keep_in_memory=True)
    assert m.name == "membership_inference"
    assert {k: v.dtype for k, v in m.features.items()} == {"predictions": "float64", "references": "int32"}
    for key in ("mireshghallah2022quantifying", "mattern2023membership", "xia2025exploring",
                "jagielski2020auditing"):
        assert key in m.citation
    assert "https://arxiv.org/abs/2006.07709" in m.reference_urls
    assert "population_scores" in m.inputs_description and "epsilon" in m.description


def test_docstring_example_runs():
    module = importlib.import_module("mlflow_mia.entrypoints.hf_metric.hf_metric")
    parser = doctest.DocTestParser()
    test = parser.get_doctest(module._KWARGS_DESCRIPTION, {}, "hf_metric", None, 0)
    runner = doctest.DocTestRunner()
    runner.run(test)
    assert runner.failures == 0 and runner.tries == 5


def test_bad_input_errors():
    metric = evaluate.load(METRIC_PATH, keep_in_memory=True)
    with pytest.raises(ValueError, match="population_scores is required"):
        metric.compute(predictions=[1.0, 0.0], references=[1, 0])
    with pytest.raises(ValueError, match="delta must be"):
        metric.compute(predictions=[1.0, 0.0], references=[1, 0], population_scores=list(range(20)), delta=2)
    with pytest.raises(ValueError, match="alpha=0.001 needs at least 1000"):
        metric.compute(predictions=[1.0, 0.0], references=[1, 0], population_scores=list(range(20)))


def test_readme_snippet_runs(capsys):
    readme = (REPO / "docs" / "guides" / "hf_metric.md").read_text(encoding="utf-8")
    section = readme.split("## Scoring attack outputs with Hugging Face `evaluate`", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "docs/guides/hf_metric.md", "exec"), {})
    auc, tpr, eps = map(float, capsys.readouterr().out.split())
    assert 0.9 < auc < 1.0 and 0.2 < tpr < 0.6 and eps > 1.0


def test_scores_reach_the_metrics_unrounded(metric):
    pop = np.arange(100.0)  # threshold at FPR 0.1: 89.0 (ten population scores lie above it)
    out = metric.compute(predictions=[89 + 1e-9, 89 + 2e-9, 10.0, 20.0], references=[1, 1, 0, 0],
                         population_scores=pop, fprs=[0.1])
    assert out["threshold_at_pop_fpr_0.1"] == 89.0
    assert out["recall_at_pop_fpr_0.1"] == 1.0  # float32 would round both members onto the threshold


def test_hf_metric_settings_are_read_as_the_audit_options(metric):
    """fprs as a string is read as a list; seed='x' and other bad settings name the setting and its form."""
    pop = list(np.arange(100.0))
    args = dict(predictions=[300.0, 200.0, 1.0, 0.5], references=[1, 1, 0, 0], population_scores=pop)
    assert metric.compute(**args, fprs="0.1") == metric.compute(**args, fprs=[0.1])
    assert metric.compute(**args, fprs="0.1,0.05", seed="3", bootstrap_rounds="0") == \
        metric.compute(**args, fprs=[0.1, 0.05], seed=3, bootstrap_rounds=0)
    for bad, message in (({"seed": "x"}, "seed must be an int >= 0, got 'x'"),
                         ({"fprs": "abc"}, "fprs must be a non-empty list (or comma-separated string) of numbers "
                                           "in [1e-09, 1), got 'abc'"),
                         ({"bootstrap_rounds": -1}, "bootstrap_rounds must be an int >= 0, got -1"),
                         ({"confidence": "high"}, "confidence must be a number in (0, 1), got 'high'")):
        with pytest.raises(ValueError) as info:
            metric.compute(**args, **bad)
        assert str(info.value) == message


@pytest.mark.parametrize("labels, shown", [([1, "yes", 0, 0], "'yes'"), ([1, 0.5, 0, 0], "0.5"),
                                           ([1, 2, 0, 0], "2"), ([1, None, 0, 0], "None")])
def test_hf_metric_labels_other_than_0_1_are_refused(metric, labels, shown):
    """A float label such as 0.5 is refused, not truncated to 0 by the int32 feature."""
    with pytest.raises(ValueError) as info:
        metric.compute(predictions=[3.0, 2.0, 1.0, 0.5], references=labels, population_scores=list(range(100)),
                       fprs=[0.1])
    assert str(info.value) == f"references must be membership labels 0 or 1 (1 = member), got {shown} at position 1"
    with pytest.raises(ValueError, match="predictions \\(attack scores\\) must be numbers, got 'high' at position 0"):
        metric.compute(predictions=["high", 2.0], references=[1, 0], population_scores=list(range(100)), fprs=[0.1])
    exact = metric.compute(predictions=[3.0, 2.0, 1.0, 0.5], references=[1.0, 1.0, 0.0, 0.0],
                           population_scores=list(range(100)), fprs=[0.1])
    assert exact["auc"] == 1.0  # whole-number floats are labels


def test_finite_1e308_scores_are_numbers_and_only_nan_or_inf_is_refused(metric):
    """Finite scores up to the float64 maximum are scored (issue 32: 1e308 was called 'NaN or infinity');
    NaN and infinity are refused by kind and position, before anything is stored."""
    import sys

    big = sys.float_info.max
    pop = list(np.arange(100.0))
    out = metric.compute(predictions=[big, 1e308, 1e308, 0.5, -big, 0.1], references=[1, 1, 1, 0, 0, 0],
                         population_scores=pop + [1e308, -1e308], fprs=[0.1], bootstrap_rounds=20)
    assert out["auc"] == 1.0 and out["recall_at_pop_fpr_0.1"] == 1.0
    for value, kind in ((float("inf"), "infinite"), (float("-inf"), "infinite"), (float("nan"), "NaN")):
        with pytest.raises(ValueError) as info:
            metric.compute(predictions=[3.0, value], references=[1, 0], population_scores=pop, fprs=[0.1])
        assert str(info.value) == (f"predictions (attack scores) must be finite numbers, got {value!r} ({kind}) "
                                   "at position 1")
        with pytest.raises(ValueError) as info:
            metric.compute(predictions=[3.0, 1.0], references=[1, 0], population_scores=[value] + pop, fprs=[0.1])
        assert str(info.value) == f"population_scores must be finite numbers, got {value!r} ({kind}) at position 0"

