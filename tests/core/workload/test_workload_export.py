"""PolyTrace exports of generated steps, read back through the row converters."""

from __future__ import annotations

import numpy as np
import orjson

from core.simulator.workload import workload_from_columns
from core.workload.export import (
    compact_json,
    multiturn_rows,
    packed_rows,
    write_compact_json,
    write_multiturn_jsonl,
    write_packed_jsonl,
)
from core.workload.generate import GeneratedStep
from core.workload.polytrace_rows import multiturn_rows_to_columns, packed_rows_to_columns

PACKED_KEYS = {"step", "rank", "dp_rank", "tp_rank", "local_index", "input", "output", "n_sampling", "validate"}


def _single(step=0):
    return GeneratedStep(
        step, np.array([10, 20, 30, 40]), [np.array([1, 2]), np.array([3, 4]), np.array([5, 6]), np.array([7, 8])]
    )


def _multi():
    turns = [
        [
            {"input": [10, 5], "output": [3, 4], "tool_latency_s": [0.5]},
            {"input": [10], "output": [9], "tool_latency_s": []},
        ]
    ]
    return GeneratedStep(2, np.array([10]), [np.array([12, 9])], turns)


def test_packed_rows_shape_and_ranks():
    rows = packed_rows(_single(), dp_size=2)
    assert all(set(r) == PACKED_KEYS for r in rows)
    assert [r["dp_rank"] for r in rows] == [0, 0, 1, 1]
    assert [r["local_index"] for r in rows] == [0, 1, 0, 1]
    assert rows[2]["input"] == 30 and rows[2]["output"] == [5, 6] and rows[2]["n_sampling"] == 2


def test_written_packed_files_read_back(tmp_path):
    steps = [_single(0), _single(1)]
    paths = write_packed_jsonl(tmp_path / "run", steps, dp_size=2)
    assert [p.name for p in paths] == ["packed_lengths_step_0.jsonl", "packed_lengths_step_1.jsonl"]
    rows = [orjson.loads(line) for p in paths for line in p.read_bytes().splitlines()]
    ws = workload_from_columns(packed_rows_to_columns(rows))
    assert [w.step for w in ws] == [0, 1]
    assert ws[1].response_len.tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
    assert ws[1].prompt_len.tolist() == [10, 10, 20, 20, 30, 30, 40, 40]


def test_compact_json_single_and_multi_turn(tmp_path):
    d = compact_json([_single(0), _multi()])
    assert d["0"] == {"input": [10, 20, 30, 40], "output": [[1, 2], [3, 4], [5, 6], [7, 8]]}
    # multi-turn inputs are each turn's whole prompt: 10, then 10 + 3 generated + 5 appended
    assert d["2"] == [{"input": [10, 18], "output": [3, 4]}, {"input": [10], "output": [9]}]
    p = write_compact_json(tmp_path / "trace.json", [_single(0), _multi()])
    assert orjson.loads(p.read_bytes()) == d


def test_multiturn_rows_round_trip(tmp_path):
    step = _multi()
    (path,) = write_multiturn_jsonl(tmp_path, [step])
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert rows == multiturn_rows(step)
    t0 = rows[0]["turns"]
    # turn 1's prompt = prompt + turn 0 output + tool tokens, turn 0's context cached
    assert [t["prompt_tokens"] for t in t0] == [10, 18] and [t["cached_tokens"] for t in t0] == [0, 13]
    assert rows[0]["tool_calls"][0]["latency_s"] == 0.5
    cols = multiturn_rows_to_columns(rows)
    (w,) = workload_from_columns(cols["samples"], cols["turns"], cols["tool_calls"])
    direct = step.to_step_workload()
    for name in (
        "turn_sample",
        "turn_prompt_tokens",
        "turn_cached_tokens",
        "turn_completion_tokens",
        "turn_tool_latency_s",
    ):
        assert getattr(w, name).tolist() == getattr(direct, name).tolist()


def _read_with_project_reader(reader, name: str, data: bytes) -> dict[str, dict]:
    """Run a backend reader over bytes and merge its batches per table."""
    import io

    from backend.formats.base import ReadResult, Source

    tables: dict[str, dict] = {}
    for batch in reader(Source(name, lambda: io.BytesIO(data), len(data)), ReadResult()):
        t = tables.setdefault(batch.table, {})
        for k, v in batch.columns.items():
            t[k] = np.concatenate([t[k], np.asarray(v)]) if k in t else np.asarray(v)
    return tables


def test_exports_are_ingested_by_the_project_readers(tmp_path):
    from backend.formats.polytrace import read_compact, read_multiturn_workload, read_packed_lengths

    single, multi = _single(4), _multi()
    # packed JSONL
    (p,) = write_packed_jsonl(tmp_path, [single], dp_size=2)
    t = _read_with_project_reader(read_packed_lengths, p.name, p.read_bytes())
    (w,) = workload_from_columns(t["samples"])
    assert w.step == 4 and w.response_len.tolist() == [1, 2, 3, 4, 5, 6, 7, 8] and w.n_groups == 4
    # compact JSON, single- and multi-turn
    c = write_compact_json(tmp_path / "run.json", [single, multi])
    t = _read_with_project_reader(read_compact, c.name, c.read_bytes())
    ws = workload_from_columns(t["samples"], t.get("turns"))
    assert [w.step for w in ws] == [2, 4]
    assert ws[1].response_len.tolist() == [1, 2, 3, 4, 5, 6, 7, 8] and ws[1].prompt_len.tolist()[::2] == [
        10,
        20,
        30,
        40,
    ]
    assert ws[0].turn_prompt_tokens.tolist() == [10, 18, 10]
    assert ws[0].turn_cached_tokens.tolist() == [0, 13, 0]  # inferred: the previous context
    # multi-turn JSONL
    (m,) = write_multiturn_jsonl(tmp_path, [multi])
    t = _read_with_project_reader(read_multiturn_workload, m.name, m.read_bytes())
    (w,) = workload_from_columns(t["samples"], t["turns"], t["tool_calls"])
    direct = multi.to_step_workload()
    for name in ("turn_prompt_tokens", "turn_cached_tokens", "turn_completion_tokens", "turn_tool_latency_s"):
        assert getattr(w, name).tolist() == getattr(direct, name).tolist()
