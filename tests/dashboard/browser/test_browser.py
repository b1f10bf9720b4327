"""The dashboard in a real browser: headless Chromium (Debian's, never downloaded)
driving the real server (`rlvr-explorer serve`, with its worker) in a subprocess.

Each test reads what the charts hold from the DOM (`.js-plotly-plot`.data of the chart
with a stable id) and compares it with values computed here from the uploaded rows.
Every test fails on any HTTP status >= 400 its pages got, any SEVERE entry in the
browser console and a failed callback's message (`Browser.problems`, checked when a page
is left and after each test by tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from dashboard.app import CALLBACK_ERROR, CALLBACK_LOG_ENV
from tests.conftest import ROOT
from tests.helpers import health, synthetic_rows, write_packed_dir

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
TIMEOUT = 60


def _submitted(banner: str | None) -> bool:
    """A submit's banner says its job started, or (a small job: before the test looked)
    already finished."""
    return any(f" {word}" in (banner or "") for word in ("started", "finished"))


# -- the server ---------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, base: str, key: str, env: dict, log: Path):
        self.base, self.key, self.env, self.log = base, key, env, log
        self.api = httpx.Client(base_url=base + "/api/v1", headers={"X-API-Key": key}, timeout=60)

    def upload(self, files: list[Path], name: str) -> dict:
        parts = [("files", (f.name, f.read_bytes(), "application/octet-stream")) for f in files]
        r = self.api.post("/traces", files=parts, data={"name": name})
        if r.status_code == 409 and set(r.json()["detail"].get("changed") or ()) == {"name"}:
            # content an earlier test uploaded under another name: that trace
            r = self.api.get(f"/traces/{r.json()['detail']['trace_id']}")
        assert r.status_code in (200, 201, 202), r.text
        body = r.json()
        trace = body["trace"] if r.status_code == 202 else body
        self.wait_ready(trace["id"])
        return trace

    def wait_ready(self, trace_id: int) -> dict:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            t = self.api.get(f"/traces/{trace_id}").json()
            if t["status"] in ("ready", "failed"):
                assert t["status"] == "ready", t
                return t
            time.sleep(0.3)
        raise AssertionError(f"trace {trace_id} not ready")

    def other_team_key(self) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "rlvr_explorer", "create-team", "other team"],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def server(tmp_path_factory, browser_run):
    for path in (CHROMIUM, CHROMEDRIVER):
        assert Path(path).exists(), f"{path} is missing (apt-get install chromium chromium-driver)"
    data = tmp_path_factory.mktemp("server")
    port = _free_port()
    # no engine worker beside it (serve starts one where RLVR_ENGINE_PYTHON is set): the engine
    # test starts its own
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "RLVR_ENGINE_PYTHON")}
    env.update(RLVR_DATA_DIR=str(data), RLVR_SECRET_KEY="browser-test-secret", PYTHONUNBUFFERED="1")
    env[CALLBACK_LOG_ENV] = str(browser_run.log)  # the session's callback coverage (tests/conftest.py)
    log = data / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr_explorer", "serve", "--no-demo", "--port", str(port), "--concurrency", "1"],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        health(port, proc, "serve did not answer within 90 s", timeout=90, log=log)
        yield Server(base, (data / "local_team_key").read_text().strip(), env, log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # serve stops its worker on the way out
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


# -- the browser ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def downloads(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(server, downloads):
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
        "--window-size=1400,1800",
    ):
        opts.add_argument(arg)
    # the console, and the network's responses (every HTTP status the pages got)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    opts.add_experimental_option("perfLoggingPrefs", {"enableNetwork": True, "enablePage": False})
    opts.add_experimental_option(
        "prefs", {"download.default_directory": str(downloads), "download.prompt_for_download": False}
    )
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    try:
        yield Browser(driver, server)
    finally:
        driver.quit()


class Browser:
    def __init__(self, driver, server: Server):
        self.d, self.server = driver, server
        self.allowed: list[tuple[int, str]] = []

    # navigation and waiting
    def open(self, path: str) -> None:
        self.assert_console_clean()  # what the page before did
        self.d.get(self.server.base + path)

    def wait(self, predicate, what: str, timeout: float = TIMEOUT):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = predicate()
                if last:
                    return last
            except Exception as exc:
                last = exc
            time.sleep(0.25)
        self.assert_console_clean()
        raise AssertionError(f"timed out waiting for {what} (last: {last!r})")

    def element(self, selector: str, what: str | None = None, *, clickable: bool = False, timeout: float = TIMEOUT):
        """The element, once it is in the page (and, with `clickable`, visible and
        enabled): an explicit wait, as Dash renders a page's parts after it loads.
        `selector` is an element id, or a CSS selector when it starts with `#`, `.` or
        contains a space or a bracket."""
        from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as EC
        from selenium.webdriver.support.ui import WebDriverWait

        by_css = selector[:1] in "#." or any(c in selector for c in " [>:")
        locator = (By.CSS_SELECTOR, selector) if by_css else (By.ID, selector)
        condition = EC.element_to_be_clickable if clickable else EC.presence_of_element_located
        try:
            return WebDriverWait(self.d, timeout, ignored_exceptions=[StaleElementReferenceException]).until(
                condition(locator)
            )
        except TimeoutException:
            self.assert_console_clean()
            raise AssertionError(f"timed out waiting for {what or selector} ({selector})") from None

    def click(self, selector: str, what: str | None = None, timeout: float = TIMEOUT) -> None:
        """Click the element once it is clickable (again if Dash re-rendered it meanwhile)."""
        from selenium.common.exceptions import StaleElementReferenceException

        deadline = time.monotonic() + timeout
        while True:
            try:
                self.element(selector, what, clickable=True, timeout=max(1.0, deadline - time.monotonic())).click()
                return
            except StaleElementReferenceException:
                if time.monotonic() > deadline:
                    raise

    def css(self, selector: str):
        from selenium.webdriver.common.by import By

        return self.d.find_elements(By.CSS_SELECTOR, selector)

    def text(self, element_id: str) -> str:
        return self.d.execute_script(
            f"var e = document.getElementById({json.dumps(element_id)}); return e ? e.innerText : null;"
        )

    def chart(self, chart_id: str) -> list[dict] | None:
        """The plotly traces drawn in the chart with this id (None before it drew)."""
        return self.d.execute_script(
            f"var g = document.getElementById({json.dumps(chart_id)});"
            "var p = g && g.querySelector('.js-plotly-plot');"
            # numpy arrays travel as {dtype, bdata, shape} (plotly keeps the decoded typed
            # arrays in _inputArray): turn them into plain lists
            "var plain = function (k, v) {"
            "  if (v && typeof v === 'object' && v.bdata !== undefined && v._inputArray !== undefined) {"
            "    v = v._inputArray; }"
            "  return ArrayBuffer.isView(v) ? Array.from(v) : v; };"
            "return p && p.data ? JSON.parse(JSON.stringify(p.data, plain)) : null;"
        )

    def wait_chart(self, chart_id: str, *names: str) -> dict[str, dict]:
        """Wait until the chart shows traces (with these names, when given); by name."""

        def ready():
            data = self.chart(chart_id)
            if not data:
                return None
            by_name = {t.get("name"): t for t in data}
            return by_name if all(n in by_name for n in names) else None

        return self.wait(ready, f"chart {chart_id} with {names or 'data'}")

    def sign_in(self, key: str, valid: bool = True) -> None:
        """Sign in with `key`; for a valid key, wait for the redirect away from the form,
        so that a page opened next is not replaced by that late redirect."""
        self.open("/sign-in")
        box = self.element("sign-in-key", "the sign-in form", clickable=True)
        box.clear()
        box.send_keys(key)
        self.click("sign-in-submit", "the sign-in button")
        if valid:
            self.wait(lambda: "/sign-in" not in self.d.current_url, "the redirect after signing in")

    # what went wrong in the pages: every browser test fails on it (tests/conftest.py)
    def start_test(self) -> None:
        """A new test: the log read afresh, nothing allowed."""
        self.problems()
        self.allowed = []

    def allow_http(self, status: int, url_part: str) -> None:
        """An HTTP error this test provokes on purpose (and the console line Chromium
        writes for it), on URLs containing `url_part`."""
        self.allowed.append((status, url_part))

    def _allowed(self, status: int, text: str) -> bool:
        return any(status == s and part in text for s, part in self.allowed)

    def problems(self) -> list[str]:
        """HTTP errors, console errors and a failed callback's message since the last look."""
        found = []
        for entry in self.d.get_log("performance"):
            event = json.loads(entry["message"])["message"]
            response = event.get("params", {}).get("response") or {}
            if event.get("method") == "Network.responseReceived" and response.get("status", 0) >= 400:
                if not self._allowed(response["status"], response.get("url", "")):
                    found.append(f"HTTP {response['status']} {response.get('url')}")
        for entry in self.d.get_log("browser"):
            status = next((s for s, _ in self.allowed if f"status of {s}" in entry["message"]), 0)
            if entry["level"] == "SEVERE" and not self._allowed(status, entry["message"]):
                found.append("console: " + entry["message"][:500])
        shown = self.d.execute_script(
            f"var e = document.getElementById({json.dumps(CALLBACK_ERROR)}); return e ? e.innerText : '';"
        )
        if shown:
            found.append(f"a callback failed: {shown}")
        return found

    def assert_console_clean(self) -> None:
        problems = self.problems()
        assert not problems, "the page had errors:\n" + "\n".join(problems)


