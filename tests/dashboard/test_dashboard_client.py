"""The dashboard's API client against a stub API (httpx.MockTransport), and the Dash
app's server side (sign-in, page routing, a figure callback) against the same stub."""

from __future__ import annotations

import json

import httpx
import pytest

from dashboard.api import session
from dashboard.api.client import ApiClient, ApiError, api_root

KEY = "team-key-123"
TRACE = {
    "id": 7,
    "name": "run A",
    "source_format": "polytrace-packed",
    "framework": "verl",
    "status": "ready",
    "error": None,
    "n_steps": 2,
    "n_samples": 4,
    "n_turns": 0,
    "n_tool_calls": 0,
    "n_gpu_events": 0,
    "n_rank_timings": 0,
    "size_bytes": 1234,
    "max_response_len": 4096,
    "tasks": [],
    "metadata": {},
    "created_at": "2026-01-01T00:00:00",
    "updated_at": "2026-01-01T00:00:00",
    "job_id": None,
}


class StubApi:
    """A minimal API: records requests, answers from a route table."""

    def __init__(self):
        self.requests: list[httpx.Request] = []
        self.routes: dict[tuple[str, str], httpx.Response | callable] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.headers.get("X-API-Key") != KEY:
            return httpx.Response(401, json={"detail": {"message": "invalid API key"}})
        answer = self.routes.get((request.method, request.url.path))
        if answer is None:
            return httpx.Response(404, json={"detail": "Not Found"})
        return answer(request) if callable(answer) else answer

    def client(self, key: str | None = KEY) -> ApiClient:
        return ApiClient("http://api.test", key, http=httpx.Client(transport=httpx.MockTransport(self)))


@pytest.fixture(autouse=True)
def fresh_caches():
    """Results and built figures are cached per (API root, key, trace or job): tests
    share the stub's root and key, so each starts empty."""
    from dashboard.server import figure_cache, results

    figure_cache.clear()
    results._cache.clear()
    yield
    figure_cache.clear()
    results._cache.clear()


@pytest.fixture
def stub():
    s = StubApi()
    s.routes[("GET", "/api/v1/me")] = httpx.Response(200, json={"team": {"id": 1, "name": "infra"}})
    s.routes[("GET", "/api/v1/traces")] = lambda r: httpx.Response(200, json={"items": [TRACE], "total": 1})
    s.routes[("GET", "/api/v1/traces/7")] = httpx.Response(200, json=TRACE)
    return s


def test_api_root_normalises_base_url():
    assert api_root("http://h:8000") == "http://h:8000/api/v1"
    assert api_root("http://h:8000/") == "http://h:8000/api/v1"
    assert api_root("http://h:8000/api/v1/") == "http://h:8000/api/v1"


def test_key_header_and_me(stub):
    assert stub.client().me() == {"team": {"id": 1, "name": "infra"}}
    req = stub.requests[-1]
    assert req.headers["X-API-Key"] == KEY
    assert str(req.url) == "http://api.test/api/v1/me"


def test_wrong_key_is_unauthorized(stub):
    with pytest.raises(ApiError) as err:
        stub.client("nope").me()
    assert err.value.status == 401 and err.value.unauthorized
    assert err.value.message == "invalid API key"


def test_list_traces_drops_empty_params(stub):
    page = stub.client().list_traces(limit=10, offset=20, status=None, q="")
    assert page["total"] == 1
    params = dict(stub.requests[-1].url.params)
    assert params == {"limit": "10", "offset": "20"}


def test_fastapi_default_and_validation_errors(stub):
    with pytest.raises(ApiError) as err:
        stub.client().get_trace(99)
    assert err.value.not_found and err.value.message == "Not Found"
    stub.routes[("GET", "/api/v1/traces/7/summaries")] = httpx.Response(
        422,
        json={
            "detail": [
                {
                    "loc": ["query", "field"],
                    "msg": "Input should be 'response', 'prompt' or 'total'",
                    "type": "literal_error",
                }
            ]
        },
    )
    with pytest.raises(ApiError) as err:
        stub.client().summaries(7, field="bogus")
    assert err.value.status == 422
    assert err.value.message == "query.field: Input should be 'response', 'prompt' or 'total'"


