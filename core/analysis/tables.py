"""The column data the analyses read.

`TraceData` holds one column dataclass per table (see backend/formats/base.py for the
tables): `SampleColumns`, `TurnColumns`, `ToolCallColumns`, `RankTimingColumns`,
`StepColumns`. Each field is a numpy array with one value per row (strings as numpy
str/object arrays); optional columns are None when the trace does not have them.
The worker builds it with `TraceData.from_tables({"samples": {"step": arr, ...}, ...})`,
reading only the columns `registry.ANALYSES[kind].tables` names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Self

import numpy as np

# --------------------------------------------------------------------------- tables


def _present(x: object) -> bool:
    return x is not None


@dataclass
class _Columns:
    """Base for one table: equal-length arrays, optional ones None."""

    # rows belong to training steps, so a trace can be cut into step ranges
    by_step: ClassVar[bool] = True

    def __len__(self) -> int:
        first = getattr(self, fields(self)[0].name)
        return 0 if first is None else len(first)

    @classmethod
    def from_columns(cls, columns: dict[str, Any]) -> Self:
        """Build from a column dict, keeping known columns and ignoring the rest."""
        kwargs = {}
        for f in fields(cls):
            value = columns.get(f.name)
            if value is None:
                if f.default is dataclasses.MISSING:
                    raise ValueError(f"table for {cls.__name__} lacks required column '{f.name}'")
                continue
            kwargs[f.name] = np.asarray(value)
        out = cls(**kwargs)
        lengths = {len(getattr(out, f.name)) for f in fields(cls) if _present(getattr(out, f.name))}
        if len(lengths) > 1:
            raise ValueError(f"{cls.__name__}: columns have different lengths {sorted(lengths)}")
        return out

    def take(self, index: np.ndarray) -> Self:
        """Rows selected by a boolean mask or an index array (optional columns stay None)."""
        return type(self)(
            **{f.name: (None if getattr(self, f.name) is None else getattr(self, f.name)[index]) for f in fields(self)}
        )

    def columns(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]

    def step_column(self) -> np.ndarray:
        """The `step` column, which every `by_step` table has."""
        step = getattr(self, "step", None)
        assert step is not None, f"{type(self).__name__} has no step column"
        return step


@dataclass
class SampleColumns(_Columns):
    step: np.ndarray
    group_idx: np.ndarray
    sample_idx: np.ndarray
    prompt_len: np.ndarray
    response_len: np.ndarray
    dp_rank: np.ndarray | None = None
    rank: np.ndarray | None = None
    tp_rank: np.ndarray | None = None
    task_id: np.ndarray | None = None
    validate: np.ndarray | None = None
    truncated: np.ndarray | None = None
    num_turns: np.ndarray | None = None
    num_tool_calls: np.ndarray | None = None
    latency_s: np.ndarray | None = None
    # DAPO marks (0 filtered out, 1 kept, 2 used; -1 unknown) and the trainer step
    filter_mark: np.ndarray | None = None
    trainer_step: np.ndarray | None = None
    reward: np.ndarray | None = None  # NaN: unknown
    # rollout dumps: period of the response's final repetition, 0 none, -1 no text
    repeat_period: np.ndarray | None = None


@dataclass
class TurnColumns(_Columns):
    step: np.ndarray
    group_idx: np.ndarray
    sample_idx: np.ndarray
    turn: np.ndarray
    prompt_tokens: np.ndarray
    cached_tokens: np.ndarray | None = None
    completion_tokens: np.ndarray | None = None
    engine_latency_s: np.ndarray | None = None
    tool_call_count: np.ndarray | None = None
    finish_reason: np.ndarray | None = None


@dataclass
class ToolCallColumns(_Columns):
    step: np.ndarray
    group_idx: np.ndarray
    sample_idx: np.ndarray
    latency_s: np.ndarray
    tool_name: np.ndarray | None = None
    call_idx: np.ndarray | None = None
    turn: np.ndarray | None = None
    response_tokens: np.ndarray | None = None
    status: np.ndarray | None = None


@dataclass
class RankTimingColumns(_Columns):
    step: np.ndarray
    rank: np.ndarray
    phase: np.ndarray
    seconds: np.ndarray
    dp_rank: np.ndarray | None = None
    tp_rank: np.ndarray | None = None
    batch_size: np.ndarray | None = None
    validate: np.ndarray | None = None


@dataclass
class StepColumns(_Columns):
    step: np.ndarray
    t_gen: np.ndarray | None = None
    t_reward: np.ndarray | None = None
    t_old_log_prob: np.ndarray | None = None
    t_ref: np.ndarray | None = None
    t_adv: np.ndarray | None = None
    t_update_actor: np.ndarray | None = None
    t_step: np.ndarray | None = None
    validate: np.ndarray | None = None

    def timing(self, name: str, steps: np.ndarray) -> np.ndarray:
        """Column `name` looked up for each of `steps` (NaN where unknown)."""
        out = np.full(len(steps), np.nan)
        col = getattr(self, name, None)
        if col is None or len(self.step) == 0:
            return out
        order = np.argsort(self.step, kind="stable")
        s, v = self.step[order], np.asarray(col, dtype=np.float64)[order]
        pos = np.clip(np.searchsorted(s, steps), 0, len(s) - 1)
        hit = s[pos] == steps
        out[hit] = v[pos[hit]]
        return out


# The measured per-step durations (seconds) framework logs can carry: StepColumns' t_* fields.
STEP_TIMING_COLUMNS = tuple(f.name for f in fields(StepColumns) if f.name.startswith("t_"))


@dataclass
class GpuEventColumns(_Columns):
    """GPU events of a Kineto trace, in trace order (see backend/formats/kineto.py).
    Analysed whole: `step` is the enclosing ProfilerStep mark, -1 outside one."""

    by_step: ClassVar[bool] = False

    rank: np.ndarray
    stream: np.ndarray
    start_us: np.ndarray
    dur_us: np.ndarray
    step: np.ndarray | None = None
    kind: np.ndarray | None = None
    name_id: np.ndarray | None = None
    launch_us: np.ndarray | None = None

    def as_mapping(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in self.columns()}


TABLE_CLASSES: dict[str, type[_Columns]] = {
    "samples": SampleColumns,
    "turns": TurnColumns,
    "tool_calls": ToolCallColumns,
    "rank_timings": RankTimingColumns,
    "steps": StepColumns,
    "gpu_events": GpuEventColumns,
}


@dataclass
class TraceData:
    """Column arrays per table for one trace (or one step range of it)."""

    samples: SampleColumns | None = None
    turns: TurnColumns | None = None
    tool_calls: ToolCallColumns | None = None
    rank_timings: RankTimingColumns | None = None
    steps: StepColumns | None = None
    gpu_events: GpuEventColumns | None = None
    # trace-level facts: the rollout's max response length, task id -> task name,
    # kernel name per gpu_events.name_id, Kineto ProfilerStep windows {step: [start, end]}
    max_response_len: int | None = None
    task_names: dict[int, str] = field(default_factory=dict)
    gpu_names: list[str] = field(default_factory=list)
    gpu_step_windows: dict | None = None
    # every event of a Kineto trace (core.analysis.gpu_events.TraceEvents), when kept
    gpu_trace: Any = None

    @classmethod
    def from_tables(
        cls,
        tables: dict[str, dict[str, Any]],
        *,
        max_response_len: int | None = None,
        task_names: dict[int, str] | None = None,
        gpu_names: list[str] | None = None,
        gpu_step_windows: dict | None = None,
        gpu_trace: Any = None,
    ) -> TraceData:
        """From {table: {column: array}}; unknown tables and columns are ignored."""
        kwargs: dict[str, Any] = {
            name: klass.from_columns(tables[name])
            for name, klass in TABLE_CLASSES.items()
            if tables.get(name) is not None
        }
        return cls(
            **kwargs,
            max_response_len=max_response_len,
            task_names=dict(task_names or {}),
            gpu_names=list(gpu_names or []),
            gpu_step_windows=gpu_step_windows,
            gpu_trace=gpu_trace,
        )

    def tables(self) -> dict[str, _Columns]:
        return {name: getattr(self, name) for name in TABLE_CLASSES if getattr(self, name) is not None}

    def step_values(self) -> np.ndarray:
        """Sorted distinct steps over all tables."""
        parts = [t.step_column() for t in self.tables().values() if t.by_step and len(t)]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    def select_steps(self, lo: int, hi: int) -> TraceData:
        """The rows with lo <= step < hi, in every table."""
        chosen: dict[str, Any] = {
            name: t.take((t.step_column() >= lo) & (t.step_column() < hi))
            for name, t in self.tables().items()
            if t.by_step
        }
        return TraceData(**chosen, max_response_len=self.max_response_len, task_names=self.task_names)

    def split_steps(self, n_chunks: int) -> list[TraceData]:
        """Up to `n_chunks` pieces with disjoint step ranges and about equal step counts."""
        return [self.select_steps(lo, hi) for lo, hi in step_ranges(self.step_values(), n_chunks)]


def step_ranges(steps: np.ndarray | Sequence[int], n_chunks: int) -> list[tuple[int, int]]:
    """Half-open [lo, hi) step ranges covering `steps` (sorted distinct) in n_chunks pieces."""
    steps = np.asarray(steps)
    if len(steps) == 0:
        return []
    n_chunks = max(1, min(int(n_chunks), len(steps)))
    cuts = [steps[i * len(steps) // n_chunks] for i in range(n_chunks)]
    bounds = [int(c) for c in cuts] + [int(steps[-1]) + 1]
    return [(bounds[i], bounds[i + 1]) for i in range(n_chunks)]