# -- expected values, computed from the uploaded rows -----------------------------------
def responses(rows: list[dict]) -> np.ndarray:
    return np.array([o for r in rows for o in r["output"]], dtype=np.float64)


def dp_token_loads(rows: list[dict]) -> dict[int, float]:
    loads: dict[int, float] = {}
    for r in rows:
        loads[r["dp_rank"]] = loads.get(r["dp_rank"], 0.0) + sum(r["input"] + o for o in r["output"])
    return loads


def rollout_idle_share(rows: list[dict]) -> float:
    """1 - sum(len) / (engines x longest), engines = dp ranks (longtail's definition)."""
    by_engine: dict[int, list[int]] = {}
    for r in rows:
        by_engine.setdefault(r["dp_rank"], []).extend(r["output"])
    longest = max(max(v) for v in by_engine.values())
    return sum(longest - np.mean(v) for v in by_engine.values()) / (len(by_engine) * longest)


STEPS = 5


@pytest.fixture(scope="module")
def per_step():
    return synthetic_rows(steps=STEPS, groups=16, n=4, seed=3)


# -- the tests --------------------------------------------------------------------------
def test_sign_in_upload_and_every_trace_page(browser, server, per_step, tmp_path):
    from selenium.webdriver.common.keys import Keys

    b = browser
    # a page needs a team: the browser is sent to sign in, and comes back afterwards
    b.open("/traces")
    b.wait(lambda: "/sign-in" in b.d.current_url and b.css("#sign-in-key"), "redirect to sign-in")
    b.sign_in("not-a-key", valid=False)
    b.wait(lambda: "not valid" in (b.text("sign-in-message") or ""), "the wrong-key message")
    b.sign_in(server.key)
    b.wait(lambda: b.d.current_url.endswith("/traces") and b.text("team-name") == "local", "signed in on /traces")

    # upload a run folder's files by drag-and-drop input; the trace appears, ready
    folder = write_packed_dir(tmp_path / "run", per_step)
    files = sorted(folder.iterdir())
    b.element("#trace-upload input[type=file]", "the upload input").send_keys("\n".join(str(f) for f in files))
    ok = b.wait(lambda: b.text("upload-ok"), "the upload confirmation")
    assert f"{STEPS} steps" in ok and f"{STEPS * 16 * 4:,} samples" in ok
    # every file is listed, in the order they are read, under one collapsed line with their count
    assert [li.get_attribute("data-file") for li in b.css("#upload-status li")] == [f.name for f in files]
    assert f"{len(files)} files" in b.text("upload-files-summary")
    assert b.css("#upload-files")[0].get_attribute("open") is None
    row = b.wait(
        lambda: [r for r in b.css("#traces-table tr[data-trace-id]") if r.get_attribute("data-status") == "ready"],
        "the ready trace in the table",
    )[0]
    trace_id = int(row.get_attribute("data-trace-id"))
    b.assert_console_clean()

    # overview: cards and the response percentiles over steps
    b.open(f"/traces/{trace_id}")
    b.wait(lambda: (b.text("card-steps") or "").split("\n")[1:2] == [str(STEPS)], "the steps card")
    lines = b.wait_chart("overview-lengths", "p50", "p99")
    assert lines["p50"]["y"] == pytest.approx([np.percentile(responses(r), 50) for r in per_step])
    tokens = sum(r["input"] * len(r["output"]) + sum(r["output"]) for rows in per_step for r in rows)
    assert f"{tokens:,}" in b.text("card-tokens")
    b.wait(lambda: "x" in (b.text("card-imbalance") or "").split("\n")[1], "the imbalance card from its analysis")
    b.assert_console_clean()

    # distributions: one box per step from the stored percentiles; the heatmap shares
    b.open(f"/traces/{trace_id}/distributions")
    box = b.wait_chart("dist-box", "p25-p75, whiskers p10-p90")["p25-p75, whiskers p10-p90"]
    assert box["x"] == list(range(STEPS))
    assert box["q1"] == pytest.approx([np.percentile(responses(r), 25) for r in per_step])
    assert box["upperfence"] == pytest.approx([np.percentile(responses(r), 90) for r in per_step])
    heat = next(iter(b.wait_chart("dist-heatmap").values()))
    assert np.allclose(np.nansum(np.array(heat["z"], dtype=float), axis=0), 100.0)
    cdf = b.wait_chart("dist-cdf")
    assert len(cdf) == min(4, STEPS) and all(t["y"][-1] == pytest.approx(1.0) for t in cdf.values())
    idle = b.wait_chart("longtail-idle")
    total = np.sum([t["y"] for t in idle.values()], axis=0)
    assert total == pytest.approx([100 * rollout_idle_share(r) for r in per_step])
    b.assert_console_clean()

    # imbalance: recorded max/mean of the DP token loads, and KK/LPT never above it here
    b.open(f"/traces/{trace_id}/imbalance")
    ratio = b.wait_chart("imb-ratio", "recorded", "Karmarkar-Karp", "LPT")
    expected = [max(v) / np.mean(v) for v in (list(dp_token_loads(r).values()) for r in per_step)]
    assert ratio["recorded"]["y"] == pytest.approx(expected)
    assert all(k <= r + 1e-9 for k, r in zip(ratio["Karmarkar-Karp"]["y"], ratio["recorded"]["y"]))
    heat = next(iter(b.wait_chart("imb-heatmap").values()))
    assert np.array(heat["z"], dtype=float).shape == (4, STEPS)  # dp ranks x steps
    assert "%" in b.text("imb-kk-saved")
    b.assert_console_clean()

    # the GPU timeline and multi-turn pages say what this trace lacks
    b.open(f"/traces/{trace_id}/gpu")
    b.wait(lambda: "no GPU events" in (b.text("_pages_content") or ""), "the no-GPU message")
    b.open(f"/traces/{trace_id}/multiturn")
    b.wait(lambda: "no turns" in (b.text("_pages_content") or ""), "the no-turns message")

    # jobs: the analyses the pages started, finished; re-run one with other parameters
    b.open("/jobs")
    b.wait(
        lambda: (
            {r.get_attribute("data-kind") for r in b.css("#jobs-table tr[data-status=succeeded]")}
            >= {"longtail", "imbalance"}
        ),
        "succeeded analysis jobs",
    )
    row = b.element("#jobs-table tr[data-kind=longtail]", "the longtail job's row")
    trace_name = server.api.get(f"/traces/{trace_id}").json()["name"]
    assert row.find_element("css selector", ".job-trace").text == trace_name  # the trace by name, not id
    assert "tail fraction 0.1" in row.find_element("css selector", ".job-params").text  # readable, not JSON
    assert row.find_element("css selector", ".job-duration").text.endswith(" s")
    row.find_element("css selector", "button").click()
    field = b.wait(
        lambda: b.d.find_element("css selector", "[data-param=tail_fraction] input"),
        "the re-run form with the job's parameters",
    )
    assert float(field.get_attribute("value")) == pytest.approx(0.1)
    field.send_keys(Keys.CONTROL, "a")  # (clear() bypasses React: the old text would stay)
    field.send_keys(Keys.DELETE)
    field.send_keys("0.2")
    b.click("rerun-submit", "the re-run button")
    started = b.wait(lambda: b.text("rerun-message"), "the re-run message")
    assert "Started job" in started, started
    job_id = int(started.split()[2])
    job = server.api.get(f"/jobs/{job_id}").json()
    assert job["kind"] == "longtail" and job["trace_id"] == trace_id and job["params"]["tail_fraction"] == 0.2
    b.assert_console_clean()


