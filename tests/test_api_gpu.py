"""GPU events over REST: windowed listing and the Chrome-trace export, on a real Kineto trace."""

from __future__ import annotations

import gzip

import orjson
import pytest


@pytest.fixture()
def kineto_trace(api, shared_fixtures):
    path = shared_fixtures / "kineto" / "sampled_rank-1.json.gz"
    r = api.post("/api/v1/traces", files=[("files", (path.name, path.read_bytes(), "application/gzip"))])
    assert r.status_code == 201, r.text
    raw = orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    gpu = [e for e in raw if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    return r.json(), gpu


def test_window_listing(api, kineto_trace):
    trace, gpu = kineto_trace
    assert trace["n_gpu_events"] == len(gpu)
    starts = sorted(float(e["ts"]) for e in gpu)
    t0, t1 = starts[100], starts[200]
    page = api.get(f"/api/v1/traces/{trace['id']}/gpu-events", params={"rank": 1, "start_us": t0, "end_us": t1}).json()
    expected = sum(1 for e in gpu if float(e["ts"]) < t1 and float(e["ts"]) + float(e["dur"]) > t0)
    assert len(page["items"]) == expected and not page["truncated"]
    assert {i["kind"] for i in page["items"]} <= {"compute", "communication", "memory"}
    limited = api.get(f"/api/v1/traces/{trace['id']}/gpu-events", params={"limit": 10}).json()
    assert len(limited["items"]) == 10 and limited["truncated"]


def test_chrome_trace_download(api, kineto_trace):
    trace, gpu = kineto_trace
    r = api.get(f"/api/v1/traces/{trace['id']}/gpu-events/chrome-trace", params={"rank": 1})
    assert r.status_code == 200
    assert "attachment" in r.headers["content-disposition"]
    body = r.json()
    complete = [e for e in body["traceEvents"] if e.get("ph") == "X"]
    assert len(complete) == len(gpu)
    assert {e["pid"] for e in complete} == {1}
