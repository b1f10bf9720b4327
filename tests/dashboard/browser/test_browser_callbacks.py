"""Dashboard callbacks no other browser test fires, fired in a real browser on real data
(headless Chromium, the fixtures of tests/dashboard/browser/test_browser.py); together with the others they
fire every callback of the app (tests/dashboard/browser/test_browser_callbacks_coverage.py)."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlparse

import pytest

from dashboard.figures.gpu import short_kernel_name
from tests.dashboard.browser.test_browser import Browser, browser, downloads, server  # noqa: F401
from tests.dashboard.browser.test_browser_replay_params import param_box
from tests.helpers import jsonl, synthetic_rows, write_packed_dir

pytestmark = pytest.mark.browser

STEPS = 4


@pytest.fixture(scope="module")
def run(server, tmp_path_factory):  # noqa: F811
    """A run with DP ranks and stage timings (its verl metric log), uploaded once."""
    folder = write_packed_dir(tmp_path_factory.mktemp("callbacks") / "run", synthetic_rows(steps=STEPS, seed=21))
    steps = [{"step": s, "data": {"timing_s/gen": 10.0 + s, "timing_s/step": 20.0 + s}} for s in range(STEPS)]
    (folder / "metrics.jsonl").write_bytes(jsonl(steps))
    return server.upload(sorted(folder.iterdir()), "callbacks run")


def _signed_in(b: Browser, key: str) -> None:
    b.sign_in(key)
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]"), "the traces page")


def _options(b: Browser, dropdown_id: str) -> list:
    """The options a dropdown offers, opened as a user opens it."""
    opened = b.css(".dash-dropdown-option")
    if not opened:
        b.click(f"#{dropdown_id}", f"the {dropdown_id} dropdown")
        opened = b.css(".dash-dropdown-option")
    return opened


def choose(b: Browser, dropdown_id: str, label: str) -> None:
    """Pick the option with this label in a dropdown, as a user does."""
    from selenium.webdriver.common.keys import Keys

    option = b.wait(
        lambda: [o for o in _options(b, dropdown_id) if o.text.strip() == label], f"{label!r} in {dropdown_id}"
    )[0]
    option.click()
    if b.css(".dash-dropdown-option"):  # (a multi-select stays open)
        b.d.switch_to.active_element.send_keys(Keys.ESCAPE)


# A click on a chart's mark, as plotly reports it (the event Dash turns into clickData):
# the last point of the first curve with data (of a heatmap, its fullest cell).
CLICK_JS = """
var p = document.getElementById(arguments[0]).querySelector('.js-plotly-plot');
var plain = function (v) { return v && v._inputArray ? Array.from(v._inputArray) : Array.from(v || []); };
for (var c = 0; c < p.data.length; c++) {
  var t = p.data[c], xs = plain(t.x), ys = plain(t.y);
  if (!xs.length || !ys.length || t.visible === false) { continue; }
  var n = Math.min(xs.length, ys.length) - 1;
  var pt = {curveNumber: c, pointNumber: n, pointIndex: n, x: xs[n], y: ys[n]};
  if (t.type === 'heatmap') {
    var z = p.calcdata[c][0].z, best = [0, 0];
    z.forEach(function (row, i) { row.forEach(function (v, j) { if (v > z[best[0]][best[1]]) { best = [i, j]; } }); });
    pt = {curveNumber: c, pointNumber: best, x: xs[best[1]], y: ys[best[0]], z: z[best[0]][best[1]]};
  }
  p.emit('plotly_click', {points: [pt], event: {}});
  return [t.name || '', pt.x];
}
return null;
"""


def drill(b: Browser, page: str, chart_id: str) -> tuple[dict[str, list[str]], list]:
    """Open the page, click a mark of the chart: the samples page's query it opened, and
    the clicked curve's name and x."""
    b.open(page)
    b.wait(lambda: b.chart(chart_id), f"{chart_id} drawn", timeout=120)
    time.sleep(0.3)  # (the figure handed to plotly: its handlers are on)
    clicked = b.d.execute_script(CLICK_JS, chart_id)
    assert clicked, f"{chart_id} has no mark to click"
    b.wait(lambda: "/samples" in b.d.current_url, f"the samples page after a click on {chart_id}")
    b.wait(lambda: b.css("#samples-table tbody tr"), f"the samples drilled from {chart_id}")
    return parse_qs(urlparse(b.d.current_url).query), clicked


