"""The README's Python blocks run as written (the demo build swapped for the tiny registered models)."""

from __future__ import annotations

import re
import types
from pathlib import Path


README = Path(__file__).resolve().parents[1] / "README.md"


def readme_block(name: str) -> str:
    """The fenced code block right after ``<!-- readme-test: name -->`` in README.md."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"<!-- readme-test: {re.escape(name)} -->\n```\w*\n(.*?)\n```", text, re.S)
    if match is None:
        raise AssertionError(f"README.md has no code block after <!-- readme-test: {name} -->")
    return match.group(1)


def test_evaluate_block_runs_as_written(tracking, monkeypatch, capsys):
    import mlflow

    from mlflow_mia.demo import build

    spec = types.SimpleNamespace(target_uri="models:/tgt@candidate", reference_uri="models:/ref@champion",
                                 pool_path=tracking.pool_path, population_path=tracking.population_path)
    sizes = []
    monkeypatch.setattr(build, "build_demo", lambda size: sizes.append(size) or spec)
    monkeypatch.setenv("MLFLOW_MIA_CACHE", str(tracking.cache_dir))
    code = readme_block("evaluate")
    exec(compile(code, "README.md:evaluate", "exec"), {"__name__": "readme"})
    assert sizes == ["small"]  # the block names the small demo of README command 1
    out = capsys.readouterr().out.strip().splitlines()
    run = mlflow.last_active_run()
    assert run.info.run_name == "audit bbc-small-target (Python)"  # named by the block, not drawn at random
    assert out[-1] == f"likelihood_ratio AUC {run.data.metrics['likelihood_ratio/auc']:.3f}"
    assert mlflow.get_experiment(run.info.experiment_id).name == "mlflow-mia"
    assert run.data.tags["mia.verdict"] in ("leaks", "no evidence of leakage", "inconclusive")
    # The verdict comes from the result (its verdict artifact and code), and is the one on the run page.
    assert out[-3] == f"verdict: {run.data.tags['mia.verdict']} ({run.data.tags['mia.verdict.reason']})"
    codes = {"within budget": 0, "no evidence of leakage": 1, "inconclusive": 2, "leaks": 3}
    assert out[-2] == f"mia_verdict_code {codes[run.data.tags['mia.verdict']]}"
    assert "data.tags" not in code and "get_run" not in code


def test_readme_fits_a_few_screens_and_opens_with_the_two_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200, f"README.md has {len(lines)} lines; move detail into docs/"
    block = lines[lines.index("```bash"):][:6]
    assert block[1].startswith("# 1. Install") and block[2].startswith("python3 -m venv .venv && . .venv/bin/activate")
    assert block[2].endswith("mlflow run . -e audit --env-manager local -P demo_size=small --experiment-name mlflow-mia")
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert block[4].startswith("# 2. Run the tests") and block[5] == ci[ci.index("# --- README: test command (keep identical) ---") + 1]


def test_readme_links_point_at_files_that_exist():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert len(local) > 20  # the README is a front door into docs/
    missing = [t for t in local if not (README.parent / t).exists()]
    assert missing == []
