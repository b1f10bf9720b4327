"""Rollout dumps through the API on both databases: uploaded with the run's tokenizer (or
without: characters), a sample's text and group, the search before and after the index
job a real worker builds, filters, bad dumps refused whole, and deletion."""

from __future__ import annotations

import io
import zipfile

import pytest
from sqlalchemy import text
from tokenizers import Tokenizer

from backend.store.db import get_engine
from tests.conftest import wait_for_job
from tests.helpers import jsonl
from tests.rollout_writer import HTML, PHRASE, dump_bytes, dump_rows, trained_tokenizer, write_dump


def zipped(folder) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, f"rollouts/{path.relative_to(folder)}")
    return buf.getvalue()


@pytest.fixture()
def dumped(api, tmp_path):
    written = write_dump(tmp_path / "dump")
    tok_json = trained_tokenizer([r["input"] + r["output"] for rows in written.values() for r in rows])
    r = api.post(
        "/api/v1/traces",
        files=[
            ("files", ("rollouts.zip", zipped(tmp_path / "dump"), "application/zip")),
            ("tokenizer", ("qwen-tokenizer.json", tok_json.encode(), "application/json")),
        ],
    )
    assert r.status_code == 201, r.text
    return r.json(), written, Tokenizer.from_str(tok_json)


def grouped(rows: list[dict]) -> dict:
    """(group, sample) of each line, counted independently: prompts by first appearance."""
    prompts = list(dict.fromkeys(r["input"] for r in rows))
    seen: dict[str, int] = {}
    out = {}
    for i, r in enumerate(rows):
        s = seen.get(r["input"], 0)
        seen[r["input"]] = s + 1
        out[i] = (prompts.index(r["input"]), s)
    return out


def test_a_sample_its_text_tokens_and_group(api, dumped):
    trace, written, tok = dumped
    assert trace["status"] == "ready" and trace["n_samples"] == 3 * 20 + 2
    assert trace["metadata"]["rollouts"]["length_unit"] == "tokens"
    rows = written["2.jsonl"]
    i = next(i for i, r in enumerate(rows) if HTML in r["output"])
    g, s = grouped(rows)[i]
    body = api.get(f"/api/v1/traces/{trace['id']}/samples/2/{g}/{s}/text").json()
    assert body["prompt"] == rows[i]["input"] and body["response"] == rows[i]["output"]
    assert body["response_len"] == len(tok.encode(rows[i]["output"], add_special_tokens=False).ids)
    assert body["prompt_len"] == len(tok.encode(rows[i]["input"], add_special_tokens=False).ids)
    assert body["reward"] == rows[i]["score"] and body["gts"] == rows[i]["gts"]
    assert body["extras"] == {"acc": float(rows[i]["acc"]), "pred": rows[i]["pred"], "format_ok": 1.0}
    assert body["length_unit"] == "tokens" and body["validate"] is False
    siblings = [j for j, (gg, _) in grouped(rows).items() if gg == g and j != i]
    assert sorted(m["sample_idx"] for m in body["group"]) == sorted(grouped(rows)[j][1] for j in siblings)
    assert {m["reward"] for m in body["group"]} == {rows[j]["score"] for j in siblings}
    missing = api.get(f"/api/v1/traces/{trace['id']}/samples/2/{g}/99/text")
    assert missing.status_code == 404


