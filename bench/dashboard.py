"""Dashboard benchmark: is every page readable and quick at 500 steps and 256 ranks?

1. Figures (always): each figure builder on a synthetic payload of the size the API
   sends for a big run -- 500 steps of summaries on the shared log bins, an imbalance and
   a long-tail result for 256 DP ranks x 500 steps, a stage Gantt of 256 ranks, a kernel
   Gantt of 10,000 GPU events (the page's event budget). Reported: build time (best of
   `--repeat`) and the JSON size the browser receives (what Dash serialises).
2. Pages (`--pages`): the real server (`rlvr-explorer serve`, embedded) in a throwaway
   folder, a synthetic run of `--steps` x `--groups` x 8 samples on `--dp-size` DP ranks
   uploaded through the API and analysed, then in headless Chromium the seconds from
   navigation until every chart of a page has drawn its data.

    python bench/dashboard.py [--repeat 5] [--pages --steps 500 --groups 256 --dp-size 64]
"""

from __future__ import annotations

import argparse
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

from dashboard.figures.distributions import (cdf_figure, length_box_figure, length_heatmap_figure,  # noqa: E402
                                             percentile_lines_figure, tail_figure)
from dashboard.figures.gpu import kernel_gantt_figure  # noqa: E402
from dashboard.figures.imbalance import imbalance_ratio_figure, load_heatmap_figure, saving_figure  # noqa: E402
from dashboard.figures.longtail import longtail_engine_figure, longtail_idle_figure  # noqa: E402
from dashboard.figures.stages import stage_gantt_figure, stage_time_figure  # noqa: E402
from workers.analysis.stats import LOG_BIN_EDGES, distribution_stats, log_histogram  # noqa: E402

STAGES = ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor")


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
        out.append({"step": s, "tokens": {"recorded": rec.tolist(), "mean": mean, "recorded_max": rec.max(),
                                          "max_over_mean": rec.max() / mean, "max_over_min": rec.max() / rec.min(),
                                          "kk_max_over_mean": kk / mean, "lpt_max_over_mean": kk / mean,
                                          "kk_saving": 1 - kk / rec.max(), "lpt_saving": 1 - kk / rec.max()}})
    return {"dp_size": ranks, "steps": out}


def longtail_result(steps: int, engines: int, rng) -> dict:
    out = []
    for s in range(steps):
        idle = rng.uniform(0.3, 0.9, engines)
        out.append({"step": s, "engine_time": 1000.0, "idle_within_engines": 400.0, "idle_waiting": 200.0,
                    "tail_time_share": 0.4, "tail_sample_share": 0.05,
                    "engine": {"engine": list(range(engines)), "idle_fraction": idle.tolist()}})
    return {"tail_fraction": 0.1, "engine_key": "dp_rank", "steps": out}


def gpu_events(n: int, ranks: int, rng) -> list[dict]:
    kinds = rng.choice(["compute", "communication", "memory"], n, p=[0.7, 0.2, 0.1])
    start = np.sort(rng.uniform(0, 600_000, n))
    return [{"rank": int(i % ranks), "stream": int(7 + (i % 3)), "step": 1, "kind": str(k), "name": f"kernel_{i % 50}",
             "start_us": float(t), "dur_us": float(d)}
            for i, (k, t, d) in enumerate(zip(kinds, start, rng.exponential(40.0, n)))]