def _shown_number(text: str | None) -> float | None:
    """The number a card shows ('1,234', '3.20 M', '1.23x', '45.6%'), as a plain float."""
    value = (text or "").split("\n")[1] if text and "\n" in text else ""
    scale = {"%": 0.01, "x": 1.0, " M": 1e6, " B": 1e9}
    for suffix, factor in scale.items():
        if value.endswith(suffix):
            return float(value[: -len(suffix)].replace(",", "")) * factor
    return float(value.replace(",", "")) if value and value != "—" else None


def test_overview_cards_show_the_api_numbers(browser, server, per_step, tmp_path):
    """Each overview card shows the number the API returns (to the card's precision)."""
    b = browser
    trace = server.upload(sorted(write_packed_dir(tmp_path / "cards", per_step).iterdir()), "cards")
    tid = trace["id"]

    def done(kind):
        jobs = [j for j in server.api.get(f"/traces/{tid}/analyses").json()["items"] if j["kind"] == kind]
        return jobs and jobs[0]["status"] == "succeeded" and server.api.get(f"/traces/{tid}/analyses/{kind}").json()

    imb = b.wait(lambda: done("imbalance"), "the imbalance analysis")["result"]["summary"]["tokens"]
    idle = b.wait(lambda: done("longtail"), "the long-tail analysis")["result"]["summary"]["idle_fraction"]["mean"]
    t = server.api.get(f"/traces/{tid}").json()
    steps = server.api.get(f"/traces/{tid}/steps").json()["items"]
    tails = sorted(x["tail_ratio"] for x in server.api.get(f"/traces/{tid}/summaries").json()["steps"])
    mid = len(tails) // 2
    expected = {
        "card-steps": (t["n_steps"], 0),
        "card-samples": (t["n_samples"], 0.005),
        "card-tokens": (sum(x["prompt_tokens"] + x["response_tokens"] for x in steps), 0.005),
        "card-tail": (tails[mid] if len(tails) % 2 else (tails[mid - 1] + tails[mid]) / 2, 0.006),
        "card-imbalance": (imb["max_over_mean"]["mean"], 0.006),
        "card-idle": (idle, 0.0006),
    }
    b.sign_in(server.key)
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]"), "the traces page")
    b.open(f"/traces/{tid}")
    for card_id, (want, tol) in expected.items():
        got = b.wait(lambda card_id=card_id: _shown_number(b.text(card_id)), f"the number on {card_id}")
        assert got == pytest.approx(want, rel=tol, abs=tol), (card_id, b.text(card_id))
    b.assert_console_clean()


