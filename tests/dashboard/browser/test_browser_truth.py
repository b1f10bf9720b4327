"""One truth on every page, and a dashboard that keeps your place, in a real browser
(headless Chromium, the fixtures of tests/dashboard/browser/test_browser.py):

- one truncation figure: the Distributions bars, the Samples table and filter and the API
  count the same samples, under the same definition;
- a drill-down from a max marker lands on that sample, highlighted;
- a shared URL restores a page's controls and zoom;
- a live run's overview cards follow its analyses without a reload, marked stale with
  their age while the re-run waits;
- no legend overlaps a chart's title or its data at 1,440 px wide (bounding boxes).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from tests.conftest import ROOT
from tests.dashboard.browser.test_browser import Browser, browser, downloads, server  # noqa: F401
from tests.dashboard.browser.test_browser_samples import click_plot, table_rows, x_fraction
from tests.helpers import jsonl, synthetic_rows, write_packed_dir

pytestmark = pytest.mark.browser

CAP = 4096


def capped_run() -> list[list[dict]]:
    """4 steps x 8 groups x 4 samples; steps 1 and 3 have responses at the 4,096 cap."""
    per_step = synthetic_rows(steps=4, groups=8, n=4, seed=31)
    for rows in per_step:
        for r in rows:
            r["output"] = [min(o, CAP - 1) for o in r["output"]]
    per_step[1][2]["output"][1] = per_step[1][5]["output"][0] = per_step[1][6]["output"][3] = CAP
    per_step[3][0]["output"][2] = per_step[3][7]["output"][1] = CAP
    return per_step


def at_cap(rows: list[dict]) -> int:
    return sum(o >= CAP for r in rows for o in r["output"])


def test_one_truncation_figure_on_distributions_samples_and_the_api(browser, server, tmp_path):  # noqa: F811
    b = browser
    per_step = capped_run()
    trace = server.upload(sorted(write_packed_dir(tmp_path / "capped", per_step).iterdir()), "capped")
    t = server.api.get(f"/traces/{trace['id']}").json()
    assert t["truncation"]["basis"] == "cap" and t["truncation"]["cap"] == CAP
    definition = t["truncation"]["definition"]
    assert "4,096-token cap" in definition
    summaries = server.api.get(f"/traces/{trace['id']}/summaries").json()
    for e in summaries["steps"]:
        want = at_cap(per_step[e["step"]])
        assert round(e["truncation_rate"] * e["count"]) == want
        page = server.api.get(f"/traces/{trace['id']}/samples", params={"step": e["step"], "truncated": "true"})
        assert page.json()["total"] == want

    b.sign_in(server.key)
    b.open(f"/traces/{trace['id']}/distributions")
    tail = b.wait_chart("dist-tail", "truncated (%)")
    bars = dict(zip(tail["truncated (%)"]["x"], tail["truncated (%)"]["y"]))
    for s, rows in enumerate(per_step):
        assert bars[s] == pytest.approx(100 * at_cap(rows) / 32)
    title = b.d.execute_script(
        "return document.getElementById('dist-tail').querySelector('.js-plotly-plot').layout.title.text;"
    )
    assert definition in title.replace("<br>", " ")  # (wrapped between words)
    # a truncation bar opens that step's truncated samples
    time.sleep(0.5)
    b.d.execute_script("window.scrollTo(0, document.getElementById('dist-tail').offsetTop - 100);")
    bar_y = b.d.execute_script(
        "var p = document.getElementById('dist-tail').querySelector('.js-plotly-plot');"
        "var ax = p._fullLayout.yaxis2; return 1 - ax.l2p(arguments[0] / 2) / ax._length;",
        bars[1],
    )
    click_plot(b, "dist-tail", x_fraction(b, "dist-tail", 1), bar_y)
    b.wait(lambda: "/samples" in b.d.current_url, "the samples page after the truncation bar")
    query = parse_qs(urlparse(b.d.current_url).query)
    assert query["step"] == ["1"] and query["truncated"] == ["true"]
    rows = b.wait(lambda: table_rows(b), "the truncated samples")
    assert len(rows) == at_cap(per_step[1]) and {r[6] for r in rows} == {"yes"}
    assert {int(r[5].replace(",", "")) for r in rows} == {CAP}
    assert definition in b.text("samples-truncation-definition")
    # the rest of the step: marked "no" (not "–"), the same definition
    b.open(f"/traces/{trace['id']}/samples?step=1&truncated=false")
    rows = b.wait(lambda: table_rows(b), "the step's other samples")
    assert len(rows) == 32 - at_cap(per_step[1]) and {r[6] for r in rows} == {"no"}
    b.assert_console_clean()


def test_a_max_marker_drills_to_that_sample_highlighted(browser, server, tmp_path):  # noqa: F811
    b = browser
    per_step = synthetic_rows(steps=3, groups=16, n=8, seed=33)  # 128 samples a step: more than a page
    trace = server.upload(sorted(write_packed_dir(tmp_path / "drill", per_step).iterdir()), "drill max")
    b.sign_in(server.key)
    b.open(f"/traces/{trace['id']}/distributions")
    box = b.wait_chart("dist-box", "max")
    step = 2
    longest = max(o for r in per_step[step] for o in r["output"])
    assert box["max"]["y"][box["max"]["x"].index(step)] == longest
    time.sleep(0.5)
    point = b.d.execute_script(
        "var p = document.getElementById('dist-box').querySelector('.js-plotly-plot');"
        "var xa = p._fullLayout.xaxis, ya = p._fullLayout.yaxis;"
        "return [xa.l2p(arguments[0]) / xa._length, 1 - ya.l2p(arguments[1]) / ya._length];",
        step,
        longest,
    )
    click_plot(b, "dist-box", point[0], point[1])
    b.wait(lambda: "/samples" in b.d.current_url, "the samples page after the max marker")
    query = parse_qs(urlparse(b.d.current_url).query)
    assert query["step"] == [str(step)] and query["sort"] == ["response_len"] and query["order"] == ["desc"]
    focused = b.wait(lambda: b.css("#samples-table tr.focused"), "the highlighted sample")
    assert len(focused) == 1 and focused[0].get_attribute("data-key") == query["sample"][0]
    cells = focused[0].find_elements("css selector", "td")
    assert int(cells[5].text.replace(",", "")) == longest and cells[0].text == str(step)
    assert table_rows(b)[0][5] == f"{longest:,}"  # the first row: on screen, not 512 rows down
    b.assert_console_clean()


def test_a_shared_url_restores_the_page(browser, server, tmp_path):  # noqa: F811
    b = browser
    per_step = synthetic_rows(steps=4, groups=8, n=4, seed=35)
    trace = server.upload(sorted(write_packed_dir(tmp_path / "url", per_step).iterdir()), "shared url")
    b.sign_in(server.key)
    base = f"/traces/{trace['id']}/distributions"
    b.open(base)
    b.wait_chart("dist-percentiles", "p50")
    # change controls and zoom as a user would; the URL follows
    b.d.find_element("css selector", "#dist-field input[value=prompt]").click()
    b.wait(lambda: "field=prompt" in b.d.current_url, "the field in the URL")
    b.d.find_element("css selector", "#dist-phase input[value=all]").click()
    b.wait(lambda: "phase=all" in b.d.current_url, "the phase in the URL")
    b.d.execute_script(
        "var p = document.getElementById('dist-percentiles').querySelector('.js-plotly-plot');"
        "Plotly.relayout(p, {'xaxis.range[0]': 0.5, 'xaxis.range[1]': 2.5});"
    )
    b.wait(lambda: "z.dist-percentiles=0.5,2.5" in b.d.current_url, "the zoom in the URL")
    shared = b.d.current_url
    # a colleague opens the link: the same view
    b.open("/traces")
    b.d.get(shared)
    lines = b.wait_chart("dist-percentiles", "p50")
    assert lines["p50"]["y"] == pytest.approx([np.percentile([r["input"] for r in rows for _ in r["output"]], 50)
                                              for rows in per_step])  # fmt: skip
    assert b.d.find_element("css selector", "#dist-field input[value=prompt]").is_selected()
    assert b.d.find_element("css selector", "#dist-phase input[value=all]").is_selected()
    rng = b.wait(
        lambda: b.d.execute_script(
            "var p = document.getElementById('dist-percentiles').querySelector('.js-plotly-plot');"
            "return p && p._fullLayout ? p._fullLayout.xaxis.range : null;"
        ),
        "the zoomed axis",
    )
    assert rng == pytest.approx([0.5, 2.5])
    # the Jobs page's filter and the Traces page's search come back the same way
    b.open(f"/jobs?kind=lengths&trace_id={trace['id']}")
    b.wait(lambda: b.css("#jobs-table tr[data-job-id]"), "the jobs table")
    assert {r.get_attribute("data-kind") for r in b.css("#jobs-table tr[data-job-id]")} == {"lengths"}
    b.open("/traces?q=shared")
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]"), "the traces table")
    ids = [r.get_attribute("data-trace-id") for r in b.css("#traces-table tr[data-trace-id]")]
    assert ids == [str(trace["id"])]
    assert b.css("#traces-table td.trace-id")[0].text == str(trace["id"])  # the id the CLI takes
    b.assert_console_clean()


def _card(b: Browser, card_id: str) -> str | None:
    text = b.text(card_id)
    return text.split("\n")[1] if text and "\n" in text else None


@contextlib.contextmanager
def held_worker(srv):
    """The server's worker (and its pool) stopped with SIGSTOP for the block: jobs queued
    meanwhile wait, so a page shows what it shows before their results."""
    data = f"RLVR_DATA_DIR={srv.env['RLVR_DATA_DIR']}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            if b"rlvr_explorer" in cmd and b"worker" in cmd and data in (proc / "environ").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except (OSError, ValueError):
            continue
    assert pids, "the server's worker process"
    groups = {os.getpgid(p) for p in pids}
    for g in groups:
        os.killpg(g, signal.SIGSTOP)
    try:
        yield
    finally:
        for g in groups:
            os.killpg(g, signal.SIGCONT)


def test_a_live_runs_cards_follow_its_analyses_without_a_reload(browser, server, tmp_path):  # noqa: F811
    b = browser
    run = tmp_path / "live-cards"
    run.mkdir()
    first = synthetic_rows(steps=1, groups=8, n=4, seed=40)[0]
    (run / "packed_lengths_step_0.jsonl").write_bytes(jsonl(first))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr_explorer", "watch", str(run), "--name", "live cards", "--server", server.base,
         "--api-key", server.key, "--interval", "0.3"],
        cwd=ROOT, env=server.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        state = run / ".rlvr-watch.json"
        b.wait(lambda: state.exists(), "the watcher's state file")
        trace_id = json.loads(state.read_text())["trace_id"]

        def idle_result() -> float | None:
            jobs = server.api.get(f"/traces/{trace_id}/analyses").json()["items"]
            done = [j for j in jobs if j["kind"] == "longtail" and j["status"] == "succeeded"]
            if not done:
                return None
            job = server.api.get(f"/jobs/{max(done, key=lambda j: j['id'])['id']}").json()
            return job["result"]["summary"]["idle_fraction"]["mean"]

        before = b.wait(idle_result, "the first long-tail result", timeout=120)
        b.sign_in(server.key)
        b.open(f"/traces/{trace_id}")
        b.wait(lambda: _card(b, "card-idle") == f"{100 * before:.1f}%", "the idle card of step 0", timeout=120)
        b.d.execute_script("window.__same_page = true;")
        assert not b.css("#card-idle .card-stale")  # the result covers every step
        # a step whose long tail is very different: the idle share moves. The worker is
        # held meanwhile, so the page shows the step before the analysis re-ran.
        skewed = synthetic_rows(steps=2, groups=8, n=4, seed=41)[1]
        skewed[0]["output"][0] = 40 * max(o for r in skewed for o in r["output"])
        with held_worker(server):
            (run / "packed_lengths_step_1.jsonl").write_bytes(jsonl(skewed))
            b.wait(lambda: "2 steps" in (b.text("trace-live-steps") or ""), "step 1 on the page", timeout=60)
            stale = b.wait(lambda: b.css("#card-idle .card-stale"), "the idle card marked stale")[0].text
            assert re.fullmatch(r"computed \d+ s ago, step 0 of 2 — refreshing", stale), stale
            assert _card(b, "card-idle") == f"{100 * before:.1f}%"  # the old figure, said to be old
        after = b.wait(lambda: (v := idle_result()) is not None and abs(v - before) > 1e-3 and v, "the re-run",
                       timeout=120)  # fmt: skip
        b.wait(lambda: _card(b, "card-idle") == f"{100 * after:.1f}%", "the idle card after the re-run", timeout=90)
        assert not b.css("#card-idle .card-stale")
        assert b.d.execute_script("return window.__same_page === true;"), "the page reloaded"
        b.assert_console_clean()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


OVERLAPS = """
var out = [];
var box = function (e) { var r = e.getBoundingClientRect(); return r.width && r.height ? r : null; };
var hit = function (a, b) {
  return a && b && a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1; };
