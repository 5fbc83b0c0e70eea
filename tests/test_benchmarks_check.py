"""``benchmarks/check_regression.compare``: the CI speed check fails only on a large drop of a committed ratio."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "check_regression.py"


@pytest.fixture(scope="module")
def compare():
    spec = importlib.util.spec_from_file_location("check_regression", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compare


def _result(**ratios) -> dict:
    return {"cases": {case: {"ratio": r, "ratio_min": r - 0.1, "ratio_max": r + 0.1} for case, r in ratios.items()}}


def test_equal_ratios_pass(compare, capsys):
    assert compare("bench_pll", _result(minilm=1.34, base=1.2), _result(minilm=1.34, base=1.2), 0.6) == []
    out = capsys.readouterr().out
    assert "bench_pll/minilm: 1.34x (pairs 1.24-1.44) vs committed 1.34x; floor 0.80x: ok" in out
    assert "bench_pll/base: 1.20x" in out and "FAIL" not in out


def test_a_drop_below_the_tolerance_fails_naming_the_case(compare, capsys):
    committed = _result(minilm=2.0, base=1.5)
    # 1.19 < 0.6 x 2.0 = 1.2 fails; 0.9 = 0.6 x 1.5 is on the floor and passes
    failures = compare("bench_pll", committed, _result(minilm=1.19, base=0.9), 0.6)
    assert failures == ["bench_pll/minilm ratio 1.19x < 1.20x (0.6 x committed 2.00x)"]
    assert "bench_pll/minilm: 1.19x (pairs 1.09-1.29) vs committed 2.00x; floor 1.20x: FAIL" in capsys.readouterr().out
    assert compare("bench_pll", committed, _result(minilm=1.19), 0.5) == []  # a looser tolerance lets it pass


def test_a_case_without_a_committed_figure_passes(compare, capsys):
    assert compare("bench_ner", _result(other=3.0), _result(batch128=0.1), 0.6) == []
    assert compare("bench_ner", None, _result(batch128=0.1), 0.6) == []  # no committed file at all
    out = capsys.readouterr().out
    assert out.count("bench_ner/batch128: 0.10x (no committed figure to compare)") == 2
