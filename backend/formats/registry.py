"""The format registry: each format's reader and its file-name rule (content rules are in
`backend.formats.detect`). See docs/formats.md for every format."""

from __future__ import annotations

import re
from collections.abc import Collection

from backend.formats.areal import read_areal_perf, read_areal_sessions
from backend.formats.base import Reader
from backend.formats.dapo import read_dapo_filter
from backend.formats.kineto import read_kineto
from backend.formats.native import read_native_csv, read_native_jsonl, read_native_parquet
from backend.formats.nsys import read_nsys
from backend.formats.otlp import read_otlp
from backend.formats.polytrace import read_compact, read_multiturn_workload, read_packed_lengths, read_reward_timings
from backend.formats.rollouts import read_verl_rollouts
from backend.formats.tensorboard import read_tensorboard
from backend.formats.tokenizer import read_tokenizer
from backend.formats.verl_logs import read_verl_console, read_verl_jsonl
from backend.formats.wandb_history import read_wandb_csv, read_wandb_parquet

FORMATS: dict[str, Reader] = {
    "polytrace-packed": read_packed_lengths,
    "polytrace-reward": read_reward_timings,
    "polytrace-multiturn": read_multiturn_workload,
    "polytrace-compact": read_compact,
    "verl-jsonl": read_verl_jsonl,
    "verl-console": read_verl_console,
    "native-csv": read_native_csv,
    "native-jsonl": read_native_jsonl,
    "native-parquet": read_native_parquet,
    "kineto": read_kineto,
    "nsys-sqlite": read_nsys,
    "dapo-filter": read_dapo_filter,
    "tensorboard": read_tensorboard,
    "wandb-csv": read_wandb_csv,
    "wandb-parquet": read_wandb_parquet,
    "areal-perf": read_areal_perf,
    "areal-sessions": read_areal_sessions,
    "otlp-json": read_otlp,
    "verl-rollouts": read_verl_rollouts,
    # no rows: the run's tokenizer for the rollout dumps read after it
    "tokenizer": read_tokenizer,
}

NAME_PATTERNS = (
    (re.compile(r"^tokenizer\.json$"), "tokenizer"),
    (re.compile(r"^events\.out\.tfevents\..+"), "tensorboard"),
    (re.compile(r"^traces-r\d+\.jsonl?$"), "areal-perf"),
    (re.compile(r"^sessions-r\d+\.jsonl?$"), "areal-sessions"),
    (re.compile(r"^packed_lengths_step_?\d+.*\.jsonl?$"), "polytrace-packed"),
    (re.compile(r"^reward_timings_step_?\d+.*\.jsonl?$"), "polytrace-reward"),
    (re.compile(r"^multiturn_workload_step_?\d+.*\.jsonl?$"), "polytrace-multiturn"),
    (re.compile(r".*\.(parquet|pq)$"), "native-parquet"),
    (re.compile(r".*\.csv$"), "native-csv"),
    (re.compile(r"^dapo_filter_indices.*\.jsonl?$"), "dapo-filter"),
)
# Read before the other files of an upload (they prepare what those are read with), and
# no trace on their own: the tokenizer (rollout dumps' token lengths), then DAPO marks
# (attached to the packed-length samples).
READ_FIRST = ("tokenizer", "dapo-filter")
# Formats that each give every sample of a run, in order of preference: a folder holding
# several (as `rlvr-explorer generate` writes, and its zip) is read in the first only.
REPRESENTATIONS = ("polytrace-multiturn", "polytrace-packed", "polytrace-compact")

# Files known to sit in run folders that no reader uses (yet): a friendlier note.
KNOWN_UNUSED = (
    (re.compile(r"^enhanced_task_distribution_parameters.*\.json$"), "fitted distribution parameters, not a trace"),
    (re.compile(r"^readme(\.\w+)?$"), "documentation"),
    (
        re.compile(r".*\.(nsys-rep|qdrep|qdstrm)$"),
        "Nsight Systems report (not read: export it with `nsys export --type sqlite` and upload the .sqlite)",
    ),
    (
        re.compile(r"^run-.*\.wandb$"),
        "W&B offline run (not read: only the wandb package reads it; `wandb sync` it and export the history as CSV/Parquet)",
    ),
)

# Which files carry a table, or a sample column not every format has: what to upload when
# an analysis lacks its data (`files_carrying`). Keys: "table.column", else "table".
CARRIED_BY = {
    "samples.dp_rank": "packed_lengths_step_N.jsonl (PolyTrace, a dp_rank per prompt group) "
    "or a native CSV/JSONL/Parquet with a dp_rank column",
    "samples.filter_mark": "verl DAPO's dapo_filter_indices.jsonl beside the packed_lengths_step_N.jsonl files",
    "samples.num_turns": "a native CSV/JSONL/Parquet with a num_turns column",
    "samples.reward": "per-sample rewards: verl rollout dumps (<step>.jsonl of trainer.rollout_data_dir, with "
    "score), AReaL sessions-rN.jsonl with reward, or a native CSV/JSONL/Parquet with a reward column",
    "samples": "per-step lengths: packed_lengths_step_N.jsonl or multiturn_workload_step_N.jsonl (PolyTrace), "
    "a PolyTrace compact JSON, or a native CSV/JSONL/Parquet",
    "rank_timings": "reward_timings_step_N.jsonl (PolyTrace, reward_time_s per rank)",
    "turns": "multiturn_workload_step_N.jsonl (PolyTrace multi-turn) or AReaL sessions-rN.jsonl",
    "tool_calls": "multiturn_workload_step_N.jsonl (PolyTrace multi-turn) or AReaL sessions-rN.jsonl",
    "steps.t_reward": "a verl metric log with timing_s/reward (file logger JSONL or console lines)",
    "steps": "a verl metric log (file logger JSONL or console lines), TensorBoard or W&B history",
    "gpu_events": "PyTorch profiler (Kineto) traces: *.json or *.json.gz, one per rank",
}


def files_carrying(alternatives: list[list[tuple[str, str]]], present: Collection[str] = ()) -> str:
    """The files that would provide missing (table, column)s, per alternative, in words.
    A column of a table the trace already has (`present`) is named as that column, never
    as the files bringing the table it has."""

    def carrying(table: str, column: str) -> str:
        if f"{table}.{column}" in CARRIED_BY:
            return CARRIED_BY[f"{table}.{column}"]
        if table in present:
            return f"files with a {column} column for its {table} (docs/formats.md)"
        return CARRIED_BY.get(table, table)

    options = []
    for alt in alternatives:
        files = list(dict.fromkeys(carrying(t, c) for t, c in alt))
        options.append(" plus ".join(files))
    return "; or ".join(o for o in options if o) or "nothing"
