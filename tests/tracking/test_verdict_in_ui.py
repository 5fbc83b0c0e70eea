"""The MLflow UI in a real browser: the verdict shows, without a click, wherever a reviewer looks.

Starts ``mlflow server`` on 127.0.0.1 (a free port) over the test store, audits a tiny
registered model twice with the CLI (a leaking and a non-leaking version), and opens in
headless Chromium through playwright: the run page, the experiment's run list (plain, and
the audits' view the CLI prints), the compare view of the two audits and the registered
version page. Each assertion checks that the verdict is on screen (inside the window, not
below it) as the page opens. Then the documentation a new user reads next to it: the site,
built with ``mkdocs build`` into a temporary folder and opened as files, its
getting-started page (the commands, the printed verdict, the screenshots this test takes, no
markdown left as text, every link to a page of the site) and its Python API page (no Sphinx
role left as text, cross-references that go to their heading, every table inside the page
or scrolling). Skipped, with the reason, when playwright or Chromium is missing (Debian:
``apt-get install -y chromium``; ``pip install playwright``, the ``test`` extra), or the
docs packages for the site's test. With ``$MLFLOW_MIA_UI_SCREENSHOTS`` set to a folder, the
UI pages are saved there (relative to the repository) as PNGs: ``ui_run_verdict.png``, ``ui_experiment_runs.png``,
``ui_compare_verdict.png`` and ``ui_version_verdict.png`` (``docs/images``, shown by the
getting-started page and the reference's MLflow pages)::

    MLFLOW_MIA_UI_SCREENSHOTS=docs/images HF_HUB_OFFLINE=1 .venv/bin/pytest tests/tracking/test_verdict_in_ui.py
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

import pytest
from mlflow import MlflowClient

from mlflow_mia.entrypoints.cli import main
from mlflow_mia.tracking.run_list import run_list_url
from mlflow_mia.tracking.verdict import run_url

ROOT = Path(__file__).resolve().parents[2]
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
    shots = ROOT / os.environ["MLFLOW_MIA_UI_SCREENSHOTS"] if os.environ.get("MLFLOW_MIA_UI_SCREENSHOTS") else tmp_path
    # (a relative folder is the repository's: the test runs in the tracking store's folder)
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
            tag = page.locator("tr", has=page.get_by_text("mia.verdict", exact=True)).first  # the tags table's row
            assert tag.inner_text().split() == ["mia.verdict", "leaks"], tag.inner_text()
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


#: The walk's screenshots that the getting-started page shows.
WALK_SHOTS = ("ui_run_verdict.png", "ui_experiment_runs.png", "ui_compare_verdict.png")
#: A Sphinx role as text (``:func:`name```): what a reader would see of a role that was not rewritten.
RAW_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|data|meth|attr|exc|obj):`")


def _site(tmp_path: Path) -> Path:
    """The documentation site, built into ``tmp_path/site`` (skips without the docs packages).

    ``--no-strict``: a broken link elsewhere is ``tests/test_docs_site.py``'s to report; this walk checks
    what the pages show.
    """
    for name in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            pytest.skip(f"the docs packages are not installed ({name}); pip install -e '.[docs]'")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--no-strict", "--site-dir", str(site)], cwd=ROOT,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return site


def _open_file(page, path: Path, heading: str) -> str:
    """Open a page of the built site; its article's text once ``heading`` shows."""
    page.goto(path.as_uri())
    page.get_by_role("heading", name=heading).first.wait_for(state="visible", timeout=30_000)
    return page.inner_text("article")


