"""The chaos run of bench/chaos.py, two minutes of it: several teams' uploads, reads,
analyses and replays while workers are SIGKILLed, Postgres restarted and Redis stopped
(private servers on their own ports). No job stuck or failed without a reason, no row
lost or duplicated, no other team's object read, no 5xx but the 503s of the outages,
and no request left without an answer."""

from __future__ import annotations

import pytest

from bench._servers import ServerUnavailable

MINUTES = 2.0
pytestmark = pytest.mark.processes  # servers and workers of its own


def test_two_minutes_of_chaos():
    from bench.chaos import MUST_BE_ZERO, run

    lines: list[str] = []

    def out(line: str) -> None:
        print(line)
        lines.append(line)

    try:
        figures = run(minutes=MINUTES, teams=3, clients_per_team=2, seed=7, out=out)
    except ServerUnavailable as exc:
        pytest.skip(str(exc))
    table = "\n".join(lines)
    for name in MUST_BE_ZERO:
        assert figures[name] == 0, f"{name}:\n{table}"
    assert sum(figures["faults"].values()) >= 4, table  # faults did happen
    assert figures["uploads acknowledged"] >= 10 and figures["jobs finished"] >= 20, table
    server_errors = [
        f"{kind} {status}"
        for kind, statuses in figures["requests"].items()
        for status in statuses
        if (status.isdigit() and int(status) >= 500 and status != "503") or status.startswith("no answer")
    ]
    assert not server_errors, table
