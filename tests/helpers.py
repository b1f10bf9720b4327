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


def dapo_run(
    gen_steps: int = 5, prompts: int = 8, n: int = 4, train_batch_size: int = 6, seed: int = 3
) -> tuple[list[list[dict]], list[dict]]:
    """A synthetic verl DAPO run: per generation step the packed-length lines (one prompt
    group per line, 2 DP ranks) and the ``dapo_filter_indices.jsonl`` lines. Each trainer
    step fills its batch of `train_batch_size` prompts from as many generation batches as
    it takes (kept = groups whose fake rewards differ), the last cut at the batch size."""
    rng = np.random.default_rng(seed)
    packed, filt = [], []
    trainer, have = 0, 0
    gen_index = 0
    for step in range(gen_steps):
        rows = []
        for g in range(prompts):
            rows.append(
                {
                    "step": step,
                    "rank": g % 2,
                    "dp_rank": g % 2,
                    "tp_rank": 0,
                    "local_index": g // 2,
                    "input": int(rng.integers(20, 200)),
                    "output": [int(x) for x in rng.integers(1, 3000, size=n)],
                    "n_sampling": n,
                    "validate": False,
                }
            )
        packed.append(rows)
        kept = sorted(int(i) for i in rng.choice(prompts, size=int(rng.integers(1, prompts)), replace=False))
        take = min(len(kept), train_batch_size - have)
        used = kept[:take]
        filt.append(
            {
                "workload_step": step,
                "trainer_step": trainer,
                "gen_batch_index": gen_index,
                "prompt_count": prompts,
                "n_sampling": n,
                "train_batch_size": train_batch_size,
                "num_prompt_in_batch_before": have,
                "kept_prompt_count": len(kept),
                "used_prompt_count": len(used),
                "kept_prompt_indices": kept,
                "used_prompt_indices": used,
            }
        )
        have += take
        gen_index += 1
        if have >= train_batch_size:
            trainer, have, gen_index = trainer + 1, 0, 0
    return packed, filt


def write_dapo_dir(folder: Path, packed: list[list[dict]], filt: list[dict]) -> Path:
    write_packed_dir(folder, packed)
    (folder / "dapo_filter_indices.jsonl").write_bytes(jsonl(filt))
    return folder
