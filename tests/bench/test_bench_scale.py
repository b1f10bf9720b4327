"""bench/scale.py at a tiny scale (~20k samples): it runs end to end against Postgres and
Redis, prints every figure it promises, and leaves no database behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.conftest import PG_ADMIN_URL, REDIS_URL, _services_reachable

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def _bench_databases() -> set[str]:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'rlvr_bench_%'")}


def test_scale_bench_reports_its_figures_and_cleans_up():
    missing = _services_reachable()
    if missing:
        if os.environ.get("RLVR_REQUIRE_SERVICES"):
            pytest.fail(missing)
        pytest.skip(missing)
    before = _bench_databases()
    out = subprocess.run(
        [
            sys.executable,
            "bench/scale.py",
            "--samples", "20000", "--steps", "10", "--small-traces", "2", "--small-samples", "4000",
            "--pg", PG_ADMIN_URL,
        ],
        cwd=ROOT,
        env={**os.environ, "RLVR_BENCH_REDIS": REDIS_URL},
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "== scale: 20,000-sample trace + 2 x 4,000" in text
    assert "ratio" in text and "peak RSS" in text
    assert "default analyses end to end (2 worker processes)" in text and "'succeeded'" in text
    assert "'failed'" not in text
    for line in ("page distributions", "page imbalance", "Traces list", "Compare of two", "Compare-many"):
        assert line in text
    assert "per million samples" in text
    assert _bench_databases() == before  # its database was dropped