def search(api, trace_id, **params) -> dict:
    r = api.get(f"/api/v1/traces/{trace_id}/text-search", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def index_rows(trace_id: int) -> int:
    table = "sample_text_search" if get_engine().dialect.name == "postgresql" else "sample_text_fts"
    with get_engine().connect() as conn:
        return conn.execute(text(f"SELECT count(*) FROM {table} WHERE trace_id = :t"), {"t": trace_id}).scalar_one()


def test_search_reads_then_uses_the_index(api, dumped, worker):
    trace, written, _ = dumped
    tid = trace["id"]
    # the phrase, in another case, in one response of step 2
    for params in ({"q": PHRASE.upper(), "step": 2}, {"q": PHRASE}):
        found = search(api, tid, **params)
        assert [(m["step"], m["where"]) for m in found["items"]] == [(2, "response")]
        assert PHRASE.title() in found["items"][0]["snippet"]
    assert search(api, tid, q=PHRASE, step=1)["items"] == []
    loops = search(api, tid, q="", repeating=True)
    assert loops["total"] == 3 and all(m["repeat_period"] == len("I think the answer is 5. ") for m in loops["items"])
    failed = search(api, tid, q="answer", reward_max=0, response_len_min=50)
    expected = sum(
        1
        for name, rows in written.items()
        for r in rows
        if not name.startswith("val") and r["score"] <= 0 and "answer" in (r["input"] + r["output"]).lower()
    )
    assert 0 < failed["total"] and all(m["reward"] <= 0 and m["response_len"] >= 50 for m in failed["items"])
    assert failed["total"] <= expected  # the length filter only removes
    jobs = api.get("/api/v1/jobs", params={"trace_id": tid, "kind": "text_index"}).json()["items"]
    assert len(jobs) == 1
    assert wait_for_job(api, jobs[0]["id"])["status"] == "succeeded"
    assert index_rows(tid) == trace["n_samples"]
    indexed = search(api, tid, q=PHRASE)
    assert indexed["indexed"] and [m["step"] for m in indexed["items"]] == [2]
    assert indexed["scanned"] == 1  # the index left one candidate to read
    assert api.delete(f"/api/v1/traces/{tid}").status_code == 204
    assert index_rows(tid) == 0


def test_without_a_tokenizer_lengths_are_characters(api, tmp_path):
    rows = dump_rows(5, groups=2, n=2)
    r = api.post("/api/v1/traces", files=[("files", ("5.jsonl", dump_bytes(rows), "application/jsonl"))])
    assert r.status_code == 201, r.text
    trace = r.json()
    assert trace["metadata"]["rollouts"]["length_unit"] == "characters" and trace["max_response_len"] is None
    page = api.get(f"/api/v1/traces/{trace['id']}/samples", params={"step": 5, "limit": 10}).json()["items"]
    texts = {
        (s["group_idx"], s["sample_idx"]): api.get(
            f"/api/v1/traces/{trace['id']}/samples/5/{s['group_idx']}/{s['sample_idx']}/text"
        ).json()
        for s in page
    }
    assert all(s["response_len"] == len(texts[(s["group_idx"], s["sample_idx"])]["response"]) for s in page)
    assert all(t["length_unit"] == "characters" and t["stop_reason"] is None for t in texts.values())


@pytest.mark.parametrize(
    "line, field, line_no",
    [(b"{broken json\n", None, 3), (b'{"input": "p", "score": 1, "step": 1}\n', "output", 3)],
)
def test_a_bad_dump_is_refused_whole(api, line, field, line_no):
    good = dump_bytes(dump_rows(1, groups=1, n=2, shuffle=False))
    r = api.post("/api/v1/traces", files=[("files", ("1.jsonl", good + line, "application/jsonl"))])
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert (detail["file"], detail["line"], detail["field"]) == ("1.jsonl", line_no, field)
    assert all(t["name"] != "1.jsonl" for t in api.get("/api/v1/traces").json()["items"])
    with get_engine().connect() as conn:
        orphans = conn.execute(
            text("SELECT count(*) FROM sample_texts WHERE trace_id NOT IN (SELECT id FROM traces)")
        ).scalar_one()
    assert orphans == 0


def packed_twin(rows: list[dict], tok: Tokenizer, step: int) -> bytes:
    """The PolyTrace packed-lengths file of the same samples (token lengths), its prompt
    groups in reverse order and on two DP ranks: matching goes by lengths, not order."""
    groups: dict[str, list[int]] = {}
    for r in rows:
        groups.setdefault(r["input"], []).append(len(tok.encode(r["output"], add_special_tokens=False).ids))
    lines = []
    for i, (prompt, outputs) in enumerate(reversed(list(groups.items()))):
        lines.append(
            {
                "step": step,
                "rank": i % 2,
                "dp_rank": i % 2,
                "tp_rank": 0,
                "local_index": i,
                "input": len(tok.encode(prompt, add_special_tokens=False).ids),
                "output": outputs,
                "n_sampling": len(outputs),
                "validate": False,
            }
        )
    return jsonl(lines)


def test_a_dump_attached_to_its_packed_lengths_run_lands_on_its_samples(api, tmp_path):
    rows = {s: dump_rows(s, groups=4, n=3) for s in (1, 2)}
    tok_json = trained_tokenizer([r["input"] + r["output"] for lines in rows.values() for r in lines])
    tok = Tokenizer.from_str(tok_json)
    packed = [(f"packed_lengths_step_{s}.jsonl", packed_twin(rows[s], tok, s)) for s in rows]
    r = api.post("/api/v1/traces", files=[("files", (n, raw, "application/jsonl")) for n, raw in packed])
    assert r.status_code == 201, r.text
    trace = r.json()
    assert trace["n_samples"] == 24 and "reward_length" not in trace["analyses"]
    files = [("files", (f"{s}.jsonl", dump_bytes(rows[s]), "application/jsonl")) for s in rows]
    no_tok = api.post(f"/api/v1/traces/{trace['id']}/files", files=files)
    assert no_tok.status_code == 422 and no_tok.json()["detail"]["field"] == "tokenizer"
    done = api.post(
        f"/api/v1/traces/{trace['id']}/files", files=[*files, ("tokenizer", ("tokenizer.json", tok_json.encode(), "x"))]
    )
    assert done.status_code == 201, done.text
    after = done.json()["trace"]
    assert after["n_samples"] == 24 and "reward_length" in after["analyses"]  # counted once, rewards now known
    assert after["metadata"]["rollouts"]["samples"] == 24 and after["metadata"]["rollouts"]["length_unit"] == "tokens"
    for s in rows:
        for sample in api.get(f"/api/v1/traces/{trace['id']}/samples", params={"step": s}).json()["items"]:
            body = api.get(
                f"/api/v1/traces/{trace['id']}/samples/{s}/{sample['group_idx']}/{sample['sample_idx']}/text"
            )
            assert body.status_code == 200, body.text
            text_body = body.json()
            assert len(tok.encode(text_body["response"], add_special_tokens=False).ids) == sample["response_len"]
            assert len(tok.encode(text_body["prompt"], add_special_tokens=False).ids) == sample["prompt_len"]
            assert sample["reward"] == text_body["reward"] is not None and sample["dp_rank"] in (0, 1)
    other = dump_rows(2, groups=4, n=3, seed=77)  # another run's samples of step 2: other lengths
    bad = api.post(
        f"/api/v1/traces/{trace['id']}/files",
        files=[
            ("files", ("2.jsonl", dump_bytes(other), "x")),
            ("tokenizer", ("tokenizer.json", tok_json.encode(), "x")),
        ],
    )
    assert bad.status_code == 422 and "matches no sample" in bad.json()["detail"]["message"]
