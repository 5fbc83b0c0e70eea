"""``benchmarks/check_regression``: the CI speed check fails only on a large drop of a committed ratio."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "check_regression.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("check_regression", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def compare(check):
    return check.compare


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


@pytest.fixture
def fake_runs(check, monkeypatch, tmp_path):
    """``main`` with the benchmarks replaced: each call returns the next result queued for its script."""
    queued, calls = {}, []

    def run_benchmark(script, mode, env, timeout):
        calls.append((script, mode))
        result = queued[script].pop(0)
        return (result, None) if result is not None else (None, f"{script} --{mode} failed (exit 1)")

    monkeypatch.setattr(check, "run_benchmark", run_benchmark)
    monkeypatch.setattr(check, "RESULTS", tmp_path)
    return queued, calls


def test_ci_mode_compares_with_the_ci_results_at_half(check, fake_runs, tmp_path, capsys):
    queued, calls = fake_runs
    (tmp_path / "bench_pll_ci.json").write_text(json.dumps(_result(pll_minilm=2.0)))
    (tmp_path / "bench_ner_ci.json").write_text(json.dumps(_result(ner_minilm=1.6)))
    (tmp_path / "bench_ner_quick.json").write_text(json.dumps(_result(ner_minilm=9.0)))  # not read by --ci
    queued.update(bench_pll=[_result(pll_minilm=1.0)], bench_ner=[_result(ner_minilm=0.79)])
    assert check.main(["--ci"]) == 1
    assert calls == [("bench_ner", "ci"), ("bench_pll", "ci")]
    out = capsys.readouterr().out
    assert "fail below 0.5 x the committed ci ratios" in out
    assert "bench_pll/pll_minilm: 1.00x (pairs 0.90-1.10) vs committed 2.00x; floor 1.00x: ok" in out
    assert "speed regression:\n  bench_ner/ner_minilm ratio 0.79x < 0.80x (0.5 x committed 1.60x)" in out


def test_quick_mode_keeps_its_tolerance_and_a_failed_run_fails(check, fake_runs, tmp_path, capsys):
    queued, calls = fake_runs
    (tmp_path / "bench_pll_quick.json").write_text(json.dumps(_result(pll_minilm=2.0)))
    queued.update(bench_pll=[_result(pll_minilm=1.3)], bench_ner=[None])
    assert check.main(["--quick"]) == 1
    out = capsys.readouterr().out
    assert "floor 1.20x: ok" in out  # 0.6 x 2.0
    assert out.rstrip().endswith("speed regression:\n  bench_ner --quick failed (exit 1)")
    queued.update(bench_pll=[_result(pll_minilm=1.3)])
    assert check.main(["--quick", "--only", "pll", "--tolerance", "0.7"]) == 1  # 1.3 < 0.7 x 2.0
    assert calls[-1] == ("bench_pll", "quick") and len(calls) == 3


def test_a_size_must_be_named(check, capsys):
    with pytest.raises(SystemExit) as stop:
        check.main([])
    assert stop.value.code == 2
    assert "one of the arguments --ci --quick is required" in capsys.readouterr().err


def test_record_commits_the_run_of_median_ratio_with_every_runs_ratio(check, fake_runs, tmp_path):
    queued, _ = fake_runs
    runs = [_result(pll_minilm=r, pll_other=10 * r) for r in (2.4, 1.8, 2.1)]
    for k, run in enumerate(runs):
        run["date_utc"] = f"run {k}"
    queued.update(bench_pll=list(runs))
    assert check.main(["--ci", "--only", "pll", "--record", "3"]) == 0
    written = json.loads((tmp_path / "bench_pll_ci.json").read_text())
    assert written["date_utc"] == "run 2" and written["cases"]["pll_minilm"]["ratio"] == 2.1
    assert written["runs"] == {"pll_minilm": [2.4, 1.8, 2.1], "pll_other": [24.0, 18.0, 21.0]}
    queued.update(bench_pll=[runs[0], None])  # a failed run records nothing
    (tmp_path / "bench_pll_ci.json").unlink()
    assert check.main(["--ci", "--only", "pll", "--record", "2"]) == 1
    assert not (tmp_path / "bench_pll_ci.json").exists()


def test_a_benchmark_past_its_timeout_is_reported(check, tmp_path, monkeypatch):
    monkeypatch.setattr(check, "HERE", tmp_path)
    (tmp_path / "bench_slow.py").write_text("import time\ntime.sleep(30)\n")
    assert check.run_benchmark("bench_slow", "ci", {}, timeout=1) == (
        None, "bench_slow --ci did not finish in 1 s")
