"""Screenshot the MLflow UI's run comparison of the latest ``mlflow-mia compare``.

Starts ``mlflow server`` on 127.0.0.1 (a free port, one worker, no job consumers),
waits for it, opens the comparison of the nested per-version runs in headless
Chromium, saves a PNG and stops the server.

    mlflow-mia compare --models bbc-target ...        # or examples/compare_versions.py
    python examples/ui_screenshot.py                   # -> a new temporary folder (the path is printed)
    python examples/ui_screenshot.py --out docs/images/mlflow_compare.png \
        --plot-page docs/images/mlflow_compare_plot.png --report-page docs/images/mlflow_compare_report.png

Needs Chromium (Debian: ``apt-get install -y chromium``).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                  "--disable-dev-shm-usage"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def latest_comparison(tracking_uri: str, parent_run_id: str | None = None):
    """``(experiment_id, parent_run_id, [child run ids])`` of the newest compare run."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    children = client.search_runs(experiments, filter_string="tags.`mia.compare_parent` != ''",
                                  order_by=["attributes.start_time DESC"], max_results=500)
    if not children:
        raise SystemExit(f"no run of `mlflow-mia compare` found in {tracking_uri}; run one first")
    parent = parent_run_id or children[0].data.tags["mia.compare_parent"]
    runs = [r for r in children if r.data.tags["mia.compare_parent"] == parent]
    runs.sort(key=lambda r: r.info.start_time)
    return runs[0].info.experiment_id, parent, [r.info.run_id for r in runs]


def wait_for(url: str, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"mlflow server exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"mlflow server did not answer {url} within {timeout:.0f} s")


class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe (stdlib only).

    The MLflow 3 UI opens an assistant side panel on first load; the page script
    closes it (through the UI's own localStorage flag) before the screenshot.
    """

    def __init__(self, width: int, height: int):
        browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
        if browser is None:
            raise SystemExit("Chromium not found: apt-get install -y chromium")
        self._profile = tempfile.TemporaryDirectory()
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def fds():  # the DevTools pipe: the browser reads fd 3 and writes fd 4
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        self.proc = subprocess.Popen(
            [browser, *CHROMIUM_FLAGS, "--remote-debugging-pipe", f"--user-data-dir={self._profile.name}",
             f"--window-size={width},{height}", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer, self._id, self.width, self.height = b"", 0, width, height
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def call(self, method: str, *, session: bool = False, **params):
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._from_browser, 1 << 16)
                if not chunk:
                    raise RuntimeError("Chromium closed the DevTools pipe")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                           awaitPromise=True)
        return result.get("result", {}).get("value")

    def open(self, url: str, *, wait_s: float, ready_text: str | None = None, reload: bool = False) -> None:
        self.call("Page.navigate", session=True, url=url)
        if reload:  # a hash change keeps the single-page app (and its state) alive
            time.sleep(0.5)
            self.call("Page.reload", session=True, ignoreCache=False)
        deadline = time.time() + wait_s
        while time.time() < deadline:
            time.sleep(1.0)
            if ready_text and self.js(f"document.body && document.body.innerText.includes({json.dumps(ready_text)})"):
                time.sleep(2.0)  # let charts finish drawing
                return

    def close_assistant(self) -> None:
        """Flip the UI's own "assistant panel open" flag to false and keep it from auto-opening."""
        self.js("""(() => {
            for (const key of Object.keys(localStorage)) {
                if (key.includes('assistant.panelOpen')) localStorage.setItem(key,
                    localStorage.getItem(key).replace('true', 'false'));
            }
        })()""")

    def show_differences_only(self) -> None:
        """Turn on the comparison page's "Show diff only" switches (parameters and metrics)."""
        self.js("""[...document.querySelectorAll('[role="switch"]')]
                   .filter(b => b.getAttribute('aria-checked') !== 'true').forEach(b => b.click())""")
        time.sleep(1.5)

    def screenshot(self, out: Path) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        out.write_bytes(base64.b64decode(data))
        print(f"saved {out}")

    def quit(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._profile.cleanup()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend-store-uri", default="sqlite:///mlflow.db", help="tracking store to serve")
    parser.add_argument("--parent-run", help="compare run to show (default: the newest)")
    parser.add_argument("--out", help="PNG to write (default: mlflow_compare.png in a new temporary folder)")
    parser.add_argument("--plot-page", help="also screenshot the parent run's plots/comparison.png to this PNG")
    parser.add_argument("--report-page", help="also screenshot the parent run's report.md to this PNG")
    parser.add_argument("--all-rows", action="store_true",
                        help="show every parameter and metric (default: only those that differ between versions)")
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--height", type=int, default=1800)
    parser.add_argument("--wait-s", type=float, default=60, help="longest wait for a page to render")
    args = parser.parse_args(argv)
    if args.out is None:  # never overwrite the repository's images unless asked to
        args.out = os.path.join(tempfile.mkdtemp(prefix="mlflow_mia_screenshot_"), "mlflow_compare.png")

    experiment_id, parent, children = latest_comparison(args.backend_store_uri, args.parent_run)
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", args.backend_store_uri, "--workers", "1"],
        env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(f"{base}/health", 120, server)
        query = urllib.parse.urlencode({"runs": json.dumps(children), "experiments": json.dumps([experiment_id])})
        browser = Chromium(args.width, args.height)
        try:
            browser.open(f"{base}/#/experiments/{experiment_id}", wait_s=30, ready_text="Runs")
            browser.close_assistant()
            browser.open(f"{base}/#/compare-runs?{query}", wait_s=args.wait_s, ready_text="Metrics", reload=True)
            if not args.all_rows:
                browser.show_differences_only()
            browser.screenshot(Path(args.out))
            run_page = f"{base}/#/experiments/{experiment_id}/runs/{parent}/artifacts"
            if args.plot_page:
                browser.open(f"{run_page}/plots/comparison.png", wait_s=args.wait_s, ready_text="comparison.png",
                             reload=True)
                browser.screenshot(Path(args.plot_page))
            if args.report_page:
                browser.open(f"{run_page}/report.md", wait_s=args.wait_s, ready_text="model versions compared",
                             reload=True)
                browser.screenshot(Path(args.report_page))
        finally:
            browser.quit()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