def test_upload_sends_multipart_and_reads_the_three_answers(stub):
    seen = {}

    def created(request: httpx.Request):
        body = request.read()
        seen["body"] = body
        seen["ctype"] = request.headers["content-type"]
        return httpx.Response(201, json=TRACE)

    stub.routes[("POST", "/api/v1/traces")] = created
    res = stub.client().upload_trace([("a/step_0.jsonl", b'{"x": 1}\n'), ("a/step_1.jsonl", b"{}\n")], name="my run")
    assert res.status_code == 201 and res.trace["id"] == 7 and res.job is None and not res.duplicate
    assert seen["ctype"].startswith("multipart/form-data")
    body = seen["body"]
    assert body.count(b'name="files"') == 2
    assert b'filename="a/step_0.jsonl"' in body and b'{"x": 1}' in body
    assert b'name="name"' in body and b"my run" in body
    assert b'name="format"' not in body  # not sent when not given

    job = {"id": 3, "kind": "ingest", "status": "queued", "progress": 0.0}
    stub.routes[("POST", "/api/v1/traces")] = httpx.Response(
        202, json={"trace": {**TRACE, "status": "pending"}, "job": job}
    )
    res = stub.client().upload_trace([("big.zip", b"PK")])
    assert res.status_code == 202 and res.job["id"] == 3 and res.trace["status"] == "pending"

    stub.routes[("POST", "/api/v1/traces")] = httpx.Response(200, json=TRACE)
    assert stub.client().upload_trace([("a.jsonl", b"{}")]).duplicate


def test_upload_error_names_file_line_field(stub):
    stub.routes[("POST", "/api/v1/traces")] = httpx.Response(
        400,
        json={
            "detail": {
                "message": "file step_3.jsonl, line 12, field 'output': expected a list of ints",
                "file": "step_3.jsonl",
                "line": 12,
                "field": "output",
            }
        },
    )
    with pytest.raises(ApiError) as err:
        stub.client().upload_trace([("step_3.jsonl", b"{}")])
    e = err.value
    assert (e.status, e.file, e.line, e.field) == (400, "step_3.jsonl", 12, "output")
    assert "line 12" in e.message


def test_upload_needs_files(stub):
    with pytest.raises(ApiError):
        stub.client().upload_trace([])


def test_non_json_answer_is_an_api_error(stub):
    stub.routes[("GET", "/api/v1/traces/7/analyses")] = httpx.Response(
        200, text="<html>dash index</html>", headers={"content-type": "text/html"}
    )
    with pytest.raises(ApiError) as err:
        stub.client().analyses(7)
    assert err.value.status == 502 and "not JSON" in err.value.message


def test_unreachable_api_is_an_api_error():
    def refuse(request):
        raise httpx.ConnectError("connection refused", request=request)

    client = ApiClient("http://down.test", KEY, http=httpx.Client(transport=httpx.MockTransport(refuse)))
    with pytest.raises(ApiError) as err:
        client.me()
    assert err.value.status == 0 and "Cannot reach the API" in err.value.message


def test_analysis_jobs_and_downloads(stub):
    job = {"id": 11, "kind": "imbalance", "status": "queued", "params": {"keep_groups": False}}

    def post(request):
        return httpx.Response(202, json={**job, "params": json.loads(request.read())["params"]})

    stub.routes[("POST", "/api/v1/traces/7/analyses")] = post
    stub.routes[("GET", "/api/v1/jobs")] = httpx.Response(200, json={"items": [job]})
    stub.routes[("GET", "/api/v1/jobs/11")] = httpx.Response(200, json=job)
    stub.routes[("GET", "/api/v1/traces/7/gpu-events/chrome-trace")] = httpx.Response(
        200, content=b'{"traceEvents": []}'
    )
    c = stub.client()
    assert c.run_analysis(7, "imbalance", {"keep_groups": False})["params"] == {"keep_groups": False}
    assert json.loads(stub.requests[-1].read()) == {"kind": "imbalance", "params": {"keep_groups": False}}
    assert c.jobs(trace_id=7, status="running")[0]["id"] == 11
    assert dict(stub.requests[-1].url.params) == {"trace_id": "7", "status": "running"}
    assert c.job(11)["kind"] == "imbalance"
    assert c.chrome_trace(7, rank=[0, 3], start_us=10.0, end_us=20.5) == b'{"traceEvents": []}'
    assert stub.requests[-1].url.params.get_list("rank") == ["0", "3"]
    assert stub.requests[-1].url.params["end_us"] == "20.5"


