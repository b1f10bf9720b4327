"""Shared test fixtures: where the real traces live, and skipping when they don't."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = ROOT.parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    """The real traces in ../shared/fixtures; tests that need them skip when absent."""
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(f"real trace fixtures not found at {SHARED_FIXTURES} (see its README)")
    return SHARED_FIXTURES


# --- databases -------------------------------------------------------------------------
# Storage and API tests run against both the embedded default (SQLite) and Postgres.
# Each backend gets a fresh database for the session, created by the migrations.

import os  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import ExitStack, contextmanager  # noqa: E402

PG_ADMIN_URL = os.environ.get("RLVR_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("RLVR_TEST_REDIS", "redis://127.0.0.1:6379/15")


def _create_pg_database() -> tuple[str, str]:
    import psycopg

    name = f"rlvr_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    return name, f"{base}/{name}"


def _drop_pg_database(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _services_reachable() -> str | None:
    """None when the Postgres and Redis servers answer, else what does not."""
    import psycopg
    import redis

    try:
        psycopg.connect(PG_ADMIN_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"Postgres at {PG_ADMIN_URL} is not reachable ({str(exc).strip()[:120]})"
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        return f"Redis at {REDIS_URL} is not reachable ({exc})"
    return None


@contextmanager
def deployment(shape: str, data_dir: Path) -> Iterator[dict[str, str]]:
    """Environment of one deployment shape, with a freshly migrated database:
    sqlite = the embedded default (SQLite file + filesystem Celery transport);
    postgres = Postgres + Redis (a queue of its own). Without the servers the postgres
    shape skips with the reason, except where RLVR_REQUIRE_SERVICES is set (CI): then
    it fails."""
    from backend.store.migrate import upgrade

    if shape == "sqlite":
        url = f"sqlite:///{data_dir / 'test.sqlite3'}"
        upgrade(url)
        yield {"RLVR_DATABASE_URL": url, "RLVR_DATA_DIR": str(data_dir), "RLVR_BROKER_URL": "filesystem://"}
        return
    missing = _services_reachable()
    if missing:
        if os.environ.get("RLVR_REQUIRE_SERVICES"):
            pytest.fail(missing)
        pytest.skip(missing)
    name, url = _create_pg_database()
    try:
        upgrade(url)
        # A queue of its own: test sessions may share the Redis server.
        yield {
            "RLVR_DATABASE_URL": url,
            "RLVR_DATA_DIR": str(data_dir),
            "RLVR_BROKER_URL": REDIS_URL,
            "RLVR_QUEUE_NAME": name,
        }
    finally:
        _drop_pg_database(name)


@pytest.fixture(
    scope="session", params=["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.redis])]
)
def backend_env(request, tmp_path_factory) -> Iterator[dict[str, str]]:
    """The session's deployment of one shape (see `deployment`). The data folder is
    shared with worker processes: the session's `worker` reads this database and queue
    (and sweeps them) from the first test that asks for it to the session's end."""
    with deployment(request.param, tmp_path_factory.mktemp(f"data-{request.param}")) as environment:
        yield environment


OWN_DEPLOYMENT = "own_deployment"


@pytest.fixture()
def env(request, backend_env, tmp_path_factory, monkeypatch):
    """Point the settings at the test deployment: the session's, or, for a test marked
    `own_deployment`, a fresh one of the same shape that no other process reads (no
    session worker sends its outbox or sweeps its inline ingestions)."""
    from backend.store.db import reset_caches

    with ExitStack() as stack:
        environment = backend_env
        if request.node.get_closest_marker(OWN_DEPLOYMENT):
            shape = request.node.callspec.params["backend_env"]
            environment = stack.enter_context(deployment(shape, tmp_path_factory.mktemp(f"own-{shape}")))
        for key, value in environment.items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("DATABASE_URL", raising=False)
        monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
        reset_caches()
        yield environment
        reset_caches()


@pytest.fixture()
def team_key(env) -> str:
    """A fresh team (so tests never see each other's traces) and its API key."""
    from backend.auth import create_team
    from backend.store.db import session_scope

    with session_scope() as session:
        _team, key = create_team(session, f"team-{uuid.uuid4().hex[:8]}")
    return key


@pytest.fixture()
def client(env):
    from fastapi.testclient import TestClient

    from backend.api import create_app

    with TestClient(create_app()) as c:
        yield c


@pytest.fixture()
def api(client, team_key):
    """A test client that sends the team's key."""
    client.headers["X-API-Key"] = team_key
    return client


# --- real worker processes -------------------------------------------------------------

import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402


