"""A deployment as docker-compose runs it — `rlvr-explorer api --workers 2` with the
dashboard, on both databases: a key revoked through one process is refused by both
within 5 s, and the dashboard session signed in with it ends; state-changing dashboard
requests from a foreign origin are refused (the delete-trace callback replayed with the
session cookie and `Origin: http://evil.example` deletes nothing)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import ROOT
from tests.helpers import jsonl, synthetic_rows

REVOKED_WITHIN_S = 5.0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def two_processes(env, tmp_path):
    """`api --workers 2` (with the dashboard) on a free port; its base URL."""
    port = _free_port()
    run_env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    run_env.update(env)
    log = (tmp_path / "api.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr_explorer", "api", "--workers", "2", "--port", str(port)],
        env=run_env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "api.log").read_text()[-3000:]
            try:
                if httpx.get(f"{base}/api/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            raise AssertionError("the API did not start:\n" + (tmp_path / "api.log").read_text()[-3000:])
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def fresh_status(base: str, key: str, n: int) -> list[int]:
    """Statuses of `n` GET /me on new connections (the kernel spreads them over the processes)."""
    return [
        httpx.get(f"{base}/api/v1/me", headers={"X-API-Key": key, "Connection": "close"}, timeout=10).status_code
        for _ in range(n)
    ]


def _callback(http: httpx.Client, output: str, inputs: list, state: list | None = None, **headers):
    outputs = [{"id": o.split(".")[0], "property": o.split(".")[1]} for o in output.strip(".").split("...")]
    body = {
        "output": output,
        "outputs": outputs if len(outputs) > 1 else outputs[0],
        "inputs": inputs,
        "state": state or [],
        "changedPropIds": [f"{inputs[0]['id']}.{inputs[0]['property']}"] if isinstance(inputs[0]["id"], str) else [],
    }
    return http.post("/_dash-update-component", json=body, headers=headers)


def sign_in(http: httpx.Client, key: str, origin: str):
    return _callback(
        http,
        "..sign-in-message.children...sign-in-redirect.href..",
        [
            {"id": "sign-in-submit", "property": "n_clicks", "value": 1},
            {"id": "sign-in-key", "property": "n_submit", "value": 0},
        ],
        [
            {"id": "sign-in-key", "property": "value", "value": key},
            {"id": "sign-in-next", "property": "data", "value": "/team"},
        ],
        Origin=origin,
    )


def team_page(http: httpx.Client, origin: str):
    return _callback(
        http,
        ".._pages_content.children..._pages_store.data..",
        [
            {"id": "_pages_location", "property": "pathname", "value": "/team"},
            {"id": "_pages_location", "property": "search", "value": ""},
        ],
        Origin=origin,
    )


def test_revocation_reaches_every_process_and_ends_sessions(two_processes, team_key):
    base = two_processes
    made = httpx.post(f"{base}/api/v1/keys", json={"name": "leaked"}, headers={"X-API-Key": team_key}).json()
    key = made["key"]
    assert fresh_status(base, key, 40) == [200] * 40  # cached by both processes now
    with httpx.Client(base_url=base, timeout=30) as browser:
        assert sign_in(browser, key, base).status_code == 200
        page = team_page(browser, base)
        assert page.status_code == 200 and "leaked" in page.text  # the team page lists the keys

        revoked = httpx.delete(f"{base}/api/v1/keys/{made['id']}", headers={"X-API-Key": team_key})
        assert revoked.status_code == 204
        t0 = time.monotonic()
        while fresh_status(base, key, 10) != [401] * 10:
            assert time.monotonic() - t0 < REVOKED_WITHIN_S, "a revoked key was still accepted"
        took = time.monotonic() - t0
        assert fresh_status(base, key, 20) == [401] * 20
        assert fresh_status(base, team_key, 10) == [200] * 10
        print(f"\n[two API processes] revoked key refused by every request after {took:.1f} s")

        ended = team_page(browser, base)
        assert ended.status_code == 200 and "sign-in?next=" in ended.text, ended.text[:500]
        assert "rlvr_session=" in ended.headers.get("set-cookie", "")  # the cookie is cleared
        assert "rlvr_session" not in browser.cookies
        assert "sign-in?next=" in team_page(browser, base).text  # and stays signed out


def test_foreign_origin_cannot_replay_a_dashboard_deletion(two_processes, team_key, env):
    base = two_processes
    body = jsonl(synthetic_rows(steps=1, groups=4, n=2)[0])
    r = httpx.post(
        f"{base}/api/v1/traces",
        files=[("files", ("packed_lengths_step_0.jsonl", body, "text/plain"))],
        headers={"X-API-Key": team_key},
    )
    assert r.status_code == 201, r.text
    trace_id = r.json()["id"]

    deps = httpx.get(f"{base}/_dash-dependencies").json()
    (output,) = [  # the delete callback's registered output (allow_duplicate outputs carry a suffix)
        d["output"]
        for d in deps
        if any(i["id"] == "delete-confirm" and i["property"] == "submit_n_clicks" for i in d["inputs"])
    ]

    def delete_via_dashboard(browser, **headers):
        return _callback(
            browser,
            output,
            [{"id": "delete-confirm", "property": "submit_n_clicks", "value": 1}],
            [
                {"id": "delete-target", "property": "data", "value": trace_id},
                {"id": "traces-refresh", "property": "data", "value": 0},
            ],
            **headers,
        )

    with httpx.Client(base_url=base, timeout=30) as browser:
        assert sign_in(browser, team_key, base).status_code == 200
        for headers in (
            {"Origin": "http://evil.example"},
            {"Origin": "null"},
            {"Referer": "http://evil.example/page"},
            {"Origin": base.replace("127.0.0.1", "localhost")},  # another origin, same machine
            {},
        ):
            refused = delete_via_dashboard(browser, **headers)
            assert refused.status_code == 403, (headers, refused.text)
            assert "RLVR_TRUSTED_ORIGINS" in refused.json()["detail"]["message"] or not headers
        assert httpx.get(f"{base}/api/v1/traces/{trace_id}", headers={"X-API-Key": team_key}).status_code == 200
        done = delete_via_dashboard(browser, Referer=f"{base}/traces")  # its own page (no Origin: the Referer)
        assert done.status_code == 200, done.text
    assert httpx.get(f"{base}/api/v1/traces/{trace_id}", headers={"X-API-Key": team_key}).status_code == 404
