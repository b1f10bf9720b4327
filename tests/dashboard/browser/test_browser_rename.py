"""Renaming a trace from its Overview in a real browser: the header and the API follow,
an empty name is refused on the page, and nothing answers HTTP >= 400 or logs a
console error."""

from __future__ import annotations

import re

import pytest

from tests.dashboard.browser.test_browser import Browser, browser, downloads, server  # noqa: F401
from tests.helpers import synthetic_rows, write_packed_dir

pytestmark = pytest.mark.browser

# uvicorn's access lines: '... "POST /_dash-update-component HTTP/1.1" 200 OK'
ACCESS = re.compile(r'"[A-Z]+ (\S+) HTTP/[\d.]+" (\d{3})')


def failed_requests(log: str) -> list[str]:
    return [f"{m.group(2)} {m.group(1)}" for m in ACCESS.finditer(log) if int(m.group(2)) >= 400]


def set_name(b: Browser, value: str) -> None:
    from selenium.webdriver.common.keys import Keys

    box = b.element("trace-rename-name", "the name field", clickable=True)
    box.send_keys(Keys.CONTROL, "a")  # (clear() leaves a React input's value in place)
    box.send_keys(Keys.DELETE)
    box.send_keys(value)
    b.click("trace-rename-save", "the rename button")


def test_rename_on_the_overview(browser, server, tmp_path):  # noqa: F811
    b = browser
    folder = write_packed_dir(tmp_path / "rename_run", synthetic_rows(steps=2, groups=8, n=2, seed=61))
    trace = server.upload(sorted(folder.iterdir()), "before rename")
    b.sign_in(server.key)
    b.open(f"/traces/{trace['id']}")
    b.wait(lambda: b.text("trace-name") == "before rename", "the header's name")
    log_start = server.log.stat().st_size

    set_name(b, "dapo 32B, run 7")
    b.wait(lambda: "dapo 32B, run 7" in (b.text("trace-rename-message") or ""), "the rename's confirmation")
    b.wait(lambda: b.text("trace-name") == "dapo 32B, run 7", "the header to follow")
    assert server.api.get(f"/traces/{trace['id']}").json()["name"] == "dapo 32B, run 7"

    set_name(b, "   ")  # refused on the page, not sent
    b.wait(lambda: "Give the trace a name" in (b.text("trace-rename-message") or ""), "the empty name's message")
    assert server.api.get(f"/traces/{trace['id']}").json()["name"] == "dapo 32B, run 7"

    b.open("/traces")  # the list shows the new name
    b.wait(lambda: "dapo 32B, run 7" in (b.text("traces-table") or ""), "the renamed trace in the list")
    b.assert_console_clean()
    with server.log.open("rb") as f:
        f.seek(log_start)
        seen = f.read().decode("utf-8", "replace")
    assert "/_dash-update-component" in seen  # the access log is there to be read
    assert not failed_requests(seen), failed_requests(seen)
