"""``benchmarks/make_docs.py``: docs/benchmarks.md is what the committed results render to."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]


def test_committed_benchmark_page_matches_the_committed_results():
    spec = importlib.util.spec_from_file_location("make_docs", _ROOT / "benchmarks" / "make_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # Other results live in the same folder (shadow_scaling.json): the page reads the speed benchmarks only.
    assert (_ROOT / "benchmarks" / "results" / "shadow_scaling.json").exists()
    assert module.render() == (_ROOT / "docs" / "benchmarks.md").read_text()
