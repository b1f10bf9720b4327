"""The sample table behind every chart: GET /traces/{id}/samples filters, sorts and
pages server-side; GET .../samples/{step}/{group}/{sample}/turns is a trajectory's
turn-by-turn timeline. Checked against numpy on the rows the test wrote."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from tests import format_writers as fw


@pytest.fixture()
def native(api, tmp_path):
    rng = np.random.default_rng(7)
    n = 600
    cols = {
        "step": np.repeat(np.arange(6), 100),
        "group_idx": np.tile(np.repeat(np.arange(25), 4), 6),
        "sample_idx": np.tile(np.arange(4), 150),
        "prompt_len": rng.integers(10, 200, n),
        "response_len": rng.integers(1, 4000, n),
        "dp_rank": rng.integers(0, 4, n),
        "num_turns": rng.integers(1, 5, n),
        "truncated": rng.random(n) < 0.2,
        "reward": np.round(rng.random(n), 3),
        "latency_s": np.round(rng.random(n) * 10, 3),
    }
    lines = [orjson.dumps({k: v[i].item() for k, v in cols.items()}) for i in range(n)]
    r = api.post(
        "/api/v1/traces",
        files=[("files", ("samples.jsonl", b"\n".join(lines), "application/json"))],
        data={"name": "s"},
    )
    assert r.status_code == 201, r.text
    return r.json()["id"], cols


def keys(items):
    return [(i["step"], i["group_idx"], i["sample_idx"]) for i in items]


def expected(cols, mask, sort="step", desc=False):
    idx = np.flatnonzero(mask)
    k = (cols["sample_idx"][idx], cols["group_idx"][idx], cols["step"][idx], cols[sort][idx])
    order = np.lexsort(k)
    if desc:
        order = np.lexsort(tuple(-np.asarray(x, dtype=float) for x in k))
    return [(int(cols["step"][i]), int(cols["group_idx"][i]), int(cols["sample_idx"][i])) for i in idx[order]]


@pytest.mark.parametrize(
    "params,mask",
    [
        ({"step": 2}, lambda c: c["step"] == 2),
        ({"step_min": 1, "step_max": 3}, lambda c: (c["step"] >= 1) & (c["step"] <= 3)),
        (
            {"response_len_min": 1000, "response_len_max": 2000},
            lambda c: (c["response_len"] >= 1000) & (c["response_len"] < 2000),
        ),
        ({"dp_rank": 3, "step": 4}, lambda c: (c["dp_rank"] == 3) & (c["step"] == 4)),
        ({"num_turns": 2}, lambda c: c["num_turns"] == 2),
        ({"truncated": "true"}, lambda c: c["truncated"]),
        ({"truncated": "false", "dp_rank": 0}, lambda c: ~c["truncated"] & (c["dp_rank"] == 0)),
    ],
)
def test_filters(api, native, params, mask):
    trace_id, cols = native
    body = api.get(f"/api/v1/traces/{trace_id}/samples", params={**params, "limit": 10_000}).json()
    want = expected(cols, mask(cols))
    assert keys(body["items"]) == want and body["total"] == len(want) and not body["total_is_lower_bound"]


@pytest.mark.parametrize("sort", ["response_len", "prompt_len", "reward", "latency_s", "dp_rank", "num_turns"])
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_sort_and_page(api, native, sort, order):
    trace_id, cols = native
    mask = cols["step"] >= 3
    want = expected(cols, mask, sort, desc=order == "desc")
    got = []
    for offset in range(0, len(want), 64):
        page = api.get(
            f"/api/v1/traces/{trace_id}/samples",
            params={"step_min": 3, "sort": sort, "order": order, "limit": 64, "offset": offset},
        ).json()
        assert page["total"] == len(want)
        got += page["items"]
    assert keys(got) == want
    values = [i[sort] for i in got]
    assert values == sorted(values, reverse=order == "desc")


def test_row_fields(api, native):
    trace_id, cols = native
    (row,) = api.get(f"/api/v1/traces/{trace_id}/samples", params={"step": 5, "limit": 1}).json()["items"]
    i = 500
    assert row["response_len"] == cols["response_len"][i] and row["dp_rank"] == cols["dp_rank"][i]
    assert row["truncated"] == bool(cols["truncated"][i]) and row["num_turns"] == cols["num_turns"][i]
    assert row["reward"] == pytest.approx(cols["reward"][i]) and row["latency_s"] == pytest.approx(cols["latency_s"][i])


@pytest.mark.parametrize("params", [{"sort": "nope"}, {"order": "up"}, {"limit": 0}, {"truncated": "maybe"}])
def test_bad_parameters_are_422(api, native, params):
    trace_id, _ = native
    assert api.get(f"/api/v1/traces/{trace_id}/samples", params=params).status_code == 422


def test_turns_timeline(api):
    r = api.post(
        "/api/v1/traces",
        files=[("files", ("sessions-r0.jsonl", fw.areal_sessions(0, 2, 2), "application/json"))],
        data={"name": "sessions"},
    )
    assert r.status_code == 201, r.text
    trace_id = r.json()["id"]
    body = api.get(f"/api/v1/traces/{trace_id}/samples/0/1/1/turns").json()
    assert [t["turn"] for t in body["items"]] == [0, 1]
    assert body["items"][0]["engine_latency_s"] == pytest.approx(1.0)
    assert body["items"][0]["tool_latency_s"] is None or body["items"][0]["tool_latency_s"] >= 0
    assert api.get(f"/api/v1/traces/{trace_id}/samples/0/9/9/turns").status_code == 404


def test_turns_with_cached_tokens(api, shared_fixtures, monkeypatch):
    from pathlib import Path

    from backend.settings import get_settings

    # two 6.6 MB files: ingested in the request here (by default a worker would take them)
    monkeypatch.setattr(get_settings(), "inline_ingest_max_bytes", 64 << 20)

    folder = Path(shared_fixtures) / "polytrace" / "search_r1_qwen2_5_7b"
    if not folder.is_dir():
        pytest.skip("Search-R1 fixture absent")
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    r = api.post(
        "/api/v1/traces", files=[("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in files[:2]]
    )
    assert r.status_code == 201, r.text
    trace_id = r.json()["id"]
    (first,) = api.get(
        f"/api/v1/traces/{trace_id}/samples", params={"limit": 1, "sort": "num_turns", "order": "desc"}
    ).json()["items"]
    turns = api.get(
        f"/api/v1/traces/{trace_id}/samples/{first['step']}/{first['group_idx']}/{first['sample_idx']}/turns"
    ).json()["items"]
    assert len(turns) == first["num_turns"]
    for t in turns:
        if t["prompt_tokens"] is not None and t["cached_tokens"] is not None:
            assert t["new_prompt_tokens"] == t["prompt_tokens"] - t["cached_tokens"]
    # The step's request timeline: every trajectory, engine then tool time back to back,
    # sorted by end; its end is the sum of the sample's turns' engine and tool latency.
    step = api.get(f"/api/v1/traces/{trace_id}/steps/{first['step']}/trajectories").json()["items"]
    ends = [t["end_s"] for t in step]
    assert ends == sorted(ends) and len(step) == first_step_count(api, trace_id, first["step"])
    mine = next(t for t in step if (t["group_idx"], t["sample_idx"]) == (first["group_idx"], first["sample_idx"]))
    measured = sum((t["engine_latency_s"] or 0) + (t["tool_latency_s"] or 0) for t in turns)
    assert mine["end_s"] == pytest.approx(measured)
    assert {s[0] for t in step for s in t["segments"]} == {"engine", "tool"}
    assert api.get(f"/api/v1/traces/{trace_id}/steps/999/trajectories").status_code == 404


def first_step_count(api, trace_id, step) -> int:
    steps = api.get(f"/api/v1/traces/{trace_id}/steps").json()["items"]
    return next(s["n_samples"] for s in steps if s["step"] == step)


def test_total_is_capped(api, native, monkeypatch):
    from backend.api.routes import trace_data

    trace_id, _ = native
    monkeypatch.setattr(trace_data, "SAMPLE_COUNT_CAP", 100)
    body = api.get(f"/api/v1/traces/{trace_id}/samples", params={"response_len_min": 0, "limit": 10}).json()
    assert body["total"] == 100 and body["total_is_lower_bound"] and len(body["items"]) == 10
    # steps only: exact, from the per-step counts
    body = api.get(f"/api/v1/traces/{trace_id}/samples", params={"step_min": 1, "limit": 10}).json()
    assert body["total"] == 500 and not body["total_is_lower_bound"]