def test_upload_error_is_shown_next_to_its_file(browser, server, per_step, tmp_path):
    b = browser
    b.sign_in(server.key)
    upload_input = b.element("#trace-upload input[type=file]", "the traces page's upload input")
    good = write_packed_dir(tmp_path / "bad", per_step[:1])
    bad = good / "packed_lengths_step_1.jsonl"
    rows = [dict(r) for r in per_step[1]]
    rows[2]["output"] = "many"  # line 3 is broken
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    upload_input.send_keys(f"{good / 'packed_lengths_step_0.jsonl'}\n{bad}")
    err = b.wait(
        lambda: b.css("#upload-status li[data-file='packed_lengths_step_1.jsonl'] .file-error"),
        "the error next to the bad file",
    )[0].text
    assert "line 3" in err and "output" in err
    assert not b.css("#upload-status li[data-file='packed_lengths_step_0.jsonl'] .file-error")
    assert "nothing was stored" in b.text("upload-error")
    b.assert_console_clean()


def test_compare_delete_sign_out_and_other_team(browser, server, per_step, tmp_path):
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    b = browser
    a = server.upload(sorted(write_packed_dir(tmp_path / "a", per_step[:3]).iterdir()), "compare A")
    other = synthetic_rows(steps=3, groups=8, n=4, seed=11)
    c = server.upload(sorted(write_packed_dir(tmp_path / "c", other).iterdir()), "compare C")
    b.sign_in(server.key)
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]"), "the traces page")

    b.open(f"/compare?a={a['id']}&b={c['id']}")
    lines = b.wait_chart("cmp-lengths", "A p50", "B p99")
    assert lines["B p99"]["y"] == pytest.approx([np.percentile(responses(r), 99) for r in other])
    assert len(b.wait_chart("cmp-cdf")) == 2
    b.assert_console_clean()

    # delete C with confirmation
    b.open("/traces")
    b.click(f"tr[data-trace-id='{c['id']}'] button", "C's delete button")
    WebDriverWait(b.d, 10).until(EC.alert_is_present())
    b.d.switch_to.alert.accept()
    b.wait(lambda: not b.css(f"tr[data-trace-id='{c['id']}']"), "C gone from the table")
    assert server.api.get(f"/traces/{c['id']}").status_code == 404

    # sign out: pages send the browser to sign in again
    b.click("sign-out", "the sign-out button")
    b.wait(lambda: "/sign-in" in b.d.current_url, "the sign-in page after signing out")
    b.open(f"/traces/{a['id']}")
    b.wait(lambda: "/sign-in" in b.d.current_url, "sign-in required again")

    # another team does not see this team's trace
    b.sign_in(server.other_team_key())
    b.wait(lambda: b.text("team-name") == "other team", "signed in as the other team")
    b.open(f"/traces/{a['id']}")
    b.wait(lambda: "not found" in (b.text("trace-error") or ""), "not found for the other team")
    b.assert_console_clean()


