"""PolyTrace readers: real fixtures end to end, hand-made files, the compact format,
and bad input naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from backend.formats import read_sources
from backend.formats.archive import expand_upload
from backend.formats.base import MAX_TOKENS, InputError, ReadResult, Source


def jsonl(rows: list[dict]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


def file_source(path: Path) -> Source:
    return Source(path.name, lambda: path.open("rb"), path.stat().st_size)


def read_tables(sources: list[Source], result: ReadResult | None = None) -> dict[str, dict[str, np.ndarray]]:
    """All batches concatenated per table and column."""
    result = result if result is not None else ReadResult()
    parts: dict[str, dict[str, list]] = {}
    for batch in read_sources(sources, None, result):
        table = parts.setdefault(batch.table, {})
        for key, values in batch.columns.items():
            table.setdefault(key, []).append(np.asarray(values))
    return {t: {k: np.concatenate(v) for k, v in cols.items()} for t, cols in parts.items()}


def read_folder(folder: Path, result: ReadResult | None = None) -> dict:
    return read_tables(expand_upload(folder, folder.name), result)


def raw_lines(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def packed(step: int, rank: int, local: int, inp: int, out: list, **extra) -> dict:
    row = {
        "step": step,
        "rank": rank,
        "dp_rank": rank,
        "tp_rank": 0,
        "local_index": local,
        "input": inp,
        "output": out,
        "n_sampling": len(out),
        "validate": False,
    }
    row.update(extra)
    return row


def assert_unique_keys(samples: dict) -> None:
    keys = np.stack([samples["step"], samples["group_idx"], samples["sample_idx"]], axis=1)
    assert len(np.unique(keys, axis=0)) == len(keys)


# --------------------------------------------------------------------------- real fixtures


@pytest.mark.parametrize(
    "folder, steps, groups, n",
    [
        ("verl_dapo_qwen2_5_32b", 6, 96, 8),
        ("verl_video_qwen2_5_vl_7b", 21, 64, 8),
        ("rllm_deepcoder_14b_16k", 3, 16, 8),
    ],
)
def test_packed_fixtures_match_raw_lines(shared_fixtures, folder, steps, groups, n):
    path = shared_fixtures / "polytrace" / folder
    samples = read_folder(path)["samples"]
    rows = [r for f in sorted(path.glob("packed_lengths_step_*.jsonl")) for r in raw_lines(f)]
    assert len(samples["step"]) == steps * groups * n == sum(len(r["output"]) for r in rows)
    assert len(np.unique(samples["step"])) == steps
    # Token totals and per-(step, dp_rank) loads match the raw lines.
    assert samples["response_len"].sum() == sum(sum(r["output"]) for r in rows)
    assert samples["prompt_len"].sum() == sum(r["input"] * len(r["output"]) for r in rows)
    first = rows[0]
    mask = (samples["step"] == first["step"]) & (samples["dp_rank"] == first["dp_rank"])
    expected = sum(sum(r["output"]) for r in rows if r["step"] == first["step"] and r["dp_rank"] == first["dp_rank"])
    assert samples["response_len"][mask].sum() == expected
    for s in np.unique(samples["step"]):
        assert len(np.unique(samples["group_idx"][samples["step"] == s])) == groups
    assert_unique_keys(samples)
    assert samples["prompt_len"].dtype == np.int32 and samples["group_idx"].dtype == np.int32


def test_reward_timings_fixture(shared_fixtures):
    path = shared_fixtures / "polytrace" / "rllm_deepcoder_14b_16k"
    result = ReadResult()
    timings = read_folder(path, result)["rank_timings"]
    rows = [r for f in sorted(path.glob("reward_timings_step_*.jsonl")) for r in raw_lines(f)]
    assert len(timings["seconds"]) == len(rows) == 6
    assert set(timings["phase"].tolist()) == {"reward"}
    assert timings["seconds"].sum() == pytest.approx(sum(r["reward_time_s"] for r in rows))
    assert sorted(timings["rank"].tolist()) == sorted(r["rank"] for r in rows)
    assert timings["batch_size"].sum() == sum(r["batch_size"] for r in rows)
    assert result.skipped == []


def test_multiturn_fixture_counts(shared_fixtures):
    path = shared_fixtures / "polytrace" / "search_r1_qwen2_5_7b"
    result = ReadResult()
    tables = read_folder(path, result)
    rows = [r for f in sorted(path.glob("multiturn_workload_step_*.jsonl")) for r in raw_lines(f)]
    samples, turns, calls = tables["samples"], tables["turns"], tables["tool_calls"]
    assert len(samples["step"]) == len(rows) == 2048 + 2048 + 47
    assert len(turns["turn"]) == sum(r["turn_count"] for r in rows)
    assert len(calls["call_idx"]) == sum(r["tool_call_count"] for r in rows)
    assert samples["num_turns"].sum() == sum(len(r["turns"]) for r in rows)
    assert samples["truncated"].sum() == sum(r["finish_reason"] == "length" for r in rows)
    assert samples["response_len"].sum() == sum(r["final_response_len"] for r in rows)
    assert samples["latency_s"].sum() == pytest.approx(sum(t["engine_latency_s"] for r in rows for t in r["turns"]))
    assert turns["cached_tokens"].sum() == sum(t["cached_tokens"] for r in rows for t in r["turns"])
    assert calls["latency_s"].sum() == pytest.approx(sum(c["latency_s"] for r in rows for c in r["tool_calls"]))
    assert result.info.max_response_len == 3000
    assert_unique_keys(samples)
    # Turns point at their trajectory: the first trajectory's turns come first.
    first = rows[0]
    sel = (
        (turns["step"] == first["step"])
        & (turns["group_idx"] == first["prompt_group_id"])
        & (turns["sample_idx"] == first["sample_id"])
    )
    assert turns["completion_tokens"][sel].tolist() == [t["completion_tokens"] for t in first["turns"]]


# --------------------------------------------------------------------------- hand-made files


def test_group_ordinals_unique_across_files_of_one_step(tmp_path):
    # Two ranks of step 3 in two files, both with local_index 0 and 1.
    (tmp_path / "packed_lengths_step_3_rank0.jsonl").write_bytes(
        jsonl([packed(3, 0, 0, 10, [1, 2]), packed(3, 0, 1, 11, [3, 4])])
    )
    (tmp_path / "packed_lengths_step_3_rank4.jsonl").write_bytes(
        jsonl([packed(3, 4, 0, 12, [5, 6, 7]), packed(3, 4, 1, 13, [8])])
    )
    samples = read_folder(tmp_path)["samples"]
    assert samples["group_idx"].tolist() == [0, 0, 1, 1, 2, 2, 2, 3]
    assert samples["sample_idx"].tolist() == [0, 1, 0, 1, 0, 1, 2, 0]
    assert samples["prompt_len"].tolist() == [10, 10, 11, 11, 12, 12, 12, 13]
    assert samples["response_len"].tolist() == list(range(1, 9))
    assert samples["rank"].tolist() == [0, 0, 0, 0, 4, 4, 4, 4]


def test_duplicate_group_in_a_step_is_an_error(tmp_path):
    (tmp_path / "packed_lengths_step_1.jsonl").write_bytes(jsonl([packed(1, 0, 0, 10, [1])]))
    (tmp_path / "packed_lengths_step_1_again.jsonl").write_bytes(
        jsonl([packed(1, 2, 0, 9, [1]), packed(1, 0, 0, 10, [1])])
    )
    with pytest.raises(InputError) as err:
        read_folder(tmp_path)
    assert err.value.file.endswith("packed_lengths_step_1_again.jsonl")
    assert (err.value.line, err.value.field) == (2, "local_index")


def test_step_from_file_name_when_rows_lack_it(tmp_path):
    rows = [{"rank": 0, "local_index": 0, "input": 5, "output": [7, 8]}]
    (tmp_path / "packed_lengths_step_12.jsonl").write_bytes(jsonl(rows))
    samples = read_folder(tmp_path)["samples"]
    assert samples["step"].tolist() == [12, 12]
    assert "validate" not in samples


def test_unknown_files_in_a_run_folder_are_skipped_with_a_note(tmp_path):
    (tmp_path / "packed_lengths_step_0.jsonl").write_bytes(jsonl([packed(0, 0, 0, 10, [1, 2])]))
    (tmp_path / "enhanced_task_distribution_parameters.json").write_text('{"math": {}}')
    (tmp_path / "notes.md").write_text("# my run\n")
    (tmp_path / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    result = ReadResult()
    samples = read_folder(tmp_path, result)["samples"]
    assert len(samples["step"]) == 2
    assert len(result.skipped) == 2
    assert any("enhanced_task_distribution_parameters.json" in note for note in result.skipped)
    assert any("notes.md" in note and "unknown" in note for note in result.skipped)
    assert not any(".DS_Store" in note for note in result.skipped)


def test_multiturn_hand_made(tmp_path):
    row = {
        "step": 2,
        "prompt_len": 100,
        "max_response_len": 500,
        "prompt_group_id": 7,
        "sample_id": 3,
        "final_response_len": 500,
        "finish_reason": "length",
        "turn_count": 2,
        "tool_call_count": 1,
        "turns": [
            {
                "turn": 0,
                "prompt_tokens": 100,
                "cached_tokens": 0,
                "completion_tokens": 20,
                "engine_latency_s": 1.5,
                "tool_call_count": 1,
                "finish_reason": "tool_calls",
            },
            {
                "turn": 1,
                "prompt_tokens": 300,
                "cached_tokens": 119,
                "completion_tokens": 200,
                "engine_latency_s": 2.25,
                "tool_call_count": 0,
                "finish_reason": "length",
            },
        ],
        "tool_calls": [
            {"turn": 0, "tool_name": "search", "latency_s": 0.5, "response_token_len": 180, "status": "success"}
        ],
    }
    (tmp_path / "multiturn_workload_step_2.jsonl").write_bytes(jsonl([row]))
    result = ReadResult()
    t = read_folder(tmp_path, result)
    s = t["samples"]
    assert (s["group_idx"][0], s["sample_idx"][0], s["num_turns"][0], s["num_tool_calls"][0]) == (7, 3, 2, 1)
    assert s["latency_s"][0] == pytest.approx(3.75)
    assert bool(s["truncated"][0]) is True
    assert t["turns"]["cached_tokens"].tolist() == [0, 119]
    assert t["turns"]["finish_reason"].tolist() == ["tool_calls", "length"]
    assert t["tool_calls"]["tool_name"].tolist() == ["search"]
    assert t["tool_calls"]["response_tokens"].tolist() == [180]
    assert result.info.max_response_len == 500


# --------------------------------------------------------------------------- compact JSON


def test_compact_single_turn_flat_and_grouped(tmp_path):
    doc = {
        "0": {"input": [10, 20], "output": [[1, 2, 3], [4, 5, 6]]},
        "1": {"input": [30, 40, 50], "output": [7, 8, 9]},
    }
    path = tmp_path / "run.json"
    path.write_bytes(orjson.dumps(doc))
    s = read_tables([file_source(path)])["samples"]
    assert s["step"].tolist() == [0] * 6 + [1] * 3
    assert s["group_idx"].tolist() == [0, 0, 0, 1, 1, 1, 0, 1, 2]
    assert s["sample_idx"].tolist() == [0, 1, 2, 0, 1, 2, 0, 0, 0]
    assert s["prompt_len"].tolist() == [10, 10, 10, 20, 20, 20, 30, 40, 50]
    assert s["response_len"].tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9]


def test_compact_multi_turn(tmp_path):
    doc = {"10": [{"input": [100, 300], "output": [20, 200]}, {"input": [50], "output": [5]}], "2": []}
    path = tmp_path / "trajectories.json"
    path.write_bytes(orjson.dumps(doc))
    t = read_tables([file_source(path)])
    s = t["samples"]
    assert s["step"].tolist() == [10, 10]
    assert s["prompt_len"].tolist() == [100, 50]
    assert s["response_len"].tolist() == [220, 5]
    assert s["num_turns"].tolist() == [2, 1]
    assert t["turns"]["prompt_tokens"].tolist() == [100, 300, 50]
    assert t["turns"]["turn"].tolist() == [0, 1, 0]
    assert t["turns"]["group_idx"].tolist() == [0, 0, 1]


@pytest.mark.parametrize(
    "doc, field",
    [
        ({"0": {"input": [1, "x"], "output": [1, 2]}}, "0.input[1]"),
        ({"0": {"input": [1, 2], "output": [1]}}, "0.output"),
        ({"0": {"input": [1], "output": [[1, -2]]}}, "0.output[0][1]"),
        ({"0": {"output": [1]}}, "0.input"),
        ({"3": [{"input": [1, 2], "output": [3]}]}, "3[0].output"),
        ({"3": [{"input": [1], "output": [MAX_TOKENS + 1]}]}, "3[0].output[0]"),
    ],
)
def test_compact_bad_input_names_field(tmp_path, doc, field):
    path = tmp_path / "run.json"
    path.write_bytes(orjson.dumps(doc))
    with pytest.raises(InputError) as err:
        read_tables([file_source(path)])
    assert (err.value.file, err.value.field) == ("run.json", field)


def test_compact_malformed_json_names_line(tmp_path):
    path = tmp_path / "run.json"
    path.write_bytes(b'{"0": {"input": [1],\n "output": [2,]}}')
    with pytest.raises(InputError) as err:
        read_tables([file_source(path)], ReadResult())
    assert err.value.line == 2


# --------------------------------------------------------------------------- bad input


GOOD = packed(0, 0, 0, 10, [1, 2])


@pytest.mark.parametrize(
    "second_line, line, field, words",
    [
        (b'{"step": 0, "input": 5, "output": [1, 2]', 2, None, "malformed JSON"),
        (jsonl([{**GOOD, "local_index": 1, "input": "abc"}]), 2, "input", "expected an integer"),
        (jsonl([{**GOOD, "local_index": 1, "output": [3, -4]}]), 2, "output[1]", "negative"),
        (jsonl([{**GOOD, "local_index": 1, "output": [3, MAX_TOKENS + 1]}]), 2, "output[1]", "exceeds"),
        (jsonl([{k: v for k, v in GOOD.items() if k != "output"} | {"local_index": 1}]), 2, "output", "missing"),
        (jsonl([{**GOOD, "local_index": 1, "n_sampling": 3}]), 2, "output", "n_sampling"),
        (jsonl([{**GOOD, "local_index": 1, "output": "1,2"}]), 2, "output", "expected a list"),
        (jsonl([{**GOOD, "local_index": 1, "output": [1.5]}]), 2, "output[0]", "expected an integer"),
        (jsonl([{**GOOD, "local_index": 1, "validate": "no"}]), 2, "validate", "true or false"),
        (
            jsonl([{**GOOD, "local_index": 1}]).replace(b"[1,2]", b"[1,9223372036854775808]"),
            2,
            "output[1]",
            "out of range",
        ),
        (jsonl([{**GOOD, "local_index": 1, "input": [1, 2]}]), 2, "input", "expected an integer"),
        (jsonl([{**GOOD, "local_index": 1, "output": [[1, 2], [3]]}]), 2, "output[0]", "expected an integer"),
        (b"[1, 2]\n", 2, None, "JSON object"),
    ],
)
def test_packed_bad_input_names_file_line_field(tmp_path, second_line, line, field, words):
    (tmp_path / "packed_lengths_step_0.jsonl").write_bytes(jsonl([GOOD]) + b"\n" + second_line)
    with pytest.raises(InputError) as err:
        read_folder(tmp_path)
    e = err.value
    assert e.file == f"{tmp_path.name}/packed_lengths_step_0.jsonl"
    assert e.line == line + 1  # the blank line between counts too
    assert e.field == field
    assert words in str(e)
    assert e.file in str(e) and f"line {e.line}" in str(e)


def test_byte_order_mark_and_crlf_lines(tmp_path):
    path = tmp_path / "packed_lengths_step_0.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + jsonl([GOOD]).replace(b"\n", b"\r\n") + b"\r\n")
    samples = read_tables([file_source(path)])["samples"]
    assert samples["response_len"].tolist() == [1, 2]


def test_error_line_counts_across_blocks(tmp_path, monkeypatch):
    import backend.formats.jsonl as jsonl_toolkit

    monkeypatch.setattr(jsonl_toolkit, "BLOCK_BYTES", 256)
    rows = [packed(0, 0, i, 10, [1, 2]) for i in range(50)]
    rows[41]["input"] = -1
    (tmp_path / "packed_lengths_step_0.jsonl").write_bytes(jsonl(rows))
    with pytest.raises(InputError) as err:
        read_folder(tmp_path)
    assert (err.value.line, err.value.field) == (42, "input")


def test_reward_and_multiturn_bad_fields(tmp_path):
    reward = tmp_path / "reward_timings_step_0.jsonl"
    reward.write_bytes(
        jsonl([{"step": 0, "rank": 0, "reward_time_s": 1.0}, {"step": 0, "rank": 1, "reward_time_s": "slow"}])
    )
    with pytest.raises(InputError) as err:
        read_tables([file_source(reward)])
    assert (err.value.line, err.value.field) == (2, "reward_time_s")

    multi = tmp_path / "multiturn_workload_step_0.jsonl"
    turn = {"turn": 0, "prompt_tokens": 10, "completion_tokens": 5}
    row = {
        "step": 0,
        "prompt_len": 10,
        "final_response_len": 5,
        "prompt_group_id": 0,
        "sample_id": 0,
        "turns": [turn, {**turn, "turn": 1, "cached_tokens": -3}],
    }
    multi.write_bytes(jsonl([row]))
    with pytest.raises(InputError) as err:
        read_tables([file_source(multi)])
    assert (err.value.line, err.value.field) == (1, "turns[1].cached_tokens")


def test_empty_packed_file_is_an_error(tmp_path):
    path = tmp_path / "packed_lengths_step_0.jsonl"
    path.write_bytes(b"\n\n")
    with pytest.raises(InputError) as err:
        read_tables([file_source(path)])
    assert err.value.file == "packed_lengths_step_0.jsonl" and "empty" in str(err.value)
