"""Defects a probe of a long-lived shared deployment found, each pinned on both databases:
NUL characters in text that reaches a query, the OpenAPI id bounds, `Allow` on a 405,
booleans as metric numbers, whitespace around an API key, upload paths in job params,
ingest progress during the load, and two readers' error messages."""

from __future__ import annotations

import gzip

import pytest

from tests.format_writers import kineto_rank_trace
from tests.helpers import jsonl, synthetic_rows


@pytest.fixture()
def live_trace(api) -> int:
    r = api.post("/api/v1/traces/live", json={"name": "run"})
    assert r.status_code == 201, r.text
    return r.json()["id"]


@pytest.fixture()
def kineto_trace(api) -> int:
    body = gzip.compress(kineto_rank_trace(0, steps=2, ops_per_step=10))
    r = api.post("/api/v1/traces", files=[("files", ("rank-0.json.gz", body, "application/gzip"))])
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _is_4xx_error(r, field: str | None = None) -> dict:
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    detail = r.json()["detail"]
    assert detail["message"]
    if field is not None:
        assert detail["field"] == field, detail
    return detail


# --------------------------------------------------------------------------- NUL


def test_nul_in_live_trace_name_is_a_422(api):
    detail = _is_4xx_error(api.post("/api/v1/traces/live", json={"name": "a\u0000b"}), "name")
    assert "NUL" in detail["message"]
    assert api.get("/api/v1/traces").json()["total"] == 0  # nothing half-made
    ok = api.post("/api/v1/traces/live", json={"name": "a b", "metadata": {"note": "x\u0000y"}})
    assert ok.status_code in (201, 422), ok.text  # metadata is JSON: stored or refused, never a 500


def test_nul_in_gpu_events_name_filter_is_a_422(api, kineto_trace):
    _is_4xx_error(api.get(f"/api/v1/traces/{kineto_trace}/gpu-events", params={"name": "a\u0000b"}), "name")
    _is_4xx_error(api.get(f"/api/v1/traces/{kineto_trace}/gpu-events/search", params={"name": "a\u0000b"}), "name")
    found = api.get(f"/api/v1/traces/{kineto_trace}/gpu-events", params={"name": "gemm"})
    assert found.status_code == 200 and found.json()["items"]


@pytest.mark.parametrize(
    "path",
    [
        "/traces/{id}/analyses/a%00b",
        "/traces/{id}/summaries?task=a%00b",
        "/traces/{id}/series?keys=a%00b",
        "/traces?q=a%00b",
        "/jobs?kind=a%00b",
    ],
)
def test_nul_anywhere_in_text_parameters_is_a_4xx(api, live_trace, path):
    _is_4xx_error(api.get("/api/v1" + path.format(id=live_trace)))


def test_nul_in_metric_keys_is_a_4xx(api, live_trace):
    r = api.post(f"/api/v1/traces/{live_trace}/steps", json={"steps": [{"step": 1, "metrics": {"a\u0000b": 1.0}}]})
    _is_4xx_error(r)


# --------------------------------------------------------------------------- OpenAPI and HTTP


def test_openapi_id_bounds_are_minimum_and_maximum(api):
    spec = api.get("/api/v1/openapi.json").json()
    seen = 0

    def walk(node, where):
        nonlocal seen
        if isinstance(node, dict):
            for bad in ("ge", "le", "gt", "lt"):
                assert bad not in node, f"{where}: '{bad}' is not JSON Schema"
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    walk(spec, "")
    for path, ops in spec["paths"].items():
        for op in ops.values():
            for p in op.get("parameters", []):
                if p["name"] in ("trace_id", "job_id", "test_trace_id", "key_id"):
                    schema = next(s for s in p["schema"].get("anyOf", [p["schema"]]) if s["type"] == "integer")
                    assert schema["minimum"] == 1 and schema["maximum"] == 2**31 - 1, (path, p)
                    seen += 1
    assert seen >= 30


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [("PUT", "/me", {"GET"}), ("PATCH", "/traces", {"GET", "POST"}), ("PUT", "/traces/1", {"GET", "DELETE"})],
)
def test_405_names_the_allowed_methods(api, method, path, allowed):
    r = api.request(method, "/api/v1" + path, json={})
    assert r.status_code == 405, r.text
    assert set(r.headers["allow"].replace(" ", "").split(",")) >= allowed, r.headers
    assert method in r.json()["detail"]["message"]


def test_metric_values_refuse_booleans(api, live_trace):
    r = api.post(f"/api/v1/traces/{live_trace}/steps", json={"steps": [{"step": 1, "metrics": {"loss": True}}]})
    _is_4xx_error(r)
    ok = api.post(f"/api/v1/traces/{live_trace}/steps", json={"steps": [{"step": 1, "metrics": {"loss": 0.5, "n": 3}}]})
    assert ok.status_code == 201, ok.text
    assert api.get(f"/api/v1/traces/{live_trace}/steps").json()["items"][0]["metrics"] == {"loss": 0.5, "n": 3}