def test_gpu_timeline_page_on_kineto_traces(browser, server, shared_fixtures, downloads):
    b = browser
    kineto = shared_fixtures / "kineto"
    trace = server.upload([kineto / "sampled_rank-0.json.gz", kineto / "sampled_rank-1.json.gz"], "kineto sampled")
    b.sign_in(server.key)
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]"), "the traces page")
    b.open(f"/traces/{trace['id']}/gpu")
    gantt = b.wait_chart("gpu-kernel-gantt", "compute", "communication")
    assert gantt["compute"]["type"] == "scatter"
    temporal = b.wait_chart("gpu-temporal", "idle", "compute")
    # Holistic Trace Analysis's reference figures for these ranks (fixtures README)
    assert temporal["idle"]["x"] == pytest.approx([53.56, 54.72], abs=0.01)
    assert temporal["compute"]["x"] == pytest.approx([17.71, 22.57], abs=0.01)
    assert len(b.wait(lambda: b.css("#gpu-top-kernels tbody tr"), "the top-kernels table")) >= 2

    # zoom into the first 50 ms and load every event of that window from the server
    def zoomed_info():
        if "window 50.000 ms" in (b.text("gpu-window-info") or ""):
            return b.text("gpu-window-info")
        # (again each round: a figure update that lands after the zoom resets it)
        b.d.execute_script(
            "var p = document.getElementById('gpu-kernel-gantt').querySelector('.js-plotly-plot');"
            "Plotly.relayout(p, {'xaxis.range[0]': 0, 'xaxis.range[1]': 50});"
        )
        time.sleep(0.3)  # the zoom reaches Dash as the graph's relayoutData
        b.click("gpu-zoom-load", "the load-window button")
        time.sleep(0.7)
        return None

    info = b.wait(zoomed_info, "the zoomed window")
    zoomed = b.wait_chart("gpu-kernel-gantt", "compute")
    # every event drawn overlaps the window [0, 50] ms (segments are start, end, gap)
    bars = [
        t
        for t in zoomed.values()
        if "idle" not in t["name"]
        and len(t["x"]) % 3 == 0
        and all(g is None for g in t["x"][2::3])  # kernel bars: (start, end, gap); not names or flows
    ]
    segs = [(t["x"][i], t["x"][i + 1]) for t in bars for i in range(0, len(t["x"]), 3)]
    assert segs and all(s0 <= 50.0 + 1e-6 and s1 >= -1e-6 for s0, s1 in segs)
    # the detail view draws each event of the window once per rank lane shown
    assert 0 < int(info.split()[0].replace(",", "")) <= len(segs) < 2 * 1179

    # the window downloads as Chrome-trace JSON
    before = set(downloads.iterdir())
    b.click("gpu-download", "the download button")
    path = b.wait(lambda: [p for p in set(downloads.iterdir()) - before if p.suffix == ".json"], "the download")[0]
    body = json.loads(b.wait(lambda: path.read_text() or None, "the downloaded file"))
    assert body["traceEvents"]
    b.assert_console_clean()