def test_delete(stub):
    stub.routes[("DELETE", "/api/v1/traces/7")] = httpx.Response(204)
    assert stub.client().delete_trace(7) is None
    assert stub.requests[-1].method == "DELETE"


# -- the Dash app's server side against the stub --------------------------------------
@pytest.fixture
def app(stub):
    from dashboard.app import create_dash

    stub.routes[("GET", "/api/v1/traces/7/steps")] = httpx.Response(
        200,
        json={
            "items": [
                {"step": 0, "validate": False, "prompt_tokens": 10, "response_tokens": 30, "t_gen": 5.0, "t_step": 8.0},
                {"step": 1, "validate": False, "prompt_tokens": 12, "response_tokens": 40, "t_gen": 6.0, "t_step": 9.0},
            ]
        },
    )
    stub.routes[("GET", "/api/v1/traces/7/summaries")] = httpx.Response(
        200,
        json={
            "field": "response",
            "task": None,
            "tasks": [],
            "bin_edges": [1, 2, 4, 8, 16, 32],
            "steps": [
                {
                    "step": s,
                    "count": 2,
                    "mean": 10.0 + s,
                    "p50": 10.0 + s,
                    "p90": 14.0,
                    "p99": 15.0,
                    "max": 16.0,
                    "tail_ratio": 1.6,
                    "hist": [0, 0, 0, 2, 0],
                }
                for s in (0, 1)
            ],
        },
    )
    return create_dash("http://api.test", http_client=httpx.Client(transport=httpx.MockTransport(stub)))


def _callback(
    client, output: str, inputs: list[dict], state: list[dict] | None = None, changed: list[str] | None = None
):
    """POST one Dash callback request the way the renderer does."""
    outputs = [{"id": o.split(".")[0], "property": o.split(".")[1]} for o in output.strip(".").split("...")]
    body = {
        "output": output,
        "outputs": outputs if len(outputs) > 1 else outputs[0],
        "inputs": inputs,
        "state": state or [],
        "changedPropIds": changed or [],
    }
    return client.post("/_dash-update-component", json=body)


def test_app_routes_sign_in_and_renders_a_trace(app):
    client = app.server.test_client()
    assert client.get("/traces").status_code == 200
    assert client.get("/_dash-layout").status_code == 200

    # wrong key: message, no redirect
    r = _callback(
        client,
        "..sign-in-message.children...sign-in-redirect.href..",
        [
            {"id": "sign-in-submit", "property": "n_clicks", "value": 1},
            {"id": "sign-in-key", "property": "n_submit", "value": 0},
        ],
        [
            {"id": "sign-in-key", "property": "value", "value": "bad"},
            {"id": "sign-in-next", "property": "data", "value": "/traces/7"},
        ],
        ["sign-in-submit.n_clicks"],
    )
    resp = r.get_json()["response"]
    assert "not valid" in json.dumps(resp["sign-in-message"])
    assert "sign-in-redirect" not in resp

    # right key: the session cookie is set and we go back where we came from
    r = _callback(
        client,
        "..sign-in-message.children...sign-in-redirect.href..",
        [
            {"id": "sign-in-submit", "property": "n_clicks", "value": 2},
            {"id": "sign-in-key", "property": "n_submit", "value": 0},
        ],
        [
            {"id": "sign-in-key", "property": "value", "value": KEY},
            {"id": "sign-in-next", "property": "data", "value": "/traces/7"},
        ],
        ["sign-in-submit.n_clicks"],
    )
    resp = r.get_json()["response"]
    assert resp["sign-in-redirect"]["href"] == "/traces/7"
    assert "rlvr_session" in r.headers.get("Set-Cookie", "")

    # the router renders the overview of trace 7 (not swallowed by a shorter template)
    r = _callback(
        client,
        ".._pages_content.children..._pages_store.data..",
        [
            {"id": "_pages_location", "property": "pathname", "value": "/traces/7/distributions"},
            {"id": "_pages_location", "property": "search", "value": ""},
        ],
        changed=["_pages_location.pathname"],
    )
    page = json.dumps(r.get_json()["response"]["_pages_content"]["children"])
    assert '"dist-box"' in page and '"run A"' in page

    # a figure callback: stage-time bars of trace 7 from the stub's steps
    r = _callback(
        client,
        "..overview-cards.children...overview-stage-time.figure...overview-lengths.figure...overview-gpu.figure"
        "...overview-data-efficiency.figure..",
        [{"id": "page-trace-id", "property": "data", "value": 7}, []],
        [{"id": "overview-zoom", "property": "data", "value": {}}],
        changed=["page-trace-id.data"],
    )
    # the ALL input is an empty list here (no analysis panels rendered)
    out = r.get_json()["response"]
    gen = next(t for t in out["overview-stage-time"]["figure"]["data"] if t["name"] == "generation")
    assert gen["y"] == [5.0, 6.0]
    p50 = next(t for t in out["overview-lengths"]["figure"]["data"] if t["name"] == "p50")
    assert p50["y"] == [10.0, 11.0]
    cards = json.dumps(out["overview-cards"]["children"])
    assert "92" in cards  # tokens: 10 + 30 + 12 + 40


