"""The query layer (backend/store/queries/) on SQLite and Postgres: each function's
answer on a small trace written row by row, and the team scope — asked with another
team's id, every function of a trace's rows finds nothing."""

from __future__ import annotations

import uuid

import pytest

from backend.store.queries import engine_profiles, gpu_events, jobs, samples, steps, texts, traces, turns
from backend.store.queries.samples import SampleFilter

STEPS, GROUPS, PER_GROUP = 3, 2, 3


def _rows(trace_id: int) -> list:
    """Steps 0-2 of 2 groups of 3 samples; turns, tool calls, texts and GPU events."""
    from backend.store.models import GpuEvent, GpuKernelName, RankTiming, Step

    rows: list = []
    for step in range(STEPS):
        stats = {"response": {"all": {"n": GROUPS * PER_GROUP, "mean": 100.0 * step}}}
        rows.append(Step(trace_id=trace_id, step=step, n_samples=GROUPS * PER_GROUP, t_gen=1.5 * step, summary=stats))
        rows.append(RankTiming(trace_id=trace_id, step=step, rank=0, phase="gen", seconds=1.0))
        for g in range(GROUPS):
            for i in range(PER_GROUP):
                rows += _sample_rows(trace_id, step, g, i)
    rows.append(GpuKernelName(trace_id=trace_id, name_id=0, name="gemm_100%_kernel"))
    rows.append(GpuKernelName(trace_id=trace_id, name_id=1, name="nccl_allreduce"))
    for e in range(6):
        rows.append(
            GpuEvent(
                trace_id=trace_id,
                event_idx=e,
                rank=e % 2,
                stream=7,
                step=e // 2,
                kind=0,
                name_id=e % 2,
                start_us=10.0 * e,
                dur_us=5.0,
            )
        )
    return rows


def _sample_rows(trace_id: int, step: int, g: int, i: int) -> list:
    """Sample n (in key order) has response_len 100 n, is truncated when 4 divides n,
    has reward i, dp_rank g, two turns of 1 + i s and a 0.5 s tool call after the first;
    samples of step 0 have text and an extra `k` = n."""
    from backend.store.models import Sample, SampleExtra, SampleText, ToolCall, Turn

    key = {"trace_id": trace_id, "step": step, "group_idx": g, "sample_idx": i}
    n = (step * GROUPS + g) * PER_GROUP + i
    sample = Sample(**key, prompt_len=10, response_len=100 * n, truncated=n % 4 == 0, reward=float(i), dp_rank=g)
    sample.num_turns, sample.repeat_period = 2, i if step == 0 else None  # texts at step 0 only
    tool = ToolCall(**key, call_idx=0, turn=0, latency_s=0.5, status="failed" if (g, i) == (0, 1) else "ok")
    rows: list = [sample, tool]
    for turn in range(2):
        finish = "error" if (g, i, turn) == (1, 2, 1) else "stop"
        rows.append(
            Turn(**key, turn=turn, engine_latency_s=1.0 + i, prompt_tokens=50, cached_tokens=20, finish_reason=finish)
        )
    if step == 0:
        response = f"response {g}.{i}".encode()
        rows.append(SampleText(**key, prompt=b"p", response=response, prompt_chars=1, response_chars=len(response)))
        rows.append(SampleExtra(**key, key="k", value_num=n))
    return rows


