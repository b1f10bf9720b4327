"""Issue 32 in a real browser against a real server and worker.

Item 2: a form that submits a job never sends a value other than the one shown. Typed
out of its declared bounds (partial's over_provision 0.5, 0 GPUs, no steps), a field
blocks the submit with its message under it and no job is made; the corrected values
reach the stored job exactly.

Item 5: revoking the key the session is signed in with asks first, naming it as this
session's key, then lands on the sign-in page saying why; a key revoked elsewhere sends
the next page action to the sign-in page too, never the API's raw wording.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.dashboard.browser.test_browser import Browser, _submitted, browser, downloads, server  # noqa: F401
from tests.helpers import synthetic_rows, write_packed_dir

pytestmark = pytest.mark.browser

RAW_401 = "missing, invalid or revoked API key"


def _dom_id(**parts) -> str:
    """A pattern-matching id as Dash renders it in the DOM (sorted compact JSON)."""
    return json.dumps(dict(sorted(parts.items())), separators=(",", ":"))


def param_box_id(which: str, name: str) -> str:
    return _dom_id(type="policy-param", form="sim", policy=which, name=name)


def param_error_id(which: str, name: str) -> str:
    return _dom_id(type="policy-param-error", form="sim", policy=which, name=name)


def _jobs(srv, path: str, trace_id: int, **params) -> list[dict]:
    return srv.api.get(path, params={"trace_id": trace_id, **params}).json()["items"]


def _type(b: Browser, selector: str, value: str) -> None:
    """Replace what a text box (an element id, or a CSS selector) holds by `value`, as a
    user types it; found afresh when Dash re-rendered it meanwhile."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.keys import Keys

    css = selector if selector.startswith("[") else f"[id='{selector}']"
    for _ in range(5):
        try:
            box = b.element(css, selector, clickable=True)
            box.send_keys(Keys.CONTROL, "a")  # (clear() bypasses React)
            box.send_keys(Keys.DELETE)
            if value:
                box.send_keys(value)
            if box.get_attribute("value") == value:
                return
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"could not type {value!r} into {selector}")


def _signed_in(b: Browser, key: str) -> None:
    b.sign_in(key)
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]") or b.text("traces-table"), "the traces page")


@pytest.fixture(scope="module")
def trace(server, tmp_path_factory):  # noqa: F811
    folder = write_packed_dir(tmp_path_factory.mktemp("forms"), synthetic_rows(steps=2, groups=8, n=4, seed=32))
    return server.upload(sorted(folder.iterdir()), "forms of issue 32")


def test_simulate_blocks_an_invalid_parameter_then_sends_the_value_shown(browser, server, trace):  # noqa: F811
    b = browser
    body = {
        "trace_id": trace["id"],
        "policy": "sync",
        "compare_policy": {"kind": "partial", "params": {"over_provision": 1.25}},
        "uncertainty": False,
    }
    first = server.api.post("/simulations", json=body).json()
    _signed_in(b, server.key)
    b.open(f"/traces/{trace['id']}/simulate?rerun={first['id']}")
    b.wait(lambda: b.text("sim-rerun-note"), "the re-run form")
    assert b.element(f"[id='{param_box_id('b', 'over_provision')}']").get_attribute("value") == "1.25"

    # 0.5 is below over_provision's declared bound (>= 1), 0 GPUs below the budget's
    _type(b, param_box_id("b", "over_provision"), "0.5")
    _type(b, "sim-gpus", "0")
    b.click("sim-submit", "the replay button")
    said = b.wait(lambda: b.text(param_error_id("b", "over_provision")), "the parameter's message")
    assert said == "0.5 is out of range: a number >= 1"
    assert b.text("sim-gpus-error") == "0 is out of range: a whole number >= 1"
    blocked = b.text("sim-form-message")
    assert "Not submitted" in blocked and "over_provision" in blocked and '"GPUs"' in blocked
    box = b.element(f"[id='{param_box_id('b', 'over_provision')}']")
    assert box.get_attribute("value") == "0.5"  # left as typed
    assert [j["id"] for j in _jobs(server, "/simulations", trace["id"])] == [first["id"]]  # no job submitted

    _type(b, param_box_id("b", "over_provision"), "1.5")
    _type(b, "sim-gpus", "8")
    b.click("sim-submit", "the replay button")
    b.wait(lambda: _submitted(b.text("sim-form-message")), "the replay to start")
    latest = _jobs(server, "/simulations", trace["id"])[0]
    assert latest["id"] != first["id"]
    stored = server.api.get(f"/simulations/{latest['id']}").json()["params"]
    assert stored["compare_policy"]["params"]["over_provision"] == 1.5 and stored["cluster"]["n_gpus"] == 8
    assert not b.text(param_error_id("b", "over_provision")) and not b.text("sim-gpus-error")
    b.assert_console_clean()


def test_advise_and_workload_block_an_invalid_number(browser, server, trace):  # noqa: F811
    b = browser
    _signed_in(b, server.key)
    b.open(f"/traces/{trace['id']}/advise")
    _type(b, "adv-gpus", "0")
    b.click("adv-submit", "the advise button")
    said = b.wait(lambda: b.text("adv-gpus-error"), "the GPU budget's message")
    assert said == "0 is out of range: a whole number >= 1" and "Not submitted" in b.text("adv-message")
    assert _jobs(server, "/advice", trace["id"]) == []

    b.open(f"/traces/{trace['id']}/workload")
    b.wait(lambda: "None yet" in (b.text("wl-history") or ""), "the workload form")
    before = _jobs(server, "/jobs", trace["id"], kind="workload")
    _type(b, "wl-steps", "")
    _type(b, "wl-samples", "2.5")
    b.click("wl-submit", "the generate button")
    assert b.wait(lambda: b.text("wl-steps-error"), "the steps' message") == "required: a whole number >= 1"
    assert b.text("wl-samples-error") == "2.5 is not a whole number" and "Not submitted" in b.text("wl-form-message")
    assert _jobs(server, "/jobs", trace["id"], kind="workload") == before
    b.assert_console_clean()


