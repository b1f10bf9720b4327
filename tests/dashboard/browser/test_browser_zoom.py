"""Every page with a zoomable step axis keeps its charts' zoom in the URL, in a real
browser (the fixtures of tests/dashboard/browser/test_browser.py): a chart zoomed on the Overview,
Imbalance, Simulate, Compare and metric explorer pages puts z.<chart>=x0,x1 in the URL, and a colleague
opening that URL sees the same range. A figure drawn again later keeps the user's zoom."""

from __future__ import annotations

import pytest

from tests.dashboard.browser.test_browser import Browser, browser, downloads, server  # noqa: F401
from tests.helpers import synthetic_rows, write_packed_dir

pytestmark = pytest.mark.browser

RANGE = """
var p = document.getElementById(arguments[0]).querySelector('.js-plotly-plot');
return p && p._fullLayout && p.data && p.data.length ? p._fullLayout.xaxis.range : null;
"""


def zoom_and_share(b: Browser, path: str, chart: str, lo: float, hi: float) -> None:
    """Open `path`, zoom `chart` to [lo, hi] as a user would, and open the URL it left
    afresh: the chart shows [lo, hi]."""
    b.open(path)
    b.wait(lambda: b.d.execute_script(RANGE, chart), f"chart {chart} on {path}")
    b.d.execute_script(
        "var p = document.getElementById(arguments[0]).querySelector('.js-plotly-plot');"
        "Plotly.relayout(p, {'xaxis.range[0]': arguments[1], 'xaxis.range[1]': arguments[2]});",
        chart,
        lo,
        hi,
    )
    b.wait(lambda: f"z.{chart}={lo:g},{hi:g}" in b.d.current_url, f"the zoom of {chart} in the URL")
    shared = b.d.current_url
    b.open("/traces")
    b.d.get(shared)
    got = b.wait(lambda: b.d.execute_script(RANGE, chart), f"chart {chart} from the shared URL")
    assert got == pytest.approx([lo, hi]), (chart, got)


def test_shared_urls_restore_the_zoom_of_step_charts(browser, server, tmp_path):  # noqa: F811
    b = browser
    a = server.upload(sorted(write_packed_dir(tmp_path / "za", synthetic_rows(steps=5, groups=8, n=4, seed=51)).iterdir()),
                      "zoom a")  # fmt: skip
    c = server.upload(sorted(write_packed_dir(tmp_path / "zc", synthetic_rows(steps=5, groups=8, n=4, seed=52)).iterdir()),
                      "zoom c")  # fmt: skip
    sim = server.api.post("/simulations", json={"trace_id": a["id"], "policy": "sync", "uncertainty": False}).json()
    b.sign_in(server.key)
    b.wait(lambda: b.text("team-name") == "local", "signed in")
    zoom_and_share(b, f"/traces/{a['id']}", "overview-lengths", 0.5, 3.5)
    zoom_and_share(b, f"/traces/{a['id']}/imbalance", "imb-ratio", 1.5, 3.5)
    zoom_and_share(b, f"/compare?a={a['id']}&b={c['id']}", "cmp-lengths", 0.5, 2.5)
    zoom_and_share(b, f"/metrics?traces={a['id']},{c['id']}&keys=response/p99", "metrics-chart", 1.5, 3.5)
    assert "keys=response" in b.d.current_url  # the page's own query kept beside the zoom
    b.wait(lambda: server.api.get(f"/simulations/{sim['id']}").json()["status"] == "succeeded", "the replay",
           timeout=180)  # fmt: skip
    zoom_and_share(b, f"/traces/{a['id']}/simulate?job={sim['id']}", "sim-pred-vs-measured", 0.5, 2.5)
    b.assert_console_clean()


def test_a_redrawn_chart_keeps_the_users_zoom(browser, server, tmp_path):  # noqa: F811
    b = browser
    t = server.upload(sorted(write_packed_dir(tmp_path / "zr", synthetic_rows(steps=5, groups=8, n=4, seed=53)).iterdir()),
                      "zoom redraw")  # fmt: skip
    b.sign_in(server.key)
    b.wait(lambda: b.text("team-name") == "local", "signed in")
    b.open(f"/traces/{t['id']}/imbalance?z.imb-ratio=0.5,2.5")
    assert b.wait(lambda: b.d.execute_script(RANGE, "imb-ratio"), "the ratio chart") == pytest.approx([0.5, 2.5])
    b.d.execute_script(
        "var p = document.getElementById('imb-ratio').querySelector('.js-plotly-plot');"
        "Plotly.relayout(p, {'xaxis.range[0]': 1.5, 'xaxis.range[1]': 3.5});"
    )
    b.wait(lambda: "z.imb-ratio=1.5,3.5" in b.d.current_url, "the new zoom in the URL")
    # another load: the figures are drawn again, at the zoom the user chose last
    b.d.find_element("css selector", "#imb-load input:not(:checked)").click()
    b.wait(lambda: "load=" in b.d.current_url, "the load in the URL")
    b.wait(lambda: b.d.execute_script(RANGE, "imb-ratio") == pytest.approx([1.5, 3.5]), "the kept zoom")
    b.assert_console_clean()
