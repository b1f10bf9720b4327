"""The analyses the worker can run: what each reads, its defaults, how to run and merge it.

`ANALYSES[kind]` is an `AnalysisSpec`:
- ``tables``: {table: columns to read} -- the worker reads only these (absent optional
  columns are simply left out of TraceData); ``required``: {table: columns} that must
  exist for the analysis to say anything;
- ``defaults``: parameters (a job's params override them; unknown names are rejected);
- ``run(data, **params)`` -> result dict (plain JSON) and ``reduce(partials, **params)``
  merging results computed over disjoint step ranges into the whole-trace result; an
  analysis without ``reduce`` (the GPU timeline) always runs on the whole trace.

Entry points for the worker:
- `run_analysis(kind, data, params)`: one call on the whole trace.
- Chunked (Celery chord): split the trace into step ranges (`chunk_ranges`, or
  `TraceData.split_steps`), run `run_analysis(kind, chunk, params)` per chunk with the
  same `global_params(kind, ...)`, then `reduce_results(kind, partials, params)`.
  `run_analysis_chunked(kind, chunks, params)` does all three in one process.
  Every analysis is per step, and its summary is rebuilt from per-step entries (plus
  additive totals), so the chunked result equals the direct one.
- `default_analyses(available)`: the kinds run automatically when a trace becomes ready
  (`default`), given which tables/columns it has.

Where each shows in the dashboard (``shows``) reaches it through ``GET /jobs/kinds``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from core.analysis import (
    data_efficiency,
    gpu_report,
    imbalance,
    latency,
    lengths,
    longtail,
    multiturn,
    reward_length,
)
from core.analysis.tables import TraceData, step_ranges


@dataclass(frozen=True)
class AnalysisSpec:
    kind: str
    title: str
    tables: dict[str, tuple[str, ...]]
    required: dict[str, tuple[str, ...]]
    defaults: dict
    run: Callable[..., dict]
    # merges per-step-range results; None: the analysis runs on the whole trace only
    reduce: Callable[..., dict] | None
    # parameters of `run` that `reduce` takes too
    reduce_params: tuple[str, ...] = ()
    # any one of these {table: columns} makes the analysis applicable (empty: use `required`)
    any_of: tuple[dict[str, tuple[str, ...]], ...] = field(default=())
    # queued automatically when a trace becomes ready (if applicable)
    default: bool = True
    # its per-step figures join the live step series (GET /traces/{id}/series)
    live_series: bool = False
    # {parameter: (table, column)}: a parameter every step-range part must share, fixed
    # when not given from the whole trace as max(column) + 1 (e.g. the DP size)
    shared_params: dict[str, tuple[str, str]] = field(default_factory=dict)
    # where the dashboard shows it (`SHOWN_ON`): "overview" (its panel, feeding the
    # headline cards, on a trace's Overview), "compare" (among Compare many's panels), and
    # the trace pages drawing its figures, by their path under /traces/<id>/
    shows: tuple[str, ...] = ()

    def applicable(self, available: Mapping[str, Collection[str]]) -> bool:
        """Whether a trace with `available` {table: columns} (non-empty tables only) fits."""

        def has(req: dict) -> bool:
            return all(t in available and set(cols) <= set(available[t]) for t, cols in req.items())

        if self.any_of:
            return any(has(req) for req in self.any_of)
        return has(self.required)

    def missing_columns(self, available: Mapping[str, Collection[str]]) -> list[list]:
        """What a trace with `available` lacks: per alternative, its missing (table, column)s."""
        options = self.any_of or (self.required,)
        return [
            [(table, col) for table, cols in req.items() for col in cols if col not in available.get(table, ())]
            for req in options
        ]

    def missing(self, available: Mapping[str, Collection[str]]) -> str:
        """What a trace with `available` lacks for this analysis, as `table.column`s."""
        wants = [" and ".join(f"{t}.{c}" for t, c in alt) or "nothing" for alt in self.missing_columns(available)]
        return " or ".join(wants)


SAMPLE_KEY = ("step", "group_idx", "sample_idx")
# the columns every `samples` read includes (SampleColumns' required fields)
SAMPLE_BASE = SAMPLE_KEY + ("prompt_len", "response_len")

ANALYSES: dict[str, AnalysisSpec] = {
    "lengths": AnalysisSpec(
        kind="lengths",
        title="Length distributions",
        tables={"samples": SAMPLE_BASE + ("validate", "truncated", "task_id", "filter_mark")},
        required={"samples": ("step", "prompt_len", "response_len")},
        defaults={"max_response_len": None, "by_task": True, "infer_cap_min_hits": 2, "groups": "all"},
        run=lengths.analyze_lengths,
        reduce=lengths.reduce_lengths,
        reduce_params=("infer_cap_min_hits",),
    ),
    "longtail": AnalysisSpec(
        kind="longtail",
        title="Rollout long tail",
        tables={
            "samples": SAMPLE_BASE + ("dp_rank", "rank", "validate", "latency_s"),
            "steps": ("step", "t_gen"),
            "tool_calls": SAMPLE_KEY + ("latency_s",),
        },
        required={"samples": ("step", "response_len")},
        defaults={"engine_key": "dp_rank", "tail_fraction": 0.1, "include_validation": False},
        run=longtail.analyze_longtail,
        reduce=longtail.reduce_longtail,
        live_series=True,
        shows=("overview", "compare", "distributions"),
    ),
    "imbalance": AnalysisSpec(
        kind="imbalance",
        title="DP load imbalance",
        tables={"samples": SAMPLE_BASE + ("dp_rank", "validate", "filter_mark")},
        required={"samples": ("step", "group_idx", "prompt_len", "response_len", "dp_rank")},
        defaults={
            "dp_size": None,
            "keep_groups": True,
            "include_validation": False,
            "cost_linear": imbalance.COST_LINEAR,
            "groups": "all",
        },
        run=imbalance.analyze_imbalance,
        reduce=imbalance.reduce_imbalance,
        live_series=True,
        shared_params={"dp_size": ("samples", "dp_rank")},
        shows=("overview", "compare", "imbalance"),
    ),
    "latency": AnalysisSpec(
        kind="latency",
        title="Reward and tool latency",
        tables={
            "rank_timings": ("step", "rank", "phase", "seconds", "batch_size", "validate"),
            "tool_calls": SAMPLE_KEY + ("latency_s", "tool_name", "status"),
            "steps": ("step", "t_reward", "t_step", "validate"),
            "samples": SAMPLE_BASE + ("validate",),
        },
        required={},
        any_of=(
            {"rank_timings": ("step", "rank", "phase", "seconds")},
            {"tool_calls": SAMPLE_KEY + ("latency_s",)},
            {"steps": ("step", "t_reward")},
        ),
        defaults={"reward_phase": "reward", "include_validation": False},
        run=latency.analyze_latency,
        reduce=latency.reduce_latency,
        live_series=True,
        shows=("multiturn",),
    ),
    "multiturn": AnalysisSpec(
        kind="multiturn",
        title="Multi-turn rollouts",
        tables={
            "turns": SAMPLE_KEY
            + ("turn", "prompt_tokens", "cached_tokens", "completion_tokens", "engine_latency_s", "tool_call_count"),
            "tool_calls": SAMPLE_KEY + ("latency_s",),
            "samples": SAMPLE_BASE + ("validate", "num_turns", "num_tool_calls"),
        },
        required={},
        any_of=({"turns": SAMPLE_KEY + ("turn", "prompt_tokens")}, {"samples": ("step", "num_turns")}),
        defaults={"include_validation": False},
        run=multiturn.analyze_multiturn,
        reduce=multiturn.reduce_multiturn,
        shows=("multiturn",),
    ),
}

ANALYSES["data_efficiency"] = AnalysisSpec(
    kind="data_efficiency",
    title="Data efficiency (DAPO dynamic sampling)",
    tables={"samples": SAMPLE_BASE + ("validate", "filter_mark", "trainer_step")},
    required={"samples": ("step", "group_idx", "response_len", "filter_mark")},
    defaults={"include_validation": False},
    run=data_efficiency.analyze_data_efficiency,
    reduce=data_efficiency.reduce_data_efficiency,
    live_series=True,
    shows=("overview", "compare"),
)

ANALYSES["reward_length"] = AnalysisSpec(
    kind="reward_length",
    title="Reward vs response length",
    tables={"samples": SAMPLE_BASE + ("validate", "reward", "repeat_period")},
    required={"samples": ("step", "response_len", "reward")},
    defaults={"tail_fraction": 0.1, "no_reward_at": 0.0, "min_samples": 10, "include_validation": False},
    run=reward_length.analyze_reward_length,
    reduce=reward_length.reduce_reward_length,
    reduce_params=("tail_fraction", "no_reward_at", "min_samples"),
    shows=("distributions",),
)

ANALYSES["gpu_timeline"] = AnalysisSpec(
    kind="gpu_timeline",
    title="GPU timeline",
    # "kineto_events": every event of the Kineto files, when the ingest kept them (the
    # CPU-side analyses: queue length, launch statistics, memory bandwidth, annotations)
    tables={
        "gpu_events": ("rank", "stream", "step", "kind", "name_id", "start_us", "dur_us", "launch_us"),
        "kineto_events": (),
    },
    required={"gpu_events": ("rank", "stream", "step", "kind", "name_id", "start_us", "dur_us", "launch_us")},
    defaults={"hta_compat": True, "straggler_tolerance": 0.05},
    run=gpu_report.analyze_gpu_timeline,
    reduce=None,
    shows=("overview", "compare", "gpu"),
)


# The dashboard's own places (`AnalysisSpec.shows`); any other value is a trace page.
SHOWN_ON = ("overview", "compare")


def default_analyses(available: Mapping[str, Collection[str]]) -> list[str]:
    """The default kinds that fit a trace having `available` {table: columns}."""
    return [k for k, spec in ANALYSES.items() if spec.default and spec.applicable(available)]


# Integer parameters whose default is None (inferred): when given, integers >= 1.
_OPTIONAL_INT_PARAMS = frozenset({"max_response_len", "dp_size"})
PARAM_INT_MAX = 2**31 - 1
PARAM_STR_MAX = 200


def _check_param(key: str, value: object, default: object) -> object:
    """A parameter of the type of its default, within what the store and the analyses
    hold (ValueError naming params.<key>)."""
    where = f"params.{key}"
    if value is None and default is None:
        return None
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{where}: must be true or false, got {value!r}")
        return value
    if isinstance(default, str):
        if not isinstance(value, str) or len(value) > PARAM_STR_MAX or "\0" in value:
            raise ValueError(f"{where}: must be a string of at most {PARAM_STR_MAX} characters, got {value!r:.80}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: must be a finite number, got {value!r:.80}")
    if isinstance(default, int) or key in _OPTIONAL_INT_PARAMS:
        if value != int(value) or not (1 if default is None else 0) <= value <= PARAM_INT_MAX:
            lo = 1 if default is None else 0
            raise ValueError(f"{where}: must be an integer in {lo}..{PARAM_INT_MAX}, got {value!r:.80}")
        return int(value)
    if abs(value) > 1e15:
        raise ValueError(f"{where}: must be at most 1e15 in magnitude, got {value!r}")
    return float(value)


def resolve_params(kind: str, params: dict | None = None) -> dict:
    """Defaults overridden by `params`; unknown parameter names, and values of another
    type than the default's or out of range, raise ValueError."""
    spec = _spec(kind)
    params = dict(params or {})
    unknown = set(params) - set(spec.defaults)
    if unknown:
        raise ValueError(f"unknown parameter(s) for analysis '{kind}': {', '.join(sorted(unknown))}")
    checked = {k: _check_param(k, v, spec.defaults[k]) for k, v in params.items()}
    return {**spec.defaults, **checked}