def test_pages_need_a_signed_in_team(app):
    client = app.server.test_client()
    r = _callback(
        client,
        ".._pages_content.children..._pages_store.data..",
        [
            {"id": "_pages_location", "property": "pathname", "value": "/traces/7"},
            {"id": "_pages_location", "property": "search", "value": ""},
        ],
        changed=["_pages_location.pathname"],
    )
    page = json.dumps(r.get_json()["response"]["_pages_content"]["children"])
    assert "/sign-in?next=%2Ftraces%2F7" in page


def test_mounted_under_a_prefix(stub):
    from dashboard.app import create_dash

    app = create_dash(
        "http://api.test", requests_pathname_prefix="/ui", http_client=httpx.Client(transport=httpx.MockTransport(stub))
    )
    client = app.server.test_client()
    index = client.get("/traces").get_data(as_text=True)
    assert '"requests_pathname_prefix":"\\u002fui\\u002f"' in index  # the browser calls /ui/_dash-*
    r = _callback(
        client,
        ".._pages_content.children..._pages_store.data..",
        [
            {"id": "_pages_location", "property": "pathname", "value": "/ui/traces/7/imbalance"},
            {"id": "_pages_location", "property": "search", "value": ""},
        ],
        changed=["_pages_location.pathname"],
    )
    page = json.dumps(r.get_json()["response"]["_pages_content"]["children"])
    assert "/ui/sign-in?next=%2Ftraces%2F7%2Fimbalance" in page


def test_analysis_results_stay_on_the_server_and_are_cached_per_team(app, stub):
    import flask

    from dashboard.server import results

    results._cache.clear()
    stub.routes[("GET", "/api/v1/jobs/21")] = httpx.Response(
        200, json={"id": 21, "kind": "imbalance", "status": "succeeded", "result": {"dp_size": 4}}
    )
    stub.routes[("GET", "/api/v1/jobs/22")] = httpx.Response(
        200, json={"id": 22, "kind": "longtail", "status": "running", "result": None}
    )
    with app.server.test_request_context():
        flask.session[session.KEY_FIELD] = session.seal_key(KEY)
        assert results.analysis_result({"job_id": 21, "note": None}, "imbalance") == (
            {"dp_size": 4},
            "Waiting for the imbalance analysis…",
        )
        n = len(stub.requests)
        assert results.job_result(21) == {"dp_size": 4}
        assert len(stub.requests) == n  # served from the cache
        assert results.job_result(22) is None and results.job_result(22) is None
        assert len(stub.requests) == n + 2  # unfinished jobs are not cached
        assert results.analysis_result({"job_id": None, "note": "The longtail analysis is running…"}, "long-tail") == (
            None,
            "The longtail analysis is running…",
        )
    with app.server.test_request_context():
        flask.session[session.KEY_FIELD] = session.seal_key("another team")
        result, note = results.analysis_result({"job_id": 21}, "imbalance")
        assert result is None and "session has ended" in note  # the cache does not answer for another key