def test_multiturn_page_on_search_r1(browser, server, shared_fixtures):
    b = browser
    trace = server.upload(
        [shared_fixtures / "polytrace" / "search_r1_qwen2_5_7b" / "multiturn_workload_step_5.jsonl"], "search-r1 step 5"
    )
    rows = [
        json.loads(line)
        for line in (shared_fixtures / "polytrace" / "search_r1_qwen2_5_7b" / "multiturn_workload_step_5.jsonl").open()
    ]
    train = [r for r in rows if not r.get("validate")]
    b.sign_in(server.key)
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]"), "the traces page")
    b.open(f"/traces/{trace['id']}/multiturn")
    counts = b.wait_chart("mt-counts", "turns")
    turns = np.bincount([r["turn_count"] for r in train])
    assert counts["turns"]["y"] == list(np.trim_zeros(turns, "b"))
    cache = b.wait_chart("mt-cache", "cache hit rate")
    prompt = sum(t["prompt_tokens"] for r in train for t in r["turns"])
    cached = sum(t["cached_tokens"] for r in train for t in r["turns"])
    assert cache["cache hit rate"]["y"] == pytest.approx([100 * cached / prompt])
    b.assert_console_clean()
    # imbalance does not apply (no dp_rank): an explanation, not a red error
    b.open(f"/traces/{trace['id']}/imbalance")
    b.wait(lambda: "no DP rank" in (b.text("_pages_content") or ""), "the no-dp_rank note")
    assert not b.css(".alert-error")
    b.assert_console_clean()


# -- replays and synthetic workloads ------------------------------------------------------
def _number_input(b, element_id: str, value) -> None:
    from selenium.webdriver.common.keys import Keys

    box = b.element(element_id, clickable=True)
    box.send_keys(Keys.CONTROL, "a")  # (clear() bypasses React)
    box.send_keys(Keys.DELETE)
    box.send_keys(str(value))


def _card_value(b, card_id: str) -> str | None:
    text = b.text(card_id)
    return text.split("\n")[1] if text and "\n" in text else None


def _latest_simulation(server, trace_id: int) -> dict:
    items = server.api.get("/simulations", params={"trace_id": trace_id}).json()["items"]
    return server.api.get(f"/simulations/{items[0]['id']}").json()


def test_simulate_page_replays_sync_against_one_step_off(browser, server, per_step, tmp_path, downloads):
    b = browser
    trace = server.upload(sorted(write_packed_dir(tmp_path / "sim", per_step).iterdir()), "replay me")
    b.sign_in(server.key)
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]"), "the traces page")
    b.open(f"/traces/{trace['id']}/simulate")
    b.wait(lambda: "None yet" in (b.text("sim-history") or ""), "the empty replay list")
    # the form starts from the presets: sync against one_step_off on one GPU budget (the
    # layout left to the API, derived per policy)
    assert b.element("sim-gpus", "the GPUs box").get_attribute("value") == "8"
    assert b.element("sim-replicas", "the replicas box").get_attribute("value") == ""
    _number_input(b, "sim-max-seqs", 64)
    b.click("sim-submit", "the replay button")
    b.wait(lambda: _submitted(b.text("sim-form-message")), "the replay to start")
    shown = b.wait(lambda: _card_value(b, "card-sim-speedup"), "the speedup card", timeout=120)
    job = _latest_simulation(server, trace["id"])
    assert job["status"] == "succeeded" and job["params"]["limits"]["max_running_seqs"] == 64
    assert job["params"]["policy"]["kind"] == "sync" and job["params"]["compare_policy"]["kind"] == "one_step_off"
    assert shown == f"{job['result']['compare']['total']['speedup']:.3f}x"
    bars = b.wait_chart("sim-speedup", "per step")["per step"]
    assert bars["y"] == pytest.approx([r["speedup"] for r in job["result"]["compare"]["per_step"]])
    lines = b.wait_chart(
        "sim-pred-vs-measured", "predicted rollout", "predicted step (sync)", "predicted step (one_step_off)"
    )
    assert lines["predicted step (sync)"]["y"] == pytest.approx([s["step_time"] for s in job["result"]["a"]["steps"]])
    idle = b.wait_chart("sim-idle")
    assert any(t.get("type") == "bar" for t in idle.values())
    gantt = b.wait_chart("sim-timeline", "rollout")  # a short timeline: every interval as a segment
    starts = [v for v in gantt["rollout"]["x"][0::3]]
    first = job["result"]["a"]["timeline"][0]["intervals"]
    assert starts[0] == pytest.approx(next(iv[0] for iv in first if iv[3] == "rollout"), rel=1e-6)
    b.element(f"#sim-history tr[data-job-id='{job['id']}']", "the replay in the history")

    # the simulated timeline downloads as Chrome trace JSON
    before = set(downloads.iterdir())
    b.click("sim-download-b", "the timeline download button")
    path = b.wait(lambda: [p for p in set(downloads.iterdir()) - before if p.suffix == ".json"], "the download")[0]
    events = json.loads(b.wait(lambda: path.read_text() or None, "the downloaded file"))["traceEvents"]
    assert any(e.get("name") == "rollout" and e.get("ph") == "X" for e in events)

    # the jobs page re-runs it in the simulate page's form, filled as it was configured
    b.open(f"/jobs?trace_id={trace['id']}&kind=simulation")
    row = b.wait(lambda: b.css(f"#jobs-table tr[data-job-id='{job['id']}']"), "the replay in the jobs table")[0]
    assert "sync vs one_step_off" in row.find_element("css selector", ".job-params").text
    row.find_element("link text", "Re-run…").click()
    b.wait(lambda: b.text("sim-rerun-note"), "the re-run form")
    assert b.d.find_element("id", "sim-max-seqs").get_attribute("value") == "64"
    b.assert_console_clean()