def start_worker(environment: dict[str, str], log_path: Path, concurrency: int = 1) -> subprocess.Popen:
    """A real Celery worker process (`rlvr-explorer worker`), as deployments run it."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(environment)
    log = log_path.open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr_explorer", "worker", f"--concurrency={concurrency}", "--loglevel=INFO"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited early:\n{log_path.read_text()[-3000:]}")
        if b"ready." in log_path.read_bytes():
            return proc
        time.sleep(0.2)
    raise RuntimeError(f"worker did not start:\n{log_path.read_text()[-3000:]}")


def stop_worker(proc: subprocess.Popen) -> None:
    """Stop a worker and every process of its session (start_worker gives it its own):
    a warm shutdown first, then SIGKILL to whatever is left (the main process past 20 s,
    a pool child it left behind). A worker that outlived its test would go on sweeping
    and running the jobs of later tests on the same database, so one still there after
    that fails the test."""
    import signal

    from tests.helpers import kill_session, live_session_pids, wait_session_gone

    if proc.poll() is None:
        # A warm shutdown is asked of the main process; it stops its own pool.
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    kill_session(proc.pid)
    proc.wait()
    wait_session_gone(proc.pid, 30)
    left = live_session_pids(proc.pid)
    if left:
        raise RuntimeError(f"worker {proc.pid}: processes {left} of it still run after SIGKILL")


WORKER_PART_SAMPLES = 300


@pytest.fixture(scope="session")
def worker(backend_env, tmp_path_factory):
    """One real worker per deployment shape (filesystem transport or Redis)."""
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    # Tiny parts, so analyses of test-sized traces take the chunked (Celery group) path.
    proc = start_worker(
        {**backend_env, "RLVR_ANALYSIS_PART_SAMPLES": str(WORKER_PART_SAMPLES)}, log_path, concurrency=2
    )
    yield proc
    stop_worker(proc)


def wait_for_job(api, job_id: int, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api.get(f"/api/v1/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish in {timeout}s: {job}")


# Markers follow from what a test uses, so `-m "not postgres and not browser"` selects the
# quick local loop (CONTRIBUTING.md): the postgres shape of backend_env marks itself.
MARKERS_BY_FIXTURE = {"browser": ("browser",), "private_pg": ("postgres",), "backend_env": ("store",)}


@functools.cache
def _starts_processes(path: Path) -> bool:
    """A test module that imports subprocess or multiprocessing starts processes."""
    text = path.read_text()
    return any(f"import {m}" in text for m in ("subprocess", "multiprocessing"))


def pytest_collection_modifyitems(items):
    # the callback coverage counts what every browser test before it fired
    items.sort(key=lambda item: Path(str(item.path)).name == CALLBACK_COVERAGE_FILE)
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            for marker in MARKERS_BY_FIXTURE.get(fixture, ()):
                item.add_marker(marker)
        if "worker" in getattr(item, "fixturenames", ()) or _starts_processes(Path(str(item.path))):
            item.add_marker("processes")
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("backend_env") == "postgres":
            item.add_marker("postgres")  # also when a test picks the shape (indirect)
            item.add_marker("redis")


def pytest_terminal_summary(terminalreporter):
    """The truth audit's counts (tests/dashboard/test_truth_audit.py), when it ran; the browser
    suite's callback coverage, when it was checked."""
    if BROWSER_RUN.summary:
        terminalreporter.section("dashboard callbacks")
        for line in BROWSER_RUN.summary:
            terminalreporter.write_line(line)
    audit = next((m for name, m in sys.modules.items() if name.endswith("test_truth_audit")), None)
    if audit is not None and getattr(audit, "AUDIT", None):
        terminalreporter.section("truth audit")
        for line in audit.audit_report():
            terminalreporter.write_line(line)


# --- the browser suite -----------------------------------------------------------------
# Every browser test's page checks (HTTP >= 400, console errors, a failed callback's
# message) run after it; the dashboard's callbacks they fire are recorded by the test
# server (dashboard.app.CALLBACK_LOG_ENV) into one file for the session, which
# tests/dashboard/browser/test_browser_callbacks_coverage.py, run last, checks against the app's callbacks.
BROWSER_FILES = "test_browser*.py"
CALLBACK_COVERAGE_FILE = "test_browser_callbacks_coverage.py"


class BrowserRun:
    """The session's browser tests: the callback log, and why this run is not the whole
    browser suite (a subset: callback coverage is then reported, not enforced)."""

    def __init__(self) -> None:
        self._log: Path | None = None
        self.partial: list[str] = []
        self.summary: list[str] = []

    @property
    def log(self) -> Path:
        """The file the test servers append the callbacks they ran to."""
        if self._log is None:
            import tempfile

            self._log = Path(tempfile.mkdtemp(prefix="rlvr-callbacks-")) / "callbacks.jsonl"
        return self._log

    def calls(self) -> list[dict]:
        import json

        if self._log is None or not self._log.exists():
            return []
        return [json.loads(line) for line in self._log.read_text().splitlines()]


BROWSER_RUN = BrowserRun()  # one per test session (process)


@pytest.fixture(scope="session")
def browser_run() -> BrowserRun:
    return BROWSER_RUN


@pytest.fixture(autouse=True)
def _browser_page_checks(request):
    """Any browser test fails on an HTTP error, a console error or a callback's error
    message in its pages (a test that provokes one says so: `browser.allow_http`)."""
    if "browser" not in request.fixturenames:
        yield
        return
    browser = request.getfixturevalue("browser")
    browser.start_test()
    yield
    browser.assert_console_clean()


def pytest_unconfigure(config):
    import shutil

    if BROWSER_RUN._log is not None:
        shutil.rmtree(BROWSER_RUN._log.parent, ignore_errors=True)


def pytest_deselected(items):
    BROWSER_RUN.partial += [f"{item.nodeid} deselected" for item in items if item.get_closest_marker("browser")]


def pytest_collection_finish(session):
    collected = {Path(str(item.path)).name for item in session.items}
    for path in sorted((ROOT / "tests").rglob(BROWSER_FILES)):
        if path.name not in collected:
            BROWSER_RUN.partial.append(f"{path.relative_to(ROOT)} not collected")


def pytest_runtest_logreport(report):
    if "browser" in report.keywords and (report.skipped or report.failed):
        BROWSER_RUN.partial.append(f"{report.nodeid} {'skipped' if report.skipped else 'failed'}")
