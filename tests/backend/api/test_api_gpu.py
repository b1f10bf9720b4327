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


def test_chrome_trace_download_gpu_only(api, kineto_trace):
    trace, gpu = kineto_trace
    r = api.get(f"/api/v1/traces/{trace['id']}/gpu-events/chrome-trace", params={"rank": 1, "events": "gpu"})
    assert r.status_code == 200
    assert "attachment" in r.headers["content-disposition"]
    body = r.json()
    complete = [e for e in body["traceEvents"] if e.get("ph") == "X"]
    assert len(complete) == len(gpu)
    assert {e["pid"] for e in complete} == {1}


def _kinds(events: list[dict]) -> dict:
    out: dict = {}
    for e in events:
        key = (e.get("ph"), e.get("cat") or "")
        out[key] = out.get(key, 0) + 1
    return out


def test_chrome_trace_download_carries_every_event_kind(api, kineto_trace, shared_fixtures):
    """The complete export: per (ph, cat), as many events as the original file holds,
    for the whole trace and for a time window (recomputed from the raw file)."""
    trace, _ = kineto_trace
    raw = orjson.loads(gzip.decompress((shared_fixtures / "kineto" / "sampled_rank-1.json.gz").read_bytes()))
    original = raw["traceEvents"]
    whole = api.get(f"/api/v1/traces/{trace['id']}/gpu-events/chrome-trace").json()
    assert _kinds(whole["traceEvents"]) == _kinds(original)
    kinds = {k for k, _ in _kinds(original).items()}
    assert {("X", "cpu_op"), ("X", "cuda_runtime"), ("X", "user_annotation"), ("X", "kernel")} <= kinds
    # a window in the middle of the trace
    ts = sorted(float(e["ts"]) for e in original if "ts" in e and e.get("ph") == "X")
    t0, t1 = ts[len(ts) // 3], ts[len(ts) // 2]

    def overlaps(e: dict) -> bool:
        if e.get("ph") == "M":
            return True
        if "ts" not in e:
            return False
        t = float(e["ts"])
        if e.get("ph") == "X":
            return t < t1 and t + float(e.get("dur", 0)) > t0
        return t0 <= t < t1

    window = api.get(
        f"/api/v1/traces/{trace['id']}/gpu-events/chrome-trace", params={"start_us": t0, "end_us": t1}
    ).json()
    assert _kinds(window["traceEvents"]) == _kinds([e for e in original if overlaps(e)])
    # the timings and ids survive: every kernel keeps its correlation
    kernels = [e for e in whole["traceEvents"] if e.get("cat") == "kernel"]
    assert all("correlation" in e["args"] for e in kernels)


def test_gpu_diff_between_two_traces(api, kineto_trace, shared_fixtures):
    trace, _ = kineto_trace
    path = shared_fixtures / "kineto" / "sampled_rank-0.json.gz"
    r = api.post("/api/v1/traces", files=[("files", (path.name, path.read_bytes(), "application/gzip"))])
    other = r.json()
    d = api.get(f"/api/v1/traces/{other['id']}/gpu-diff", params={"test_trace_id": trace["id"]})
    assert d.status_code == 200, d.text
    body = d.json()
    # HTA 0.5.0 TraceDiff on the same pair (rank 0 as control, rank 1 as test)
    assert body["ops_diff"] == {"added": 4, "deleted": 29, "increased": 21, "decreased": 34, "unchanged": 310}
    assert body["control"] == {"rank": 0, "step": 551, "trace_id": other["id"]}
    missing = api.get(f"/api/v1/traces/{other['id']}/gpu-diff", params={"test_trace_id": 999_999})
    assert missing.status_code == 404


def test_gpu_events_name_search_and_launch(api, kineto_trace):
    trace, gpu = kineto_trace
    want = sum(1 for e in gpu if "nccl" in e["name"].lower())
    page = api.get(f"/api/v1/traces/{trace['id']}/gpu-events", params={"name": "NCCL", "limit": 5000}).json()
    assert len(page["items"]) == want > 0
    assert all("nccl" in i["name"].lower() for i in page["items"])
    assert any(i["launch_us"] is not None and i["launch_us"] <= i["start_us"] for i in page["items"])


def test_search_events_of_every_kind(api, kineto_trace, shared_fixtures):
    trace, _ = kineto_trace
    raw = orjson.loads(gzip.decompress((shared_fixtures / "kineto" / "sampled_rank-1.json.gz").read_bytes()))
    want = [e for e in raw["traceEvents"] if e.get("ph") == "X" and "aten::mm" in e.get("name", "").lower()]
    r = api.get(f"/api/v1/traces/{trace['id']}/gpu-events/search", params={"name": "ATEN::MM", "limit": 5000}).json()
    assert r["total"] == len(want) > 0
    assert {i["cat"] for i in r["items"]} == {e["cat"] for e in want}
    assert [i["ts_us"] for i in r["items"]] == sorted(i["ts_us"] for i in r["items"])


def test_kept_events_go_with_the_trace(api, kineto_trace):
    from backend.store.trace_tables import trace_events_dir

    trace, _ = kineto_trace
    folder = trace_events_dir(trace["id"])
    assert sorted(p.suffix for p in folder.iterdir()) == [".json", ".npz"]
    assert api.delete(f"/api/v1/traces/{trace['id']}").status_code == 204
    assert not folder.exists()


def test_search_takes_q_as_documented_and_name_as_before(api, kineto_trace):
    trace, _ = kineto_trace
    url = f"/api/v1/traces/{trace['id']}/gpu-events/search"
    by_q = api.get(url, params={"q": "aten::mm", "limit": 5000})
    assert by_q.status_code == 200, by_q.text
    assert by_q.json()["total"] > 0
    assert api.get(url, params={"name": "aten::mm", "limit": 5000}).json() == by_q.json()
    missing = api.get(url)
    assert missing.status_code == 422
    assert missing.json()["detail"]["field"] == "q"