def test_simulate_page_shows_calibrated_accuracy_on_search_r1(browser, server, shared_fixtures):
    b = browser
    folder = shared_fixtures / "polytrace" / "search_r1_qwen2_5_7b"
    trace = server.upload(
        [folder / "multiturn_workload_step_0.jsonl", folder / "multiturn_workload_step_1.jsonl"], "search-r1 steps 0-1"
    )
    b.sign_in(server.key)
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]"), "the traces page")
    b.open(f"/traces/{trace['id']}/simulate")
    b.click("#sim-calibrate input[value=on]", "the form's calibrate switch")
    b.element("sim-fit-steps", "the fit-steps box", clickable=True).send_keys("0")
    assert b.element("sim-step-from").get_attribute("value") == "0"
    assert b.element("sim-step-to").get_attribute("value") == "2"
    b.click("sim-submit", "the replay button")
    shown = b.wait(
        lambda: (_card_value(b, "card-sim-accuracy-rollout") or "").rstrip("%") or None,
        "the rollout accuracy",
        timeout=180,
    )
    job = _latest_simulation(server, trace["id"])
    assert job["params"]["calibrate"] == {"fit_steps": [0]} and job["params"]["steps"] == [0, 2]
    accuracy = job["result"]["accuracy"]["mean"]["rollout_s_accuracy"]
    assert float(shown) == pytest.approx(100 * accuracy, abs=0.051)
    # the Monte-Carlo mean on the one eligible step (docs/simulator.md): better than naive
    assert job["result"]["accuracy"]["predictor"] == "mc_mean"
    assert accuracy > job["result"]["accuracy"]["mean"]["rollout_s_naive_accuracy"]
    row = b.wait(lambda: b.css("#sim-accuracy-table tr[data-metric=rollout_s] td"), "the accuracy table")
    assert [c.text for c in row[1:3]] == [
        f"{100 * accuracy:.1f}%",
        f"{100 * job['result']['accuracy']['mean']['rollout_s_naive_accuracy']:.1f}%",
    ]
    lines = b.wait_chart("sim-pred-vs-measured", "measured rollout", "predicted rollout")
    measured = job["result"]["accuracy"]["steps"][0]["rollout_s"]["measured"]
    assert lines["measured rollout"]["x"] == [1] and lines["measured rollout"]["y"] == pytest.approx([measured])
    b.assert_console_clean()


def test_workload_page_fits_generates_and_downloads(browser, server, per_step, tmp_path, downloads):
    import zipfile

    b = browser
    trace = server.upload(sorted(write_packed_dir(tmp_path / "wl", per_step).iterdir()), "fit me")
    b.sign_in(server.key)
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]"), "the traces page")
    b.open(f"/traces/{trace['id']}/workload")
    b.wait(lambda: "None yet" in (b.text("wl-history") or ""), "the form and the empty job list")
    _number_input(b, "wl-steps", 2)
    _number_input(b, "wl-groups", 8)
    _number_input(b, "wl-samples", 3)
    b.click("wl-submit", "the generate button")
    link = b.element("wl-trace-link", "the new trace's link", timeout=120)
    new_id = int(link.get_attribute("href").rstrip("/").split("/")[-1])
    new = server.wait_ready(new_id)
    assert (new["n_steps"], new["n_samples"]) == (2, 2 * 8 * 3)
    ks = b.wait_chart("wl-ks", "default")["default"]
    job = server.api.get("/jobs", params={"trace_id": trace["id"], "kind": "workload"}).json()["items"][0]
    job = server.api.get(f"/workloads/{job['id']}").json()
    fit = job["result"]["fit"]["default"]
    assert ks["x"][:4] == pytest.approx(
        [fit["prompt"]["lognorm"], fit["prompt"]["gamma"], fit["response"]["lognorm"], fit["response"]["gamma"]]
    )
    before = set(downloads.iterdir())
    b.click("wl-download", "the zip download button")
    path = b.wait(lambda: [p for p in set(downloads.iterdir()) - before if p.suffix == ".zip"], "the zip")[0]
    names = b.wait(lambda: zipfile.ZipFile(path).namelist() if zipfile.is_zipfile(path) else None, "a whole zip")
    assert {"packed_lengths_step_0.jsonl", "packed_lengths_step_1.jsonl"} <= {n.split("/")[-1] for n in names}
    b.assert_console_clean()