def run_analysis(kind: str, data: TraceData, params: dict | None = None) -> dict:
    """Run one analysis on `data` (a whole trace or one step range of it)."""
    spec = _spec(kind)
    result = spec.run(data, **resolve_params(kind, params))
    result["params"] = resolve_params(kind, params)
    return result


def reduce_results(kind: str, partials: list[dict], params: dict | None = None) -> dict:
    """Merge `run_analysis` results over disjoint step ranges (in any order)."""
    spec = _spec(kind)
    if spec.reduce is None:
        raise ValueError(f"analysis '{kind}' runs on the whole trace and has no step-range parts to merge")
    full = resolve_params(kind, params)
    result = spec.reduce(partials, **{k: full[k] for k in spec.reduce_params})
    result["params"] = full
    return result


def global_params(kind: str, chunks: list[TraceData], params: dict | None = None) -> dict:
    """Parameters every chunk must share (the spec's `shared_params`), fixed from all
    chunks before they run: a chunk missing the top DP rank would otherwise size its
    ranks differently. A Celery chord gets the same from one `SELECT max(column)`."""
    full = dict(params or {})
    for name, (table, column) in _spec(kind).shared_params.items():
        if full.get(name):
            continue
        cols = [getattr(getattr(c, table), column, None) for c in chunks if getattr(c, table) is not None]
        tops = [int(np.max(col)) for col in cols if col is not None and len(col)]
        if tops:
            full[name] = max(tops) + 1
    return full


def run_analysis_chunked(kind: str, chunks: list[TraceData], params: dict | None = None) -> dict:
    """Run per step-range chunk and reduce; equals `run_analysis` on the whole trace."""
    shared = global_params(kind, chunks, params)
    return reduce_results(kind, [run_analysis(kind, c, shared) for c in chunks], shared)


def chunk_ranges(steps: npt.ArrayLike, n_chunks: int) -> list[tuple[int, int]]:
    """Half-open step ranges [lo, hi) splitting the trace's distinct steps into chunks."""
    return step_ranges(np.unique(np.asarray(steps)), n_chunks)


def _spec(kind: str) -> AnalysisSpec:
    try:
        return ANALYSES[kind]
    except KeyError:
        raise ValueError(f"unknown analysis '{kind}'; known: {', '.join(ANALYSES)}") from None
