"""The MLflow UI in a real browser: the verdict shows, without a click, wherever a reviewer looks.

Starts ``mlflow server`` on 127.0.0.1 (a free port) over the test store, audits a tiny
registered model twice with the CLI (a leaking and a non-leaking version), and opens in
headless Chromium through playwright: the run page, the experiment's run list (plain, and
the audits' view the CLI prints), the compare view of the two audits and the registered
version page. Each assertion checks that the verdict is on screen (inside the window, not
below it) as the page opens. Skipped, with the reason, when playwright or Chromium is
missing (Debian: ``apt-get install -y chromium``; ``pip install playwright``, the ``test``
extra). With ``$MLFLOW_MIA_UI_SCREENSHOTS`` set to a folder, the pages are saved there as
PNGs: ``ui_run_verdict.png``, ``ui_experiment_runs.png``, ``ui_compare_verdict.png`` and
``ui_version_verdict.png`` (``docs/images``, shown by the getting-started page and the
reference's MLflow pages).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
from mlflow import MlflowClient

from mlflow_mia.entrypoints.cli import main
from mlflow_mia.tracking.run_list import run_list_url
from mlflow_mia.tracking.verdict import run_url

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium() -> str:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright, or the test extra)")
    path = os.environ.get("MLFLOW_MIA_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path or not os.path.exists(path):
        pytest.skip("no Chromium found (Debian: apt-get install -y chromium; or set $MLFLOW_MIA_CHROMIUM)")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(uri: str, root: Path):
    port = _free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", uri, "--workers", "1"], cwd=root, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"mlflow server exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc, base
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise AssertionError(f"mlflow server did not answer {base}/health within 180 s")


def _open(page, url: str, text: str, *, timeout_ms: int = 90_000):
    """Load a page of the single-page UI and wait until ``text`` is visible."""
    page.goto(url)
    try:
        page.get_by_text(text, exact=False).first.wait_for(state="visible", timeout=timeout_ms)
    except Exception:  # playwright's TimeoutError: show what the page held instead
        raise AssertionError(f"{url} did not show {text!r}; it showed:\n{page.inner_text('body')[:3000]}") from None
    time.sleep(1.0)  # the rest of the page settles


def _close_assistant(page) -> None:
    """Close the UI's assistant side panel (its own localStorage flag), so the screenshot shows the page."""
    page.evaluate("""() => { for (const key of Object.keys(localStorage)) {
        if (key.includes('assistant.panelOpen')) {
            localStorage.setItem(key, localStorage.getItem(key).replace('true', 'false')); } } }""")
    page.reload()
    page.get_by_text("About this run").first.wait_for(state="visible", timeout=60_000)
    time.sleep(1.0)


VIEWPORT = {"width": 1500, "height": 1100}


def _on_screen(page, text: str) -> bool:
    """``text`` is visible inside the window as the page opened (no scrolling, no click)."""
    locator = page.get_by_text(text, exact=False).first
    if not locator.is_visible():
        return False
    box = locator.bounding_box()
    return box is not None and 0 <= box["y"] < VIEWPORT["height"] and 0 <= box["x"] < VIEWPORT["width"]


def test_the_verdict_shows_without_a_click_wherever_a_reviewer_looks(tracking, tmp_path, monkeypatch):
    chromium = _chromium()
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("MLFLOW_MIA_HASH_KEY", "k" * 32)  # one key: the two audits' data digests agree
    assert main(["audit", "--target", "models:/tgt@champion", *tracking.cli_args()]) == 0
    assert main(["audit", "--target", "models:/tgt@candidate", *tracking.cli_args()]) == 0
    client = MlflowClient()
    experiment_id = os.environ["MLFLOW_EXPERIMENT_ID"]
    leaky, clean = client.search_runs([experiment_id], order_by=["attributes.start_time DESC"])
    assert leaky.data.tags["mia.verdict"] == "leaks" and clean.data.tags["mia.verdict"] == "no evidence of leakage"
    build = client.create_run(experiment_id, run_name="build canary demo (small)")  # not an audit
    client.set_terminated(build.info.run_id)
    version = client.get_model_version("tgt", "2")
    shots = Path(os.environ.get("MLFLOW_MIA_UI_SCREENSHOTS") or tmp_path)
    server, base = _serve(tracking.tracking_uri, tracking.root)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport=VIEWPORT)
            # The run page the CLI prints (run_url): name, description and tag give the verdict.
            _open(page, run_url(leaky.info.run_id, experiment_id, tracking_uri=base), "Verdict: leaks")
            _close_assistant(page)
            for text in ("[leaks] tgt v2 / ref v1", "Verdict: leaks", "The strongest attack", "mia.verdict"):
                assert _on_screen(page, text), text
            body = page.inner_text("body")
            assert "pool" in body and "population" in body  # the datasets
            page.screenshot(path=str(shots / "ui_run_verdict.png"))
            # The plain run list (no view chosen): MLflow shows no tag, metric or description column by default,
            # so the run names carry the verdicts.
            _open(page, f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning",
                  "[leaks] tgt v2 / ref v1")
            assert _on_screen(page, "[no evidence of leakage] tgt v1") and _on_screen(page, "build canary demo")
            # The run list the CLI prints: the audits' view, the verdict and its reason as columns, audits only.
            _open(page, run_list_url(experiment_id, tracking_uri=base), "contains 0.5; not a proof of privacy")
            for text in ("mia.verdict", "[leaks] tgt v2 / ref v1", "above 0.5",
                         "contains 0.5; not a proof of privacy", "2 matching runs"):
                assert _on_screen(page, text), text
            assert "build canary demo" not in page.inner_text("body")
            page.screenshot(path=str(shots / "ui_experiment_runs.png"))
            # The compare view of the two audits: the run names (first rows of "Run details") give the verdicts;
            # the parallel-coordinates plot opens on the parameters that differ (MLflow picks the first three
            # by name) and the first shared metric, the headline AUC.
            ids, experiments = json.dumps([clean.info.run_id, leaky.info.run_id]), json.dumps([experiment_id])
            _open(page, f"{base}/#/compare-runs?runs={quote(ids)}&experiments={quote(experiments)}",
                  "[leaks] tgt v2 / ref v1")
            assert _on_screen(page, "[leaks] tgt v2 / ref v1")
            assert _on_screen(page, "[no evidence of leakage] tgt v1 / ref v1")
            plot = page.locator(".js-plotly-plot").first.inner_text()
            assert "likelihood_ratio/auc" in plot and "target_model" in plot
            assert not any(key in plot for key in ("allow_tokenizer_mismatch", "attacks", "bootstrap_rounds", "digest"))
            page.screenshot(path=str(shots / "ui_compare_verdict.png"))
            # The registered version: the verdict first in its description, which links the audit that set it.
            _open(page, f"{base}/#/models/tgt/versions/2", f"Verdict: {version.tags['mia.verdict']}")
            assert _on_screen(page, "Verdict: leaks")
            assert "mia.verdict" in page.inner_text("body")
            page.screenshot(path=str(shots / "ui_version_verdict.png"))
            href = page.get_by_role("link", name="[leaks] tgt v2 / ref v1").first.get_attribute("href")
            assert f"/runs/{leaky.info.run_id}" in href  # the description links back to the run
            # The report's address the CLI prints opens report.md in the run's artifact view.
            _open(page, run_url(leaky.info.run_id, experiment_id, tracking_uri=base, path="report.md"), "In brief")
            browser.close()
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