@pytest.fixture()
def world(env):
    """Two teams; team a's trace with rows and jobs, team b's empty trace."""
    from backend.auth import create_team
    from backend.store.db import session_scope
    from backend.store.models import Job, JobStatus, Trace, TraceStatus

    with session_scope() as session:
        team_a, _ = create_team(session, f"qa-{uuid.uuid4().hex[:8]}")
        team_b, _ = create_team(session, f"qb-{uuid.uuid4().hex[:8]}")
        trace = Trace(team_id=team_a.id, name="run 100%_a", status=TraceStatus.READY, content_hash="a" * 64)
        other = Trace(team_id=team_b.id, name="run b", status=TraceStatus.READY, content_hash="b" * 64)
        session.add_all([trace, other])
        session.flush()
        session.add_all(_rows(trace.id))
        job_rows = [
            Job(
                team_id=team_a.id,
                trace_id=trace.id,
                kind="ingest",
                params={"upload": "u1"},
                params_key="i",
                status=JobStatus.SUCCEEDED,
            ),
            Job(team_id=team_a.id, trace_id=trace.id, kind="lengths", params_key="k", status=JobStatus.SUCCEEDED),
            Job(team_id=team_a.id, trace_id=trace.id, kind="lengths", params_key="k", status=JobStatus.FAILED),
            Job(team_id=team_b.id, trace_id=other.id, kind="lengths", params_key="k", status=JobStatus.SUCCEEDED),
        ]
        job_rows[1].result = {"x": 1}
        session.add_all(job_rows)
        session.flush()
        ids = {
            "a": team_a.id,
            "b": team_b.id,
            "trace": trace.id,
            "other": other.id,
            "jobs": [j.id for j in job_rows],
        }
    return ids


@pytest.fixture()
def session(world):
    from backend.store.db import new_session

    s = new_session()
    yield s
    s.close()


def keys(rows) -> list[tuple[int, int, int]]:
    return [(r.step, r.group_idx, r.sample_idx) for r in rows]


def test_traces(session, world):
    a, trace_id = world["a"], world["trace"]
    assert traces.get_trace(session, team_id=a, trace_id=trace_id).id == trace_id
    assert traces.get_trace(session, team_id=world["b"], trace_id=trace_id) is None
    # the name filter is a literal substring: % and _ match themselves
    total, page = traces.list_traces(session, team_id=a, status="ready", name_contains="100%_", limit=10, offset=0)
    assert total == 1 and [t.id for t in page] == [trace_id]
    assert traces.list_traces(session, team_id=a, status=None, name_contains="100%x", limit=10, offset=0) == (0, [])
    assert traces.list_traces(session, team_id=a, status="failed", name_contains=None, limit=10, offset=0)[0] == 0
    assert (
        traces.count_traces(session, team_id=a) == 1 and traces.count_traces(session, team_id=a, status="failed") == 0
    )
    live = traces.add_live_trace(session, team_id=a, name="live", meta={"m": 1})
    session.flush()
    assert live.live and live.team_id == a and live.status == "ready"


def test_jobs(session, world):
    a, b, trace_id = world["a"], world["b"], world["trace"]
    ingest, ok, failed, theirs = world["jobs"]
    listed = jobs.list_jobs(session, team_id=a, include_result=False)
    assert [j.id for j in listed] == [failed, ok, ingest]  # newest first, only the team's
    with pytest.raises(Exception, match="result"):
        _ = listed[1].result  # not read without include_result (and never by accident)
    assert [
        j.id for j in jobs.list_jobs(session, team_id=a, kinds=["lengths"], status="succeeded", include_result=True)
    ] == [ok]
    assert [j.id for j in jobs.list_jobs(session, team_id=a, limit=1, offset=1, include_result=False)] == [ok]
    assert jobs.get_job(session, team_id=a, job_id=ok).id == ok
    assert jobs.get_job(session, team_id=a, job_id=ok, kind="ingest") is None
    assert jobs.get_job(session, team_id=a, job_id=theirs) is None
    assert [j.id for j in jobs.trace_jobs_of_kind(session, team_id=a, trace_id=trace_id, kind="lengths")] == [
        failed,
        ok,
    ]
    assert jobs.latest_succeeded_job_id(session, team_id=a, trace_id=trace_id, kind="lengths", params_key="k") == ok
    assert jobs.latest_succeeded_job_id(session, team_id=b, trace_id=trace_id, kind="lengths", params_key="k") is None
    assert jobs.job_result(session, team_id=a, job_id=ok) == {"x": 1}
    assert jobs.job_result(session, team_id=b, job_id=ok) is None
    assert jobs.latest_job_per_trace(session, team_id=a, trace_ids=[trace_id, world["other"]], kind="ingest") == {
        trace_id: ingest
    }
    assert jobs.recent_job_params(session, team_id=a, kind="ingest", limit=5) == [{"upload": "u1"}]
    assert sorted(jobs.trace_job_refs(session, team_id=a, trace_id=trace_id)) == sorted(
        [("ingest", ingest), ("lengths", ok), ("lengths", failed)]
    )
    jobs.delete_job(session, team_id=b, job_id=ok)  # another team's: nothing happens
    jobs.delete_job(session, team_id=a, job_id=failed)
    session.flush()
    assert [j.id for j in jobs.list_jobs(session, team_id=a, kind="lengths", include_result=False)] == [ok]