def _new_key(srv, name: str) -> tuple[int, str]:
    made = srv.api.post("/keys", json={"name": name}).json()
    return made["id"], made["key"]


def _refused(srv, key: str) -> bool:
    return httpx.get(srv.base + "/api/v1/me", headers={"X-API-Key": key}).status_code == 401


def test_revoking_the_sessions_own_key_asks_then_returns_to_sign_in(browser, server):  # noqa: F811
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    b = browser
    key_id, key = _new_key(server, "revoked from its own session")
    _signed_in(b, key)
    b.open("/team")
    row = b.element(f"#team-keys tr[data-key-id='{key_id}']", "this session's key")
    assert "this session" in row.text
    row.find_element("css selector", "button").click()
    dialog = WebDriverWait(b.d, 30).until(EC.alert_is_present())
    assert "key of this session" in dialog.text and "signs you out" in dialog.text
    dialog.accept()
    b.wait(lambda: "/sign-in" in b.d.current_url and b.text("sign-in-ended"), "the sign-in page")
    assert "You revoked the API key this session was signed in with" in b.text("sign-in-ended")
    assert RAW_401 not in b.d.find_element("tag name", "body").text
    assert _refused(server, key)  # really revoked
    b.open("/team")  # the session is over: the page asks to sign in
    b.wait(lambda: "/sign-in" in b.d.current_url, "the sign-in redirect")
    b.assert_console_clean()


def test_a_key_revoked_elsewhere_sends_the_next_action_to_sign_in(browser, server, trace):  # noqa: F811
    b = browser
    key_id, key = _new_key(server, "revoked elsewhere")
    _signed_in(b, key)
    b.open(f"/traces/{trace['id']}/simulate")
    b.element("sim-submit", "the replay form", clickable=True)
    assert server.api.delete(f"/keys/{key_id}").status_code in (200, 204)
    b.wait(lambda: _refused(server, key), "the revocation to take effect")
    b.click("sim-submit", "the replay button")  # its callback meets the API's 401
    b.wait(lambda: "/sign-in" in b.d.current_url and b.text("sign-in-ended"), "the sign-in page")
    assert "no longer accepts its key" in b.text("sign-in-ended")
    assert f"next=%2Ftraces%2F{trace['id']}%2Fsimulate" in b.d.current_url
    assert RAW_401 not in b.d.find_element("tag name", "body").text
    b.assert_console_clean()


def test_the_jobs_rerun_form_refuses_text_that_is_not_a_number(browser, server, trace):  # noqa: F811
    b = browser
    server.wait_ready(trace["id"])
    b.wait(lambda: _jobs(server, "/jobs", trace["id"], kind="longtail"), "the trace's longtail job")
    _signed_in(b, server.key)
    b.open(f"/jobs?trace_id={trace['id']}&kind=longtail")
    b.click("#jobs-table tr[data-kind=longtail] button", "the longtail job's re-run button")  # (polled: found afresh)
    b.wait(lambda: "Parameters of job" in (b.text("rerun-form") or ""), "the re-run form with the job's parameters")
    before = len(_jobs(server, "/jobs", trace["id"], kind="longtail"))
    box = "[data-param=tail_fraction] input"
    _type(b, box, "0.2x")
    b.click("rerun-submit", "the run button")
    said = b.wait(lambda: b.css("[data-param=tail_fraction] .field-error")[0].text, "the field's message")
    # refused as typed: a browser's number box would have sent nothing (the analysis' default)
    assert said.startswith("'0.2x' is not a number") and "Not submitted" in b.text("rerun-message")
    assert len(_jobs(server, "/jobs", trace["id"], kind="longtail")) == before
    _type(b, box, "0.25")
    b.click("rerun-submit", "the run button")
    started = b.wait(lambda: "Started job" in (b.text("rerun-message") or "") and b.text("rerun-message"), "the run")
    job = server.api.get(f"/jobs/{int(started.split()[2])}").json()
    assert job["kind"] == "longtail" and job["params"]["tail_fraction"] == 0.25
    assert not b.css("[data-param=tail_fraction] .field-error")[0].text
    b.assert_console_clean()


def test_compare_of_two_gpu_only_traces_says_what_they_lack(browser, server, shared_fixtures):  # noqa: F811
    """Issue 32, item 9: no four empty panels for two Kineto traces, one line instead."""
    b = browser
    kineto = shared_fixtures / "kineto"
    a = server.upload([kineto / "sampled_rank-0.json.gz"], "gpu only A")
    c = server.upload([kineto / "sampled_rank-1.json.gz"], "gpu only B")
    _signed_in(b, server.key)
    b.open(f"/compare?a={a['id']}&b={c['id']}")
    said = b.wait(lambda: b.text("cmp-lacking"), "what the traces lack")
    assert "rollout lengths" in said and "stage timings" in said and "GPU trace diff" in said
    for row in ("cmp-lengths-row", "cmp-stages-row"):
        assert not b.element(row).is_displayed(), f"{row} shown with no data"
    b.wait(lambda: b.chart("cmp-diff-chart"), "the GPU trace diff")
    b.assert_console_clean()
