"""Small traces written by the project's own code, for tests that must always run."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import orjson

from core.workload.synthetic import packed_length_rows


def synthetic_rows(steps: int = 4, groups: int = 16, n: int = 4, seed: int = 1) -> list[list[dict]]:
    return list(packed_length_rows(steps, groups, n, dp_size=4, seed=seed, max_response_len=4096))


def jsonl(rows: list[dict]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


def write_packed_dir(folder: Path, per_step: list[list[dict]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rows in per_step:
        (folder / f"packed_lengths_step_{rows[0]['step']}.jsonl").write_bytes(jsonl(rows))
    return folder


def zip_folder(folder: Path) -> bytes:
    """The folder as a zip whose bytes depend on the content only (fixed entry times, so
    the same files zipped twice hash the same, whatever the clock says)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                info = zipfile.ZipInfo(f"{folder.name}/{f.relative_to(folder)}", date_time=(2024, 1, 1, 0, 0, 0))
                zf.writestr(info, f.read_bytes(), compress_type=zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def responses_of(per_step: list[list[dict]], step: int) -> np.ndarray:
    return np.array([o for r in per_step[step] for o in r["output"]])
