"""verl metric logs: file-logger JSON lines and console lines -> `steps` batches."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import orjson
import pytest

from backend.formats import detect_format, read_sources
from backend.formats.base import InputError, ReadResult, Source
from backend.formats.verl_logs import parse_console_line
from core.analysis.tables import STEP_TIMING_COLUMNS


def source(path: Path) -> Source:
    return Source(path.name, lambda: path.open("rb"), path.stat().st_size)


def steps_of(path: Path, result: ReadResult | None = None) -> dict:
    batches = list(read_sources([source(path)], None, result if result is not None else ReadResult()))
    assert {b.table for b in batches} == {"steps"}
    cols: dict = {}
    for b in batches:
        for k, v in b.columns.items():
            cols.setdefault(k, []).extend(list(v))
    return cols


def training_metrics(step: int) -> dict:
    """Keys as verl's ray_trainer logs them (compute_data/timing/throughput metrics)."""
    return {
        "training/global_step": step,
        "training/epoch": 0,
        "actor/entropy": 0.51 - 0.01 * step,
        "actor/pg_loss": -0.002,
        "actor/grad_norm": 0.12,
        "critic/score/mean": 0.3 + 0.05 * step,
        "response_length/mean": 812.5 + step,
        "response_length/max": 4096,
        "response_length/min": 12,
        "response_length/clip_ratio": 0.031,
        "prompt_length/mean": 140.2,
        "global_seqlen/min": 101234,
        "global_seqlen/max": 131001,
        "global_seqlen/balanced_min": 115000,
        "global_seqlen/balanced_max": 115010,
        "timing_s/gen": 40.0 + step,
        "timing_s/reward": 2.5,
        "timing_s/old_log_prob": 6.25,
        "timing_s/ref": 5.75,
        "timing_s/adv": 0.125,
        "timing_s/update_actor": 20.5,
        "timing_s/step": 76.0 + step,
        "timing_per_token_ms/gen": 0.04,
        "perf/throughput": 1523.7,
        "perf/total_num_tokens": 246235,
    }


def test_file_logger_jsonl(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [
        {"step": 0, "data": {"val-core/openai/gsm8k/reward/mean@1": 0.21}},
        {"step": 1, "elapsed_seconds": 80.2, "data": training_metrics(1)},
        {"step": 2, "elapsed_seconds": 160.9, "data": {**training_metrics(2), "note": "text is dropped"}},
        {"step": 2, "data": {"val-core/openai/gsm8k/reward/mean@1": 0.34}},
    ]
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    assert detect_format(source(path)) == "verl-jsonl"
    result = ReadResult()
    cols = steps_of(path, result)
    assert result.info.framework == "verl"
    assert cols["step"] == [0, 1, 2]
    assert set(STEP_TIMING_COLUMNS) <= set(cols)
    assert math.isnan(cols["t_gen"][0]) and cols["t_gen"][1:] == [41.0, 42.0]
    assert cols["t_step"][1:] == [77.0, 78.0]
    assert cols["t_update_actor"][2] == 20.5
    m2 = cols["metrics"][2]
    assert m2["response_length/max"] == 4096 and m2["global_seqlen/balanced_max"] == 115010
    assert m2["val-core/openai/gsm8k/reward/mean@1"] == 0.34  # merged from the validation line
    assert "note" not in m2 and "elapsed_seconds" not in m2
    assert cols["metrics"][0] == {"val-core/openai/gsm8k/reward/mean@1": 0.21}


def test_file_logger_nan_from_python_json(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 3, "data": {"actor/grad_norm": NaN, "timing_s/step": 9.5}}\n')
    cols = steps_of(path)
    assert cols["t_step"] == [9.5]
    assert cols["metrics"][0]["actor/grad_norm"] is None


def test_aliases_old_timing_names_and_generate_sequences(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [
        {"step": 1, "data": {"timing/gen": 3.0, "timing/step": 9.0}},
        {"step": 2, "data": {"timing_s/generate_sequences": 4.0, "timing_s/step": 10.0}},
    ]
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in rows))
    cols = steps_of(path)
    assert cols["t_gen"] == [3.0, 4.0]
    assert cols["t_step"] == [9.0, 10.0]
    assert "t_reward" not in cols  # no step logged it


def console_line(step: int, metrics: dict) -> str:
    # verl's concat_dict_to_str: "step:N - key:value - ..." with values as "{v:.3f}"
    return " - ".join([f"step:{step}"] + [f"{k}:{v:.3f}" for k, v in metrics.items()])


def test_console_lines_with_prefixes_and_noise(tmp_path):
    path = tmp_path / "train.log"
    text = "\n".join(
        [
            "(TaskRunner pid=4171) Training Progress:   0%|          | 0/3",
            "INFO 05-01 10:00:00 vllm engine started, global_step:0 - nothing",
            "(TaskRunner pid=4171) " + console_line(1, training_metrics(1)),
            "\x1b[36m(TaskRunner pid=4171)\x1b[0m " + console_line(2, training_metrics(2)),
            "step:3 - timing_s/gen:np.float64(12.5) - actor/lr:tensor(1.0e-06, device='cuda:0') - tag:abc",
        ]
    )
    path.write_text(text + "\n")
    assert detect_format(source(path)) == "verl-console"
    result = ReadResult()
    cols = steps_of(path, result)
    assert cols["step"] == [1, 2, 3]
    assert cols["t_gen"] == [41.0, 42.0, 12.5]
    assert cols["t_reward"][:2] == [2.5, 2.5] and math.isnan(cols["t_reward"][2])
    assert cols["metrics"][0]["response_length/max"] == 4096.0
    assert cols["metrics"][2] == {"timing_s/gen": 12.5, "actor/lr": 1e-06}
    assert result.info.framework == "verl"


def test_parse_console_line_values():
    step, metrics = parse_console_line("step:7 - a:1 - b:-2.5e-3 - c:nan - d:np.int64(4) - e:None")
    assert step == 7
    assert metrics["a"] == 1.0 and metrics["b"] == -0.0025 and metrics["d"] == 4.0
    assert np.isnan(metrics["c"]) and "e" not in metrics
    assert parse_console_line("global_step:7 - a:1") is None


def test_console_log_found_after_a_long_preamble(tmp_path):
    path = tmp_path / "job.out"
    path.write_text("warning: something\n" * 20000 + console_line(5, {"timing_s/step": 3.0}) + "\n")
    assert path.stat().st_size > 64 << 10
    assert detect_format(source(path)) == "verl-console"
    assert steps_of(path)["t_step"] == [3.0]


def test_console_without_metric_lines_is_an_error(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("nothing here\n")
    with pytest.raises(InputError) as err:
        list(read_sources([source(path)], "verl-console", ReadResult()))
    assert err.value.file == "train.log" and "step:N" in str(err.value)


@pytest.mark.parametrize(
    "line, field",
    [
        (b'{"step": "one", "data": {}}', "step"),
        (b'{"data": {"a": 1}}', "step"),
        (b'{"step": 1, "data": [1, 2]}', "data"),
        (b'{"step": 1, "data": {', None),
    ],
)
def test_jsonl_bad_input(tmp_path, line, field):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 0, "data": {"a": 1}}\n' + line + b"\n")
    with pytest.raises(InputError) as err:
        list(read_sources([source(path)], "verl-jsonl", ReadResult()))
    assert (err.value.file, err.value.line, err.value.field) == ("metrics.jsonl", 2, field)
