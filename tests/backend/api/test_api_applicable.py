"""Which analyses apply is the registry's word, answered by the API: the trace lists
them, and asking for one that does not apply names the files that would bring its data."""

from __future__ import annotations

from tests.helpers import jsonl, synthetic_rows


def _upload(api, name: str, content: bytes) -> dict:
    r = api.post("/api/v1/traces", files=[("files", (name, content, "application/octet-stream"))])
    assert r.status_code == 201, r.text
    return r.json()


def test_packed_trace_lists_sample_analyses(api):
    trace = _upload(api, "packed_lengths_step_0.jsonl", jsonl(synthetic_rows(steps=1, groups=4, n=2)[0]))
    assert trace["analyses"] == ["lengths", "longtail", "imbalance"]
    assert api.get(f"/api/v1/traces/{trace['id']}").json()["analyses"] == trace["analyses"]


def test_inapplicable_analysis_names_the_missing_column(api):
    csv = b"step,group_idx,sample_idx,prompt_len,response_len\n0,0,0,10,20\n0,0,1,10,30\n"
    trace = _upload(api, "samples.csv", csv)
    assert "imbalance" not in trace["analyses"] and "lengths" in trace["analyses"]
    r = api.post(f"/api/v1/traces/{trace['id']}/analyses", json={"kind": "imbalance"})
    assert r.status_code == 422
    body = r.json()["detail"]
    # in the files' words (which file of which format would bring it), not the store's columns
    assert "packed_lengths_step_N.jsonl" in body["message"] and "dp_rank column" in body["message"]
    assert "samples.dp_rank" not in body["message"] and body["field"] == "kind"
    r = api.post(f"/api/v1/traces/{trace['id']}/analyses", json={"kind": "gpu_timeline"})
    assert r.status_code == 422 and "Kineto" in r.json()["detail"]["message"]