document.querySelectorAll('.js-plotly-plot').forEach(function (p) {
  var legend = p.querySelector('.legend'); var title = p.querySelector('.gtitle');
  var plot = p.querySelector('.nsewdrag'); var id = p.closest('[id]') ? p.closest('[id]').id : '?';
  if (!legend) { return; }
  var l = box(legend.querySelector('.bg') || legend);
  if (title && hit(l, box(title))) { out.push(id + ': legend over the title'); }
  if (plot && hit(l, box(plot))) { out.push(id + ': legend over the data'); }
});
return [document.querySelectorAll('.js-plotly-plot .legend').length, out];
"""


def test_no_legend_covers_a_title_or_the_data_at_1440_px(browser, server, tmp_path, shared_fixtures):  # noqa: F811
    b = browser
    b.d.set_window_size(1440, 1800)
    runs = []
    for i in range(3):
        per_step = synthetic_rows(steps=4, groups=8, n=4, seed=50 + i)
        folder = write_packed_dir(tmp_path / f"legend{i}", per_step)
        log = folder / "metrics.jsonl"
        log.write_bytes(jsonl([{"step": s, "data": {"timing_s/gen": 10.0 + s, "timing_s/step": 20.0 + s}}
                               for s in range(4)]))  # fmt: skip
        runs.append(server.upload(sorted(folder.iterdir()), f"legend run {i}"))
    mt = server.upload(
        [shared_fixtures / "polytrace" / "search_r1_qwen2_5_7b" / "multiturn_workload_step_5.jsonl"], "legend mt"
    )
    ids = ",".join(str(t["id"]) for t in runs)
    pages = [
        (f"/traces/{runs[0]['id']}/distributions", "dist-percentiles"),
        (f"/traces/{mt['id']}/multiturn", "mt-counts"),
        (f"/compare/many?traces={ids}", "cmpn-lengths"),
        (f"/metrics?traces={ids}&keys=t_gen,response/p99", "metrics-chart"),
        (f"/compare?a={runs[0]['id']}&b={runs[1]['id']}", "cmp-lengths"),
    ]
    b.sign_in(server.key)
    try:
        for path, chart in pages:
            b.open(path)
            b.wait_chart(chart)
            time.sleep(2.0)  # every chart of the page drawn
            n, bad = b.d.execute_script(OVERLAPS)
            assert n > 0, f"{path}: no legend drawn"
            assert bad == [], f"{path}: {bad}"
    finally:
        b.d.set_window_size(1400, 1800)
    b.assert_console_clean()