def test_sample_filters_one_builder(session, world):
    a, trace_id = world["a"], world["trace"]

    def page(filters, sort="step", order="asc", limit=100, offset=0):
        rows = samples.sample_page(
            session,
            team_id=a,
            trace_id=trace_id,
            filters=filters,
            sort=sort,
            order=order,
            limit=limit,
            offset=offset,
        )
        return keys(rows)

    every = [(s, g, i) for s in range(STEPS) for g in range(GROUPS) for i in range(PER_GROUP)]
    assert page(SampleFilter()) == every
    assert page(SampleFilter(step_min=1, step_max=1)) == [k for k in every if k[0] == 1]
    n = {k: (k[0] * GROUPS + k[1]) * PER_GROUP + k[2] for k in every}
    # response_len = 100 n: [300, 700) holds n = 3..6; the upper bound is exclusive
    assert page(SampleFilter(response_len_min=300, response_len_max=700)) == [k for k in every if 3 <= n[k] < 7]
    assert page(SampleFilter(truncated=True)) == [k for k in every if n[k] % 4 == 0]
    assert page(SampleFilter(truncated=False, dp_rank=1)) == [k for k in every if n[k] % 4 and k[1] == 1]
    assert page(SampleFilter(reward_min=1.0, reward_max=1.0, step=2)) == [(2, 0, 1), (2, 1, 1)]
    assert page(SampleFilter(with_text=True)) == [k for k in every if k[0] == 0]
    assert page(SampleFilter(repeating=True)) == [k for k in every if k[0] == 0 and k[2] > 0]
    assert page(SampleFilter(), sort="response_len", order="desc", limit=2) == [(2, 1, 2), (2, 1, 1)]
    assert page(SampleFilter(step=0), sort="response_len", order="desc", limit=1, offset=1) == [(0, 1, 1)]


def test_sample_counts(session, world):
    a, trace_id = world["a"], world["trace"]

    def count(filters, cap=1000):
        return samples.count_samples(session, team_id=a, trace_id=trace_id, filters=filters, cap=cap)

    assert SampleFilter(step_min=1).steps_only() and not SampleFilter(truncated=False).steps_only()
    assert count(SampleFilter(step_min=1)) == (2 * GROUPS * PER_GROUP, False)  # from the per-step counts
    assert count(SampleFilter(step_min=1), cap=1) == (2 * GROUPS * PER_GROUP, False)  # exact: never capped
    assert count(SampleFilter(dp_rank=0)) == (STEPS * PER_GROUP, False)
    assert count(SampleFilter(dp_rank=0), cap=4) == (4, True)
    assert samples.sample_exists(session, team_id=a, trace_id=trace_id, key=(1, 1, 2))
    assert not samples.sample_exists(session, team_id=a, trace_id=trace_id, key=(1, 2, 0))
    rows = samples.text_sample_rows(session, team_id=a, trace_id=trace_id, filters=SampleFilter(reward_min=2.0))
    assert sorted(rows) == [(0, 0, 2), (0, 1, 2)]
    assert tuple(rows[(0, 1, 2)]) == (0, 1, 2, 2.0, 10, 500, 2)


def test_steps(session, world):
    a, trace_id = world["a"], world["trace"]
    assert [s.step for s in steps.list_steps(session, team_id=a, trace_id=trace_id)] == [0, 1, 2]
    summaries = steps.step_summaries(session, team_id=a, trace_id=trace_id)
    assert [(s, summary["response"]["all"]["mean"]) for s, _v, summary in summaries] == [
        (0, 0.0),
        (1, 100.0),
        (2, 200.0),
    ]
    series = steps.step_series_rows(session, team_id=a, trace_id=trace_id)
    assert [(r.step, r.t_gen) for r in series] == [(0, 0.0), (1, 1.5), (2, 3.0)]


