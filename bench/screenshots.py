"""Screenshots of every dashboard page, for the docs (docs/img/*.png).

Starts the real server in a throwaway folder with the synthetic demo trace (the
project's own generator), uploads a synthetic run with a verl metric log (stage timings
derived from its lengths, so the stage charts have something to show; its name says it
is synthetic) and the real fixtures from ../shared/fixtures when they are there (Kineto
GPU traces, Search-R1 multi-turn, rllm reward timings), waits for the analyses, and
captures each page full-length in headless Chromium once its charts have drawn. Fails
if the browser console logged an error.

    python bench/screenshots.py [--out docs/img] [--width 1400]

Also replays the demo run (sync against one_step_off) and, with the fixtures, a
calibrated replay of Search-R1 steps 0-1, and fits a synthetic twin of the demo run,
so the simulate and workload pages have something to show.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _browser import (
    ROOT,
    api_client,
    chromium,
    console_errors,
    full_page_png,
    running_server,
    sign_in,
    upload,
    wait_analyses,
    wait_for_charts,
)

FIXTURES = ROOT.parent / "shared" / "fixtures"


def synthetic_run_with_timings(folder: Path, steps: int = 40, groups: int = 64, n: int = 8) -> list[Path]:
    """PolyTrace packed-lengths files plus a verl file-logger JSONL whose stage times
    follow the lengths (generation waits for the longest response, training scales with
    the tokens)."""
    import numpy as np
    import orjson

    from core.workload.synthetic import packed_length_rows

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    lines = []
    for rows in packed_length_rows(steps, groups, n, dp_size=8, seed=5):
        step = rows[0]["step"]
        (folder / f"packed_lengths_step_{step}.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
        longest = max(max(r["output"]) for r in rows)
        tokens = sum(r["input"] * n + sum(r["output"]) for r in rows)
        t = {
            "timing_s/gen": 0.012 * longest + rng.normal(3, 0.5),
            "timing_s/reward": rng.uniform(4, 9),
            "timing_s/old_log_prob": tokens / 90_000,
            "timing_s/ref": tokens / 95_000,
            "timing_s/adv": 0.4,
            "timing_s/update_actor": tokens / 30_000,
        }
        t["timing_s/step"] = sum(t.values()) + rng.uniform(2, 4)
        lines.append(orjson.dumps({"step": step, "data": t}))
    (folder / "verl_metrics.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return sorted(folder.iterdir())


def run_job(api, path: str, body: dict, timeout: float = 600) -> dict:
    """POST a replay or workload job and wait until it has finished."""
    r = api.post(path, json=body)
    r.raise_for_status()
    job = r.json()
    deadline = time.monotonic() + timeout
    while job["status"] in ("queued", "running"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} job {job['id']} still {job['status']} after {timeout} s")
        time.sleep(0.5)
        job = api.get(f"{path}/{job['id']}").json()
    if job["status"] != "succeeded":
        raise RuntimeError(f"{path} job {job['id']} failed: {job.get('error')}")
    return job


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    ap.add_argument("--width", type=int, default=1400)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="rlvr-shots-") as tmp, running_server(Path(tmp), demo=True) as (base, key):
        api = api_client(base, key)
        traces = {"cli-demo": api.get("/traces", params={"q": "demo"}).json()["items"][0]}
        demo = traces["demo"] = upload(
            api, synthetic_run_with_timings(Path(tmp) / "synthetic"), "synthetic GRPO run + verl stage timings"
        )
        if FIXTURES.is_dir():
            kineto = FIXTURES / "kineto"
            traces["kineto"] = upload(
                api,
                [kineto / "sampled_rank-0.json.gz", kineto / "sampled_rank-1.json.gz"],
                "Kineto: HTA sampled ranks 0-1",
            )
            search = FIXTURES / "polytrace" / "search_r1_qwen2_5_7b"
            traces["search"] = upload(
                api, sorted(search.glob("multiturn_workload_step_*.jsonl")), "Search-R1 Qwen2.5-7B (multi-turn)"
            )
            rllm = FIXTURES / "polytrace" / "rllm_deepcoder_14b_16k"
            traces["rllm"] = upload(api, sorted(rllm.glob("*.jsonl")), "rllm DeepCoder-14B 16k")
        else:
            print(f"note: {FIXTURES} not found; only the synthetic demo trace is shown", file=sys.stderr)

        # a replay of each (the simulate page opens the latest) and a synthetic twin
        replays = [(demo["id"], {"steps": [0, 40]})]
        if "search" in traces:
            replays.append((traces["search"]["id"], {"calibrate": {"fit_steps": [0]}, "steps": [0, 2]}))
        for trace_id, extra in replays:
            run_job(
                api,
                "/simulations",
                {
                    "trace_id": trace_id,
                    "cluster": {"gpu": "H100", "n_gpus": 16, "rollout_replicas": 2, "rollout_tp": 4, "train_dp": 8},
                    "model": "Qwen2.5-7B",
                    "policy": "sync",
                    "compare_policy": "one_step_off",
                    **extra,
                },
            )
        run_job(
            api,
            "/workloads",
            {
                "trace_id": demo["id"],
                "steps": 4,
                "groups": 32,
                "samples_per_group": 8,
                "name": "synthetic twin of the demo run",
            },
        )

        driver = chromium(args.width, 1000)
        try:
            sign_in(driver, base, key)
            pages = [
                ("traces", "/traces"),
                ("jobs", "/jobs"),
                ("overview", f"/traces/{demo['id']}"),
                ("distributions", f"/traces/{demo['id']}/distributions"),
                ("imbalance", f"/traces/{demo['id']}/imbalance"),
                ("simulate", f"/traces/{demo['id']}/simulate"),
                ("workload", f"/traces/{demo['id']}/workload"),
            ]
            if "kineto" in traces:
                pages += [
                    ("gpu-timeline", f"/traces/{traces['kineto']['id']}/gpu"),
                    ("overview-kineto", f"/traces/{traces['kineto']['id']}"),
                    ("multiturn", f"/traces/{traces['search']['id']}/multiturn"),
                    ("reward-latency", f"/traces/{traces['rllm']['id']}/multiturn"),
                    ("stages-per-rank", f"/traces/{traces['rllm']['id']}/gpu"),
                    ("compare", f"/compare?a={demo['id']}&b={traces['rllm']['id']}"),
                    ("simulate-calibrated", f"/traces/{traces['search']['id']}/simulate"),
                ]
            # open every trace page once so its analyses start, then wait for them all
            for _, path in pages:
                driver.get(base + path)
                time.sleep(2)
            for t in traces.values():
                wait_analyses(api, t["id"])
            tables = {"traces": "#traces-table tr[data-trace-id]", "jobs": "#jobs-table tr[data-job-id]"}
            for name, path in pages:
                driver.get(base + path)
                took = wait_for_charts(driver, ready_selector=tables.get(name))
                time.sleep(0.5)
                out = args.out / f"{name}.png"
                full_page_png(driver, out, args.width)
                print(f"{out}  ({took:.1f} s to draw)")
            errors = console_errors(driver)
        finally:
            driver.quit()
    if errors:
        print("browser console errors:\n" + "\n".join(errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
