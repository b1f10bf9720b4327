"""An engine replay end to end, in a real browser: queued by `POST /traces/{id}/engine-
replays` on the `engine` queue, run by a worker of the engine environment
(RLVR_ENGINE_PYTHON: `celery -A workers.celery_app worker -Q engine`, as docs/engine.md
deploys it) on a real vLLM engine (tiny model, 64 requests, lengths x 0.05); the Simulate page then shows what the simulator predicted
from the engine profile beside what the engine measured, the numbers the API gives."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.conftest import ROOT, stop_worker
from tests.dashboard.browser.test_browser import Browser, browser, downloads, server  # noqa: F401
from tests.engine.test_engine_replay import engine_python  # noqa: F401
from tests.helpers import synthetic_rows, write_packed_dir

pytestmark = [pytest.mark.browser, pytest.mark.engine]


@pytest.fixture()
def engine_worker(server, engine_python, tmp_path):  # noqa: F811
    """A worker of the engine environment reading only the engine queue."""
    log = tmp_path / "engine-worker.log"
    env = {**server.env, "RLVR_ENGINE_PYTHON": engine_python}
    cmd = [engine_python, "-m", "celery", "-A", "workers.celery_app", "worker", "-Q", "engine"]
    cmd += ["--concurrency=1", "--loglevel=INFO", "--without-gossip", "--without-mingle"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while b"ready." not in log.read_bytes():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)
    yield proc, log
    stop_worker(proc)


def wait_job(srv, job_id: int, log, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = srv.api.get(f"/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed"):
            assert job["status"] == "succeeded", (job, log.read_text()[-3000:])
            return job
        time.sleep(2)
    raise AssertionError(f"engine replay {job_id} did not finish in {timeout} s:\n{log.read_text()[-3000:]}")


def table_rows(b: Browser) -> dict[str, list[str]]:
    rows = b.css("#engine-measured-table tr[data-figure]")
    return {r.get_attribute("data-figure"): [td.text for td in r.find_elements("css selector", "td")] for r in rows}


@pytest.mark.timeout(1200)  # engine start, a calibration sweep and a 64-request replay on a loaded 2-core machine
def test_simulate_shows_an_engine_replay_predicted_beside_measured(browser, server, engine_worker, tmp_path):  # noqa: F811
    b = browser
    folder = write_packed_dir(tmp_path / "engine", synthetic_rows(steps=2, groups=16, n=4, seed=11))
    trace = server.upload(sorted(folder.iterdir()), "engine replayed")
    body = {"policy": "sync", "steps": [0, 1], "max_requests": 64, "length_scale": 0.05}
    queued = server.api.post(f"/traces/{trace['id']}/engine-replays", json=body)
    assert queued.status_code == 202 and queued.json()["kind"] == "engine_replay", queued.text
    job_id = queued.json()["id"]
    job = wait_job(server, job_id, engine_worker[1], timeout=1000)
    assert job["kind"] == "engine_replay" and job["result"]["lengths_exact"], job
    assert job["result"]["requests"] == 64 and job["result"]["engines"] == 1

    [replay] = server.api.get(f"/traces/{trace['id']}/engine-replays").json()["items"]
    assert replay["job_id"] == job_id and replay["profile"]["id"] == job["result"]["profile_id"]
    measured, predicted = replay["measured"], replay["predicted"]
    assert measured["makespan_s"] > 0 and predicted["makespan_s"] > 0

    b.sign_in(server.key)
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]"), "the traces page")
    b.open(f"/traces/{trace['id']}/simulate")
    rows = b.wait(lambda: table_rows(b), "the measured-on-a-real-engine table")
    assert set(rows) == {"makespan_s", "p50_completion_s", "p90_completion_s", "decoded_tokens"}
    for key in ("makespan_s", "p50_completion_s", "p90_completion_s"):
        assert rows[key][1:3] == [f"{predicted[key]:.3f}", f"{measured[key]:.3f}"], (key, rows[key])
    assert rows["decoded_tokens"][1:3] == [f"{predicted['decoded_tokens']:,}", f"{measured['decoded_tokens']:,}"]
    assert rows["makespan_s"][3] == f"{100 * replay['error']['makespan']:+.1f}%"
    about = b.text("engine-measured-about")
    assert f"Engine replay {job_id}: policy sync, 64 requests" in about and "lengths exact: yes" in about
    assert f"engine profile {replay['profile']['id']}" in about

    bars = b.wait_chart("engine-measured-chart", "predicted", "measured")
    times = [predicted["makespan_s"], predicted["p50_completion_s"], predicted["p90_completion_s"]]
    assert bars["predicted"]["y"] == pytest.approx(times)
    assert bars["measured"]["y"] == pytest.approx(
        [measured[k] for k in ("makespan_s", "p50_completion_s", "p90_completion_s")]
    )
    b.assert_console_clean()