def test_turns_and_trajectories(session, world):
    a, trace_id = world["a"], world["trace"]
    found, tool_time = turns.sample_turns(session, team_id=a, trace_id=trace_id, key=(1, 0, 2))
    assert [t.turn for t in found] == [0, 1] and tool_time == {0: 0.5}
    timelines = turns.step_trajectories(session, team_id=a, trace_id=trace_id, step=1, limit=100)
    assert len(timelines) == GROUPS * PER_GROUP
    assert [t.end_s for t in timelines] == sorted(t.end_s for t in timelines)  # the long tail last
    by_key = {(t.group_idx, t.sample_idx): t for t in timelines}
    # sample i: two turns of 1 + i s of engine time, 0.5 s of tool time after the first
    assert by_key[(0, 2)].segments == [("engine", 0.0, 3.0), ("tool", 3.0, 0.5), ("engine", 3.5, 3.0)]
    assert by_key[(0, 2)].end_s == 6.5
    assert {k for k, t in by_key.items() if t.discarded} == {(0, 1), (1, 2)}  # a failed call, an error finish
    assert turns.step_trajectories(session, team_id=a, trace_id=trace_id, step=1, limit=2)[-1].sample_idx == 1
    assert turns.step_trajectories(session, team_id=a, trace_id=trace_id, step=9, limit=100) == []


def test_gpu_events(session, world):
    a, trace_id = world["a"], world["trace"]

    def window(**kw):
        kw.setdefault("limit", 100)
        return [
            (e.event_idx, name) for e, name in gpu_events.gpu_event_window(session, team_id=a, trace_id=trace_id, **kw)
        ]

    assert window(rank=0) == [(0, "gemm_100%_kernel"), (2, "gemm_100%_kernel"), (4, "gemm_100%_kernel")]
    # events overlapping [12, 30): those starting before 30 and ending after 12
    assert [e for e, _ in window(start_us=12.0, end_us=30.0)] == [2, 1]
    assert [e for e, _ in window(name_contains="ALLREDUCE")] == [1, 3, 5]
    assert window(name_contains="0%_k") == window(rank=0)  # % and _ are literal
    assert window(name_contains="0%xk") == []
    assert [e for e, _ in window(step=2, limit=1)] == [4]
    assert gpu_events.kernel_names(session, team_id=a, trace_id=trace_id) == {
        0: "gemm_100%_kernel",
        1: "nccl_allreduce",
    }
    assert [(r.step, r.rank) for r in gpu_events.rank_timings(session, team_id=a, trace_id=trace_id, step=1)] == [
        (1, 0)
    ]


def test_texts(session, world):
    a, trace_id = world["a"], world["trace"]
    sample, text = texts.sample_with_text(session, team_id=a, trace_id=trace_id, key=(0, 1, 1))
    assert sample.response_len == 400 and text.response == b"response 1.1"
    sample, text = texts.sample_with_text(session, team_id=a, trace_id=trace_id, key=(1, 1, 1))
    assert sample is not None and text is None  # text at step 0 only
    assert texts.sample_extras(session, team_id=a, trace_id=trace_id, key=(0, 1, 1)) == {"k": 4.0}
    others, group_texts = texts.group_others(session, team_id=a, trace_id=trace_id, key=(0, 1, 1))
    assert [o.sample_idx for o in others] == [0, 2] and sorted(group_texts) == [0, 1, 2]
    packed = texts.packed_responses(session, team_id=a, trace_id=trace_id, keys=[(0, 0, 2), (0, 1, 0), (1, 0, 0)])
    assert packed == {(0, 0, 2): b"response 0.2", (0, 1, 0): b"response 1.0"}


