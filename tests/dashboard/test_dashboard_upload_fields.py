"""The Traces page's upload sends the max response length shown or nothing: an invalid
value (a browser's number box would have handed Dash null, and the upload gone out
without the limit) blocks the upload with its message under the field."""

from __future__ import annotations

import base64

import httpx

from tests.dashboard.test_dashboard_client import _callback
from tests.dashboard.test_dashboard_team import client, stub, team_page  # noqa: F401

FILE = "data:application/json;base64," + base64.b64encode(b'{"step": 0}\n').decode()


def _upload(client, max_len):  # noqa: F811
    team_page(client, "/traces")
    deps = client.get("/_dash-dependencies").get_json()
    (output,) = [d["output"] for d in deps if d["output"].startswith("..upload-state.data...")]
    return _callback(
        client,
        output,
        [{"id": "trace-upload", "property": "contents", "value": [FILE]}],
        [
            {"id": "trace-upload", "property": "filename", "value": ["metrics.jsonl"]},
            {"id": "trace-upload-name", "property": "value", "value": None},
            {"id": "trace-upload-format", "property": "value", "value": None},
            {"id": "traces-refresh", "property": "data", "value": 0},
            {"id": "trace-upload-max-len", "property": "value", "value": max_len},
        ],
        ["trace-upload.contents"],
    )


def _response(r) -> dict:
    return {k.split("@")[0]: v for k, v in r.get_json()["response"].items()}


def test_an_invalid_max_response_length_blocks_the_upload(client, stub):  # noqa: F811
    for shown, why in (("0", "out of range"), ("8k", "not a number"), ("1.5", "not a whole number")):
        resp = _response(_upload(client, shown))
        assert why in resp["trace-upload-max-len-error"]["children"], (shown, resp)
        assert resp["upload-busy"]["children"].startswith("Not submitted: fix Max response length")
    assert not any(q.method == "POST" for q in stub.requests)  # nothing was uploaded


def test_the_max_response_length_shown_is_the_one_sent(client, stub):  # noqa: F811
    sent = []

    def accept(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(201, json={"id": 5, "name": "metrics", "status": "ready"})

    stub.routes[("POST", "/api/v1/traces")] = accept
    resp = _response(_upload(client, " 8192 "))
    assert resp["trace-upload-max-len-error"]["children"] == ""
    assert len(sent) == 1 and b'name="max_response_len"\r\n\r\n8192\r\n' in sent[0]