def bench_figures(repeat: int) -> list[tuple[str, str, float, int]]:
    rng = np.random.default_rng(0)
    summary = summaries_payload(500, 2048, rng)
    imb = imbalance_result(500, 256, rng)
    lt = longtail_result(500, 256, rng)
    steps = [{"step": s, **{f"t_{st}": float(rng.uniform(5, 50)) for st in STAGES}, "t_step": 400.0}
             for s in range(500)]
    timings = [{"step": 0, "rank": r, "phase": "reward", "seconds": float(rng.uniform(10, 30))} for r in range(256)]
    events = gpu_events(10_000, 4, rng)
    cases = [
        ("length boxes", "500 steps", lambda: length_box_figure(summary)),
        ("length heatmap", "500 steps x log bins", lambda: length_heatmap_figure(summary)),
        ("percentile lines", "500 steps", lambda: percentile_lines_figure(summary)),
        ("tail / truncation", "500 steps", lambda: tail_figure(summary)),
        ("CDFs", "4 of 500 steps", lambda: cdf_figure(summary, [0, 166, 333, 499])),
        ("stage time bars", "500 steps x 6 stages", lambda: stage_time_figure(steps)),
        ("stage Gantt", "256 ranks", lambda: stage_gantt_figure(steps[0], timings, step_no=0)),
        ("DP load heatmap", "256 ranks x 500 steps", lambda: load_heatmap_figure(imb)),
        ("imbalance ratios", "500 steps x 3 policies", lambda: imbalance_ratio_figure(imb)),
        ("balancing saving", "500 steps", lambda: saving_figure(imb)),
        ("long-tail idle", "500 steps", lambda: longtail_idle_figure(lt)),
        ("engine idle heatmap", "256 engines x 500 steps", lambda: longtail_engine_figure(lt)),
        ("kernel Gantt", "10,000 events, 4 ranks", lambda: kernel_gantt_figure(events)),
    ]
    rows = []
    for name, size, build in cases:
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            fig = build()
            best = min(best, time.perf_counter() - t0)
        payload = pio.to_json(fig, validate=False)
        rows.append((name, size, best, len(payload)))
    return rows


def bench_pages(steps: int, groups: int, dp_size: int) -> list[tuple[str, float]]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("_browser", HERE / "_browser.py")
    b = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(b)

    from workers.workload.synthetic import packed_length_rows

    with tempfile.TemporaryDirectory(prefix="rlvr-bench-dash-") as tmp:
        folder = Path(tmp) / "run"
        folder.mkdir()
        for rows in packed_length_rows(steps, groups, 8, dp_size=dp_size):
            (folder / f"packed_lengths_step_{rows[0]['step']}.jsonl").write_bytes(
                b"".join(orjson.dumps(r) + b"\n" for r in rows))
        with b.running_server(Path(tmp) / "data") as (base, key):
            api = b.api_client(base, key)
            t0 = time.monotonic()
            trace = b.upload(api, sorted(folder.iterdir()), f"bench {steps}x{groups}x8 dp{dp_size}")
            print(f"ingested {trace['n_samples']:,} samples in {time.monotonic() - t0:.1f} s", file=sys.stderr)
            driver = b.chromium(1400, 1000)
            try:
                b.sign_in(driver, base, key)
                pages = [("traces", "/traces", "#traces-table tr[data-trace-id]"),
                         ("overview", f"/traces/{trace['id']}", None),
                         ("distributions", f"/traces/{trace['id']}/distributions", None),
                         ("imbalance", f"/traces/{trace['id']}/imbalance", None),
                         ("jobs", "/jobs", "#jobs-table tr[data-job-id]")]
                for _, path, _sel in pages:  # start the analyses
                    driver.get(base + path)
                    time.sleep(1)
                b.wait_analyses(api, trace["id"], timeout=1800)
                out = []
                for name, path, selector in pages:
                    driver.get(base + path)
                    out.append((name, b.wait_for_charts(driver, timeout=300, settle=0, ready_selector=selector)))
                errors = b.console_errors(driver)
            finally:
                driver.quit()
    if errors:
        raise SystemExit("browser console errors:\n" + "\n".join(errors))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pages", action="store_true", help="also time real pages in headless Chromium")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--groups", type=int, default=256)
    ap.add_argument("--dp-size", type=int, default=64)
    args = ap.parse_args()

    print(f"{'figure':<22}{'size':<26}{'build ms':>10}{'JSON KB':>10}")
    for name, size, secs, nbytes in bench_figures(args.repeat):
        print(f"{name:<22}{size:<26}{1000 * secs:>10.1f}{nbytes / 1024:>10.1f}")
    if args.pages:
        print(f"\npage (trace of {args.steps} steps x {args.groups} groups x 8, {args.dp_size} DP ranks)"
              f"{'':<4}seconds until every chart drew")
        for name, secs in bench_pages(args.steps, args.groups, args.dp_size):
            print(f"{name:<22}{secs:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
