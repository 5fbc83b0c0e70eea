"""The MLflow UI in a real browser: the run page and the registered version page show the verdict.

Starts ``mlflow server`` on 127.0.0.1 (a free port) over the test store, audits a tiny
registered model with the CLI, and opens both pages in headless Chromium through
playwright. Skipped, with the reason, when playwright or Chromium is missing (Debian:
``apt-get install -y chromium``; ``pip install playwright``, the ``test`` extra).
With ``$MLFLOW_MIA_UI_SCREENSHOTS`` set to a folder, the pages are saved there as PNGs
(README's ``docs/images/ui_run_verdict.png`` and ``ui_version_verdict.png``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow import MlflowClient

from mlflow_mia.entrypoints.cli import main
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


def test_run_and_version_pages_show_the_verdict(tracking, tmp_path):
    chromium = _chromium()
    from playwright.sync_api import sync_playwright

    assert main(["audit", "--target", "models:/tgt@candidate", *tracking.cli_args()]) == 0
    client = MlflowClient()
    run = client.search_runs([os.environ["MLFLOW_EXPERIMENT_ID"]], order_by=["attributes.start_time DESC"])[0]
    verdict = run.data.tags["mia.verdict"]
    version = client.get_model_version("tgt", "2")
    shots = Path(os.environ.get("MLFLOW_MIA_UI_SCREENSHOTS") or tmp_path)
    server, base = _serve(tracking.tracking_uri, tracking.root)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            # The address the CLI prints (run_url): the "Model training" view of the run.
            _open(page, run_url(run.info.run_id, run.info.experiment_id, tracking_uri=base), f"Verdict: {verdict}")
            _close_assistant(page)
            body = page.inner_text("body")
            assert "audit tgt v2 vs ref v1" in body  # the run's name says what was audited
            assert "mia.verdict" in body and page.get_by_text("mia.verdict").first.is_visible()
            assert "The strongest attack" in body  # the report's "In brief" paragraph is the description
            assert "pool" in body and "population" in body  # the datasets
            page.screenshot(path=str(shots / "ui_run_verdict.png"))
            # MLflow 3.17 opens an experiment on the GenAI overview unless the address (or the browser's saved
            # toggle, localStorage mlflow.workflowType) says workflowType=machine_learning; the experiment tag
            # mlflow.experimentKind only labels it. With the parameter the run list shows the audit by name.
            _open(page, f"{base}/#/experiments/{run.info.experiment_id}/runs?workflowType=machine_learning",
                  "audit tgt v2 vs ref v1")
            page.screenshot(path=str(shots / "ui_experiment_runs.png"))
            # The report's address the CLI prints opens report.md in the run's artifact view.
            _open(page, run_url(run.info.run_id, run.info.experiment_id, tracking_uri=base, path="report.md"),
                  "In brief")
            _open(page, f"{base}/#/models/tgt/versions/2", f"Verdict: {version.tags['mia.verdict']}")
            body = page.inner_text("body")
            assert "mia.verdict" in body and "Audit run:" in body
            page.screenshot(path=str(shots / "ui_version_verdict.png"))
            href = page.get_by_role("link", name="audit tgt v2 vs ref v1").first.get_attribute("href")
            assert f"/runs/{run.info.run_id}" in href  # the description links back to the run
            _open(page, f"{base}/{href.lstrip('/')}" if href.startswith("#") else href, "About this run")
            assert "audit tgt v2 vs ref v1" in page.inner_text("body")
            browser.close()
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