def _trace_reads(trace_id: int) -> dict:
    """Every function of a trace's rows, as a call with the team left to fill in."""
    everything = SampleFilter()
    key = (0, 0, 0)
    return {
        "list_steps": lambda s, t: steps.list_steps(s, team_id=t, trace_id=trace_id),
        "step_summaries": lambda s, t: steps.step_summaries(s, team_id=t, trace_id=trace_id),
        "step_series_rows": lambda s, t: steps.step_series_rows(s, team_id=t, trace_id=trace_id),
        "sample_page": lambda s, t: samples.sample_page(
            s, team_id=t, trace_id=trace_id, filters=everything, sort="step", order="asc", limit=100, offset=0
        ),
        "count_samples": lambda s, t: samples.count_samples(s, team_id=t, trace_id=trace_id, filters=everything, cap=9)[
            0
        ],
        "count_samples_filtered": lambda s, t: samples.count_samples(
            s, team_id=t, trace_id=trace_id, filters=SampleFilter(dp_rank=0), cap=9
        )[0],
        "sample_exists": lambda s, t: samples.sample_exists(s, team_id=t, trace_id=trace_id, key=key),
        "text_sample_rows": lambda s, t: samples.text_sample_rows(s, team_id=t, trace_id=trace_id, filters=everything),
        "sample_turns": lambda s, t: [x for x in turns.sample_turns(s, team_id=t, trace_id=trace_id, key=key) if x],
        "step_trajectories": lambda s, t: turns.step_trajectories(s, team_id=t, trace_id=trace_id, step=0, limit=9),
        "gpu_event_window": lambda s, t: gpu_events.gpu_event_window(s, team_id=t, trace_id=trace_id, limit=9),
        "kernel_names": lambda s, t: gpu_events.kernel_names(s, team_id=t, trace_id=trace_id),
        "rank_timings": lambda s, t: gpu_events.rank_timings(s, team_id=t, trace_id=trace_id),
        "sample_with_text": lambda s, t: [
            x for x in texts.sample_with_text(s, team_id=t, trace_id=trace_id, key=key) if x
        ],
        "sample_extras": lambda s, t: texts.sample_extras(s, team_id=t, trace_id=trace_id, key=key),
        "group_others": lambda s, t: [x for x in texts.group_others(s, team_id=t, trace_id=trace_id, key=key) if x],
        "packed_responses": lambda s, t: texts.packed_responses(s, team_id=t, trace_id=trace_id, keys=[key]),
        "trace_jobs_of_kind": lambda s, t: jobs.trace_jobs_of_kind(s, team_id=t, trace_id=trace_id, kind="lengths"),
        "trace_job_refs": lambda s, t: jobs.trace_job_refs(s, team_id=t, trace_id=trace_id),
        "list_jobs_of_trace": lambda s, t: jobs.list_jobs(s, team_id=t, trace_id=trace_id, include_result=False),
        "latest_job_per_trace": lambda s, t: jobs.latest_job_per_trace(
            s, team_id=t, trace_ids=[trace_id], kind="ingest"
        ),
    }


def test_another_teams_id_finds_nothing(session, world):
    """The scope of every read: the owner finds the rows, another team nothing (and no
    error: the route answers 404 for the trace before, this is the floor under it)."""
    reads = _trace_reads(world["trace"])
    for name, read in reads.items():
        assert read(session, world["a"]), f"{name}: the owner finds nothing (the test would prove nothing)"
        assert not read(session, world["b"]), f"{name}: another team's id reads the rows"


def test_every_query_function_is_in_the_scope_test():
    """A new function of a trace's rows joins the scope test (or is a team-level one)."""
    import inspect

    team_level = {
        "get_trace",
        "list_traces",
        "count_traces",
        "add_live_trace",
        "escape_like",
        "jobs_query",
        "list_jobs",
        "get_job",
        "delete_job",
        "latest_succeeded_job_id",
        "job_result",
        "recent_job_params",
        "owned_trace",
        "sample_where",
        "engine_profiles_by_id",
    }
    covered = set(_trace_reads(0)) | {"count_samples_filtered", "list_jobs_of_trace"}
    public = {
        name
        for module in (engine_profiles, gpu_events, jobs, samples, steps, texts, traces, turns)
        for name, fn in vars(module).items()
        if inspect.isfunction(fn) and fn.__module__ == module.__name__ and not name.startswith("_")
    }
    assert public - team_level - covered == set()