def test_api_key_whitespace_is_treated_alike_on_both_sides(client, team_key):
    for key in (team_key, f" {team_key}", f"{team_key} ", f"\t{team_key} "):
        assert client.get("/api/v1/me", headers={"X-API-Key": key}).status_code == 200, repr(key)
        assert client.get("/api/v1/me", headers={"Authorization": f"Bearer {key}"}).status_code == 200, repr(key)
    assert client.get("/api/v1/me", headers={"X-API-Key": team_key[:-1]}).status_code == 401
    assert client.get("/api/v1/me", headers={"X-API-Key": f"{team_key[:5]} {team_key[5:]}"}).status_code == 401


# --------------------------------------------------------------------------- ingest jobs


def test_ingest_job_params_do_not_show_the_server_path(api, env, monkeypatch, tmp_path):
    from backend.store.db import reset_caches

    monkeypatch.setenv("RLVR_INLINE_INGEST_MAX_BYTES", "0")  # a worker job, not inline
    reset_caches()
    body = jsonl(synthetic_rows(steps=1, groups=4, n=2)[0])
    r = api.post("/api/v1/traces", files=[("files", ("packed_lengths_step_0.jsonl", body, "text/plain"))])
    assert r.status_code == 202, r.text
    job = r.json()["job"]
    for shown in (job, api.get(f"/api/v1/jobs/{job['id']}").json(), api.get("/api/v1/jobs").json()["items"][0]):
        assert "folder" not in shown["params"], shown["params"]
        assert env["RLVR_DATA_DIR"] not in str(shown), shown


# --------------------------------------------------------------------------- readers


def test_non_ascii_digits_in_csv_name_line_and_field(api):
    body = "step,group_idx,sample_idx,prompt_len,response_len\n0,0,0,5,7\n0,0,1,5,\u0663\n".encode()
    r = api.post("/api/v1/traces", files=[("files", ("run.csv", body, "text/csv"))])
    detail = _is_4xx_error(r, "response_len")
    assert detail["line"] == 3 and detail["file"] == "run.csv", detail


def test_negative_kineto_duration_message_is_plain(api):
    body = kineto_rank_trace(0, steps=2, ops_per_step=10, bad_event=True)
    r = api.post("/api/v1/traces", files=[("files", ("rank-0.json", body, "application/json"))])
    detail = _is_4xx_error(r, "dur")
    assert "np." not in detail["message"] and "-1.0" in detail["message"], detail


def test_a_connection_dropped_before_the_session_closes_still_answers(api, monkeypatch):
    """Postgres restarted while a request ran: closing its session (a rollback on the
    dead connection) failed after the answer and cut it off (bench/chaos.py saw clients
    get no answer at all)."""
    from sqlalchemy.exc import OperationalError
    from sqlalchemy.orm import Session

    import backend.api.deps as deps

    made = deps.new_session

    def dropping():
        session = made()

        def close():
            Session.close(session)
            raise OperationalError("ROLLBACK", None, Exception("terminating connection due to administrator command"))

        session.close = close
        return session

    monkeypatch.setattr(deps, "new_session", dropping)
    r = api.get("/api/v1/traces")
    assert r.status_code == 200 and r.json()["total"] == 0


def test_an_upload_being_ingested_inline_elsewhere_is_not_acknowledged(api):
    """The same content while another request ingests it inline: a 503 to retry, not a
    200 with a trace that request may still fail and drop (bench/chaos.py lost three
    acknowledged uploads so: retried after a 503 during a Postgres restart, answered
    200, then swept away as a dead inline ingestion)."""
    from datetime import timedelta

    from sqlalchemy import update

    from backend.store.db import session_scope
    from backend.store.models import Trace, utcnow

    body = jsonl(synthetic_rows(steps=1, groups=4, n=2, seed=21)[0])
    files = [("files", ("packed_lengths_step_0.jsonl", body, "text/plain"))]
    first = api.post("/api/v1/traces", files=files)
    assert first.status_code == 201, first.text
    trace_id = first.json()["id"]
    with session_scope() as s:  # as while its request is still ingesting it (touched just now)
        s.execute(update(Trace).where(Trace.id == trace_id).values(status="ingesting", updated_at=utcnow()))
    busy = api.post("/api/v1/traces", files=files)
    assert busy.status_code == 503 and int(busy.headers["Retry-After"]) > 0, busy.text
    assert "being ingested by another request" in busy.json()["detail"]["message"]
    with session_scope() as s:  # that request finished
        s.execute(update(Trace).where(Trace.id == trace_id).values(status="ready"))
    again = api.post("/api/v1/traces", files=files)
    assert again.status_code == 200 and again.json()["id"] == trace_id, again.text
    with session_scope() as s:  # that request died mid-way: nobody touches the trace any more
        stale = utcnow() - timedelta(minutes=10)
        s.execute(update(Trace).where(Trace.id == trace_id).values(status="ingesting", updated_at=stale))
    restarted = api.post("/api/v1/traces", files=files)
    assert restarted.status_code == 201 and restarted.json()["status"] == "ready", restarted.text
