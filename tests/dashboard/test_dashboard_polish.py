"""What a new user reads on the pages: every empty panel says why it is empty (and what to
upload when the trace lacks the data) without a plot toolbar over nothing; count and rank
axes have whole-number ticks; percent axes have round percent ticks; the unexplained
quantities (training cost, the KS line) are explained; a running replay says so."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest

from dashboard.figures import gpu, imbalance, longtail, multiturn, simulation, stages, workload
from dashboard.figures.common import MODEBAR_BUTTONS, empty_figure, integer_ticks, nice_step, percent_axis
from dashboard.figures.distributions import tail_figure
from dashboard.figures.stages import trace_has_stage_timings as has_stage_timings
from dashboard.views.job_views import NO_REPLAY, replay_placeholder

# builders whose empty state means "the trace has no such data": they must say what to upload
MISSING_DATA = [
    (stages.stage_time_figure, []),
    (stages.stage_gantt_figure, None),
    (imbalance.load_heatmap_figure, {}),
    (multiturn.counts_hist_figure, {}),
    (multiturn.context_growth_figure, {}),
    (multiturn.reward_latency_figure, {}),
    (multiturn.reward_ranks_figure, {}),
    (multiturn.tool_latency_figure, {}),
    (gpu.temporal_breakdown_figure, None),
    (gpu.idle_breakdown_figure, None),
    (gpu.kernel_kind_figure, None),
]
OTHER_EMPTY = [
    (imbalance.imbalance_ratio_figure, {}),
    (imbalance.saving_figure, {}),
    (longtail.longtail_idle_figure, {}),
    (longtail.longtail_finish_figure, {}),
    (longtail.longtail_engine_figure, {}),
    (multiturn.turns_over_steps_figure, {}),
    (multiturn.cache_hit_figure, {}),
    (multiturn.latency_vs_tokens_figure, {}),
    (gpu.straggler_figure, None),
    (simulation.speedup_figure, {"result": {"a": {"steps": []}, "b": None}}),
    (workload.fit_ks_figure, {}),
]


def _empty(builder, arg) -> go.Figure:
    if builder is stages.stage_gantt_figure:
        return builder(None, [])
    return builder(arg)


def assert_explained_and_bare(fig: go.Figure) -> str:
    message = (fig.layout.meta or {}).get("empty")
    assert message, "an empty figure must carry its explanation"
    # drawn in the middle; each wrapped line keeps its space, so the page's text reads as the message
    assert [a.text.replace(" <br>", " ") for a in fig.layout.annotations] == [message]
    assert all(len(line.rstrip()) <= 64 for line in fig.layout.annotations[0].text.split("<br>"))  # not cut off
    assert set(MODEBAR_BUTTONS) <= set(fig.layout.modebar.remove)  # no toolbar over nothing
    assert fig.layout.xaxis.visible is False and fig.layout.yaxis.visible is False
    return message


@pytest.mark.parametrize("builder,arg", MISSING_DATA, ids=lambda x: getattr(x, "__name__", ""))
def test_empty_panels_for_missing_data_say_what_to_upload(builder, arg):
    message = assert_explained_and_bare(_empty(builder, arg))
    assert "upload" in message and ("docs/formats.md" in message or ".jsonl" in message), message


@pytest.mark.parametrize("builder,arg", OTHER_EMPTY, ids=lambda x: getattr(x, "__name__", ""))
def test_every_other_empty_panel_is_explained(builder, arg):
    assert_explained_and_bare(_empty(builder, arg))


def test_the_loading_placeholder_has_no_toolbar_either():
    assert_explained_and_bare(empty_figure("Loading…"))


# -- ticks ----------------------------------------------------------------------------
def _whole_ticks(axis) -> bool:
    """Ticks on an axis are whole numbers: one per unit, or integer-formatted, or categories."""
    if axis.type == "category":
        return True
    if axis.dtick is not None:
        return float(axis.dtick) == int(float(axis.dtick)) and (axis.tickformat or "d").endswith("d")
    return (axis.tickformat or "").endswith("d")


def test_rank_axis_of_the_load_heatmap_has_whole_ticks():
    steps = [{"step": s, "tokens": {"recorded": [10.0, 12.0], "mean": 11.0}} for s in range(3)]
    fig = imbalance.load_heatmap_figure({"steps": steps})
    assert fig.layout.yaxis.title.text.lower().find("rank") >= 0
    assert _whole_ticks(fig.layout.yaxis) and fig.layout.yaxis.dtick == 1
    assert _whole_ticks(fig.layout.xaxis)


def test_trajectory_count_axis_has_whole_ticks():
    fig = multiturn.counts_hist_figure({"summary": {"turns_hist": [0, 1, 3, 2], "tool_calls_hist": [1, 2, 0]}})
    assert _whole_ticks(fig.layout.yaxis) and fig.layout.yaxis.dtick == 1
    big = multiturn.counts_hist_figure({"summary": {"turns_hist": [0, 100, 3000], "tool_calls_hist": []}})
    assert _whole_ticks(big.layout.yaxis) and big.layout.yaxis.dtick is None  # plotly spaces them, as integers


def test_integer_ticks_counts_from_zero_for_bars():
    fig = go.Figure(go.Bar(x=[0, 1], y=[20, 25]))
    assert integer_ticks(go.Figure(fig), "y").layout.yaxis.dtick == 1  # span 5
    assert integer_ticks(go.Figure(fig), "y", from_zero=True).layout.yaxis.dtick is None  # 0..25


@pytest.mark.parametrize("rates", [[0.0002, 0.0011, 0.002], [0.02, 0.11, 0.2], [0.3, 0.85, 0.5], [0.0, 0.0, 0.0]])
def test_truncation_axis_has_round_percent_ticks(rates):
    rows = [
        {"step": i, "count": 10, "mean": 100.0, "max": 400.0, "tail_ratio": 4.0, "truncation_rate": r}
        for i, r in enumerate(rates)
    ]
    fig = tail_figure({"field": "response", "steps": rows})
    y2 = fig.layout.yaxis2
    assert y2.ticksuffix == "%" and y2.tickmode == "linear" and float(y2.tick0) == 0
    step = float(y2.dtick)
    mantissa = step / 10 ** np.floor(np.log10(step))
    assert round(mantissa, 6) in (1, 2, 5)  # 1-2-5 steps: 0.5%, 1%, 2%, 5%, 10%, 20%
    ticks = np.arange(0, y2.range[1] + 1e-12, step)
    assert 2 <= len(ticks) <= 7
    assert max(100 * r for r in rates) <= y2.range[1]


def test_nice_step_and_percent_axis():
    assert [nice_step(x, 5) for x in (1, 4.4, 11, 63, 100)] == [0.2, 1, 5, 20, 20]
    assert percent_axis(20)["dtick"] == 5 and percent_axis(20)["tickformat"] == ".0f"
    assert percent_axis(0.2)["tickformat"] == ".2f"


# -- explanations ---------------------------------------------------------------------
def test_training_cost_is_explained():
    assert "24576·s + s²" in imbalance.LOAD_LABELS["cost"]
    caption = imbalance.COST_CAPTION
    assert "verl" in caption and "linear" in caption and "quadratic" in caption and "attention" in caption


def test_ks_threshold_line_is_labelled():
    result = {"fit": {"default": {"prompt": {"lognorm": 0.03}, "response": {"gamma": 0.08}}}}
    fig = workload.fit_ks_figure(result)
    labels = [a.text for a in fig.layout.annotations]
    assert any("0.05" in (t or "") for t in labels), labels
    assert "5 percentage points" in workload.KS_CAPTION


def test_a_running_replay_replaces_the_configure_placeholder():
    assert replay_placeholder(None) == NO_REPLAY
    running = replay_placeholder({"id": 7, "status": "running", "progress": 0.4})
    assert "Replay 7 is running" in running and running != NO_REPLAY
    assert "failed" in replay_placeholder({"id": 7, "status": "failed", "error": "boom"})


def test_overview_hides_stage_time_without_timings():
    assert not has_stage_timings({"metadata": {"columns": {"steps": ["step", "validate"]}}})
    assert not has_stage_timings({})
    assert has_stage_timings({"metadata": {"columns": {"steps": ["step", "t_gen", "t_step"]}}})


# -- the upload page -------------------------------------------------------------------
def _texts(component) -> list[str]:
    """Every string under a Dash component, depth first."""
    if component is None:
        return []
    if isinstance(component, str):
        return [component]
    if isinstance(component, (list, tuple)):
        return [t for c in component for t in _texts(c)]
    return _texts(getattr(component, "children", None))


def _find(component, type_name: str) -> list:
    found = []
    if isinstance(component, (list, tuple)):
        for c in component:
            found += _find(c, type_name)
    elif component is not None and not isinstance(component, str):
        if type(component).__name__ == type_name:
            found.append(component)
        found += _find(getattr(component, "children", None), type_name)
    return found


def test_upload_file_list_is_natural_ordered_collapsed_and_counted():
    from dashboard.views.uploads import file_list

    names = ["packed_lengths_step_10.jsonl", "packed_lengths_step_2.jsonl", "packed_lengths_step_1.jsonl"]
    state = {"files": [{"name": n, "size": 1000} for n in names], "status": "done"}
    details = file_list(state)
    assert type(details).__name__ == "Details" and not details.open  # collapsed
    summary = _find(details, "Summary")[0]
    assert "3 files" in summary.children and "received" in summary.children
    rows = _find(details, "Li")
    assert [r.to_plotly_json()["props"]["data-file"] for r in rows] == [names[2], names[1], names[0]]
    assert not any("received" in t for r in rows for t in _texts(r))  # no per-file "received"


def test_upload_file_list_opens_on_failure_with_the_error_on_its_file():
    from dashboard.views.uploads import file_list

    error = {"message": "line 3: output must be a list (see docs/formats.md)", "file": "b.jsonl"}
    details = file_list(
        {
            "files": [{"name": "a.jsonl", "size": 10}, {"name": "b.jsonl", "size": 10}],
            "status": "failed",
            "error": error,
        }
    )
    assert details.open
    by_file = {r.to_plotly_json()["props"]["data-file"]: r for r in _find(details, "Li")}
    assert "line 3" not in " ".join(_texts(by_file["a.jsonl"]))
    assert "line 3" in " ".join(_texts(by_file["b.jsonl"]))
    link = _find(by_file["b.jsonl"], "A")[0]  # docs/formats.md as a link to the app's copy
    assert link.children == "docs/formats.md" and link.href == "/formats"


def test_upload_says_which_files_were_skipped():
    from dashboard.views.uploads import skipped_note

    note = skipped_note(
        {"metadata": {"skipped": ["skipped notes.txt: unknown file format", "skipped e.jsonl: empty file"]}}
    )
    assert note == "Skipped 2 files: notes.txt (unknown file format); e.jsonl (empty file)"
    assert skipped_note({"metadata": {}}) is None


def test_upload_sends_the_max_response_length():
    import httpx

    from dashboard.api.client import ApiClient

    seen = {}

    def answer(request: httpx.Request):
        seen["body"] = request.read()
        return httpx.Response(201, json={"id": 1, "name": "x", "status": "ready"})

    client = ApiClient("http://api.test", "k", http=httpx.Client(transport=httpx.MockTransport(answer)))
    client.upload_trace([("a.jsonl", b"{}\n")], max_response_len=8192)
    assert b'name="max_response_len"' in seen["body"] and b"8192" in seen["body"]
    client.upload_trace([("a.jsonl", b"{}\n")])
    assert b"max_response_len" not in seen["body"]


# -- the jobs page ---------------------------------------------------------------------
def test_job_parameters_read_as_text_not_json():
    from dashboard.views.job_views import describe_params

    longtail = {
        "kind": "longtail",
        "params": {"engine_key": "dp_rank", "tail_fraction": 0.1, "include_validation": False},
    }
    text = describe_params(longtail)
    assert text == "engine key dp_rank, include validation no, tail fraction 0.1"
    assert "{" not in text and '"' not in text
    assert describe_params({"kind": "lengths", "params": {"max_response_len": None}}) == "max response len auto"
    assert describe_params({"kind": "ingest", "params": {"folder": "/data/x", "format": None}}) == "detected format"
    sim = {
        "kind": "simulation",
        "params": {
            "cluster": {"gpu": {"name": "H100"}, "n_gpus": 16, "rollout_replicas": 2, "rollout_tp": 4, "train_dp": 8},
            "model": {"name": "Qwen2.5-7B"},
            "policy": {"kind": "sync"},
            "compare_policy": {"kind": "one_step_off"},
            "calibrate": None,
            "steps": [0, 5],
        },
    }
    assert describe_params(sim).startswith("sync vs one_step_off; 16 x H100")


def test_job_duration():
    from datetime import UTC, datetime

    from dashboard.views.job_views import job_duration

    done = {"status": "succeeded", "started_at": "2026-12-01T07:00:00Z", "finished_at": "2026-12-01T07:03:12Z"}
    assert job_duration(done) == "3 min 12 s"
    running = {"status": "running", "started_at": "2026-12-01T07:00:00+00:00", "finished_at": None}
    assert job_duration(running, now=datetime(2026, 12, 1, 7, 0, 42, tzinfo=UTC)) == "running 42 s"
    assert job_duration({"status": "queued", "started_at": None}) == "waiting for a worker"
    quick = {"status": "succeeded", "started_at": "2026-12-01T07:00:00Z", "finished_at": "2026-12-01T07:00:00.2Z"}
    assert job_duration(quick) == "< 1 s"


def test_analysis_rerun_form_round_trips_the_parameters():
    from dashboard.views.job_views import param_fields, params_from_fields

    params = {"engine_key": "dp_rank", "tail_fraction": 0.1, "include_validation": False, "dp_size": None}
    fields = param_fields(params)
    assert [(n, k) for n, k, _ in fields] == [
        ("dp_size", "optional"),
        ("engine_key", "text"),
        ("include_validation", "bool"),
        ("tail_fraction", "number"),
    ]
    # the widgets' values as Dash hands them back: a checklist list, numbers, text
    values = [None, "dp_rank", ["yes"], 0.2]
    out = params_from_fields([(n, k) for n, k, _ in fields], values)
    assert out == {"engine_key": "dp_rank", "include_validation": True, "tail_fraction": 0.2}  # empty: default
    assert params_from_fields([("dp_size", "optional")], [4.0]) == {"dp_size": 4}


def test_replay_rerun_fills_the_form_with_what_the_job_ran():
    from backend.jobs.simulations import simulation_params
    from dashboard.views.replay_forms import form_values_from_job, simulation_body

    body = {
        "trace_id": 3,
        "cluster": {"gpu": "A100", "n_gpus": 24, "rollout_replicas": 4, "rollout_tp": 2, "train_dp": 16},
        "model": "Qwen2.5-7B",
        "limits": {"max_running_seqs": 128},
        "policy": {"kind": "sync", "balancing": "kk"},
        "compare_policy": {"kind": "one_step_off", "balancing": "kk"},
        "calibrate": {"fit_steps": [0, 2]},
        "steps": [1, 5],
    }
    stored = simulation_params(body)
    defaults = {"gpu": "H100", "model": "x", "n_gpus": 8, "replicas": 2, "tp": 4, "train_dp": 8, "calibrate": "auto"}
    values = form_values_from_job(stored, defaults)
    assert simulation_params(simulation_body(3, values)) == stored


def test_workload_rerun_fills_the_form():
    from dashboard.views.replay_forms import workload_body, workload_values_from_job

    params = {
        "trace_id": 3,
        "steps": 4,
        "groups": 32,
        "samples_per_group": 8,
        "seed": 2,
        "dp_size": 2,
        "formats": ["packed"],
        "ingest": False,
        "name": "twin",
    }
    values = workload_values_from_job(params, {"steps": 1, "ingest": True})
    body = workload_body(3, values)
    assert {k: body[k] for k in params if k in body} == params
    assert workload_values_from_job({"steps": 0}, {"steps": 5})["steps"] == 5  # a fit-only job keeps the default