def test_cdf_draws_the_default_steps_in_the_first_round_and_redraws_for_chosen_ones(app, stub):
    client = app.server.test_client()
    with client.session_transaction() as sess:
        sess[session.KEY_FIELD] = session.seal_key(KEY, app.server)
    client.get("/_dash-layout")  # the app registers its callbacks on the first request
    main = next(k for k in app.callback_map if k.startswith("..dist-box.figure"))
    inputs = [
        {"id": "page-trace-id", "property": "data", "value": 7},
        {"id": "dist-field", "property": "value", "value": "response"},
        {"id": "dist-task", "property": "value", "value": None},
        {"id": "dist-phase", "property": "value", "value": "all"},
        {"id": "dist-log", "property": "value", "value": []},
    ]
    first = _callback(
        client,
        main,
        inputs,
        [
            {"id": "dist-cdf-steps", "property": "value", "value": None},
            {"id": "distributions-zoom", "property": "data", "value": {}},
        ],
        ["page-trace-id.data"],
    ).get_json()["response"]
    assert [t["name"] for t in first["dist-cdf"]["figure"]["data"]] == ["step 0", "step 1"]
    # the defaults are named, not set as the dropdown's value (which would ask again)
    assert "value" not in first["dist-cdf-steps"] and first["dist-cdf-steps"]["placeholder"].startswith("steps 0, 1")
    out = next(k for k in app.callback_map if k.startswith("dist-cdf.figure@"))
    state = [
        {"id": "page-trace-id", "property": "data", "value": 7},
        {"id": "dist-field", "property": "value", "value": "response"},
        {"id": "dist-task", "property": "value", "value": None},
        {"id": "dist-phase", "property": "value", "value": "all"},
    ]
    n = len(stub.requests)
    new = _callback(
        client, out, [{"id": "dist-cdf-steps", "property": "value", "value": [1]}], state, ["dist-cdf-steps.value"]
    )
    fig = new.get_json()["response"]["dist-cdf"]["figure"]
    assert [t["name"] for t in fig["data"]] == ["step 1"]
    assert len(stub.requests) == n + 1  # the summaries, fetched on the server


# -- lists without results, replays, workloads, downloads -------------------------------
def test_lists_leave_results_out_unless_asked(stub):
    stub.routes[("GET", "/api/v1/jobs")] = httpx.Response(200, json={"items": []})
    stub.routes[("GET", "/api/v1/traces/7/analyses")] = httpx.Response(200, json={"items": []})
    c = stub.client()
    c.jobs(trace_id=7, kind="imbalance")
    assert dict(stub.requests[-1].url.params) == {"trace_id": "7", "kind": "imbalance"}
    c.jobs(include_result=True)
    assert dict(stub.requests[-1].url.params) == {"include_result": "true"}
    c.analyses(7)
    assert "include_result" not in stub.requests[-1].url.params
    c.analyses(7, include_result=True)
    assert stub.requests[-1].url.params["include_result"] == "true"


def test_simulation_and_workload_calls(stub):
    posted = []

    def post(request):
        posted.append(json.loads(request.read()))
        return httpx.Response(202, json={"id": 5, "kind": "simulation", "status": "queued"})

    stub.routes[("GET", "/api/v1/simulations/presets")] = httpx.Response(200, json={"policies": ["sync"]})
    stub.routes[("POST", "/api/v1/simulations")] = post
    stub.routes[("GET", "/api/v1/simulations")] = httpx.Response(200, json={"items": [{"id": 5}]})
    stub.routes[("GET", "/api/v1/simulations/5")] = httpx.Response(200, json={"id": 5, "status": "running"})
    stub.routes[("POST", "/api/v1/workloads")] = lambda r: httpx.Response(202, json={"id": 6, **json.loads(r.read())})
    stub.routes[("GET", "/api/v1/workloads/6")] = httpx.Response(200, json={"id": 6, "status": "succeeded"})
    c = stub.client()
    assert c.simulation_presets() == {"policies": ["sync"]}
    assert c.simulate({"trace_id": 7, "policy": "sync"})["id"] == 5
    assert posted == [{"trace_id": 7, "policy": "sync"}]
    assert c.simulations(trace_id=7, limit=3) == [{"id": 5}]
    assert dict(stub.requests[-1].url.params) == {"trace_id": "7", "limit": "3"}
    assert c.simulation(5)["status"] == "running"
    assert c.create_workload({"trace_id": 7, "steps": 0})["steps"] == 0
    assert c.workload(6)["status"] == "succeeded"
    stub.routes[("POST", "/api/v1/simulations")] = httpx.Response(
        422, json={"detail": {"message": "cluster.n_gpus: disaggregated policies need ...", "field": "cluster.n_gpus"}}
    )
    with pytest.raises(ApiError) as err:
        c.simulate({"trace_id": 7})
    assert err.value.status == 422 and err.value.field == "cluster.n_gpus"


