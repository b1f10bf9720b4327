"""`rlvr-explorer watch` against a real API server (a subprocess on a fresh SQLite
database): a test plays the trainer, writing step files and metric-log lines into a run
folder over time (a half-written line included); the watcher is killed with SIGKILL
mid-run and restarted, its state is even rolled back as if it died between a send and
its record, and in the end the trace holds every step exactly once. The Client is
exercised on the same server."""

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
import orjson
import pytest

from tests.conftest import ROOT
from tests.helpers import health, jsonl, responses_of, synthetic_rows

TIMEOUT = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def live_server(tmp_path_factory):
    from backend.store.migrate import upgrade

    data = tmp_path_factory.mktemp("watch-server")
    url = f"sqlite:///{data / 'db.sqlite3'}"
    upgrade(url)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(RLVR_DATA_DIR=str(data), RLVR_DATABASE_URL=url, RLVR_BROKER_URL="filesystem://", PYTHONUNBUFFERED="1")
    key = subprocess.run(
        [sys.executable, "-m", "rlvr_explorer", "create-team", "watchers"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()[-1]
    port = _free_port()
    log = data / "api.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr_explorer", "api", "--no-dashboard", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        health(port, proc, "api did not answer within 60 s", timeout=60, log=log)
        yield {"base": base, "key": key, "env": env}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def start_watch(server, run_dir: Path, log: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlvr_explorer",
            "watch",
            str(run_dir),
            "--server",
            server["base"],
            "--api-key",
            server["key"],
            "--interval",
            "0.2",
            *extra,
        ],
        cwd=ROOT,
        env=server["env"],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait(predicate, what: str, timeout: float = TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def metric_line(step: int) -> bytes:
    return (
        orjson.dumps({"step": step, "data": {"timing_s/gen": 10.0 + step, "actor/entropy": 1.0 / (step + 1)}}) + b"\n"
    )


def test_watch_survives_kill_and_restart(live_server, tmp_path):
    per_step = synthetic_rows(steps=6, groups=8, n=4, seed=5)
    run = tmp_path / "run"
    run.mkdir()
    log = tmp_path / "watch.log"
    http = httpx.Client(base_url=live_server["base"] + "/api/v1", headers={"X-API-Key": live_server["key"]})

    def write_step(step: int) -> None:
        (run / f"packed_lengths_step_{step}.jsonl").write_bytes(jsonl(per_step[step]))
        with (run / "metrics.jsonl").open("ab") as f:
            f.write(metric_line(step))

    write_step(0)
    write_step(1)
    with (run / "metrics.jsonl").open("ab") as f:
        f.write(metric_line(2)[:15])  # a half-written line: waited for
    (run / "packed_lengths_step_2.jsonl").write_bytes(jsonl(per_step[2])[:40])  # half-written file

    proc = start_watch(live_server, run, log, "--name", "watched run")
    state_path = run / ".rlvr-watch.json"
    trace_id = wait(lambda: state_path.exists() and json.loads(state_path.read_text())["trace_id"], "state file")

    def trace() -> dict:
        return http.get(f"/traces/{trace_id}").json()

    def steps() -> dict[int, dict]:
        return {s["step"]: s for s in http.get(f"/traces/{trace_id}/steps").json()["items"]}

    wait(lambda: {0, 1} <= set(steps()) and all(steps()[s]["n_samples"] for s in (0, 1)), "steps 0 and 1")
    assert trace()["live"]
    time.sleep(1.0)
    assert 2 not in steps()  # neither the half-written line nor the half-written file went
    checkpoint = state_path.read_bytes()  # as if the watcher died before recording what follows

    # the trainer finishes step 2, then the watcher is killed without warning
    (run / "packed_lengths_step_2.jsonl").write_bytes(jsonl(per_step[2]))
    with (run / "metrics.jsonl").open("ab") as f:
        f.write(metric_line(2)[15:])
    wait(lambda: 2 in steps() and steps()[2]["n_samples"] and steps()[2]["t_gen"] is not None, "step 2")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert trace()["live"]  # killed: nobody closed it

    write_step(3)
    state_path.write_bytes(checkpoint)  # the record of step 2 is lost: it is sent again
    proc = start_watch(live_server, run, log)
    wait(lambda: 3 in steps() and steps()[3]["t_gen"] is not None, "step 3 after the restart")
    write_step(4)
    wait(lambda: 4 in steps() and steps()[4]["t_gen"] is not None, "step 4")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    write_step(5)
    proc = start_watch(live_server, run, log, "--idle-exit", "1.5")
    assert proc.wait(timeout=TIMEOUT) == 0, log.read_text()[-2000:]

    final = steps()
    assert sorted(final) == list(range(6))
    for s in range(6):
        values = responses_of(per_step, s)
        assert final[s]["n_samples"] == values.size  # no step lost, none twice
        assert final[s]["response_tokens"] == int(values.sum())
        assert final[s]["t_gen"] == 10.0 + s
        assert final[s]["metrics"]["actor/entropy"] == pytest.approx(1.0 / (s + 1))
    t = trace()
    assert t["n_samples"] == sum(responses_of(per_step, s).size for s in range(6))
    assert t["live"] is False  # the watcher closed it on exit
    assert "watch: trace" in log.read_text()


def test_client_logs_steps_and_closes(live_server):
    from rlvr_explorer import Client

    with Client(live_server["base"], live_server["key"], name="trainer") as client:
        for step in range(4):
            client.log(step, {"timing_s/step": 1.5 * step, "actor/loss": 2.0 - step})
        client.log(3, {"timing_s/step": 4.5, "actor/loss": -1.0})  # the same step again: no duplicate
        # NaN, text and nothing at all are refused by name, before anything is sent
        for bad, named in (({"bad": float("nan")}, "'bad'"), ({"lr": "1e-6"}, "'lr'"), ({}, "no metrics")):
            with pytest.raises(ValueError, match=named):
                client.log(4, bad)
        raw = client._http.post(
            f"/traces/{client.trace_id}/steps", json={"steps": [{"step": 4, "metrics": {"x": "a"}}]}
        )
        assert raw.status_code == 422 and "x" in str(raw.json()["detail"]["field"])
        trace = client.get_trace()
        assert trace["live"] and trace["n_steps"] == 4
        tid = client.trace_id
    http = httpx.Client(base_url=live_server["base"] + "/api/v1", headers={"X-API-Key": live_server["key"]})
    body = http.get(f"/traces/{tid}/series", params={"keys": "t_step,actor/loss"}).json()
    assert body["steps"] == [0, 1, 2, 3]
    assert body["series"]["t_step"] == [0.0, 1.5, 3.0, 4.5]
    assert body["series"]["actor/loss"] == [2.0, 1.0, 0.0, -1.0]
    assert "bad" not in body["keys"]
    assert http.get(f"/traces/{tid}").json()["live"] is False