# Every chart on screen, as the browser drew it: whether it holds data, the explanation an
# empty one carries (layout.meta.empty), its toolbar buttons, and per axis the title and
# the tick labels plotly rendered.
CHARTS_JS = """
var size = function (a) {
  if (!a) { return 0; }
  if (a._inputArray) { return a._inputArray.length; }
  return a.length === undefined ? 1 : a.length; };
return Array.from(document.querySelectorAll('.js-plotly-plot')).filter(function (p) {
  return p.offsetParent !== null; }).map(function (p) {
  var full = p._fullLayout || {}, axes = [];
  Object.keys(full).forEach(function (k) {
    var ax = full[k];
    if (!/^[xy]axis\\d*$/.test(k) || !ax || !ax.visible) { return; }
    var id = ax._id, letter = id.charAt(0);
    var labels = Array.from(p.querySelectorAll('.' + id + 'tick text, g.' + letter + 'axislayer-above .'
      + id + 'tick text')).map(function (t) { return t.textContent; });
    axes.push({id: id, title: (ax.title && ax.title.text) || '', type: ax.type, labels: labels});
  });
  return {
    id: (p.closest('[id]') || {}).id,
    points: (p.data || []).reduce(function (n, t) { return n + size(t.x) + size(t.y) + size(t.z); }, 0),
    empty: (p.layout && p.layout.meta && p.layout.meta.empty) || null,
    buttons: p.querySelectorAll('.modebar-btn').length,
    axes: axes};
});
"""
PENDING = ("Loading", "Waiting", "is running", "is queued", "analysis is running")
# axis titles of whole-number quantities (steps, ranks, counts of things)
WHOLE = ("training step", "rank", "trajectories", "count per trajectory", "turn")


def _whole_axis(title: str) -> bool:
    t = title.lower()
    return any(w in t for w in WHOLE) and "mean" not in t and "(count)" not in t and "time" not in t


def test_every_page_explains_its_empty_charts_and_counts_in_whole_ticks(browser, server, per_step, tmp_path):
    b = browser
    trace = server.upload(sorted(write_packed_dir(tmp_path / "pages", per_step[:3]).iterdir()), "every page")
    b.sign_in(server.key)
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]"), "the traces page")
    tid = trace["id"]
    pages = ["", "/distributions", "/gpu", "/imbalance", "/multiturn", "/simulate", "/workload"]
    seen = checked = 0
    for page in [f"/traces/{tid}{p}" for p in pages] + ["/jobs", f"/compare?a={tid}&b={tid}"]:
        b.open(page)
        opened, last = time.monotonic(), {"n": -1}

        def settled():
            charts = b.d.execute_script(CHARTS_JS)
            if any(c["empty"] and c["empty"].startswith(PENDING) for c in charts):
                return None
            n, last["n"] = len(charts), len(charts)
            if n != last.get("prev"):  # still drawing: wait for two equal looks in a row
                last["prev"] = n
                return None
            if not charts:  # a page without charts (its message says why): give it time to draw
                return [{"none": True}] if time.monotonic() - opened > 4 else None
            return charts

        charts = [c for c in b.wait(settled, f"the charts of {page} to settle") if "none" not in c]
        for c in charts:
            seen += 1
            if not c["points"]:  # an empty chart says why, and has no toolbar over nothing
                assert c["empty"], (page, c)
                assert c["buttons"] == 0, (page, c)
                continue
            for ax in c["axes"]:
                if ax["type"] == "category" or not _whole_axis(ax["title"]):
                    continue
                fractional = [t for t in ax["labels"] if "." in t]
                assert not fractional, (page, c["id"], ax)
                checked += bool(ax["labels"])
        b.assert_console_clean()
    assert seen >= 10 and checked >= 5
    # the stage-time panel is not drawn without stage timings; the page says what to upload
    b.open(f"/traces/{tid}")
    b.wait(lambda: "upload the run's verl metric log" in (b.text("overview-no-stage-time") or ""), "the hint")
    # the formats documentation the upload page links to is served by the app
    b.open("/traces")
    href = b.wait(lambda: b.css("#formats-link"), "the formats link")[0].get_attribute("href")
    b.open(href.replace(server.base, ""))
    b.wait(lambda: "Accepted trace formats" in (b.text("formats-doc") or ""), "the formats page")
    b.assert_console_clean()


def test_api_docs_render_offline_under_the_csp(browser):
    """Swagger UI and ReDoc draw the API from assets the app serves itself (no CDN), and
    the Content-Security-Policy lets them (and the dashboard) run without console errors."""
    browser.open("/api/v1/docs")
    browser.wait(lambda: len(browser.css(".opblock")) > 10, "Swagger UI's operations")
    browser.assert_console_clean()
    browser.open("/api/v1/redoc")
    browser.wait(lambda: browser.css("h1") and "RLVR Explorer" in browser.css("h1")[0].text, "ReDoc's title")
    browser.assert_console_clean()
