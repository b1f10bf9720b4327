"""Team isolation: team B against every endpoint that takes an id (path, query or JSON
body, found in the OpenAPI document, so a new endpoint is covered by itself), with every
id encoding. Each answer is a 404 or 422 — never a 2xx carrying team A's data, never a
5xx — and afterwards B's lists hold none of A's ids and A's objects are untouched."""

from __future__ import annotations

import re
import uuid

import pytest

from tests.helpers import synthetic_rows, write_packed_dir, zip_folder

API = "/api/v1"
ID_NAMES = ("trace_id", "job_id")
OTHER_PATH_PARAMS = {"kind": "lengths"}
# Bodies that would be accepted (2xx) with a valid id of the caller's own.
BODIES = {
    ("post", "/api/v1/workloads"): {"steps": 2, "groups": 4, "samples_per_group": 2},
    ("post", "/api/v1/advice"): {"n_gpus": 8},
    ("post", "/api/v1/simulations"): {},
    ("post", "/api/v1/traces/{trace_id}/analyses"): {"kind": "lengths", "params": {}},
}


def path_encodings(foreign: int, missing: int) -> dict[str, str]:
    """Encodings of an id in a path or query string."""
    return {
        "another team's": str(foreign),
        "nonexistent": str(missing),
        "float": f"{foreign}.0",
        "exponent": f"{foreign}e0",
        "string": "abc",
        "signed": f"+{foreign}",
        "padded": f" {foreign}",
        "underscored": f"0_{foreign}",
        "zero": "0",
        "negative": f"-{foreign}",
        "above int4": str(2**31),
        "above int8": str(2**63),
        "huge": "9" * 30,
    }


def body_encodings(foreign: int, missing: int) -> dict[str, object]:
    """Encodings of an id in a JSON body."""
    return {
        "another team's": foreign,
        "nonexistent": missing,
        "float": float(foreign),
        "string": str(foreign),
        "bool": True,
        "list": [foreign],
        "object": {"id": foreign},
        "zero": 0,
        "negative": -foreign,
        "above int4": 2**31,
        "above int8": 2**63,
        "huge": 10**30,
        "float huge": 1e300,
    }


@pytest.fixture()
def world(client, env, tmp_path):
    """Team A with a ready trace and one job of each kind; team B with nothing."""
    client.raise_server_exceptions = False  # a 5xx is an answer to report, not a crash
    from backend.auth import create_team
    from backend.store.db import session_scope

    with session_scope() as session:
        _, key_a = create_team(session, f"a-{uuid.uuid4().hex[:8]}")
        _, key_b = create_team(session, f"b-{uuid.uuid4().hex[:8]}")
    ha, hb = {"X-API-Key": key_a}, {"X-API-Key": key_b}
    name = f"secret-of-a-{uuid.uuid4().hex[:8]}"
    run = write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=4, n=2))
    r = client.post(
        f"{API}/traces",
        files=[("files", ("run.zip", zip_folder(run), "application/zip"))],
        data={"name": name},
        headers=ha,
    )
    assert r.status_code == 201, r.text
    trace = r.json()
    jobs = {"ingest": trace["job_id"]} if trace["job_id"] else {}
    for kind, (path, body) in {
        "analysis": (f"{API}/traces/{trace['id']}/analyses", {"kind": "lengths", "params": {}}),
        "simulation": (f"{API}/simulations", {"trace_id": trace["id"]}),
        "workload": (f"{API}/workloads", {"trace_id": trace["id"], "steps": 2, "groups": 4, "samples_per_group": 2}),
        "advice": (f"{API}/advice", {"trace_id": trace["id"], "n_gpus": 8}),
    }.items():
        r = client.post(path, json=body, headers=ha)
        assert r.status_code in (200, 202), (kind, r.text)  # the positive control: A may
        jobs[kind] = r.json()["id"]
    n_jobs = len(client.get(f"{API}/jobs", headers=ha).json()["items"])
    return {"client": client, "a": ha, "b": hb, "trace": trace, "name": name, "jobs": jobs, "n_jobs": n_jobs}