def test_gpu_kernel_search_lists_the_matches_and_jumps_to_one(browser, server, shared_fixtures):  # noqa: F811
    from selenium.webdriver.common.keys import Keys

    b = browser
    kineto = shared_fixtures / "kineto"
    trace = server.upload([kineto / "sampled_rank-0.json.gz", kineto / "sampled_rank-1.json.gz"], "kineto search")
    found = server.api.get(f"/traces/{trace['id']}/gpu-events/search", params={"name": "nccl", "limit": 100}).json()
    hits = sorted(found["items"], key=lambda e: e["ts_us"])
    assert len(hits) > 10  # the fixture's NCCL kernels and ops, on both ranks
    _signed_in(b, server.key)
    b.open(f"/traces/{trace['id']}/gpu")
    b.wait_chart("gpu-kernel-gantt", "compute")
    b.element("gpu-search", "the kernel search box", clickable=True).send_keys("nccl", Keys.ENTER)

    options = b.wait(
        lambda: [o for o in _options(b, "gpu-search-hits") if "nccl" in o.text], "the matches in the dropdown"
    )
    assert len(options) == len(hits)  # one option per match, none dropped
    first = hits[0]
    assert (
        options[0].text.startswith(short_kernel_name(first["name"], 50)) and f"rank {first['rank']}" in options[0].text
    )

    # choosing a match zooms the kernel Gantt onto it, with context around it
    options[0].click()
    pad = max(200.0, min(20 * first["dur_us"], 5000.0))
    want = f"window {(first['dur_us'] + 2 * pad) / 1000:,.3f} ms at "
    b.wait(lambda: want in (b.text("gpu-window-info") or ""), f"the Gantt zoomed onto the match ({want})")


def test_every_chart_drills_to_its_samples(browser, server, run, shared_fixtures):  # noqa: F811
    """A click on a mark of each drillable chart opens the samples behind it."""
    from dashboard.views.drill import DRILL_GRAPHS

    b = browser
    folder = shared_fixtures / "polytrace"
    search_r1 = folder / "search_r1_qwen2_5_7b"  # (step 5 has no tool calls; step 0 has)
    multiturn = server.upload(
        [search_r1 / "multiturn_workload_step_0.jsonl", search_r1 / "multiturn_workload_step_5.jsonl"], "drill turns"
    )
    rewards = server.upload(sorted((folder / "rllm_deepcoder_14b_16k").iterdir()), "drill rewards")
    trace_of = {"distributions": run, "imbalance": run, "multiturn": multiturn}
    _signed_in(b, server.key)
    for page, charts in DRILL_GRAPHS.items():
        for chart in charts:
            trace = rewards if chart == "lat-reward" else trace_of[page]
            query, (curve, x) = drill(b, f"/traces/{trace['id']}/{page}", chart)
            # what was clicked, as the samples' filter
            if chart == "mt-counts":
                assert query["num_turns"] == [str(round(x))], (chart, query)
            elif chart == "dist-cdf":  # (one curve per step; x is a length)
                assert query["step"] == [curve.split()[-1]], (chart, curve, query)
            else:
                assert query["step"] == [str(round(x))], (chart, x, query)
            assert f"/traces/{trace['id']}/samples" in b.d.current_url


def test_distribution_cdfs_of_chosen_steps_and_the_stage_gantt(browser, server, run):  # noqa: F811
    b = browser
    _signed_in(b, server.key)
    b.open(f"/traces/{run['id']}/distributions")
    b.wait_chart("dist-cdf")
    choose(b, "dist-cdf-steps", "step 2")
    b.wait(lambda: "cdf=" in b.d.current_url and set(b.wait_chart("dist-cdf")) == {"step 2"}, "the CDF of step 2")

    # stage timings (the metric log): the GPU page draws each step's stages per rank
    b.open(f"/traces/{run['id']}/gpu")
    gantt = b.wait_chart("gpu-stage-gantt")
    assert any(t.get("x") for t in gantt.values())


def test_traces_search_jobs_filter_and_a_background_upload(browser, server, run, shared_fixtures):  # noqa: F811
    from selenium.webdriver.common.keys import Keys

    b = browser
    _signed_in(b, server.key)
    # the search narrows the table to the traces whose name contains the text
    b.element("traces-q", "the search box", clickable=True).send_keys("callbacks r", Keys.ENTER)
    b.wait(
        lambda: (
            [r.get_attribute("data-trace-id") for r in b.css("#traces-table tr[data-trace-id]")] == [str(run["id"])]
        ),
        "only the matching trace",
    )

    # an upload over the inline limit is ingested in the background; the page follows it
    b.open("/traces")
    folder = shared_fixtures / "polytrace" / "search_r1_qwen2_5_7b"
    files = [folder / "multiturn_workload_step_0.jsonl", folder / "multiturn_workload_step_1.jsonl"]
    b.element("#trace-upload input[type=file]", "the upload input").send_keys("\n".join(str(f) for f in files))
    ok = b.wait(lambda: b.text("upload-ok"), "the upload's confirmation once ingested", timeout=180)
    assert "2 steps" in ok

    # the jobs page, filtered by kind
    b.open("/jobs")
    b.wait(lambda: b.css("#jobs-table tr[data-kind]"), "the jobs table")
    choose(b, "jobs-kind", "imbalance")
    b.wait(
        lambda: {r.get_attribute("data-kind") for r in b.css("#jobs-table tr[data-kind]")} == {"imbalance"},
        "only the imbalance jobs",
    )
    assert "kind=imbalance" in b.d.current_url


