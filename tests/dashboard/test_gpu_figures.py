"""The HTA panels of the GPU-timeline page, fed with the analysis' real output."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from backend.formats.base import ReadResult, Source
from backend.formats.kineto import read_kineto
from backend.formats.kineto_events import EVENTS_DIR_STATE, load_events
from core.analysis.gpu_report import gpu_timeline_report
from dashboard.figures import gpu_hta as figs

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "kineto"


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    if not FIXTURES.is_dir():
        pytest.skip(f"Kineto fixtures not found at {FIXTURES}")
    folder = tmp_path_factory.mktemp("events")
    rr = ReadResult()
    rr.state[EVENTS_DIR_STATE] = folder
    parts: dict[str, list] = {}
    for f in ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz"):
        path = FIXTURES / f
        for batch in read_kineto(Source(f, lambda p=path: gzip.open(p, "rb")), rr):
            for k, v in batch.columns.items():
                parts.setdefault(k, []).append(v)
    events = {k: ([x for c in v for x in c] if k == "name" else np.concatenate(v)) for k, v in parts.items()}
    out = gpu_timeline_report(
        events, events["name"], rr.info.metadata["kineto"]["steps"], trace_events=load_events(folder)
    )
    return json.loads(json.dumps(out))  # as the API serves it


def test_panels_from_real_result(result):
    ov = figs.overlap_figure(result["comm_comp_overlap"])
    assert list(ov.data[0].x) == pytest.approx([11.81, 20.05], abs=0.01)
    q = figs.queue_length_figure(result["queue_length"]["summary"])
    assert len(q.data) == 2 and len(q.data[0].y) == 10  # 5 streams x 2 ranks
    assert figs.per_step_figure(result["per_step"]["temporal"]).data  # one step per rank
    launch = figs.launch_stats_rows(result["launch_stats"])
    assert [r["launches"] for r in launch] == ["602", "577"]
    types = figs.kernel_type_rows(result["kernel_breakdown"])
    assert types[0] == {"kernel type": "COMMUNICATION", "time (ms)": "305.58", "share (%)": "55.5"}
    assert len(figs.memory_bw_rows(result["memory_bw"])) == 8
    assert figs.annotation_rows(result["user_annotations"]) == []
    assert "rank 0, 1" in figs.stragglers_text(result["potential_stragglers"])


def test_panels_without_data():
    assert figs.overlap_figure([]).layout.annotations
    assert figs.queue_length_figure(None).layout.annotations
    assert figs.per_step_figure([]).layout.annotations
    assert figs.stragglers_text({"stragglers": [], "note": "one rank: nothing to compare"}).endswith(
        "(one rank: nothing to compare)."
    )


def test_compare_diff_panels_from_real_diff(tmp_path):
    if not FIXTURES.is_dir():
        pytest.skip(f"Kineto fixtures not found at {FIXTURES}")
    from core.analysis.gpu_diff import trace_diff
    from dashboard.figures import gpu_diff as compare

    kept = []
    for i, f in enumerate(("sampled_rank-0.json.gz", "sampled_rank-1.json.gz")):
        rr = ReadResult()
        rr.state[EVENTS_DIR_STATE] = tmp_path / str(i)
        path = FIXTURES / f
        for _ in read_kineto(Source(f, lambda p=path: gzip.open(p, "rb")), rr):
            pass
        kept.append(load_events(tmp_path / str(i)))
    diff = json.loads(json.dumps(trace_diff(kept[0], kept[1])))
    assert "4 added, 29 deleted" in compare.diff_summary(diff).children
    fig = compare.diff_figure(diff)
    assert len(fig.data[0].y) == 20
    assert len(compare.diff_table(diff).children[1].children) == compare.DIFF_ROWS


def test_gantt_detail_view_names_flows_and_absolute_axis():
    from dashboard.figures.gpu import kernel_gantt_figure

    events = [
        {
            "rank": 0,
            "stream": 7,
            "step": 1,
            "kind": "compute",
            "name": "void gemm_kernel<float>(int)",
            "start_us": 1_000_500.0,
            "dur_us": 400.0,
            "launch_us": 1_000_100.0,
        },
        {
            "rank": 0,
            "stream": 9,
            "step": 1,
            "kind": "communication",
            "name": "ncclDevKernel_AllReduce(x)",
            "start_us": 1_000_950.0,
            "dur_us": 30.0,
            "launch_us": 1_000_200.0,
        },
    ]
    origin = 1_000_000.0
    fig = kernel_gantt_figure(
        events,
        origin_us=origin,
        origin_label="t0",
        labels=True,
        flows=True,
        x_range_us=(1_000_400.0, 1_001_000.0),
        highlight="nccl",
    )
    by_name = {t.name: t for t in fig.data}
    # the axis keeps the trace origin: the zoomed range is shown as 0.4 .. 1.0 ms from t0
    assert tuple(fig.layout.xaxis.range) == pytest.approx((0.4, 1.0))
    assert [x for x in by_name["compute"].x if x == x] == pytest.approx([0.5, 0.9])
    # names on the bars (both are wider than 1/40 of the 600 us view)
    assert [t[:4] for t in by_name["kernel names"].text] == ["gemm", "nccl"]  # shortened to fit
    # a CPU-launch row per rank and an arrow launch -> start for each event
    assert fig.layout.yaxis.ticktext[0] == "rank 0 launches (CPU)"
    arrows = [x for x in by_name["launch -> kernel"].x if x == x]
    assert arrows == pytest.approx([0.1, 0.5, 0.2, 0.95])
    assert "matches 'nccl'" in by_name


def test_gantt_writes_kernel_names_only_when_asked():
    # The overview of a large step passes labels=False: no names on its bars (the row
    # labels once shadowed this option, so names were always written).
    from dashboard.figures.gpu import kernel_gantt_figure

    events = [
        {"rank": 0, "stream": 7, "step": 1, "kind": "compute", "name": "gemm", "start_us": 0.0, "dur_us": 400.0},
        {"rank": 1, "stream": 7, "step": 1, "kind": "compute", "name": "gemm", "start_us": 100.0, "dur_us": 300.0},
    ]
    names = lambda fig: [t for t in fig.data if t.name == "kernel names"]  # noqa: E731
    assert names(kernel_gantt_figure(events)) == []
    assert [t[:4] for t in names(kernel_gantt_figure(events, labels=True))[0].text] == ["gemm", "gemm"]
    assert list(kernel_gantt_figure(events).layout.yaxis.ticktext) == [
        "rank 0 idle",
        "rank 0 stream 7",
        "rank 1 idle",
        "rank 1 stream 7",
    ]
