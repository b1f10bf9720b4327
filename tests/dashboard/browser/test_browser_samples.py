"""The drill-down in a real browser: a click on a chart's mark opens the sample table
filtered to it (the rows are that step's), a column title sorts it server-side, and a
multi-turn step's request timeline and a sample's turns render for the Search-R1
fixture."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from tests.dashboard.browser.test_browser import TIMEOUT, Browser, browser, downloads, server  # noqa: F401
from tests.helpers import synthetic_rows, write_packed_dir

pytestmark = pytest.mark.browser


def table_rows(b: Browser) -> list[list[str]]:
    return b.d.execute_script(
        "var t = document.getElementById('samples-table'); if (!t) return null;"
        "return Array.from(t.querySelectorAll('tbody tr')).map(r => Array.from(r.cells).map(c => c.innerText));"
    )


def click_plot(b: Browser, chart_id: str, fx: float, fy: float = 0.5) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    layer = b.wait(lambda: b.css(f"#{chart_id} .nsewdrag"), f"{chart_id}'s plot area")[0]
    w, h = layer.size["width"], layer.size["height"]
    ActionChains(b.d).move_to_element_with_offset(layer, int(w * (fx - 0.5)), int(h * (fy - 0.5))).pause(
        0.3
    ).click().perform()


def x_fraction(b: Browser, chart_id: str, x: float) -> float:
    """Where data x sits across the chart's plot area (0 left .. 1 right)."""
    return b.d.execute_script(
        f"var p = document.getElementById('{chart_id}').querySelector('.js-plotly-plot');"
        "var ax = p._fullLayout.xaxis; return ax.l2p(arguments[0]) / ax._length;",
        x,
    )


def test_click_a_step_opens_its_samples_sorted_server_side(browser, server, tmp_path):  # noqa: F811
    b = browser
    per_step = synthetic_rows(steps=5, groups=16, n=4, seed=5)
    folder = write_packed_dir(tmp_path / "run", per_step)
    trace = server.upload(sorted(folder.iterdir()), "drill")
    b.sign_in(server.key)
    b.wait(lambda: "sign-in" not in b.d.current_url, "signed in")
    b.open(f"/traces/{trace['id']}/distributions")
    b.wait_chart("dist-percentiles")
    time.sleep(0.5)
    click_plot(b, "dist-percentiles", 0.5)
    b.wait(lambda: "/samples" in b.d.current_url, "the samples page after the click")
    query = parse_qs(urlparse(b.d.current_url).query)
    step = int(query["step"][0])
    assert 0 <= step < 5
    rows = b.wait(lambda: table_rows(b), "the sample table")
    assert len(rows) == 50 and {r[0] for r in rows} == {str(step)}
    assert b.text("samples-total").lower().endswith("of 64")
    expected = sorted((o for r in per_step[step] for o in r["output"]), reverse=True)[:50]
    # sort by response tokens: ascending first click, descending on the second
    for _ in range(2):
        link = b.wait(
            lambda: [
                a for a in b.css("#samples-table th a") if a.get_attribute("textContent").startswith("response tokens")
            ],
            "sort",
        )
        link[0].click()
        time.sleep(0.3)
    b.wait(lambda: "order=desc" in b.d.current_url, "descending order in the URL")
    rows = b.wait(lambda: table_rows(b), "the sorted table")
    assert [int(r[5].replace(",", "")) for r in rows] == expected
    b.assert_console_clean()

    # a DP rank of a step, from the imbalance heatmap
    b.open(f"/traces/{trace['id']}/imbalance")
    b.wait(lambda: (b.chart("imb-heatmap") or [{}])[0].get("type") == "heatmap", "the imbalance heatmap", timeout=120)
    time.sleep(0.5)
    click_plot(b, "imb-heatmap", 0.5, 0.5)
    b.wait(lambda: "/samples" in b.d.current_url, "the samples page after the heatmap click")
    query = parse_qs(urlparse(b.d.current_url).query)
    step, rank = int(query["step"][0]), int(query["dp_rank"][0])
    rows = b.wait(lambda: table_rows(b), "the rank's samples")
    want = sum(len(r["output"]) for r in per_step[step] if r["dp_rank"] == rank)
    assert len(rows) == min(50, want) and {(r[0], r[3]) for r in rows} == {(str(step), str(rank))}
    b.assert_console_clean()


def test_request_timeline_and_turns_for_search_r1(browser, server, shared_fixtures):  # noqa: F811
    b = browser
    folder = Path(shared_fixtures) / "polytrace" / "search_r1_qwen2_5_7b"
    trace = server.upload(sorted(p for p in folder.iterdir() if p.suffix == ".jsonl"), "search-r1")
    b.sign_in(server.key)
    b.wait(lambda: "sign-in" not in b.d.current_url, "signed in")
    b.open(f"/traces/{trace['id']}/samples?step=0")
    data = b.wait_chart("request-timeline", "engine time", "tool time")
    assert len(data["engine time"]["x"]) > 0 and len(data["tool time"]["x"]) > 0
    link = b.wait(
        lambda: [a for a in b.css("#samples-table td a") if a.get_attribute("textContent") == "timeline"],
        "a timeline link",
    )
    link[0].click()
    turns = b.wait_chart("sample-turns", "engine latency", "tool latency")
    assert len(turns["engine latency"]["x"]) >= 1
    b.wait_chart("sample-tokens", "cached prompt tokens", "new prompt tokens")
    b.assert_console_clean()

    # from the Multi-turn page's per-step chart to that step's samples and timeline
    b.open(f"/traces/{trace['id']}/multiturn")
    b.wait(lambda: len(b.chart("mt-steps") or []) > 0 and b.chart("mt-steps")[0].get("x"), "mt-steps", timeout=120)
    time.sleep(0.5)
    click_plot(b, "mt-steps", x_fraction(b, "mt-steps", 1))
    b.wait(lambda: "/samples" in b.d.current_url, "the samples page after the mt-steps click")
    step = int(parse_qs(urlparse(b.d.current_url).query)["step"][0])
    assert step == 1
    rows = b.wait(lambda: table_rows(b), "the step's samples")
    assert rows and {r[0] for r in rows} == {str(step)}
    b.wait_chart("request-timeline", "engine time", "tool time")
    b.assert_console_clean()
