"""DAPO filter marks (dapo_filter_indices.jsonl) on synthetic runs written here: marks on
the right samples in a folder and in archives, and bad lines named by file, line, field."""

from __future__ import annotations

import tarfile

import numpy as np
import pytest
from helpers import dapo_run, write_dapo_dir, zip_folder

from backend.formats import read_sources
from backend.formats.archive import expand_upload
from backend.formats.base import InputError, ReadResult
from backend.formats.dapo import MARK_FILTERED, MARK_KEPT, MARK_USED


def read_tables(sources, result=None) -> dict:
    """All batches concatenated per table and column."""
    result = result if result is not None else ReadResult()
    parts: dict = {}
    for batch in read_sources(sources, None, result):
        table = parts.setdefault(batch.table, {})
        for key, values in batch.columns.items():
            table.setdefault(key, []).append(np.asarray(values))
    return {t: {k: np.concatenate(v) for k, v in cols.items()} for t, cols in parts.items()}


def expected_marks(packed, filt) -> dict:
    """(step, group) -> (mark, trainer_step), from the lines written (group = line order)."""
    out = {}
    for line in filt:
        for g in range(line["prompt_count"]):
            mark = (
                MARK_USED
                if g in line["used_prompt_indices"]
                else (MARK_KEPT if g in line["kept_prompt_indices"] else MARK_FILTERED)
            )
            out[(line["workload_step"], g)] = (mark, line["trainer_step"])
    return out


def check(samples, packed, filt):
    want = expected_marks(packed, filt)
    n = sum(len(r["output"]) for rows in packed for r in rows)
    assert len(samples["step"]) == n
    for st, g, m, t in zip(samples["step"], samples["group_idx"], samples["filter_mark"], samples["trainer_step"]):
        assert (m, t) == want[(int(st), int(g))]


def test_marks_reach_the_samples_of_a_run_folder(tmp_path):
    packed, filt = dapo_run()
    folder = write_dapo_dir(tmp_path / "run", packed, filt)
    result = ReadResult()
    tables = read_tables(expand_upload(folder, folder.name), result)
    check(tables["samples"], packed, filt)
    assert not result.skipped
    assert [e["workload_step"] for e in result.info.metadata["dapo_filter"]] == [0, 1, 2, 3, 4]
    assert result.info.metadata["dapo_filter"][0]["trainer_step"] == filt[0]["trainer_step"]


def test_marks_in_zip_and_tar_archives(tmp_path):
    packed, filt = dapo_run(seed=9)
    folder = write_dapo_dir(tmp_path / "run", packed, filt)
    zpath = tmp_path / "run.zip"
    zpath.write_bytes(zip_folder(folder))
    tpath = tmp_path / "run.tar.gz"
    with tarfile.open(tpath, "w:gz") as tf:
        for f in sorted(folder.iterdir()):
            tf.add(f, arcname=f"run/{f.name}")
    for path in (zpath, tpath):
        check(read_tables(expand_upload(path, path.name))["samples"], packed, filt)


@pytest.mark.parametrize(
    "change, field, message",
    [
        ({"kept_prompt_count": 99}, "kept_prompt_indices", "kept_prompt_count is 99"),
        ({"used_prompt_count": 0}, "used_prompt_indices", "used_prompt_count is 0"),
        (
            {"kept_prompt_indices": [0, 8], "kept_prompt_count": 2, "used_prompt_indices": [], "used_prompt_count": 0},
            "kept_prompt_indices[1]",
            "outside the batch",
        ),
        (
            {"kept_prompt_indices": [1, 1], "kept_prompt_count": 2, "used_prompt_indices": [], "used_prompt_count": 0},
            "kept_prompt_indices[1]",
            "twice",
        ),
        (
            {"kept_prompt_indices": [1], "kept_prompt_count": 1, "used_prompt_indices": [2], "used_prompt_count": 1},
            "used_prompt_indices[0]",
            "used but not kept",
        ),
        ({"workload_step": 0}, "workload_step", "again"),
        ({"prompt_count": "8"}, "prompt_count", ""),
    ],
)
def test_bad_lines_name_file_line_and_field(tmp_path, change, field, message):
    packed, filt = dapo_run()
    filt[2] = {**filt[2], **change}
    folder = write_dapo_dir(tmp_path / "run", packed, filt)
    with pytest.raises(InputError) as err:
        read_tables(expand_upload(folder, folder.name))
    e = err.value
    assert e.file.endswith("dapo_filter_indices.jsonl") and e.line == 3 and e.field == field
    assert message in str(e)


def test_a_group_beyond_the_dapo_batch_is_an_error(tmp_path):
    packed, filt = dapo_run()
    filt[1]["prompt_count"] = 4
    filt[1]["kept_prompt_indices"] = [i for i in filt[1]["kept_prompt_indices"] if i < 4]
    filt[1]["kept_prompt_count"] = len(filt[1]["kept_prompt_indices"])
    filt[1]["used_prompt_indices"] = [i for i in filt[1]["used_prompt_indices"] if i < 4]
    filt[1]["used_prompt_count"] = len(filt[1]["used_prompt_indices"])
    folder = write_dapo_dir(tmp_path / "run", packed, filt)
    with pytest.raises(InputError, match="beyond the DAPO batch") as err:
        read_tables(expand_upload(folder, folder.name))
    assert err.value.file.endswith("packed_lengths_step_1.jsonl") and err.value.line == 5


def test_steps_without_marks_get_no_mark_columns(tmp_path):
    packed, filt = dapo_run()
    folder = write_dapo_dir(tmp_path / "run", packed, filt[:2])
    for batch in read_sources(expand_upload(folder, folder.name), None, ReadResult()):
        marked = int(batch.columns["step"][0]) < 2
        assert ("filter_mark" in batch.columns) == marked


def test_marks_without_their_packed_files_are_noted_and_alone_are_no_trace(tmp_path):
    packed, filt = dapo_run()
    folder = write_dapo_dir(tmp_path / "run", packed[:3], filt)
    result = ReadResult()
    read_tables(expand_upload(folder, folder.name), result)
    assert any("generation step(s) 3, 4 not used" in note for note in result.skipped)
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "dapo_filter_indices.jsonl").write_bytes((folder / "dapo_filter_indices.jsonl").read_bytes())
    with pytest.raises(InputError, match="no readable trace files"):
        read_tables(expand_upload(alone, alone.name))
