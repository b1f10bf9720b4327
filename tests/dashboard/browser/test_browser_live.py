"""Growing traces in a real browser (headless Chromium, the fixtures of
tests/dashboard/browser/test_browser.py): files added on the Add files tab, and a run followed by
`rlvr-explorer watch` whose new steps appear on the open page without a reload."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT
from tests.dashboard.browser.test_browser import Browser, browser, downloads, responses, server  # noqa: F401
from tests.helpers import jsonl, synthetic_rows

pytestmark = pytest.mark.browser


def step_path(folder, rows):
    path = folder / f"packed_lengths_step_{rows[0]['step']}.jsonl"
    path.write_bytes(jsonl(rows))
    return path


def p50_line(b: Browser, steps: list[int]):
    """The distributions page's p50 line once it shows exactly these steps."""

    def ready():
        data = b.chart("dist-percentiles")
        line = next((t for t in data or [] if t.get("name") == "p50"), None)
        return line if line and list(line["x"]) == steps else None

    return b.wait(ready, f"the p50 line over steps {steps}")


def test_add_files_tab_attaches_and_reports_errors(browser, server, tmp_path):  # noqa: F811
    b = browser
    per_step = synthetic_rows(steps=3, groups=8, n=4, seed=11)
    folder = tmp_path / "run"
    folder.mkdir()
    trace = server.upload([step_path(folder, per_step[0]), step_path(folder, per_step[1])], "attach me")
    b.sign_in(server.key)
    b.wait(lambda: b.text("team-name") == "local", "signed in")

    b.open(f"/traces/{trace['id']}/files")
    b.wait(lambda: "2 steps" in (b.text("attach-have") or ""), "what the trace holds")
    assert "no GPU events" in b.text("attach-have")
    bad = folder / "sub"
    bad.mkdir()
    (bad / "packed_lengths_step_2.jsonl").write_bytes(b'{"step": 2, "input": 5, "output": [1, "x"]}\n')
    b.css("#attach-upload input[type=file]")[0].send_keys(str(bad / "packed_lengths_step_2.jsonl"))
    err = b.wait(lambda: b.text("attach-error"), "the attach error")
    assert "packed_lengths_step_2.jsonl" in err and "line 1" in err
    assert server.api.get(f"/traces/{trace['id']}").json()["n_steps"] == 2  # nothing added

    b.css("#attach-upload input[type=file]")[0].send_keys(str(step_path(folder, per_step[2])))
    ok = b.wait(lambda: b.text("attach-created"), "the attach confirmation")
    assert "3 steps" in ok and f"{3 * 8 * 4:,} samples" in ok
    b.open(f"/traces/{trace['id']}/distributions")
    line = p50_line(b, [0, 1, 2])
    assert line["y"] == pytest.approx([np.percentile(responses(r), 50) for r in per_step])
    b.assert_console_clean()


