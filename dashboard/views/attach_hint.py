"""What to upload to fill an empty tab: the files that carry the data, and where to add
them to the trace (the Add files tab, `rlvr-explorer ingest --into ID`, or `watch`)."""

from __future__ import annotations

from dash import dcc, html

from dashboard.views.components import href

FILLS = {
    "samples": "per-step lengths: packed_lengths_step_N.jsonl (PolyTrace), multiturn_workload_step_N.jsonl, "
    "or a native CSV / JSONL / Parquet of samples",
    "turns": "multi-turn trajectories: multiturn_workload_step_N.jsonl",
    "rank_timings": "per-rank reward timings: reward_timings_step_N.jsonl",
    "gpu_events": "PyTorch-profiler (Kineto) traces of the same run (one .json / .json.gz per rank), or Nsight "
    "Systems exports (nsys export --type sqlite)",
    "steps": "stage timings and metrics: the verl file logger's JSONL or console log",
    "dapo": "DAPO dynamic-sampling marks: dapo_filter_indices.jsonl",
    "texts": "the samples' text: verl's rollout dumps (trainer.rollout_data_dir, <step>.jsonl), with the run's "
    "tokenizer.json for token lengths",
}


def upload_hint(trace_id, message: str, *needs: str) -> html.Div:
    """An info box: `message`, the files that would fill the tab, and how to add them."""
    items = [html.Li(FILLS[n]) for n in needs if n in FILLS]
    return html.Div(
        [
            html.P(message),
            html.P("Add to this trace:"),
            html.Ul(items),
            html.P(
                [
                    "on the ",
                    dcc.Link("Add files", href=href(f"/traces/{trace_id}/files")),
                    f" tab, with `rlvr-explorer ingest FILES --into {trace_id}`, or live with "
                    f"`rlvr-explorer watch RUN_DIR --into {trace_id}`.",
                ]
            ),
        ],
        className="alert alert-info upload-hint",
        role="alert",
    )
