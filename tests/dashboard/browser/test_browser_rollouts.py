"""Rollout texts in a real browser: from the Distributions max marker of a step to that
sample's text in two clicks (max marker -> the step's samples, longest first -> its
text), the text shown inert (a response holding HTML and script renders as those
characters, runs nothing), the group's other samples beside it, and the text search."""

from __future__ import annotations

import json
import time
from urllib.parse import parse_qs, urlparse

import pytest

from tests.dashboard.browser.test_browser import Browser, browser, downloads, server  # noqa: F401
from tests.dashboard.browser.test_browser_samples import table_rows
from tests.rollout_writer import HTML, PHRASE, dump_bytes, dump_rows

pytestmark = pytest.mark.browser


def click_marker(b: Browser, chart_id: str, x: float, y: float) -> None:
    """Click the point (x, y) of a chart (data coordinates of its first axes)."""
    from selenium.webdriver.common.action_chains import ActionChains

    layer = b.wait(lambda: b.css(f"#{chart_id} .nsewdrag"), f"{chart_id}'s plot area")[0]
    px, py = b.d.execute_script(
        f"var p = document.getElementById('{chart_id}').querySelector('.js-plotly-plot');"
        "var l = p._fullLayout; return [l.xaxis.l2p(arguments[0]), l.yaxis.l2p(arguments[1])];",
        x,
        y,
    )
    w, h = layer.size["width"], layer.size["height"]
    ActionChains(b.d).move_to_element_with_offset(layer, int(px - w / 2), int(py - h / 2)).pause(0.3).click().perform()


@pytest.fixture(scope="module")
def dump_trace(server, tmp_path_factory):  # noqa: F811
    """Three steps; at step 2 the longest response is the one holding HTML and script."""
    folder = tmp_path_factory.mktemp("dump")
    rows = {s: dump_rows(s) for s in (1, 2, 3)}
    longest = next(r for r in rows[2] if HTML in r["output"])
    longest["output"] += " padding" * 2_000
    for step, lines in rows.items():
        (folder / f"{step}.jsonl").write_bytes(dump_bytes(lines))
    trace = server.upload(sorted(folder.iterdir()), "rollout texts")
    return trace, rows, longest


def test_max_marker_to_the_sample_text_in_two_clicks(browser, server, dump_trace):  # noqa: F811
    b = browser
    trace, rows, longest = dump_trace
    b.sign_in(server.key)
    b.wait(lambda: "sign-in" not in b.d.current_url, "signed in")
    b.open(f"/traces/{trace['id']}/distributions")
    tail = b.wait_chart("rl-tail", "longest 10%", "the rest")  # the reward-vs-length panel draws
    assert "characters" in b.text("length-unit-note")  # read without a tokenizer: lengths are characters
    assert list(tail["longest 10%"]["x"]) == [1, 2, 3]
    b.wait_chart("rl-repetition", "all responses")
    data = b.wait_chart("dist-box", "max")
    assert data["max"]["y"][list(data["max"]["x"]).index(2)] == len(longest["output"])  # characters
    time.sleep(0.5)
    click_marker(b, "dist-box", 2, len(longest["output"]))  # click 1: the max marker of step 2
    b.wait(lambda: "/samples" in b.d.current_url, "the samples page after the click")
    query = parse_qs(urlparse(b.d.current_url).query)
    assert query["step"] == ["2"] and query["sort"] == ["response_len"] and query["order"] == ["desc"]
    first = b.wait(lambda: table_rows(b), "the step's samples")[0]
    assert int(first[5].replace(",", "")) == len(longest["output"])
    b.css("#samples-table tbody tr:first-child a.sample-text-link")[0].click()  # click 2: its text
    response = b.wait(lambda: b.css("#sample-response"), "the sample's response")[0]
    b.wait(lambda: HTML in response.get_attribute("textContent"), "the response's text, markup included")
    assert b.d.execute_script("return window.__xss === undefined")  # nothing ran
    assert not b.css("#sample-response script") and not b.css("#sample-response img")
    prompt = b.css("#sample-prompt")[0].get_attribute("textContent")
    assert prompt == longest["input"]
    members = b.css("#sample-group > .card")
    assert len(members) == 3  # the prompt's other samples
    b.assert_console_clean()


def test_search_then_open_a_match(browser, server, dump_trace):  # noqa: F811
    b = browser
    trace, rows, _ = dump_trace
    b.open(f"/traces/{trace['id']}/texts?q={PHRASE.replace(' ', '+')}")
    found = b.wait(
        lambda: b.d.execute_script(
            "var t = document.getElementById('texts-results'); if (!t) return null;"
            "return Array.from(t.querySelectorAll('tbody tr')).map(r => r.getAttribute('data-key'));"
        ),
        "the search results",
    )
    assert len(found) == 1 and found[0].startswith("2.")
    b.css("#texts-results tbody a")[0].click()
    response = b.wait(lambda: b.css("#sample-response"), "the match's sample page")[0]
    assert PHRASE.title() in response.get_attribute("textContent")
    # filters: responses that end in a loop, from the form
    b.open(f"/traces/{trace['id']}/texts?repeating=true")
    keys = b.wait(
        lambda: b.d.execute_script(
            "var t = document.getElementById('texts-results'); if (!t) return null;"
            "return Array.from(t.querySelectorAll('tbody tr')).map(r => r.getAttribute('data-key'));"
        ),
        "the looping samples",
    )
    # the writer's loops, and the padded longest response (" padding" over and over)
    loops = sum(1 for lines in rows.values() for r in lines if r["output"].count("I think the answer is 5.") > 10)
    assert len(keys) == loops + 1 == 4
    assert json.loads(json.dumps(keys))  # plain keys, step.group.sample
    b.assert_console_clean()
