"""Screenshots of every dashboard page, for the docs (docs/img/*.png).

Starts the real server in a throwaway folder with the synthetic demo trace (the
project's own generator), uploads the real fixtures from ../shared/fixtures when they
are there (Kineto GPU traces, Search-R1 multi-turn, rllm reward timings), waits for the
analyses, and captures each page full-length in headless Chromium once its charts have
drawn. Fails if the browser console logged an error.

    python bench/screenshots.py [--out docs/img] [--width 1400]
"""

from __future__ import annotations

import argparse
import sys
import time
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _browser import (ROOT, api_client, chromium, console_errors, full_page_png, running_server, sign_in,  # noqa: E402
                      upload, wait_analyses, wait_for_charts)

FIXTURES = ROOT.parent / "shared" / "fixtures"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    ap.add_argument("--width", type=int, default=1400)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="rlvr-shots-") as tmp, running_server(Path(tmp), demo=True) as (base, key):
        api = api_client(base, key)
        demo = api.get("/traces", params={"q": "demo"}).json()["items"][0]
        traces = {"demo": demo}
        if FIXTURES.is_dir():
            kineto = FIXTURES / "kineto"
            traces["kineto"] = upload(api, [kineto / "sampled_rank-0.json.gz", kineto / "sampled_rank-1.json.gz"],
                                      "Kineto: HTA sampled ranks 0-1")
            search = FIXTURES / "polytrace" / "search_r1_qwen2_5_7b"
            traces["search"] = upload(api, sorted(search.glob("multiturn_workload_step_*.jsonl")),
                                      "Search-R1 Qwen2.5-7B (multi-turn)")
            rllm = FIXTURES / "polytrace" / "rllm_deepcoder_14b_16k"
            traces["rllm"] = upload(api, sorted(rllm.glob("*.jsonl")), "rllm DeepCoder-14B 16k")
        else:
            print(f"note: {FIXTURES} not found; only the synthetic demo trace is shown", file=sys.stderr)

        driver = chromium(args.width, 1000)
        try:
            sign_in(driver, base, key)
            pages = [("traces", "/traces"), ("jobs", "/jobs"),
                     ("overview", f"/traces/{demo['id']}"),
                     ("distributions", f"/traces/{demo['id']}/distributions"),
                     ("imbalance", f"/traces/{demo['id']}/imbalance")]
            if "kineto" in traces:
                pages += [("gpu-timeline", f"/traces/{traces['kineto']['id']}/gpu"),
                          ("overview-kineto", f"/traces/{traces['kineto']['id']}"),
                          ("multiturn", f"/traces/{traces['search']['id']}/multiturn"),
                          ("reward-latency", f"/traces/{traces['rllm']['id']}/multiturn"),
                          ("stages-per-rank", f"/traces/{traces['rllm']['id']}/gpu"),
                          ("compare", f"/compare?a={demo['id']}&b={traces['rllm']['id']}")]
            # open every trace page once so its analyses start, then wait for them all
            for _, path in pages:
                driver.get(base + path)
                time.sleep(2)
            for t in traces.values():
                wait_analyses(api, t["id"])
            for name, path in pages:
                driver.get(base + path)
                took = wait_for_charts(driver)
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
