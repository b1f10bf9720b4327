"""Upload, list, get, delete traces and read their data back, on SQLite and Postgres."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import func, select

from backend.store.db import new_session
from backend.store.models import Sample, Step
from tests.helpers import jsonl, responses_of, synthetic_rows, write_packed_dir, zip_folder


def upload(api, files, **form):
    return api.post("/api/v1/traces", files=[("files", f) for f in files], data=form)


@pytest.fixture()
def per_step():
    return synthetic_rows(steps=4, groups=16, n=4)


@pytest.fixture()
def uploaded(api, per_step, tmp_path):
    archive = zip_folder(write_packed_dir(tmp_path / "run", per_step))
    r = upload(api, [("run.zip", archive, "application/zip")], name="synthetic")
    assert r.status_code == 201, r.text
    return r.json()


def count_rows(model, trace_id: int) -> int:
    with new_session() as s:
        return s.scalar(select(func.count()).select_from(model).where(model.trace_id == trace_id))


def test_upload_archive_counts_and_steps(api, uploaded, per_step):
    assert uploaded["status"] == "ready"
    assert uploaded["source_format"] == "polytrace-packed"
    assert uploaded["n_steps"] == 4
    assert uploaded["n_samples"] == 4 * 16 * 4
    assert count_rows(Sample, uploaded["id"]) == 256
    steps = api.get(f"/api/v1/traces/{uploaded['id']}/steps").json()["items"]
    assert [s["step"] for s in steps] == [0, 1, 2, 3]
    assert steps[2]["n_groups"] == 16 and steps[2]["n_samples"] == 64
    assert steps[2]["response_tokens"] == int(responses_of(per_step, 2).sum())
    assert steps[2]["prompt_tokens"] == sum(r["input"] * 4 for r in per_step[2])


def test_summaries_match_numpy(api, uploaded, per_step):
    body = api.get(f"/api/v1/traces/{uploaded['id']}/summaries", params={"field": "response"}).json()
    assert len(body["steps"]) == 4
    for s in body["steps"]:
        values = responses_of(per_step, s["step"])
        assert s["count"] == values.size
        assert s["p99"] == pytest.approx(np.percentile(values, 99))
        assert s["max"] == values.max()
        assert s["tail_ratio"] == pytest.approx(values.max() / values.mean())
        assert sum(s["hist"]) == values.size
        assert len(s["hist"]) == len(body["bin_edges"]) - 1
    total = api.get(f"/api/v1/traces/{uploaded['id']}/summaries", params={"field": "total"}).json()
    first = per_step[0]
    expected = np.array([r["input"] + o for r in first for o in r["output"]])
    assert total["steps"][0]["mean"] == pytest.approx(expected.mean())


def test_samples_paged_by_step(api, uploaded, per_step):
    r = api.get(f"/api/v1/traces/{uploaded['id']}/samples", params={"step": 1, "limit": 10, "offset": 5}).json()
    assert r["total"] == 64
    assert len(r["items"]) == 10
    assert all(item["step"] == 1 for item in r["items"])
    rows = sorted(
        ((g, i, o) for g, row in enumerate(per_step[1]) for i, o in enumerate(row["output"])),
    )
    assert {x["response_len"] for x in r["items"]} <= {o for _, _, o in rows}


def test_same_content_returns_existing_trace(api, uploaded, per_step, tmp_path):
    archive = zip_folder(write_packed_dir(tmp_path / "run", per_step))
    again = upload(api, [("run.zip", archive, "application/zip")])
    assert again.status_code == 200
    assert again.json()["id"] == uploaded["id"]
    assert api.get("/api/v1/traces").json()["total"] == 1


def test_same_content_with_other_options_is_409_naming_them(api, uploaded, per_step, tmp_path):
    archive = zip_folder(write_packed_dir(tmp_path / "run", per_step))
    item = ("run.zip", archive, "application/zip")
    # the options the trace has: the same trace, 200
    same = upload(api, [item], name="synthetic", format="polytrace-packed")
    assert same.status_code == 200 and same.json()["id"] == uploaded["id"]
    for form, field, words in (
        ({"name": "renamed"}, "name", "named 'renamed' instead of 'synthetic'"),
        ({"max_response_len": "16384"}, "max_response_len", "16,384-token cap"),
        ({"format": "kineto"}, "format", "files read as kineto instead of polytrace-packed"),
    ):
        r = upload(api, [item], **form)
        assert r.status_code == 409, (form, r.text)
        detail = r.json()["detail"]
        assert detail["field"] == field and words in detail["changed"][field], detail
        assert f"trace {uploaded['id']}" in detail["message"] and "Not applied" in detail["message"]
        assert detail["trace_id"] == uploaded["id"]
    bad = upload(api, [item], format="nosuch")
    assert bad.status_code == 422 and bad.json()["detail"]["field"] == "format"
    trace = api.get(f"/api/v1/traces/{uploaded['id']}").json()
    assert trace["name"] == "synthetic" and api.get("/api/v1/traces").json()["total"] == 1


def test_list_filter_and_paging(api, per_step):
    for i in range(3):
        rows = synthetic_rows(steps=1, groups=4, n=2, seed=10 + i)[0]
        r = upload(api, [("packed_lengths_step_0.jsonl", jsonl(rows), "application/json")], name=f"run-{i}")
        assert r.status_code == 201, r.text
    page = api.get("/api/v1/traces", params={"limit": 2}).json()
    assert page["total"] == 3 and len(page["items"]) == 2
    assert [t["name"] for t in api.get("/api/v1/traces", params={"q": "run-1"}).json()["items"]] == ["run-1"]
    assert api.get("/api/v1/traces", params={"status": "failed"}).json()["total"] == 0


def test_other_team_sees_nothing(api, uploaded, client):
    from backend.auth import create_team
    from backend.store.db import session_scope

    with session_scope() as s:
        _team, other_key = create_team(s, "other-team-" + str(uploaded["id"]) + str(id(s)))
    headers = {"X-API-Key": other_key}
    tid = uploaded["id"]
    assert client.get("/api/v1/traces", headers=headers).json()["total"] == 0
    for path in (f"/api/v1/traces/{tid}", f"/api/v1/traces/{tid}/steps", f"/api/v1/traces/{tid}/summaries"):
        assert client.get(path, headers=headers).status_code == 404
    assert client.delete(f"/api/v1/traces/{tid}", headers=headers).status_code == 404
    assert count_rows(Sample, tid) == 256


def test_missing_or_wrong_key_is_401(client):
    assert client.get("/api/v1/traces").status_code == 401
    assert client.get("/api/v1/traces", headers={"X-API-Key": "nope"}).status_code == 401


def test_delete_removes_every_row(api, uploaded):
    tid = uploaded["id"]
    assert api.delete(f"/api/v1/traces/{tid}").status_code == 204
    assert api.get(f"/api/v1/traces/{tid}").status_code == 404
    assert count_rows(Sample, tid) == 0
    assert count_rows(Step, tid) == 0


def test_openapi_documents_errors(client):
    spec = client.get("/api/v1/openapi.json").json()
    upload_op = spec["paths"]["/api/v1/traces"]["post"]
    assert {"201", "202", "200", "422", "413", "401"} <= set(upload_op["responses"])