def test_downloads_pass_the_api_file_through(app, stub):
    import gzip

    packed = gzip.compress(b'{"traceEvents": [1, 2, 3]}')
    # a streamed body, as a real transport gives it (passed on raw, still gzip-encoded)
    stub.routes[("GET", "/api/v1/simulations/5/chrome-trace")] = lambda r: (
        httpx.Response(
            200,
            stream=httpx.ByteStream(packed),
            headers={"content-encoding": "gzip", "content-type": "application/json"},
        )
        if r.url.params.get("policy") == "b"
        else httpx.Response(404, json={"detail": {"message": "no policy a"}})
    )
    stub.routes[("GET", "/api/v1/workloads/6/download")] = httpx.Response(
        409, json={"detail": {"message": "workload 6 is running"}}
    )
    client = app.server.test_client()
    assert client.get("/download/simulations/5/chrome-trace?policy=b").status_code == 401  # not signed in
    with client.session_transaction() as sess:
        sess[session.KEY_FIELD] = session.seal_key(KEY, app.server)
    r = client.get("/download/simulations/5/chrome-trace?policy=b")
    assert r.status_code == 200
    assert (
        r.headers["Content-Encoding"] == "gzip" and 'filename="simulation-5-b.json"' in r.headers["Content-Disposition"]
    )
    assert gzip.decompress(r.get_data()) == b'{"traceEvents": [1, 2, 3]}'
    assert stub.requests[-1].headers["X-API-Key"] == KEY
    missing = client.get("/download/simulations/5/chrome-trace?policy=a")
    assert missing.status_code == 404 and missing.get_data(as_text=True) == "no policy a"
    busy = client.get("/download/workloads/6.zip")
    assert busy.status_code == 409 and "running" in busy.get_data(as_text=True)


def _render(client, path: str) -> str:
    r = _callback(
        client,
        ".._pages_content.children..._pages_store.data..",
        [
            {"id": "_pages_location", "property": "pathname", "value": path},
            {"id": "_pages_location", "property": "search", "value": ""},
        ],
        changed=["_pages_location.pathname"],
    )
    return r.get_json()["response"]["_pages_content"]["children"]


def _find(tree, component_id):
    """The component with this id in a rendered layout (JSON), or None."""
    if isinstance(tree, dict):
        props = tree.get("props") or {}
        if props.get("id") == component_id:
            return tree
        for v in list(props.values()) + [tree.get("children")]:
            found = _find(v, component_id)
            if found is not None:
                return found
    elif isinstance(tree, list):
        for v in tree:
            found = _find(v, component_id)
            if found is not None:
                return found
    return None


