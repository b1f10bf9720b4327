"""Policy parameters in the Simulate and Advise forms, in a real browser against a real
server and worker: a re-run opens the form with the job's policy parameters filled in;
changed, they go to the request as `params`; a replay whose parameters make its policy
replay identically to another says so; the Advise form sweeps the policies ticked."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from core.simulator.policies import POLICIES
from tests.dashboard.browser.test_browser import Browser, _submitted, browser, downloads, server  # noqa: F401
from tests.helpers import synthetic_rows, write_packed_dir

pytestmark = pytest.mark.browser


def param_box(b: Browser, which: str, name: str):
    """The input of a policy parameter (Dash renders a dict id as its sorted JSON)."""
    pid = json.dumps({"form": "sim", "name": name, "policy": which, "type": "policy-param"}, separators=(",", ":"))
    return b.element(f"[id='{pid}'] input, input[id='{pid}']", f"the {name} box of policy {which.upper()}")


def set_number(b: Browser, which: str, name: str, value) -> None:
    from selenium.webdriver.common.keys import Keys

    box = param_box(b, which, name)
    box.send_keys(Keys.CONTROL, "a")  # (clear() bypasses React)
    box.send_keys(Keys.DELETE)
    box.send_keys(str(value))


def latest(srv, path: str, trace_id: int) -> dict:
    items = srv.api.get(path, params={"trace_id": trace_id}).json()["items"]
    return srv.api.get(f"{path}/{items[0]['id']}").json()


def test_policy_parameters_round_trip_through_the_simulate_form(browser, server, tmp_path):  # noqa: F811
    b = browser
    folder = write_packed_dir(tmp_path / "params", synthetic_rows(steps=2, groups=8, n=4, seed=5))
    trace = server.upload(sorted(folder.iterdir()), "policy parameters")
    body = {
        "trace_id": trace["id"],
        "policy": "sync",
        "compare_policy": {"kind": "partial", "params": {"over_provision": 1.25}},
        "uncertainty": False,
    }
    first = server.api.post("/simulations", json=body).json()
    b.sign_in(server.key)
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]"), "the traces page")
    b.open(f"/traces/{trace['id']}/simulate?rerun={first['id']}")
    b.wait(lambda: b.text("sim-rerun-note"), "the re-run form")
    assert param_box(b, "b", "over_provision").get_attribute("value") == "1.25"
    assert param_box(b, "b", "finished_groups").get_attribute("value") == ""  # null: the step's groups

    # over_provision 1 with finished_groups unset makes partial sync: the page says so
    set_number(b, "b", "over_provision", 1)
    b.click("sim-submit", "the replay button")
    b.wait(lambda: _submitted(b.text("sim-form-message")), "the replay to start")
    note = b.wait(lambda: b.text("sim-equivalent"), "the equivalence note", timeout=120)
    job = latest(server, "/simulations", trace["id"])
    assert job["id"] != first["id"]
    assert job["params"]["compare_policy"]["params"] == {
        **asdict(POLICIES["partial"].resolve({})),
        "over_provision": 1.0,
    }
    assert job["result"]["b"]["config"]["policy"]["equivalent_to"] == "sync"
    assert "partial with finished_groups null, over_provision 1.0" in note and "replays identically to sync" in note
    assert job["result"]["b"]["makespan_s"] == pytest.approx(job["result"]["a"]["makespan_s"], rel=1e-12)
    b.assert_console_clean()


def test_advise_sweeps_the_policies_ticked(browser, server, tmp_path):  # noqa: F811
    b = browser
    folder = write_packed_dir(tmp_path / "advise", synthetic_rows(steps=2, groups=8, n=4, seed=6))
    trace = server.upload(sorted(folder.iterdir()), "advise on two policies")
    kinds = server.api.get("/simulations/presets").json()["policies"]
    b.sign_in(server.key)
    b.wait(lambda: b.css("#traces-table tr[data-trace-id]"), "the traces page")
    b.open(f"/traces/{trace['id']}/advise")
    boxes = b.wait(lambda: b.css("#adv-policies input[type=checkbox]"), "the policy checklist")
    assert [x.get_attribute("value") for x in boxes] == kinds and all(x.is_selected() for x in boxes)
    for box in boxes[2:]:  # keep the first two
        box.click()
    b.click("adv-submit", "the advise button")
    b.wait(lambda: _submitted(b.text("adv-message")), "the advice to start")
    job = latest(server, "/advice", trace["id"])
    assert job["params"]["policies"] == kinds[:2]
    b.assert_console_clean()
