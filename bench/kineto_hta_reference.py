"""Reference figures from Holistic Trace Analysis 0.5.0 for the GPU analyses' tests.

Runs inside the HTA venv that bench/kineto.py creates (bench/out/hta-venv):

    bench/out/hta-venv/bin/python bench/kineto_hta_reference.py DIR [DIR ...] > ref.json
    bench/out/hta-venv/bin/python bench/kineto_hta_reference.py --diff CONTROL_DIR TEST_DIR

One folder per job (one file per rank, as HTA wants). Prints JSON: per job, every HTA
analysis the product reproduces (comm/comp overlap, queue length summary, time blocked on
a full queue, kernel launch statistics, kernel and user-annotation breakdowns, memory
bandwidth summary, potential stragglers, per-ProfilerStep temporal and idle breakdowns);
with --diff, TraceDiff.compare_traces of two folders (first rank, first iteration).
The figures are written into tests/core/analysis/test_gpu_hta.py by hand, so CI never needs HTA.
"""

from __future__ import annotations

import copy
import json
import logging
import sys

logging.disable(logging.WARNING)


def _num(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return None if f != f else f


def _records(df) -> list[dict]:
    if df is None:
        return []
    if hasattr(df.columns, "levels"):  # describe() output: flatten (column, stat)
        df = df.copy()
        df.columns = ["_".join(str(c) for c in col if c) for col in df.columns]
    df = df.reset_index()
    return [{str(k): _num(v) if not isinstance(v, str) else v for k, v in row.items()} for row in df.to_dict("records")]


def job(trace_dir: str) -> dict:
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.trace_analysis import TraceAnalysis

    analyzer = TraceAnalysis(trace_dir=trace_dir)
    t = analyzer.t
    ranks = t.get_ranks()
    out: dict = {"ranks": ranks}
    sym = t.symbol_table.get_sym_table()
    out["gpu_cats"] = {
        str(r): sorted({sym[c] for c in t.traces[r][t.traces[r]["stream"].ne(-1)]["cat"].unique()}) for r in ranks
    }
    out["temporal"] = _records(analyzer.get_temporal_breakdown(visualize=False))
    out["overlap"] = _records(analyzer.get_comm_comp_overlap(visualize=False))
    ql_series = analyzer.get_queue_length_time_series(ranks=ranks)
    out["queue_length"] = _records(analyzer.get_queue_length_summary_from_time_series(copy.deepcopy(ql_series)))
    out["blocked"] = _records(analyzer.get_time_spent_blocked_on_full_queue(ql_series))
    launch = analyzer.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
    out["launch"] = []
    for r, df in launch.items():
        out["launch"].append(
            {
                "rank": r,
                "n": len(df),
                "launch_delay_median_us": _num(df["launch_delay"].median()),
                "launch_delay_p95_us": _num(df["launch_delay"].quantile(0.95)),
                "launch_delay_mean_us": _num(df["launch_delay"].mean()),
                "cpu_duration_median_us": _num(df["cpu_duration"].median()),
                "cpu_duration_mean_us": _num(df["cpu_duration"].mean()),
                "gpu_duration_median_us": _num(df["gpu_duration"].median()),
                "gpu_duration_mean_us": _num(df["gpu_duration"].mean()),
                "n_gpu_shorter_than_cpu": int((df["gpu_duration"] < df["cpu_duration"]).sum()),
                "n_runtime_outliers": int((df["cpu_duration"] > 50).sum()),
                "n_launch_delay_outliers": int((df["launch_delay"] > 100).sum()),
            }
        )
    kt, ks = analyzer.get_gpu_kernel_breakdown(visualize=False)
    out["kernel_types"] = _records(kt)
    out["kernels"] = _records(ks)
    out["user_annotations"] = _records(analyzer.get_gpu_user_annotation_breakdown(visualize=False))
    out["memory_bw"] = _records(analyzer.get_memory_bw_summary(ranks=ranks))
    try:
        out["stragglers"] = [int(r) for r in analyzer.get_potential_stragglers()]
    except Exception as exc:
        out["stragglers"] = f"error: {type(exc).__name__}: {exc}"
    # per ProfilerStep: the same HTA functions on each iteration's events
    out["per_step_temporal"], out["per_step_idle"] = [], []
    for it in t.get_iterations():
        tc = copy.copy(t)
        tc.traces = {r: df[df["iteration"] == it] for r, df in t.traces.items()}
        for row in _records(BreakdownAnalysis.get_temporal_breakdown(tc, visualize=False)):
            out["per_step_temporal"].append({"step": it, **row})
        for r in ranks:
            idle, _ = BreakdownAnalysis.get_idle_time_breakdown(tc, 30, rank=r, visualize=False)
            for row in _records(idle):
                out["per_step_idle"].append({"step": it, "rank": r, **row})
    return out


def diff(control: str, test: str) -> dict:
    from hta.trace_diff import LabeledTrace, TraceDiff

    c = LabeledTrace(label="control", trace_dir=control)
    te = LabeledTrace(label="test", trace_dir=test)
    df = TraceDiff.compare_traces(c, te)
    ops = TraceDiff.ops_diff(c, te)
    return {
        "rows": _records(df),
        "ops_diff": {k: len(v) for k, v in ops.items()},
        "control_iterations": c.iterations()[:1],
        "test_iterations": te.iterations()[:1],
    }


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--diff":
        print(json.dumps(diff(args[1], args[2]), default=_num))
    else:
        print(json.dumps({d: job(d) for d in args}, default=_num))