def test_a_trace_page_follows_its_ingestion(browser, server, shared_fixtures):  # noqa: F811
    from tests.dashboard.browser.test_browser_truth import held_worker

    b = browser
    _signed_in(b, server.key)
    folder = shared_fixtures / "polytrace" / "search_r1_qwen2_5_7b"
    parts = [
        ("files", (f.name, f.read_bytes(), "application/octet-stream"))
        for f in sorted(folder.iterdir())  # over the inline limit: ingested by the worker
    ]
    with held_worker(server):
        r = server.api.post("/traces", files=parts, data={"name": "followed"})
        assert r.status_code == 202, r.text
        trace_id = r.json()["trace"]["id"]
        b.open(f"/traces/{trace_id}")
        b.element("trace-progress", "the ingestion's progress")
    # the worker goes on: the page reloads itself with the trace's content
    b.wait(lambda: "?ready=" in b.d.current_url, "the page reloaded once the trace is ready", timeout=180)
    b.wait(lambda: (b.text("card-steps") or "").split("\n")[1:2] == ["3"], "the trace's cards")


def test_team_makes_and_revokes_a_key(browser, server):  # noqa: F811
    from selenium.common.exceptions import NoAlertPresentException

    b = browser
    _signed_in(b, server.key)
    b.open("/team")
    before = len(b.wait(lambda: b.css("#team-keys tr[data-key-id]"), "the team's keys"))
    b.element("key-name", "the key's name", clickable=True).send_keys("callbacks test")
    b.click("key-create", "the make-a-key button")
    made = b.wait(lambda: b.text("key-new-value"), "the new key, shown once")
    rows = b.wait(lambda: b.css("#team-keys tr[data-key-id]") if len(b.css("#team-keys tr[data-key-id]")) > before
                  else None, "the new key in the table")  # fmt: skip
    new_id = max(int(r.get_attribute("data-key-id")) for r in rows)
    assert server.api.get("/me", headers={"X-API-Key": made}).status_code == 200  # the key works

    b.click(f"#team-keys tr[data-key-id='{new_id}'] button", "its Revoke button")

    def revoked():
        try:  # (confirmed, when the page asks)
            b.d.switch_to.alert.accept()
        except NoAlertPresentException:
            pass
        return b.css(f"#team-keys tr[data-key-id='{new_id}'][data-active=false]")

    b.wait(revoked, "the key shown revoked")
    b.wait(lambda: server.api.get("/me", headers={"X-API-Key": made}).status_code == 401, "the key refused")


def test_simulate_policy_parameters_and_reopening_replays_and_workloads(browser, server, run):  # noqa: F811
    b = browser
    tid = run["id"]
    sims = [
        server.api.post("/simulations", json={"trace_id": tid, "policy": kind, "uncertainty": False}).json()
        for kind in ("sync", "one_step_off")
    ]
    loads = [
        server.api.post("/workloads", json={"trace_id": tid, "steps": steps, "ingest": False}).json()
        for steps in (0, 1)
    ]
    for path, jobs in (("/simulations", sims), ("/workloads", loads)):
        for job in jobs:
            b.wait(lambda job=job: server.api.get(f"{path}/{job['id']}").json()["status"] == "succeeded", f"job {job}")
    _signed_in(b, server.key)

    # choosing a policy shows its own parameters, their defaults filled in
    b.open(f"/traces/{tid}/simulate?job={sims[1]['id']}")
    for which in ("a", "b"):
        choose(b, f"sim-policy-{which}", "partial")
        b.wait(lambda which=which: "(partial)" in (b.text(f"sim-params-{which}") or ""), f"policy {which}'s fields")
        assert param_box(b, which, "over_provision").get_attribute("value")

    # the history's Open shows an earlier replay, and an earlier workload job
    for page, jobs, history in (("simulate", sims, "sim-history"), ("workload", loads, "wl-history")):
        b.open(f"/traces/{tid}/{page}?job={jobs[1]['id']}")
        b.click(f"#{history} tr[data-job-id='{jobs[0]['id']}'] button", f"Open on job {jobs[0]['id']}")
        b.wait(
            lambda history=history, jobs=jobs: (
                "shown" in b.css(f"#{history} tr[data-job-id='{jobs[0]['id']}']")[0].text
            ),
            f"job {jobs[0]['id']} shown",
        )


def test_the_page_checks_catch_http_and_console_errors(browser, server):  # noqa: F811
    """What every browser test fails on (tests/conftest.py), unless the test allows it."""
    b = browser
    missing = "/api/v1/traces/987654"  # no key: 401
    b.open(missing)
    b.d.execute_script("console.error('something broke')")
    found = b.problems()
    assert any(p.startswith("HTTP 401") and missing in p for p in found), found
    assert any("something broke" in p for p in found), found
    b.allow_http(401, missing)  # provoked on purpose: allowed in this test only
    b.open(missing)
    assert b.problems() == []