def test_watch_streams_steps_into_the_open_page(browser, server, tmp_path):  # noqa: F811
    b = browser
    per_step = synthetic_rows(steps=4, groups=8, n=4, seed=12)
    run = tmp_path / "live-run"
    run.mkdir()
    step_path(run, per_step[0])
    log = tmp_path / "watch.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlvr_explorer",
            "watch",
            str(run),
            "--name",
            "live run",
            "--server",
            server.base,
            "--api-key",
            server.key,
            "--interval",
            "0.3",
        ],
        cwd=ROOT,
        env=server.env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        state = run / ".rlvr-watch.json"
        b.wait(lambda: state.exists(), "the watcher's state file")
        trace_id = json.loads(state.read_text())["trace_id"]
        b.wait(lambda: server.api.get(f"/traces/{trace_id}").json()["n_samples"], "step 0 on the server")
        b.sign_in(server.key)
        b.wait(lambda: b.text("team-name") == "local", "signed in")
        b.open(f"/traces/{trace_id}/distributions")
        b.wait(lambda: (b.text("trace-live") or "").lower() == "live", "the live badge")
        p50_line(b, [0])
        b.d.execute_script("window.__same_page = true;")
        for step in (1, 2, 3):
            step_path(run, per_step[step])
            line = p50_line(b, list(range(step + 1)))
            assert line["y"][-1] == pytest.approx(np.percentile(responses(per_step[step]), 50))
            assert b.d.execute_script("return window.__same_page === true;"), "the page reloaded"
        proc.send_signal(signal.SIGTERM)  # the watcher closes the trace on its way out
        assert proc.wait(timeout=30) == 0, log.read_text()[-2000:]
        b.wait(lambda: (b.text("trace-live") or "").lower() == "closed", "the closed badge")
        assert server.api.get(f"/traces/{trace_id}").json()["live"] is False
        b.assert_console_clean()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_metric_explorer_smooths_aligns_and_shares_its_url(browser, server, downloads, tmp_path):  # noqa: F811
    import csv

    b = browser
    folder = tmp_path / "m"
    folder.mkdir()
    runs = []
    for i, (offset, n_steps) in enumerate(((0, 6), (3, 4))):
        per_step = synthetic_rows(steps=n_steps, groups=4, n=4, seed=20 + i)
        files = [
            step_path(folder / f"r{i}", rows) if (folder / f"r{i}").mkdir(exist_ok=True) is None else None
            for rows in per_step
        ]
        log = folder / f"r{i}" / "metrics.jsonl"
        # step 2 is missing from the log: a gap
        log.write_bytes(
            jsonl([{"step": s, "data": {"timing_s/gen": 10.0 + s * (i + 1)}} for s in range(n_steps) if s != 2])
        )
        runs.append((server.upload([*files, log], f"metrics run {i}"), per_step, offset))
    (a, per_a, _), (c, per_c, _) = runs
    b.sign_in(server.key)
    b.wait(lambda: b.text("team-name") == "local", "signed in")
    b.open(f"/metrics?traces={a['id']},{c['id']}&keys=t_gen,response/p99&smooth=ema&w=0.5&offsets={c['id']}:3")

    def lines():
        data = b.chart("metrics-chart") or []
        got = {(t["meta"]["trace_id"], t["meta"]["key"]): t for t in data if t.get("meta")}
        return got if len(got) == 4 else None

    got = b.wait(lines, "four lines (2 traces x 2 series)")
    gen_a = got[(a["id"], "t_gen")]
    # EMA w=0.5 over the logged steps 0,1,3,4,5 of 10+s; a break (None) where step 2 is missing
    raw = [10.0 + s for s in (0, 1, 3, 4, 5)]
    ema = [raw[0]]
    for v in raw[1:]:
        ema.append(0.5 * ema[-1] + 0.5 * v)
    assert [x for x in gen_a["x"] if x is not None] == [0, 1, 3, 4, 5]
    assert [y for y in gen_a["y"] if y is not None] == pytest.approx(ema)
    gen_c = got[(c["id"], "t_gen")]
    assert [x for x in gen_c["x"] if x is not None] == [3, 4, 6]  # steps 0, 1, 3 moved by the offset 3
    p99 = got[(a["id"], "response/p99")]
    want = [np.percentile(responses(r), 99) for r in per_a]
    ema99 = [want[0]]
    for v in want[1:]:
        ema99.append(0.5 * ema99[-1] + 0.5 * v)
    assert p99["y"] == pytest.approx(ema99)

    # another smoothing: the URL follows, so the view can be shared
    b.d.find_element("css selector", "#metrics-smooth input[value=none]").click()
    b.wait(lambda: "smooth=" not in b.d.current_url and "keys=t_gen" in b.d.current_url, "the URL without smoothing")
    b.wait(
        lambda: [y for y in (lines() or {}).get((a["id"], "t_gen"), {}).get("y", []) if y is not None] == raw,
        "the raw values",
    )
    b.d.find_element("css selector", "#metrics-csv").click()
    path = downloads / "metrics.csv"
    b.wait(lambda: path.exists() and path.stat().st_size > 0, "the CSV download")
    rows = list(csv.DictReader(path.open()))
    assert {r["key"] for r in rows} == {"t_gen", "response/p99"}
    gen_rows = [r for r in rows if r["key"] == "t_gen" and int(r["trace_id"]) == c["id"]]
    assert [int(r["step"]) for r in gen_rows] == [3, 4, 6]
    assert [float(r["raw"]) for r in gen_rows] == [10.0, 12.0, 16.0]
    b.assert_console_clean()


def test_compare_many_traces_with_offsets_and_differences(browser, server, tmp_path):  # noqa: F811
    b = browser
    runs = []
    for i in range(6):
        folder = tmp_path / f"c{i}"
        folder.mkdir()
        per_step = synthetic_rows(steps=3, groups=4, n=2 + i % 3, seed=40 + i)
        files = [step_path(folder, rows) for rows in per_step]
        log = folder / "metrics.jsonl"
        log.write_bytes(jsonl([{"step": s, "data": {"timing_s/step": 10.0 * (i + 1) + s}} for s in range(3)]))
        runs.append((server.upload([*files, log], f"cmp run {i}"), per_step))
    ids = [t["id"] for t, _ in runs]
    b.sign_in(server.key)
    b.wait(lambda: b.text("team-name") == "local", "signed in")
    b.open(f"/compare/many?traces={','.join(map(str, ids))}&offsets={ids[5]}:10")
    lengths = b.wait(lambda: (d := b.chart("cmpn-lengths")) and len(d) == 12 and d, "p50 and p99 of six runs")
    p50 = {t["meta"]["trace_id"]: t for t in lengths if t["meta"]["series"] == "p50"}
    assert p50[ids[0]]["x"] == [0, 1, 2] and p50[ids[5]]["x"] == [10, 11, 12]
    assert p50[ids[3]]["y"] == pytest.approx([np.percentile(responses(r), 50) for r in runs[3][1]])

    def cell(figure: str, trace_id: int, part: str) -> float | None:
        v = b.d.execute_script(
            "var c = document.querySelector("
            f"'#cmpn-diff-table tr[data-figure={figure}] td[data-trace-id=\"{trace_id}\"][data-part={part}]');"
            "return c ? c.getAttribute('data-value') : null;"
        )
        return None if v in (None, "") else float(v)

    b.wait(lambda: cell("t_step", ids[5], "ratio") is not None, "the differences table")
    for i, tid in enumerate(ids):
        assert cell("t_step", tid, "value") == pytest.approx(10.0 * (i + 1) + 1)  # mean of steps 0..2
        assert cell("samples", tid, "value") == sum(responses(r).size for r in runs[i][1])
    assert cell("t_step", ids[2], "delta") == pytest.approx(31.0 - 11.0)
    assert cell("t_step", ids[2], "ratio") == pytest.approx(31.0 / 11.0)
    stages = b.wait_chart("cmpn-stages")
    assert len(next(iter(stages.values()))["x"]) == 6
    assert f"offsets={ids[5]}" in b.d.current_url.replace("%3A", ":")
    b.assert_console_clean()
