"""Every real fixture ingests, with counts that match the files, on SQLite and Postgres."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest
from sqlalchemy import select

from backend.ingest.service import accept_upload
from backend.ingest.uploads import local_files
from backend.settings import get_settings
from backend.store.db import session_scope

POLYTRACE_RUNS = [
    "verl_video_qwen2_5_vl_7b",
    "verl_dapo_qwen2_5_32b",
    "rllm_deepcoder_14b_16k",
    "search_r1_qwen2_5_7b",
]


def expected_counts(folder: Path) -> dict:
    counts = {"n_samples": 0, "n_turns": 0, "n_tool_calls": 0, "n_rank_timings": 0, "steps": set()}
    for f in folder.glob("*.jsonl"):
        for line in f.read_bytes().splitlines():
            row = orjson.loads(line)
            if f.name.startswith("packed_lengths"):
                counts["n_samples"] += len(row["output"])
                counts["steps"].add(row["step"])
            elif f.name.startswith("reward_timings"):
                counts["n_rank_timings"] += 1
            elif f.name.startswith("multiturn_workload"):
                counts["n_samples"] += 1
                counts["n_turns"] += len(row["turns"])
                counts["n_tool_calls"] += len(row["tool_calls"])
                counts["steps"].add(row["step"])
    counts["n_steps"] = len(counts.pop("steps"))
    return counts


def ingest_paths(team_id: int, paths: list[Path]):
    with session_scope() as session:
        return accept_upload(
            session,
            get_settings(),
            team_id=team_id,
            stored=local_files(paths),
            name=paths[0].name,
            forced_format=None,
            max_response_len=None,
            inline=True,
        ).trace


@pytest.fixture()
def team_id(team_key):
    from backend.auth import team_for_key

    with session_scope() as s:
        return team_for_key(s, team_key).id


@pytest.mark.parametrize("run", POLYTRACE_RUNS)
def test_polytrace_run_counts(shared_fixtures, team_id, run):
    folder = shared_fixtures / "polytrace" / run
    trace = ingest_paths(team_id, [folder])
    assert trace.status == "ready", trace.error
    expected = expected_counts(folder)
    got = {k: getattr(trace, k) for k in expected}
    assert got == expected


def test_multiturn_max_response_len_from_file(shared_fixtures, team_id):
    folder = shared_fixtures / "polytrace" / "search_r1_qwen2_5_7b"
    trace = ingest_paths(team_id, [folder])
    first = orjson.loads(next(iter((folder / "multiturn_workload_step_0.jsonl").open("rb"))))
    assert trace.max_response_len == first["max_response_len"]


def test_kineto_traces_count_gpu_events(shared_fixtures, team_id):
    files = sorted((shared_fixtures / "kineto").glob("sampled_rank-*.json.gz"))
    trace = ingest_paths(team_id, files)
    assert trace.status == "ready", trace.error
    expected = 0
    for f in files:
        events = orjson.loads(gzip.decompress(f.read_bytes()))["traceEvents"]
        expected += sum(
            1 for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
        )
    assert trace.n_gpu_events == expected
    assert trace.source_format == "kineto"
    with session_scope() as s:
        from backend.store.models import GpuEvent

        ranks = set(s.scalars(select(GpuEvent.rank).where(GpuEvent.trace_id == trace.id).distinct()))
    assert ranks == {0, 1}