def id_operations(client) -> list[tuple[str, str, str, str]]:
    """(method, path, where, id name) of every operation taking an id, from the OpenAPI document."""
    spec = client.get(f"{API}/openapi.json").json()
    ops = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            for p in op.get("parameters", []):
                if p["name"] in ID_NAMES:
                    ops.append((method, path, p["in"], p["name"]))
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            if "$ref" in body:
                body = spec["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]
            for name in body.get("properties", {}):
                if name in ID_NAMES:
                    ops.append((method, path, "body", name))
    return ops


def leaks(r, world) -> bool:
    """A's data in the answer: its trace's name, or its ids under an id key."""
    text = r.text
    if world["name"] in text:
        return True
    a_ids = {world["trace"]["id"], *world["jobs"].values()}
    return any(f'"{k}":{i}' in text.replace(" ", "") for k in ("trace_id", "id") for i in a_ids) and r.status_code < 300


def fill(path: str, values: dict[str, str]) -> str:
    return re.sub(r"{(\w+)}", lambda m: values.get(m.group(1), OTHER_PATH_PARAMS.get(m.group(1), "1")), path)


def check(r, label: str, world, failures: list[str]) -> None:
    if r.status_code >= 500 or r.status_code not in (404, 422) or leaks(r, world):
        failures.append(f"{label} -> {r.status_code} {r.text[:160]}")
    elif r.status_code == 422 and not isinstance(r.json().get("detail"), dict):
        failures.append(f"{label} -> 422 not in the ErrorResponse shape: {r.text[:160]}")


def test_every_id_taking_operation_is_covered(world):
    ops = id_operations(world["client"])
    where = {w for _m, _p, w, _n in ops}
    # the id-taking operations this matrix knows today (a new one is covered automatically)
    assert where >= {"path", "query", "body"}, ops
    assert len({(m, p) for m, p, w, _ in ops if w == "path"}) >= 15, ops
    for m, p, w, _n in ops:
        if m == "post" and (w == "body" or p.endswith("/analyses")):
            assert (m, p) in BODIES, f"no valid body known for {m} {p}"


def test_team_b_path_ids(world):
    b_tries_path_ids(world)


def test_team_b_body_ids(world):
    b_tries_body_ids(world)


def b_tries_path_ids(world):
    """Team B names A's ids (and missing ones) in every path parameter: never A's rows."""
    client, failures = world["client"], []
    missing = max(world["trace"]["id"], *world["jobs"].values()) + 1000
    for method, path, where, name in id_operations(client):
        if where != "path":
            continue
        foreign = world["trace"]["id"] if name == "trace_id" else None
        job_ids = [foreign] if foreign else list(world["jobs"].values())
        for own in job_ids:
            for label, enc in path_encodings(own, missing).items():
                url = fill(path, {name: enc})
                r = client.request(method.upper(), url, json=BODIES.get((method, path)), headers=world["b"])
                check(r, f"B {method.upper()} {url} ({name} {label})", world, failures)
    assert not failures, "\n".join(failures[:40])


def test_team_b_query_ids(world):
    client, failures = world["client"], []
    missing = world["trace"]["id"] + 1000
    for method, path, where, name in id_operations(client):
        if where != "query":
            continue
        for label, enc in path_encodings(world["trace"]["id"], missing).items():
            r = client.request(method.upper(), fill(path, {}), params={name: enc}, headers=world["b"])
            check(r, f"B {method.upper()} {path}?{name}={enc!r} ({label})", world, failures)
    assert not failures, "\n".join(failures[:40])


def b_tries_body_ids(world):
    """Team B names A's ids in every id field of a body: refused, never acted on."""
    client, failures = world["client"], []
    missing = world["trace"]["id"] + 1000
    for method, path, where, name in id_operations(client):
        if where != "body":
            continue
        for label, enc in body_encodings(world["trace"]["id"], missing).items():
            body = {**BODIES[(method, path)], name: enc}
            r = client.request(method.upper(), fill(path, {}), json=body, headers=world["b"])
            check(r, f"B {method.upper()} {path} {name}={enc!r} ({label})", world, failures)
    assert not failures, "\n".join(failures[:40])


def test_b_sees_nothing_of_a_afterwards(world):
    client, b, a = world["client"], world["b"], world["a"]
    b_tries_path_ids(world)  # whichever order the tests ran in, B has tried everything
    b_tries_body_ids(world)
    for path in ("/traces", "/jobs", "/simulations", "/workloads"):
        r = client.get(f"{API}{path}", params={"include_result": "true"} if path != "/traces" else None, headers=b)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["items"] == [], (path, body)
    # A's objects are all still there (B's DELETE did nothing), and B created nothing
    assert client.get(f"{API}/traces/{world['trace']['id']}", headers=a).status_code == 200
    # (a worker may be running A's jobs meanwhile, so A's own jobs may add more: each of
    # the world's is still there)
    for job_id in world["jobs"].values():
        assert client.get(f"{API}/jobs/{job_id}", headers=a).status_code == 200, job_id
    assert client.get(f"{API}/health").status_code == 200
