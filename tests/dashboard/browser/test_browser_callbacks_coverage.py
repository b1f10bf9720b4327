"""Every callback of the dashboard is fired, on real data, by some browser test.

The list of callbacks comes from the Dash app itself (its callback map, pages
registered); the calls come from the test servers of the session's browser tests, which
record each `_dash-update-component` request (dashboard.app.CALLBACK_LOG_ENV). This test
runs last (tests/conftest.py). In a run of the whole browser suite (`pytest`, or
`-m browser`) a callback no test fired fails it; in a subset (one file, `-k`, a skipped or
failed browser test) the coverage is reported, not enforced. Clientside callbacks run in
the browser and never reach the server: they are not counted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser


# Run in a fresh interpreter: Dash hands the callbacks a module registers at import
# (a view's `@dash.callback`) to the first app a process makes, so an app made here after
# other tests made theirs could lack them.
_LIST_CALLBACKS = """
import json
from dashboard.app import create_dash

app = create_dash("http://127.0.0.1:9")
found = {}
for output, spec in app.callback_map.items():
    function = spec.get("callback")
    if function is not None:  # (clientside callbacks have none)
        page = function.__module__.removeprefix("dashboard.").replace("pages.", "page ")
        trigger = spec["inputs"][0]  # tells apart callbacks of one output (a chart's drill)
        found[output] = f"{page}: {function.__qualname__.split('.')[-1]} ({trigger['id']}.{trigger['property']})"
print(json.dumps(found))
"""


def dashboard_callbacks() -> dict[str, str]:
    """Each server-side callback of the dashboard: its output id -> page and function."""
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", _LIST_CALLBACKS], cwd=root, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def where(output: str, callbacks: dict[str, str]) -> str:
    return f"{callbacks[output]} -> {output.split('@')[0]}"


def test_every_dashboard_callback_is_fired_by_a_browser_test(browser_run):
    callbacks = dashboard_callbacks()
    assert len(callbacks) > 40  # the pages registered (the callback map is not empty)
    calls = browser_run.calls()
    unknown = sorted({c["output"] for c in calls} - set(callbacks))
    assert not unknown, f"callback requests for outputs the app does not have: {unknown}"
    failed = sorted({where(c["output"], callbacks) for c in calls if c["status"] >= 500 or c["error"]})
    assert not failed, "callbacks that failed in a browser test:\n" + "\n".join(failed)

    # fired: it ran and changed something on the page (not only no_update)
    fired = {c["output"] for c in calls if c["status"] == 200 and c.get("updated")}
    missing = sorted(where(o, callbacks) for o in set(callbacks) - fired)
    browser_run.summary.append(f"{len(callbacks) - len(missing)} of {len(callbacks)} fired by the browser tests")
    if browser_run.partial:
        shown = browser_run.partial[:3] + (
            [f"... {len(browser_run.partial) - 3} more"] * (len(browser_run.partial) > 3)
        )
        browser_run.summary.append("not enforced, not the whole browser suite: " + "; ".join(shown))
        return
    assert not missing, f"{len(missing)} dashboard callbacks no browser test fired:\n" + "\n".join(missing)