def _read_cleanly(page, site: Path, text: str) -> None:
    """What every page of the site must do: no markdown or role left as text, every image shown, every link
    to a page of the site there (with its anchor), no table cut off on the right."""
    assert not RAW_ROLE.findall(text), RAW_ROLE.findall(text)[:5]
    assert not re.findall(r"\]\([\w./#-]+\)|!\[|^```|<autoref|&lt;", text, re.M), "markdown or markup shown as text"
    images = page.evaluate("() => [...document.querySelectorAll('article img')].map(i => [i.src, i.naturalWidth])")
    assert all(width > 0 for _, width in images), [src for src, width in images if not width]
    here = urlparse(page.url).path
    for href in page.evaluate("() => [...document.querySelectorAll('article a[href]')].map(a => a.href)"):
        url = urlparse(href)
        if url.scheme != "file":
            continue
        target = Path(unquote(url.path))
        target = target / "index.html" if target.is_dir() else target
        assert target.is_file() and site in target.parents, href
        if url.fragment and unquote(url.path) == here:
            assert page.locator(f"[id='{unquote(url.fragment)}']").count() == 1, href
    # A table is cut off when its box (or the box it scrolls in) runs under the table of contents or out
    # of the window; a table wider than its scrolling box is reachable by scrolling.
    cut = page.evaluate("""() => {
        const toc = document.querySelector('.md-sidebar--secondary');
        const tocBox = toc && toc.getBoundingClientRect();
        const limit = Math.min(window.innerWidth, tocBox && tocBox.width > 0 ? tocBox.left : Infinity);
        return [...document.querySelectorAll('article table')].filter(table => {
            let box = table;
            for (let up = table.parentElement; up && up.tagName !== 'ARTICLE'; up = up.parentElement) {
                if (['auto', 'scroll'].includes(getComputedStyle(up).overflowX)) { box = up; break; }
            }
            return box.getBoundingClientRect().right > limit + 1; }).length; }""")
    assert cut == 0, f"{cut} table(s) cut off on the right"


def test_the_docs_site_reads_cleanly_in_a_browser(tmp_path):
    chromium = _chromium()
    from playwright.sync_api import sync_playwright

    site = _site(tmp_path)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        # Getting started: the commands, what the audit printed (its verdict) and the screenshots of this walk.
        text = _open_file(page, site / "getting-started" / "index.html", "Getting started")
        assert _on_screen(page, "This page answers how to install mlflow-mia")
        assert _on_screen(page, "mlflow run . -e audit --env-manager local -P demo_size=small")
        assert "verdict: leaks (likelihood_ratio AUC" in text and "run page: http://127.0.0.1:5000/#/experiments/" in text
        shown = {Path(urlparse(src).path).name for src, _ in
                 page.evaluate("() => [...document.querySelectorAll('article img')].map(i => [i.src, i.naturalWidth])")}
        assert set(WALK_SHOTS) <= shown, shown
        _read_cleanly(page, site, text)
        # The Python API: the first function on screen, its parameter table inside the page, the
        # cross-references rendered as links that go to their heading.
        text = _open_file(page, site / "reference" / "api" / "index.html", "Python API")
        assert _on_screen(page, "run_audit(target, pool, population")
        assert "Parameters:" in text and "Returns:" in text
        _read_cleanly(page, site, text)
        link = page.locator("article a.autorefs-internal", has_text="AuditDataset").first
        href = link.get_attribute("href")
        assert re.fullmatch(r"#mlflow_mia(\.\w+)*\.AuditDataset", href), href  # an anchor on this page
        link.click()
        heading = page.locator(f"[id='{href[1:]}']")
        heading.wait_for(state="visible", timeout=10_000)
        box = heading.bounding_box()
        assert box is not None and 0 <= box["y"] < VIEWPORT["height"]  # the link went to its heading
        browser.close()


def test_the_page_checks_catch_what_a_reader_would_see(tmp_path):
    """:func:`_read_cleanly` fails on a role left as text, a link to a missing page and a table cut off."""
    chromium = _chromium()
    from playwright.sync_api import sync_playwright

    site = tmp_path / "site"
    (site / "page").mkdir(parents=True)
    (site / "other").mkdir()
    (site / "other" / "index.html").write_text("<article><h1>Other</h1></article>")
    good = "<p>See <a href='../other/'>other</a>.</p><table><tr><td>narrow</td></tr></table>"
    bad = {"<p>Uses :func:`run_audit`.</p>": ":func:`",
           "<p>See [other](other.md).</p>": "markdown or markup shown as text",
           "<p>See <a href='../gone/'>gone</a>.</p>": "gone",
           "<table style='width: 3000px'><tr><td>wide</td></tr></table>": "1 table\\(s\\) cut off on the right"}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        for html, problem in {good: None, **bad}.items():
            path = site / "page" / "index.html"
            path.write_text(f"<html><body><article><h1>Page</h1>{html}</article></body></html>")
            text = _open_file(page, path, "Page")
            if problem is None:
                _read_cleanly(page, site, text)
            else:
                with pytest.raises(AssertionError, match=problem):
                    _read_cleanly(page, site, text)
        browser.close()