def test_simulate_page_opens_the_latest_replay_with_a_form_from_presets(app, stub):
    stub.routes[("GET", "/api/v1/simulations/presets")] = httpx.Response(
        200,
        json={
            "gpus": {"H100": {}, "A100": {}},
            "models": {"Qwen2.5-7B": {}},
            "policies": ["sync", "one_step_off"],
            "balancing": ["none", "kk"],
            "defaults": {
                "cluster": {
                    "gpu": "H100",
                    "n_gpus": 8,
                    "rollout_replicas": 2,
                    "rollout_tp": 4,
                    "train_dp": 8,
                    "train_tp": 1,
                },
                "model": "Qwen2.5-7B",
                "limits": {"max_running_seqs": 256},
                "policy": {"balancing": "none"},
            },
        },
    )
    stub.routes[("GET", "/api/v1/simulations")] = httpx.Response(
        200,
        json={
            "items": [
                {"id": 9, "kind": "simulation", "status": "running", "params": {}, "result": None},
                {
                    "id": 8,
                    "kind": "simulation",
                    "status": "succeeded",
                    "params": {"policy": {"kind": "sync"}},
                    "result": None,
                },
            ]
        },
    )
    client = app.server.test_client()
    with client.session_transaction() as sess:
        sess[session.KEY_FIELD] = session.seal_key(KEY, app.server)
    page = _render(client, "/traces/7/simulate")
    assert _find(page, "sim-job")["props"]["data"] == 8  # the latest finished replay is shown
    assert _find(page, "sim-done")["props"]["data"] == 8
    # one GPU budget for both policies; the layout is left to the API (derived per policy)
    assert _find(page, "sim-gpus")["props"]["value"] == 8 and _find(page, "sim-replicas")["props"]["value"] is None
    assert [o["value"] for o in _find(page, "sim-policy-b")["props"]["options"]] == ["sync", "one_step_off"]
    assert (_find(page, "sim-step-from")["props"]["value"], _find(page, "sim-step-to")["props"]["value"]) == (0, 2)
    rows = json.dumps(_find(page, "sim-history"))
    assert '"data-job-id": "9"' in rows and '"data-job-id": "8"' in rows
    page = _render(client, "/traces/7/simulate?job=9")
    # (Dash passes the query string to the layout only from the location's search)
    r = _callback(
        client,
        ".._pages_content.children..._pages_store.data..",
        [
            {"id": "_pages_location", "property": "pathname", "value": "/traces/7/simulate"},
            {"id": "_pages_location", "property": "search", "value": "?job=9"},
        ],
        changed=["_pages_location.pathname"],
    )
    page = r.get_json()["response"]["_pages_content"]["children"]
    assert _find(page, "sim-job")["props"]["data"] == 9 and _find(page, "sim-done")["props"]["data"] is None
    assert _find(page, "sim-poll")["props"]["disabled"] is False  # a running replay is followed


def test_simulate_form_shows_the_chosen_policies_parameters(app, stub):
    """The policy forms hold each chosen policy's own parameters, built from the presets'
    policy_params: a re-run fills them as the job ran, another choice shows its defaults."""
    from backend.jobs.simulations import presets, simulation_params
    from dashboard.pages import simulate
    from dashboard.views.policy_params import PARAM

    simulate._presets.clear()  # presets are kept per API root: this test serves others
    stub.routes[("GET", "/api/v1/simulations/presets")] = httpx.Response(200, json=json.loads(json.dumps(presets())))
    body = {
        "trace_id": 7,
        "policy": {"kind": "partial", "params": {"over_provision": 1.5}},
        "compare_policy": {"kind": "async", "params": {"trigger_parameter_sync_step": 2}},
    }
    job = {"id": 8, "kind": "simulation", "status": "succeeded", "params": simulation_params(body), "result": None}
    stub.routes[("GET", "/api/v1/simulations")] = httpx.Response(200, json={"items": [job]})
    client = app.server.test_client()
    with client.session_transaction() as sess:
        sess[session.KEY_FIELD] = session.seal_key(KEY, app.server)
    r = _callback(
        client,
        ".._pages_content.children..._pages_store.data..",
        [
            {"id": "_pages_location", "property": "pathname", "value": "/traces/7/simulate"},
            {"id": "_pages_location", "property": "search", "value": "?rerun=8"},
        ],
        changed=["_pages_location.pathname"],
    )
    page = r.get_json()["response"]["_pages_content"]["children"]

    def field(tree, which, name):
        return _find(tree, {"type": PARAM, "form": "sim", "policy": which, "name": name})

    assert field(page, "a", "over_provision")["props"]["value"] == 1.5
    assert field(page, "a", "finished_groups")["props"]["value"] is None
    every = field(page, "b", "trigger_parameter_sync_step")["props"]
    assert every["value"] == 2 and every["type"] == "text"  # checked against its bounds on submit
    r = _callback(
        client,
        "sim-params-b.children",
        [{"id": "sim-policy-b", "property": "value", "value": "partial"}],
        changed=["sim-policy-b.value"],
    )
    shown = r.get_json()["response"]["sim-params-b"]["children"]
    assert field(shown, "b", "over_provision")["props"]["value"] == 2.0  # the declared default
    assert "APRIL" in json.dumps(shown)  # the help line as caption
    r = _callback(
        client,
        "sim-params-b.children",
        [{"id": "sim-policy-b", "property": "value", "value": "sync"}],
        changed=["sim-policy-b.value"],
    )
    assert r.get_json()["response"]["sim-params-b"]["children"] == []
    simulate._presets.clear()


