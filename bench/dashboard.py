"""Dashboard benchmark: is every page drawn within 1.5 s, under 2 MB, on a big trace?

1. Figures (always): each figure builder on a synthetic payload of the size the API
   sends for a big run -- 500 steps of summaries on the shared log bins, an imbalance and
   a long-tail result for 256 DP ranks x 500 steps, a stage Gantt of 256 ranks, a kernel
   Gantt of 10,000 GPU events (the page's event budget), a replay of 500 steps with a
   10,000-interval timeline. Reported: build time (best of `--repeat`), the figure JSON
   Dash serialises, and its size gzip-compressed (what the dashboard sends).
2. Pages (`--pages`): a synthetic run of `--steps` x `--groups` x `--n` samples on
   `--dp-size` DP ranks (default 500 x 2,560 x 8 = 10.24 M samples, 256 ranks) written as
   PolyTrace packed-lengths files and ingested with `rlvr-explorer ingest` into a
   throwaway data folder (SQLite, or `--database-url`); then the real server
   (`rlvr-explorer serve`) on that folder, every analysis, one replay (sync vs
   one_step_off over `--sim-steps` steps) and one workload fit run through the API, and
   each page loaded in headless Chromium (the GPU-timeline and multi-turn pages on the
   real Kineto and Search-R1 fixtures when ../shared/fixtures is there: the synthetic
   run has no GPU events or turns). Reported per page: seconds from navigation until
   every chart has drawn its data, on the first visit (the server's result and figure
   caches empty) and on a later one ("drawn s"), and for the later one the bytes
   transferred over the network (response bodies as sent, gzip-compressed) and the
   number of requests. Browser assets are warm on both, as for any returning user: the
   JS bundles are in the browser's caches from visits to a small warm-up trace first.
   Target: every page's first and later visit < 1.5 s, and < 2 MB.

Ingesting 10 M samples takes minutes: `--data DIR` keeps the folder, and a second run
with the same DIR reuses the trace, the analyses and the replay. `--quick` is a small
run (20 steps x 256 groups) to check the pipeline.

    python bench/dashboard.py --pages [--data bench/out/dash-10m] [--quick] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson
import plotly.io as pio

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# This file is bench/dashboard.py: its folder must not shadow the `dashboard` package.
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != HERE]

from core.analysis.page_views import page_view  # noqa: E402
from core.analysis.stats import LOG_BIN_EDGES, distribution_stats, log_histogram  # noqa: E402
from dashboard.figures.distributions import (  # noqa: E402
    cdf_figure,
    length_box_figure,
    length_heatmap_figure,
    percentile_lines_figure,
    tail_figure,
)
from dashboard.figures.gpu import kernel_gantt_figure  # noqa: E402
from dashboard.figures.imbalance import imbalance_ratio_figure, load_heatmap_figure, saving_figure  # noqa: E402
from dashboard.figures.longtail import longtail_engine_figure, longtail_idle_figure  # noqa: E402
from dashboard.figures.simulation import (  # noqa: E402
    idle_cause_figure,
    predicted_vs_measured_figure,
    speedup_figure,
    timeline_figure,
)
from dashboard.figures.stages import stage_gantt_figure, stage_time_figure  # noqa: E402

STAGES = ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor")
FIXTURES = ROOT.parent / "shared" / "fixtures"
TARGET_S, TARGET_BYTES = 1.5, 2 * 1024 * 1024


# -- 1. figure builders on synthetic payloads -------------------------------------------
def summaries_payload(steps: int, per_step: int, rng) -> dict:
    rows = []
    for s in range(steps):
        v = np.minimum(rng.lognormal(6.5, 0.9, per_step).round() + 1, 16384)
        rows.append({"step": s, "validate": False, **distribution_stats(v, 16384), "hist": log_histogram(v)})
    return {"field": "response", "task": None, "tasks": [], "bin_edges": LOG_BIN_EDGES.tolist(), "steps": rows}


def imbalance_result(steps: int, ranks: int, rng) -> dict:
    out = []
    for s in range(steps):
        rec = rng.lognormal(10, 0.2, ranks)
        mean = rec.mean()
        kk = mean * 1.01
        out.append(
            {
                "step": s,
                "tokens": {
                    "recorded": rec.tolist(),
                    "mean": mean,
                    "recorded_max": rec.max(),
                    "max_over_mean": rec.max() / mean,
                    "max_over_min": rec.max() / rec.min(),
                    "kk_max_over_mean": kk / mean,
                    "lpt_max_over_mean": kk / mean,
                    "kk_saving": 1 - kk / rec.max(),
                    "lpt_saving": 1 - kk / rec.max(),
                },
            }
        )
    return {"dp_size": ranks, "steps": out}


def longtail_result(steps: int, engines: int, rng) -> dict:
    out = []
    for s in range(steps):
        idle = rng.uniform(0.3, 0.9, engines)
        out.append(
            {
                "step": s,
                "engine_time": 1000.0,
                "idle_within_engines": 400.0,
                "idle_waiting": 200.0,
                "tail_time_share": 0.4,
                "tail_sample_share": 0.05,
                "engine": {"engine": list(range(engines)), "idle_fraction": idle.tolist()},
            }
        )
    return {"tail_fraction": 0.1, "engine_key": "dp_rank", "steps": out}


def gpu_events(n: int, ranks: int, rng) -> list[dict]:
    kinds = rng.choice(["compute", "communication", "memory"], n, p=[0.7, 0.2, 0.1])
    start = np.sort(rng.uniform(0, 600_000, n))
    return [
        {
            "rank": int(i % ranks),
            "stream": int(7 + (i % 3)),
            "step": 1,
            "kind": str(k),
            "name": f"kernel_{i % 50}",
            "start_us": float(t),
            "dur_us": float(d),
        }
        for i, (k, t, d) in enumerate(zip(kinds, start, rng.exponential(40.0, n)))
    ]


def simulation_result(steps: int, lanes: int, rng) -> dict:
    """A replay result of the API's shape: per-step stages and idle causes, a timeline of
    `lanes` GPUs with ~10,000 intervals, the comparison and an accuracy report."""

    def sim(scale: float) -> dict:
        rows, t = [], 0.0
        for s in range(steps):
            rollout = float(rng.uniform(200, 400)) * scale
            train = float(rng.uniform(50, 80))
            rows.append(
                {
                    "step": s,
                    "start": t,
                    "end": t + rollout + train,
                    "step_time": rollout + train,
                    "stages": {"rollout": rollout, "update_actor": train},
                    "idle_gpu_s": {"rollout_tail": rollout * 2, "dp_imbalance": 10.0, "unused": 5.0},
                    "rollout": {"time_s": rollout, "p50_traj_s": rollout / 2, "p90_traj_s": rollout * 0.8},
                }
            )
            t += rollout + train
        per_lane = 10_000 // lanes
        timeline = []
        for lane in range(lanes):
            cuts = np.sort(rng.uniform(0, t, per_lane + 1))
            ivs = [
                [
                    float(a),
                    float(b),
                    "busy" if i % 2 else "idle",
                    "rollout" if i % 2 else "rollout_tail",
                    int(a // (t / steps)),
                ]
                for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))
            ]
            timeline.append({"name": f"replica {lane // 4} / dp {lane}", "gpus": [lane], "intervals": ivs})
        return {
            "makespan_s": t,
            "n_gpus": lanes,
            "steps": rows,
            "timeline": timeline,
            "timeline_truncated": None,
            "idle_gpu_s": {"rollout_tail": 1.0},
            "idle_fraction": 0.5,
        }

    a, b = sim(1.0), sim(0.8)
    per_step = [
        {
            "step": x["step"],
            "time_a_s": x["step_time"],
            "time_b_s": y["step_time"],
            "speedup": x["step_time"] / y["step_time"],
        }
        for x, y in zip(a["steps"], b["steps"])
    ]
    acc = [
        {
            "step": s,
            "rollout_s": {
                "measured": 300.0,
                "predicted": 310.0,
                "naive": 330.0,
                "accuracy": 0.97,
                "naive_accuracy": 0.9,
            },
        }
        for s in range(1, steps)
    ]
    return {
        "a": a,
        "b": b,
        "compare": {"total": {"speedup": a["makespan_s"] / b["makespan_s"]}, "per_step": per_step},
        "accuracy": {"fit_steps": [0], "steps": acc, "mean": {"rollout_s_accuracy": 0.97}},
        "params": {"policy": {"kind": "sync"}, "compare_policy": {"kind": "one_step_off"}},
    }


def bench_figures(repeat: int) -> list[tuple[str, str, float, int, int]]:
    rng = np.random.default_rng(0)
    summary = summaries_payload(500, 2048, rng)
    # what the pages draw: the page views, their heatmaps capped whatever the trace's size
    imb = page_view("imbalance", imbalance_result(1000, 256, rng))
    lt = page_view("longtail", longtail_result(1000, 256, rng))
    steps = [
        {"step": s, **{f"t_{st}": float(rng.uniform(5, 50)) for st in STAGES}, "t_step": 400.0} for s in range(500)
    ]
    timings = [{"step": 0, "rank": r, "phase": "reward", "seconds": float(rng.uniform(10, 30))} for r in range(256)]
    events = gpu_events(10_000, 4, rng)
    sim = simulation_result(500, 64, rng)
    cases = [
        ("length boxes", "500 steps", lambda: length_box_figure(summary)),
        ("length heatmap", "500 steps x log bins", lambda: length_heatmap_figure(summary)),
        ("percentile lines", "500 steps", lambda: percentile_lines_figure(summary)),
        ("tail / truncation", "500 steps", lambda: tail_figure(summary)),
        ("CDFs", "4 of 500 steps", lambda: cdf_figure(summary, [0, 166, 333, 499])),
        ("stage time bars", "500 steps x 6 stages", lambda: stage_time_figure(steps)),
        ("stage Gantt", "256 ranks", lambda: stage_gantt_figure(steps[0], timings, step_no=0)),
        ("DP load heatmap", "256 ranks x 1,000 steps", lambda: load_heatmap_figure(imb)),
        ("imbalance ratios", "1,000 steps x 3 policies", lambda: imbalance_ratio_figure(imb)),
        ("balancing saving", "1,000 steps", lambda: saving_figure(imb)),
        ("long-tail idle", "1,000 steps", lambda: longtail_idle_figure(lt)),
        ("engine idle heatmap", "256 engines x 1,000 steps", lambda: longtail_engine_figure(lt)),
        ("kernel Gantt", "10,000 events, 4 ranks", lambda: kernel_gantt_figure(events)),
        ("replay pred/measured", "500 steps", lambda: predicted_vs_measured_figure(sim)),
        ("replay speedup", "500 steps", lambda: speedup_figure(sim)),
        ("replay idle causes", "500 steps x 2 policies", lambda: idle_cause_figure(sim)),
        ("replay GPU timeline", "10,000 intervals, 64 GPUs", lambda: timeline_figure(sim["a"])),
    ]
    rows = []
    for name, size, build in cases:
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            fig = build()
            best = min(best, time.perf_counter() - t0)
        payload = pio.to_json(fig, validate=False).encode()
        rows.append((name, size, best, len(payload), len(gzip.compress(payload, 5))))
    return rows


# -- 2. pages in headless Chromium --------------------------------------------------------
def _browser_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_browser", HERE / "_browser.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cli_env(data_dir: Path, database_url: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(RLVR_DATA_DIR=str(data_dir), PYTHONUNBUFFERED="1")
    if database_url:
        env["RLVR_DATABASE_URL"] = database_url
    return env


def prepare_trace(data_dir: Path, steps: int, groups: int, n: int, dp_size: int, database_url: str | None) -> dict:
    """Write the run and ingest it with `rlvr-explorer ingest` (once per data folder)."""
    from core.workload.synthetic import packed_length_rows

    marker = data_dir / "bench_trace.json"
    wanted = {"steps": steps, "groups": groups, "n": n, "dp_size": dp_size}
    if marker.is_file():
        known = json.loads(marker.read_text())
        if known["shape"] == wanted:
            print(f"reusing trace {known['trace_id']} in {data_dir}", file=sys.stderr)
            return known
        raise SystemExit(f"{data_dir} holds a trace of another shape {known['shape']}: use another --data")
    data_dir.mkdir(parents=True, exist_ok=True)
    env = _cli_env(data_dir, database_url)
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-run-") as tmp:
        folder = Path(tmp) / "run"
        folder.mkdir()
        t0 = time.monotonic()
        for rows in packed_length_rows(steps, groups, n, dp_size=dp_size, max_response_len=16384):
            (folder / f"packed_lengths_step_{rows[0]['step']}.jsonl").write_bytes(
                b"".join(orjson.dumps(r) + b"\n" for r in rows)
            )
        print(f"wrote {steps * groups * n:,} samples in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "rlvr_explorer", "migrate"], cwd=ROOT, env=env, check=True)
        t0 = time.monotonic()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "rlvr_explorer",
                "ingest",
                str(folder),
                "--name",
                f"bench {steps} steps x {groups} groups x {n}, {dp_size} DP ranks",
                "--json",
            ],
            cwd=ROOT,
            env=env,
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        ).stdout
    took = time.monotonic() - t0
    summary = json.loads(out[out.index("{") :])
    info = {"shape": wanted, "trace_id": summary["id"], "ingest_s": took}
    print(f"ingested {steps * groups * n:,} samples in {took:.0f} s (trace {summary['id']})", file=sys.stderr)
    marker.write_text(json.dumps(info))
    return info


def _wait_job(api, path: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = api.get(path).json()
        if job["status"] not in ("queued", "running"):
            if job["status"] != "succeeded":
                raise RuntimeError(f"{path} {job['status']}: {job.get('error')}")
            return job
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} still {job['status']} after {timeout} s")
        time.sleep(1)


def run_jobs(api, trace_id: int, sim_steps: int) -> dict:
    """Every analysis, a replay and a workload fit of the trace (reused when done)."""
    t0 = time.monotonic()
    for kind in ("lengths", "longtail", "imbalance"):
        r = api.post(f"/traces/{trace_id}/analyses", json={"kind": kind, "params": {}})
        r.raise_for_status()
    body = {
        "trace_id": trace_id,
        "cluster": {"gpu": "H100", "n_gpus": 16, "rollout_replicas": 2, "rollout_tp": 4, "train_dp": 8},
        "model": "Qwen2.5-7B",
        "policy": "sync",
        "compare_policy": "one_step_off",
        "steps": [0, sim_steps],
    }
    sim = api.post("/simulations", json=body)
    sim.raise_for_status()
    fit = api.get("/jobs", params={"trace_id": trace_id, "kind": "workload"}).json()["items"]
    if not fit:
        r = api.post("/workloads", json={"trace_id": trace_id, "steps": 0})
        r.raise_for_status()
        fit = [r.json()]
    _wait_job(api, f"/simulations/{sim.json()['id']}", 3600)
    _wait_job(api, f"/workloads/{fit[0]['id']}", 1800)
    for job in api.get(f"/traces/{trace_id}/analyses").json()["items"]:
        _wait_job(api, f"/jobs/{job['id']}", 1800)
    print(f"analyses, replay and fit ready after {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return {"simulation": sim.json()["id"], "workload": fit[0]["id"]}


def fixture_traces(b, api) -> dict[str, int]:
    """The real Kineto and Search-R1 fixtures (when ../shared/fixtures is there), for the
    GPU-timeline and multi-turn pages, which the synthetic run has no data for."""
    out = {}
    if not FIXTURES.is_dir():
        print(f"note: {FIXTURES} not found: the GPU and multi-turn pages show their 'no data' message", file=sys.stderr)
        return out
    kineto = FIXTURES / "kineto"
    out["gpu"] = b.upload(
        api, [kineto / "sampled_rank-0.json.gz", kineto / "sampled_rank-1.json.gz"], "Kineto: HTA sampled ranks 0-1"
    )["id"]
    search = FIXTURES / "polytrace" / "search_r1_qwen2_5_7b"
    out["multiturn"] = b.upload(
        api, sorted(search.glob("multiturn_workload_step_*.jsonl")), "Search-R1 Qwen2.5-7B (multi-turn)"
    )["id"]
    for trace_id in out.values():
        b.wait_analyses(api, trace_id)
    return out


def warm_up_trace(b, api) -> int:
    """A small trace of its own to warm the browser's caches on (`rlvr-explorer demo`'s)."""
    from rlvr_explorer.cli.main import write_demo_trace

    with tempfile.TemporaryDirectory(prefix="rlvr-bench-warm-") as tmp:
        folder = write_demo_trace(Path(tmp), 12, 64, 8)
        trace_id = b.upload(api, sorted(folder.glob("*.jsonl")), "warm-up: small demo run")["id"]
    b.wait_analyses(api, trace_id)
    return trace_id


def bench_pages(
    data_dir: Path, steps: int, groups: int, n: int, dp_size: int, sim_steps: int, database_url: str | None
) -> tuple[dict, list[tuple[str, float, float, int, int]]]:
    b = _browser_module()
    info = prepare_trace(data_dir, steps, groups, n, dp_size, database_url)
    tid = info["trace_id"]
    with b.running_server(data_dir, database_url=database_url) as (base, key):
        api = b.api_client(base, key)
        run_jobs(api, tid, min(sim_steps, steps))
        extra = fixture_traces(b, api)
        warm_up = warm_up_trace(b, api)
        driver = b.chromium(1400, 1000, network_log=True)
        try:
            b.sign_in(driver, base, key)
            pages = [
                ("traces", "/traces", "#traces-table tr[data-trace-id]"),
                ("overview", f"/traces/{tid}", None),
                ("distributions", f"/traces/{tid}/distributions", None),
                ("imbalance", f"/traces/{tid}/imbalance", None),
                ("gpu timeline", f"/traces/{extra.get('gpu', tid)}/gpu", None),
                ("multi-turn", f"/traces/{extra.get('multiturn', tid)}/multiturn", None),
                ("simulate", f"/traces/{tid}/simulate", None),
                ("workload", f"/traces/{tid}/workload", None),
                ("compare", f"/compare?a={tid}&b={tid}", None),
                (
                    "compare many",
                    f"/compare/many?traces={','.join(map(str, dict.fromkeys([tid, *extra.values()])))}",
                    None,
                ),
                ("metrics", f"/metrics?traces={tid}&keys=response/p99,response/mean&smooth=ema&w=0.6", None),
                ("add files", f"/traces/{tid}/files", "#attach-have li"),
                ("jobs", "/jobs", "#jobs-table tr[data-job-id]"),
            ]
            # Browser assets warm, as for any returning user: a few visits to the pages of
            # a small trace of its own put the JS bundles (plotly.js among them) in the
            # browser's HTTP and compiled-code caches, and leave the measured traces' results
            # and figures uncached on the server. First visits then find cold server caches.
            for _ in range(3):
                for page in ("", "/distributions", "/imbalance"):
                    b.timed_page_load(driver, f"{base}/traces/{warm_up}{page}")
            first = {
                name: b.timed_page_load(driver, base + path, ready_selector=selector)[0]
                for name, path, selector in pages
            }
            out = []
            for name, path, selector in pages:
                secs, nbytes, requests = b.timed_page_load(driver, base + path, ready_selector=selector)
                out.append((name, first[name], secs, nbytes, requests))
            errors = b.console_errors(driver)
        finally:
            driver.quit()
    if errors:
        raise SystemExit("browser console errors:\n" + "\n".join(errors))
    return info, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pages", action="store_true", help="also time real pages in headless Chromium")
    ap.add_argument("--quick", action="store_true", help="a small trace (20 steps x 256 groups) to check the pipeline")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--groups", type=int, default=2560)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--dp-size", type=int, default=256)
    ap.add_argument("--sim-steps", type=int, default=500, help="steps the replay covers")
    ap.add_argument("--data", type=Path, help="data folder to keep (and reuse) the ingested trace in")
    ap.add_argument("--database-url", help="Postgres URL (default: SQLite in the data folder)")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.groups, args.dp_size, args.sim_steps = 20, 256, 32, 20

    print(f"{'figure':<22}{'size':<28}{'build ms':>10}{'JSON KB':>10}{'gzip KB':>10}")
    for name, size, secs, nbytes, packed in bench_figures(1 if args.quick else args.repeat):
        print(f"{name:<22}{size:<28}{1000 * secs:>10.1f}{nbytes / 1024:>10.1f}{packed / 1024:>10.1f}")
    if not args.pages:
        return 0
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-dash-") as tmp:
        data_dir = args.data.resolve() if args.data else Path(tmp) / "data"
        info, rows = bench_pages(
            data_dir, args.steps, args.groups, args.n, args.dp_size, args.sim_steps, args.database_url
        )
    samples = args.steps * args.groups * args.n
    print(
        f"\npages: trace of {args.steps} steps x {args.groups} groups x {args.n} = {samples:,} samples, "
        f"{args.dp_size} DP ranks (ingested in {info['ingest_s']:.0f} s); replay of {min(args.sim_steps, args.steps)} "
        f"steps; target < {TARGET_S} s and < {TARGET_BYTES / 2**20:.0f} MB per page"
    )
    print(f"{'page':<16}{'first visit s':>14}{'drawn s':>9}{'transfer KB':>13}{'requests':>10}  target met")
    ok = True
    for name, first, secs, nbytes, requests in rows:
        good = max(first, secs) < TARGET_S and nbytes < TARGET_BYTES
        ok &= good
        print(f"{name:<16}{first:>14.2f}{secs:>9.2f}{nbytes / 1024:>13.1f}{requests:>10}  {'yes' if good else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
