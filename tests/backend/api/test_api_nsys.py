"""Nsight Systems exports through the API on both databases: uploaded beside (and
compared with) Kineto traces of the same events, read by the GPU analyses and the
timeline endpoints, and refused with file/row/column when broken."""

from __future__ import annotations

import sqlite3

import orjson
import pytest

from backend.store.db import get_engine, new_session
from backend.store.models import Trace
from backend.store.trace_tables import load_trace_data, trace_events_dir
from core.analysis.registry import ANALYSES, run_analysis
from tests.nsys_writer import kineto_doc, kineto_us, synthetic_activity, write_nsys


@pytest.fixture()
def activity():
    return [synthetic_activity(r, steps=3, ops_per_step=18, seed=4) for r in (0, 1)]


def upload(api, files: list[tuple[str, bytes]]) -> dict:
    r = api.post("/api/v1/traces", files=[("files", (name, raw, "application/octet-stream")) for name, raw in files])
    assert r.status_code == 201, r.text
    return r.json()


def gpu_report(trace_id: int) -> dict:
    with new_session() as s:
        trace = s.get(Trace, trace_id)
    with get_engine().connect() as conn:
        data = load_trace_data(conn, trace, ANALYSES["gpu_timeline"].tables)
    return run_analysis("gpu_timeline", data)


def test_upload_reads_like_the_kineto_twin(api, activity, tmp_path):
    nsys = upload(api, [("node0.sqlite", write_nsys(tmp_path / "node0.sqlite", activity).read_bytes())])
    kineto = upload(api, [(f"rank-{a.rank}.json", kineto_doc(a)) for a in activity])
    assert nsys["status"] == "ready" and nsys["source_format"] == "nsys-sqlite"
    assert nsys["n_gpu_events"] == kineto["n_gpu_events"] == sum(len(a.ops) for a in activity)
    assert "gpu_timeline" in nsys["analyses"]
    ours, theirs = gpu_report(nsys["id"]), gpu_report(kineto["id"])
    assert ours["cpu_side"] and ours["ranks"] == [0, 1]
    for table in ("temporal", "idle"):
        assert len(ours[table]) == len(theirs[table]) > 0
        for a, b in zip(ours[table], theirs[table]):
            assert a.keys() == b.keys()
            assert [a[k] for k in a] == pytest.approx([b[k] for k in b], nan_ok=True), table
    # the timeline endpoint lists the events at the times the export gives
    first = min((op for a in activity for op in a.ops if a.rank == 1), key=lambda op: op.start)
    page = api.get(f"/api/v1/traces/{nsys['id']}/gpu-events", params={"rank": 1, "limit": 1}).json()
    assert page["items"][0]["start_us"] == kineto_us(first.start)
    export = api.get(f"/api/v1/traces/{nsys['id']}/gpu-events/chrome-trace", params={"rank": 0})
    cats = {e.get("cat") for e in orjson.loads(export.content)["traceEvents"]}
    assert {"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "user_annotation"} <= cats
    folder = trace_events_dir(nsys["id"])
    assert folder.exists()
    assert api.delete(f"/api/v1/traces/{nsys['id']}").status_code == 204
    assert not folder.exists()


def test_broken_export_is_a_422_naming_file_row_and_column(api, activity, tmp_path):
    path = write_nsys(tmp_path / "rank0.sqlite", activity[:1])
    db = sqlite3.connect(path)
    db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 1 WHERE rowid = 5")
    db.commit()
    db.close()
    r = api.post("/api/v1/traces", files=[("files", ("rank0.sqlite", path.read_bytes(), "application/octet-stream"))])
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert (detail["file"], detail["line"], detail["field"]) == ("rank0.sqlite", 5, "CUPTI_ACTIVITY_KIND_KERNEL.end")
    listed = [t for t in api.get("/api/v1/traces").json()["items"] if t["name"] == "rank0"]
    assert all(t["status"] == "failed" and t["n_gpu_events"] == 0 for t in listed)  # nothing half-written
    assert all(not trace_events_dir(t["id"]).exists() for t in listed)