def test_advise_form_offers_every_registered_policy(app, stub):
    from backend.jobs.simulations import presets

    served = json.loads(json.dumps(presets()))
    stub.routes[("GET", "/api/v1/simulations/presets")] = httpx.Response(200, json=served)
    stub.routes[("GET", "/api/v1/advice")] = httpx.Response(200, json={"items": []})
    client = app.server.test_client()
    with client.session_transaction() as sess:
        sess[session.KEY_FIELD] = session.seal_key(KEY, app.server)
    picker = _find(_render(client, "/traces/7/advise"), "adv-policies")["props"]
    assert [o["value"] for o in picker["options"]] == served["policies"] and picker["value"] == served["policies"]
    hovers = [o["label"]["props"]["title"] for o in picker["options"]]
    assert hovers == [served["policy_help"][k] for k in served["policies"]]


def test_analysis_panel_is_filled_when_the_page_is_built(app, stub):
    stub.routes[("GET", "/api/v1/traces/7/analyses")] = httpx.Response(
        200,
        json={
            "items": [
                {
                    "id": 31,
                    "kind": "imbalance",
                    "status": "succeeded",
                    "created_at": "2026-01-01T00:00",
                    "result": None,
                },
                {
                    "id": 32,
                    "kind": "imbalance",
                    "status": "running",
                    "progress": 0.5,
                    "created_at": "2026-01-02T00:00",
                    "result": None,
                },
            ]
        },
    )
    client = app.server.test_client()
    with client.session_transaction() as sess:
        sess[session.KEY_FIELD] = session.seal_key(KEY, app.server)
    page = _render(client, "/traces/7/imbalance")
    store = _find(page, {"type": "analysis-result", "kind": "imbalance"})
    assert store["props"]["data"] == {"job_id": 31, "note": None}  # shown while the re-run goes on
    assert _find(page, {"type": "analysis-poll", "kind": "imbalance"})["props"]["disabled"] is False
    assert not any(r.url.path.endswith("/analyses") and r.method == "POST" for r in stub.requests)


def test_built_figures_are_cached_per_team(app):
    import flask

    from dashboard.server import figure_cache

    built = []

    def build():
        built.append(1)
        return {"figure": len(built)}

    with app.server.test_request_context():
        flask.session[session.KEY_FIELD] = session.seal_key(KEY)
        first = figure_cache.cached(("imbalance", 21, "tokens"), build)
        assert figure_cache.cached(("imbalance", 21, "tokens"), build) is first and len(built) == 1
        figure_cache.cached(("imbalance", 21, "cost"), build)  # other options: built again
        assert len(built) == 2
    with app.server.test_request_context():
        flask.session[session.KEY_FIELD] = session.seal_key("another team")
        assert figure_cache.cached(("imbalance", 21, "tokens"), build) == {"figure": 3}  # never another team's


def test_prefetched_result_is_fetched_once(app, stub):
    import threading
    import time

    import flask

    from dashboard.server import results

    calls = []

    def slow(request):
        calls.append(threading.current_thread().name)
        time.sleep(0.2)
        return httpx.Response(200, json={"id": 41, "kind": "longtail", "status": "succeeded", "result": {"v": 1}})

    stub.routes[("GET", "/api/v1/jobs/41")] = slow
    with app.server.test_request_context():
        flask.session[session.KEY_FIELD] = session.seal_key(KEY)
        results.prefetch(41)  # as a layout does
        assert results.job_result(41) == {"v": 1}  # waits for the fetch under way
        assert calls == ["prefetch-job-41"]
        results.prefetch(41)  # cached: nothing to do
        assert results.job_result(41) == {"v": 1} and len(calls) == 1
