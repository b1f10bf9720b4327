"""Attach files to an existing trace, live traces (Client.log, close) and per-step
series, on SQLite and Postgres. Expected figures are recomputed from the rows the test
wrote, not through product code."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from sqlalchemy import func, select

from backend.store.db import new_session
from backend.store.models import Job, Sample
from tests.helpers import dapo_run, jsonl, responses_of, synthetic_rows


def upload(api, files, **form):
    return api.post("/api/v1/traces", files=[("files", f) for f in files], data=form)


def attach(api, trace_id, files, **form):
    return api.post(f"/api/v1/traces/{trace_id}/files", files=[("files", f) for f in files], data=form)


def step_file(rows):
    return (f"packed_lengths_step_{rows[0]['step']}.jsonl", jsonl(rows), "application/jsonl")


def n_samples(trace_id):
    with new_session() as s:
        return s.scalar(select(func.count()).select_from(Sample).where(Sample.trace_id == trace_id))


@pytest.fixture()
def per_step():
    return synthetic_rows(steps=4, groups=8, n=4)


@pytest.fixture()
def base(api, per_step):
    r = upload(api, [step_file(per_step[0]), step_file(per_step[1])], name="run")
    assert r.status_code == 201, r.text
    return r.json()


def test_attach_more_steps_then_idempotent(api, base, per_step):
    tid = base["id"]
    r = attach(api, tid, [step_file(per_step[2]), step_file(per_step[3])])
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["created"] and body["steps"] == [2, 3]
    assert body["trace"]["n_steps"] == 4 and body["trace"]["n_samples"] == 4 * 8 * 4
    summaries = api.get(f"/api/v1/traces/{tid}/summaries").json()["steps"]
    assert [s["step"] for s in summaries] == [0, 1, 2, 3]
    for s in summaries:
        values = responses_of(per_step, s["step"])
        assert s["count"] == values.size and s["max"] == values.max()
        assert s["p99"] == pytest.approx(np.percentile(values, 99))
    again = attach(api, tid, [step_file(per_step[2]), step_file(per_step[3])])
    assert again.status_code == 200 and not again.json()["created"]
    assert n_samples(tid) == 4 * 8 * 4


def test_attach_is_all_or_nothing(api, base, per_step):
    tid = base["id"]
    r = attach(api, tid, [step_file(per_step[2]), ("packed_lengths_step_3.jsonl", b'{"step": 3, "input": "x"}\n', "x")])
    assert r.status_code == 422, r.text
    assert r.json()["detail"]["file"] == "packed_lengths_step_3.jsonl"
    assert r.json()["detail"]["line"] == 1
    assert n_samples(tid) == 2 * 8 * 4
    # a step the trace already has: nothing of the attach stays
    r = attach(api, tid, [step_file(per_step[2]), step_file(per_step[1])])
    assert r.status_code == 422, r.text
    assert "already in trace" in r.json()["detail"]["message"]
    assert n_samples(tid) == 2 * 8 * 4
    assert api.get(f"/api/v1/traces/{tid}").json()["n_steps"] == 2


def test_attach_metric_log_fills_timings_and_series(api, base):
    tid = base["id"]
    log = [{"step": s, "data": {"timing_s/gen": 10.0 + s, "actor/entropy": 0.5 - 0.1 * s}} for s in (0, 1, 5)]
    r = attach(api, tid, [("metrics.jsonl", jsonl(log), "application/jsonl")])
    assert r.status_code == 201, r.text
    assert set(r.json()["tables"]) >= {"steps"}
    steps = {s["step"]: s for s in api.get(f"/api/v1/traces/{tid}/steps").json()["items"]}
    assert steps[1]["t_gen"] == 11.0 and steps[1]["n_samples"] == 32  # merged into the sampled step
    assert steps[5]["t_gen"] == 15.0 and steps[5]["n_samples"] == 0
    series = api.get(f"/api/v1/traces/{tid}/series").json()
    assert "t_gen" in series["keys"] and "actor/entropy" in series["keys"] and "response/p99" in series["keys"]
    chosen = api.get(f"/api/v1/traces/{tid}/series", params={"keys": "t_gen,actor/entropy"}).json()
    assert chosen["steps"] == [0, 1, 5]
    assert chosen["series"]["t_gen"] == [10.0, 11.0, 15.0]
    assert chosen["series"]["actor/entropy"] == pytest.approx([0.5, 0.4, 0.0])
    missing = api.get(f"/api/v1/traces/{tid}/series", params={"keys": "nope"})
    assert missing.status_code == 404


def test_attach_dapo_marks_to_existing_samples(api):
    packed, filt = dapo_run(gen_steps=3)
    r = upload(api, [step_file(rows) for rows in packed], name="dapo")
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    r = attach(api, tid, [("dapo_filter_indices.jsonl", jsonl(filt), "application/jsonl")])
    assert r.status_code == 201, r.text
    with new_session() as s:
        marks = s.execute(select(Sample.step, Sample.group_idx, Sample.filter_mark).where(Sample.trace_id == tid)).all()
    for step, group, mark in marks:
        line = filt[step]
        want = 2 if group in line["used_prompt_indices"] else 1 if group in line["kept_prompt_indices"] else 0
        assert mark == want
    assert "data_efficiency" in api.get(f"/api/v1/traces/{tid}").json()["analyses"]


def test_attach_invalidates_reused_analyses(api, base, per_step):
    tid = base["id"]
    with new_session() as s:
        before = {j.kind: j.params_key for j in s.scalars(select(Job).where(Job.trace_id == tid))}
    assert before  # default analyses were queued at upload
    attach(api, tid, [step_file(per_step[2])])
    with new_session() as s:
        jobs = list(s.scalars(select(Job).where(Job.trace_id == tid)))
    fresh = {j.kind for j in jobs if not j.params_key.startswith("stale-") and j.id}
    stale = {j.kind for j in jobs if j.params_key.startswith("stale-")}
    assert set(before) <= stale and set(before) <= fresh


def test_live_trace_client_log_and_close(api):
    r = api.post("/api/v1/traces/live", json={"name": "live run"})
    assert r.status_code == 201, r.text
    trace = r.json()
    assert trace["live"] and trace["n_steps"] == 0
    tid = trace["id"]
    for step in range(3):
        body = {"steps": [{"step": step, "metrics": {"timing_s/step": 2.0 * step, "loss": 1.0 / (step + 1)}}]}
        r = api.post(f"/api/v1/traces/{tid}/steps", json=body)
        assert r.status_code == 201, r.text
    again = api.post(f"/api/v1/traces/{tid}/steps", json=body)
    assert again.status_code == 200 and again.json()["n_steps"] == 3
    series = api.get(f"/api/v1/traces/{tid}/series", params={"keys": ["t_step", "loss"]}).json()
    assert series["live"] and series["series"]["t_step"] == [0.0, 2.0, 4.0]
    closed = api.post(f"/api/v1/traces/{tid}/close").json()
    assert closed["live"] is False
    assert orjson.loads(api.get(f"/api/v1/traces/{tid}").content)["live"] is False


def test_upload_with_a_metric_log_missing_a_step(api, per_step):
    """Packed lengths for steps 0-3 and a verl log without step 2: one upload (the step
    rows differ in the keys they have)."""
    log = [{"step": s, "data": {"timing_s/gen": 1.0 + s}} for s in (0, 1, 3)]
    r = upload(api, [*(step_file(rows) for rows in per_step), ("metrics.jsonl", jsonl(log), "x")], name="gap")
    assert r.status_code == 201, r.text
    steps = {s["step"]: s for s in api.get(f"/api/v1/traces/{r.json()['id']}/steps").json()["items"]}
    assert steps[2]["t_gen"] is None and steps[2]["n_samples"] == 32 and steps[3]["t_gen"] == 4.0


def test_attach_kineto_ranks_to_a_trace(api, base, shared_fixtures):
    """Two Kineto files of one run attached one after the other: event numbers and kernel
    names continue, the per-rank metadata merges, the GPU analysis applies."""
    import gzip

    paths = [shared_fixtures / "kineto" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]
    tid = base["id"]
    total = 0
    for path in paths:
        raw = orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        total += sum(1 for e in raw if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
        r = attach(api, tid, [(path.name, path.read_bytes(), "application/gzip")])
        assert r.status_code == 201, r.text
    trace = api.get(f"/api/v1/traces/{tid}").json()
    assert trace["n_gpu_events"] == total and trace["n_samples"] == 2 * 8 * 4
    assert len(trace["metadata"]["kineto"]["ranks"]) == 2
    assert "gpu_timeline" in trace["analyses"]
    events = api.get(f"/api/v1/traces/{tid}/gpu-events", params={"limit": 200_000}).json()
    assert len(events["items"]) == total and all(e["name"] for e in events["items"])


def test_cli_ingest_into(env, tmp_path, per_step):
    from typer.testing import CliRunner

    from rlvr_explorer.cli import app
    from tests.helpers import write_packed_dir

    runner = CliRunner()
    first = write_packed_dir(tmp_path / "a", per_step[:2])
    r = runner.invoke(app, ["ingest", str(first), "--name", "cli", "--json"])
    assert r.exit_code == 0, r.output
    tid = orjson.loads(r.stdout.strip().splitlines()[-1])["id"]
    more = write_packed_dir(tmp_path / "b", per_step[2:])
    r = runner.invoke(app, ["ingest", str(more), "--into", str(tid), "--json"])
    assert r.exit_code == 0, r.output
    out = orjson.loads(r.stdout.strip().splitlines()[-1])
    assert out["attached"] and out["steps"] == 4 and out["samples"] == 4 * 8 * 4
    again = runner.invoke(app, ["ingest", str(more), "--into", str(tid)])  # a summary, not JSON
    assert again.exit_code == 0 and f"already attached: trace {tid}" in again.stdout and "{" not in again.stdout
    bad = tmp_path / "c"
    bad.mkdir()
    (bad / "packed_lengths_step_9.jsonl").write_bytes(b'{"step": 9, "input": 3, "output": ["x"]}\n')
    r = runner.invoke(app, ["ingest", str(bad), "--into", str(tid)])
    assert r.exit_code == 2 and "packed_lengths_step_9.jsonl" in r.output


def test_series_include_per_step_analysis_figures(api, base, per_step):
    """A finished default analysis adds its per-step numbers as series (recomputed here
    from the rows: the long-tail idle fraction with one engine per DP rank)."""
    from backend.store.db import session_scope
    from backend.store.models import Job, JobStatus

    tid = base["id"]
    with session_scope() as s:
        queued = s.scalars(select(Job).where(Job.trace_id == tid, Job.kind == "longtail")).first()
        assert queued is not None
        # a finished job of its own (a worker of the session may be running the queued one)
        s.add(
            Job(
                team_id=queued.team_id,
                trace_id=tid,
                kind="longtail",
                params=queued.params,
                params_key=queued.params_key,
                status=JobStatus.SUCCEEDED,
                progress=1.0,
                result={"steps": [{"step": 0, "idle_fraction": 0.25, "tokens": {"max_over_mean": 1.5}}, {"step": 7}]},
            )
        )
    body = api.get(f"/api/v1/traces/{tid}/series").json()
    assert "longtail/idle_fraction" in body["keys"] and "longtail/tokens.max_over_mean" in body["keys"]
    chosen = api.get(f"/api/v1/traces/{tid}/series", params={"keys": "longtail/idle_fraction,response/max"}).json()
    assert chosen["steps"] == [0, 1]
    assert chosen["series"]["longtail/idle_fraction"] == [0.25, None]
    assert chosen["series"]["response/max"] == [float(responses_of(per_step, s).max()) for s in (0, 1)]
