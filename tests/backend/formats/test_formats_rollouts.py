"""verl rollout dumps: samples with their text, groups, validation, extras, token lengths
from a tokenizer the test trains, the repetition flag, and file/line/field errors."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from tokenizers import Tokenizer

from backend.formats import detect_format, read_sources
from backend.formats.base import InputError, ReadResult, Source
from backend.formats.rollout_text import unpack
from core.analysis.repetition import MAX_PERIOD, WINDOW, repeat_period
from tests.rollout_writer import dump_bytes, dump_rows, trained_tokenizer


def src(raw: bytes | str, name: str) -> Source:
    data = raw.encode() if isinstance(raw, str) else raw
    return Source(name, lambda: io.BytesIO(data), len(data))


def read(sources: list[Source]) -> tuple[dict[str, dict], ReadResult]:
    result = ReadResult()
    tables: dict[str, dict[str, list]] = {}
    for batch in read_sources(sources, None, result):
        for key, values in batch.columns.items():
            tables.setdefault(batch.table, {}).setdefault(key, []).extend(list(values))
    return tables, result


def by_key(table: dict) -> dict:
    keys = zip(table["step"], table["group_idx"], table["sample_idx"])
    return {tuple(int(x) for x in k): i for i, k in enumerate(keys)}


def test_groups_texts_extras_and_character_lengths():
    rows = {s: dump_rows(s) for s in (1, 2)}
    val = dump_rows(2, groups=2, n=1, seed=9)
    sources = [src(dump_bytes(rows[s]), f"run/rollouts/{s}.jsonl") for s in rows]
    sources.append(src(dump_bytes(val), "run/val_generations/2.jsonl"))
    tables, result = read(sources)
    samples, texts = tables["samples"], tables["sample_texts"]
    assert len(samples["step"]) == 2 * 20 + 2
    index = by_key(samples)
    for step, lines in rows.items():
        # independent grouping: a prompt's samples in file order, prompts by first appearance
        prompts = list(dict.fromkeys(r["input"] for r in lines))
        seen: dict[str, int] = {}
        for r in lines:
            g, s = prompts.index(r["input"]), seen.get(r["input"], 0)
            seen[r["input"]] = s + 1
            i = index[(step, g, s)]
            assert unpack(texts["prompt"][i]) == r["input"] and unpack(texts["response"][i]) == r["output"]
            assert samples["prompt_len"][i] == len(r["input"]) and samples["response_len"][i] == len(r["output"])
            assert samples["reward"][i] == r["score"] and texts["gts"][i] == r["gts"]
            assert samples["validate"][i] == 0 and samples["repeat_period"][i] == repeat_period(r["output"])
    val_keys = [k for k in index if k[1] >= 1_000_000]
    assert len(val_keys) == 2 and all(samples["validate"][index[k]] for k in val_keys)
    extras = tables["sample_extras"]
    acc = [v for k, v in zip(extras["key"], extras["value_num"]) if k == "acc"]
    assert len(acc) == 42 and set(acc) <= {0.0, 1.0}
    assert {t for k, t in zip(extras["key"], extras["value_text"]) if k == "pred"} >= {"-1"}
    meta = result.info.metadata["rollouts"]
    assert meta["length_unit"] == "characters" and meta["samples"] == 42
    assert meta["extra_keys"] == {"acc": "number", "pred": "text", "format_ok": "number"}
    assert meta["validation_files"] == ["run/val_generations/2.jsonl"]


def test_token_lengths_are_the_tokenizers():
    rows = dump_rows(4, groups=3, n=3)
    tok_json = trained_tokenizer([r["input"] + r["output"] for r in rows])
    sources = [src(dump_bytes(rows), "4.jsonl"), src(tok_json, "tokenizer.json")]
    tables, result = read(sources)
    reference = Tokenizer.from_str(tok_json)
    texts, samples = tables["sample_texts"], tables["samples"]
    for i in range(len(samples["step"])):
        prompt, response = unpack(texts["prompt"][i]), unpack(texts["response"][i])
        assert samples["prompt_len"][i] == len(reference.encode(prompt, add_special_tokens=False).ids)
        assert samples["response_len"][i] == len(reference.encode(response, add_special_tokens=False).ids)
        assert samples["response_len"][i] != len(response)  # tokens, not characters
    assert result.info.metadata["rollouts"]["length_unit"] == "tokens"
    assert result.info.metadata["rollouts"]["tokenizer"]["file"] == "tokenizer.json"
    assert result.info.length_unit == "tokens"


def test_a_very_long_line_and_the_repetition_flag():
    long_reasoning = "".join(f"step {i}: consider case {i * 7 % 13}. " for i in range(20_000))  # ~600 KB
    loop = "Wait, let me recompute. " * 5_000
    rows = [
        {"input": "p", "output": long_reasoning, "score": 1, "step": 7},
        {"input": "p", "output": loop, "score": 0, "step": 7},
        {"input": "p", "output": "short", "score": 0, "step": 7},
    ]
    tables, _ = read([src(dump_bytes(rows), "7.jsonl")])
    assert unpack(tables["sample_texts"]["response"][0]) == long_reasoning
    assert list(tables["samples"]["repeat_period"]) == [0, len("Wait, let me recompute. "), 0]
    assert len(tables["sample_texts"]["response"][1]) < len(loop) // 50  # compressed


def test_repetition_definition():
    assert repeat_period("ab" * 600) == 2
    assert repeat_period(" ".join(str(i) for i in range(2000))) == 0
    assert repeat_period("x" * (WINDOW - 1)) == 0  # shorter than the window
    unit = "".join(chr(65 + i % 26) for i in range(MAX_PERIOD + 1))
    assert repeat_period(unit * 4) == 0  # a period longer than MAX_PERIOD
    assert repeat_period("prefix " + "abc\n" * 400 + "   \n") == 4  # trailing whitespace ignored


@pytest.mark.parametrize(
    "lines, name, line, field",
    [
        ([{"input": "a", "output": "b", "score": 1}, "{not json"], "3.jsonl", 2, None),
        ([{"input": "a", "output": "b", "score": 1}, {"input": "a", "score": 1}], "3.jsonl", 2, "output"),
        ([{"input": "a", "output": "b", "score": "high"}], "3.jsonl", 1, "score"),
        ([{"input": "a", "output": "b"}], "3.jsonl", 1, "score"),
        ([{"input": "a", "output": "b", "score": 1, "step": -2}], "3.jsonl", 1, "step"),
        ([{"input": "a", "output": "b", "score": 1}], "rollouts.jsonl", 1, "step"),
        ([{"input": "a", "output": "b", "score": 1}, {"input": 5, "output": "b", "score": 1}], "3.jsonl", 2, "input"),
    ],
)
def test_bad_lines_name_file_line_and_field(lines, name, line, field):
    raw = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n"
    with pytest.raises(InputError) as err:
        read([src(raw, f"dump/{name}")])
    assert (err.value.file, err.value.line, err.value.field) == (f"dump/{name}", line, field)


def test_detection_and_the_tokenizer_first():
    rows = dump_rows(1, groups=1, n=2)
    assert detect_format(src(dump_bytes(rows), "12.jsonl")) == "verl-rollouts"
    assert detect_format(src(dump_bytes(rows), "generations_step_12.jsonl")) == "verl-rollouts"  # by content
    tok_json = trained_tokenizer([r["output"] for r in rows], vocab_size=300)
    assert detect_format(src(tok_json, "tokenizer.json")) == "tokenizer"
    assert detect_format(src(tok_json, "qwen_tok.json")) == "tokenizer"
    # read first whatever the names: every dump then has token lengths
    tables, result = read([src(dump_bytes(rows), "1.jsonl"), src(tok_json, "zzz_tokenizer.json")])
    assert result.info.metadata["rollouts"]["length_unit"] == "tokens"
    with pytest.raises(InputError, match="no readable trace files"):
        read([src(tok_json, "tokenizer.json")])  # a tokenizer alone is no trace
    with pytest.raises(InputError) as err:
        read(
            [
                src(b'{"added_tokens": [], "truncation": null, "model": 5}', "tokenizer.json"),
                src(dump_bytes(rows), "1.jsonl"),
            ]
        )
    assert err.value.field == "tokenizer"


def test_nan_scores_and_odd_extras():
    raw = (
        '{"input": "q", "output": "a", "score": NaN, "step": 1, "acc": [1, 2], "note": null}\n'
        '{"input": "q", "output": "b\\u0000c", "score": 0.5, "step": 1, "pred": "x\\u0000y"}\n'
    )
    tables, _ = read([src(raw, "1.jsonl")])
    assert np.isnan(tables["samples"]["reward"][0]) and tables["samples"]["reward"][1] == 0.5
    assert unpack(tables["sample_texts"]["response"][1]) == "b\x00c"  # compressed bytes keep it
    extras = dict(zip(tables["sample_extras"]["key"], tables["sample_extras"]["value_text"]))
    assert extras["acc"] == "[1,2]" and extras["pred"] == "x\ufffdy" and extras["note"] is None


def test_empty_texts():
    rows = [
        {"input": "", "output": "", "score": 0, "step": 3, "uid": "a"},
        {"input": "", "output": "", "score": 1, "step": 3, "uid": "a"},
    ]
    tables, _ = read([src(dump_bytes(rows), "3.jsonl")])
    assert [unpack(b) for b in tables["sample_texts"]["response"]] == ["", ""]
    assert list(tables["samples"]["group_idx"]) == [0, 0] and list(tables["samples"]["sample_idx"]) == [0, 1]
