"""Pages that start jobs, in a real browser against a real server and worker (the
fixtures of tests/dashboard/browser/test_browser.py): the Advise form proposes the model the trace's name
names, and a submit's "started" banner turns to finished (or failed) with its job."""

from __future__ import annotations

import pytest

from tests.dashboard.browser.test_browser import Browser, browser, downloads, server  # noqa: F401
from tests.dashboard.browser.test_browser_replay_params import latest
from tests.helpers import synthetic_rows, write_packed_dir

pytestmark = pytest.mark.browser


def banner(b: Browser, element_id: str) -> tuple[str, str] | None:
    """(text, alert kind) of the banner `element_id`, or None while it is absent."""
    found = b.css(f"#{element_id}")
    if not found:
        return None
    kinds = [c for c in (found[0].get_attribute("class") or "").split() if c.startswith("alert-")]
    return found[0].text, (kinds[0].removeprefix("alert-") if kinds else "")


def test_advise_proposes_the_named_model_and_its_banner_follows_the_job(browser, server, tmp_path):  # noqa: F811
    b = browser
    folder = write_packed_dir(tmp_path / "dapo", synthetic_rows(steps=2, groups=4, n=2, seed=8))
    trace = server.upload(sorted(folder.iterdir()), "verl dapo 32b")
    b.sign_in(server.key)
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]"), "the traces page")
    b.open(f"/traces/{trace['id']}/advise")
    note = b.wait(lambda: b.text("adv-model-proposed"), "the model proposal")
    assert note == "Model Qwen2.5-32B: proposed from the trace name ('verl dapo 32b')."
    boxes = b.wait(lambda: b.css("#adv-policies input[type=checkbox]"), "the policy checklist")
    for box in boxes[1:]:  # one policy: a short sweep
        box.click()
    b.click("adv-submit", "the advise button")
    text, kind = b.wait(lambda: banner(b, "adv-started"), "the started banner")
    job = latest(server, "/advice", trace["id"])
    assert job["params"]["model"]["name"] == "Qwen2.5-32B"  # the proposed model went to the request
    if kind == "info":  # (a quick job may already be done by the first look)
        assert text == f"Advice {job['id']} started: its progress is below."
    done = b.wait(lambda: (got := banner(b, "adv-started")) and got[1] != "info" and got, "the banner to follow",
                  timeout=180)  # fmt: skip
    assert latest(server, "/advice", trace["id"])["status"] == "succeeded"
    assert done == (f"Advice {job['id']} finished: its results are below.", "ok")
    b.wait(lambda: b.css("#adv-ranking"), "the ranking")
    # packed lengths, no timings: no noise model, so no interval (never a zero-width one)
    assert "uncalibrated: no interval" in b.text("adv-ranking")
    b.assert_console_clean()


def test_a_replays_started_banner_turns_to_finished(browser, server, tmp_path):  # noqa: F811
    b = browser
    folder = write_packed_dir(tmp_path / "replay", synthetic_rows(steps=2, groups=4, n=2, seed=9))
    trace = server.upload(sorted(folder.iterdir()), "replay banner")
    b.sign_in(server.key)
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]"), "the traces page")
    b.open(f"/traces/{trace['id']}/simulate")
    b.wait(lambda: "None yet" in (b.text("sim-history") or ""), "the empty replay list")
    b.click("sim-submit", "the replay button")
    b.wait(lambda: banner(b, "sim-started"), "the started banner")
    done = b.wait(lambda: (got := banner(b, "sim-started")) and got[1] != "info" and got, "the banner to follow",
                  timeout=180)  # fmt: skip
    job = latest(server, "/simulations", trace["id"])
    assert job["status"] == "succeeded" and done == (f"Replay {job['id']} finished: its results are below.", "ok")
    b.assert_console_clean()
