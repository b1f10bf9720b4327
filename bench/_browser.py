"""Shared by bench/dashboard.py and bench/screenshots.py: run the real server
(`rlvr-explorer serve`) in a throwaway data folder, drive Debian's headless Chromium
(never a downloaded browser), wait for a page's charts, take full-page screenshots.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(data_dir: Path, *, demo: bool = False, port: int | None = None, database_url: str | None = None):
    """Yield (base URL, team key) of a server with its worker; stopped on exit.
    The database is SQLite in `data_dir` unless `database_url` names another."""
    port = port or free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(RLVR_DATA_DIR=str(data_dir), RLVR_SECRET_KEY="bench-secret", PYTHONUNBUFFERED="1")
    if database_url:
        env["RLVR_DATABASE_URL"] = database_url
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr_explorer", "serve", "--port", str(port), "--demo" if demo else "--no-demo"],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + "/api/v1/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield base, (data_dir / "local_team_key").read_text().strip()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def api_client(base: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=base + "/api/v1", headers={"X-API-Key": key}, timeout=600)


def upload(api: httpx.Client, files: list[Path], name: str, timeout: float = 1800) -> dict:
    """Upload files as one trace and wait until it is ready."""
    parts = [("files", (f.name, f.read_bytes(), "application/octet-stream")) for f in files]
    r = api.post("/traces", files=parts, data={"name": name})
    r.raise_for_status()
    trace = r.json()["trace"] if r.status_code == 202 else r.json()
    deadline = time.monotonic() + timeout
    while trace["status"] not in ("ready", "failed"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"trace {trace['id']} not ready after {timeout} s")
        time.sleep(0.5)
        trace = api.get(f"/traces/{trace['id']}").json()
    if trace["status"] != "ready":
        raise RuntimeError(f"ingest failed: {trace.get('error')}")
    return trace


def wait_analyses(api: httpx.Client, trace_id: int, timeout: float = 600) -> list[dict]:
    """Wait until no analysis job of the trace is queued or running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = api.get(f"/traces/{trace_id}/analyses").json()["items"]
        if jobs and not any(j["status"] in ("queued", "running") for j in jobs):
            return jobs
        time.sleep(0.5)
    raise RuntimeError(f"analyses of trace {trace_id} still running after {timeout} s")


def chromium(width: int = 1400, height: int = 1000, *, network_log: bool = False):
    """Headless Chromium; with `network_log` its DevTools network events are kept for
    `timed_page_load` to count the bytes transferred."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--window-size={width},{height}",
        "--hide-scrollbars",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", **({"performance": "ALL"} if network_log else {})})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def sign_in(driver, base: str, key: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(base + "/sign-in")
    WebDriverWait(driver, 30).until(EC.element_to_be_clickable((By.ID, "sign-in-key"))).send_keys(key)
    WebDriverWait(driver, 30).until(EC.element_to_be_clickable((By.ID, "sign-in-submit"))).click()
    WebDriverWait(driver, 30).until(EC.presence_of_element_located((By.ID, "team-name")))


CHARTS_STATE = """
var graphs = Array.from(document.querySelectorAll('.dash-graph')).filter(function (g) { return g.offsetParent; });
var busy = document.querySelectorAll('[data-dash-is-loading="true"]').length;
var pending = graphs.filter(function (g) {
  var p = g.querySelector('.js-plotly-plot');
  if (!p || !p.layout) { return true; }
  var notes = (p.layout.annotations || []).map(function (a) { return a.text || ''; }).join(' ');
  return /Loading|Waiting|running/.test(notes);
});
return [graphs.length, pending.length, busy];
"""


def wait_for_charts(
    driver, timeout: float = 120, settle: float = 0.5, ready_selector: str | None = None, poll: float = 0.1
) -> float:
    """Seconds until every chart on the page has drawn its data (no placeholder left);
    a page without charts counts as drawn when `ready_selector` matches, or else once
    nothing is loading for a second."""
    t0 = time.monotonic()
    idle_since = None
    while time.monotonic() - t0 < timeout:
        if ready_selector:
            if driver.execute_script("return document.querySelectorAll(arguments[0]).length", ready_selector):
                return time.monotonic() - t0
            time.sleep(poll / 2)
            continue
        n, pending, busy = driver.execute_script(CHARTS_STATE)
        if n and not pending and not busy:
            took = time.monotonic() - t0
            time.sleep(settle)
            return took
        if not n and not busy:
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since >= 1.0:
                return idle_since - t0
        else:
            idle_since = None
        time.sleep(poll)
    raise TimeoutError(f"charts still pending after {timeout} s on {driver.current_url}")


def network_transfer(driver) -> tuple[int, int]:
    """(bytes, requests) received over the network since the last call: the
    encodedDataLength (body as sent, compressed, plus headers) of every finished
    request; responses served from the browser cache count 0."""
    import json

    total = requests = 0
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.loadingFinished":
            total += int(msg["params"].get("encodedDataLength") or 0)
            requests += 1
    return total, requests


def timed_page_load(
    driver, url: str, *, ready_selector: str | None = None, timeout: float = 120
) -> tuple[float, int, int]:
    """(seconds from navigation until every chart drew, bytes transferred, requests)
    for one page load; the driver must come from `chromium(network_log=True)`."""
    driver.get("about:blank")
    network_transfer(driver)  # forget what came before
    t0 = time.monotonic()
    driver.get(url)
    loaded = time.monotonic() - t0
    took = loaded + wait_for_charts(driver, timeout=timeout, settle=0, ready_selector=ready_selector, poll=0.03)
    time.sleep(0.3)  # let the last responses' loadingFinished events arrive
    nbytes, requests = network_transfer(driver)
    return took, nbytes, requests


def full_page_png(driver, path: Path, width: int = 1400) -> None:
    """A screenshot of the whole page (not just the viewport)."""
    height = driver.execute_script("return Math.ceil(document.documentElement.scrollHeight)")
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )
    try:
        time.sleep(0.3)
        shot = driver.execute_cdp_cmd(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
            },
        )
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))


def console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
