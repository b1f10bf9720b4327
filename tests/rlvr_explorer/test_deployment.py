"""docker-compose.yml and Dockerfile: no Docker engine here, so check what can be checked:
the file parses, services are wired as documented, and every command is a real CLI entry
point the tests also run."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import zipfile

import pytest
import yaml
from alembic.script import ScriptDirectory
from typer.main import get_command

from backend.store.migrate import alembic_config
from rlvr_explorer.cli import app
from tests.conftest import ROOT

COMPOSE = ROOT / "docker-compose.yml"
WORKER_COMPOSE = ROOT / "docker-compose.worker.yml"
CHECK_COMPOSE = ROOT / "deploy" / "compose-check.yml"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_services_and_dependencies(compose):
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "migrate", "api", "worker"}
    for name in ("postgres", "redis", "api", "worker"):
        assert "healthcheck" in services[name], name
    assert services["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert {"pgdata", "uploads"} <= set(compose["volumes"])
    # The API and the worker share the upload folder (large uploads are ingested by a worker).
    assert services["api"]["volumes"] == services["worker"]["volumes"]
    env = services["worker"]["environment"]
    assert env["DATABASE_URL"].startswith("postgresql://")
    assert env["CELERY_BROKER_URL"].startswith("redis://")


def test_every_service_restarts_and_checks_health(compose):
    services = compose["services"]
    for name in ("postgres", "redis", "api", "worker"):
        assert services[name]["restart"] == "unless-stopped", name
    # The published port is configurable (the compose check picks a free one).
    assert services["api"]["ports"] == ["${RLVR_PORT:-8000}:8000"]
    assert "ports" not in services["worker"]


def test_remote_worker_file_matches_the_worker_service(compose):
    """docker-compose.worker.yml: the same image and command, Postgres and Redis by URL."""
    remote = yaml.safe_load(WORKER_COMPOSE.read_text())["services"]["worker"]
    local = compose["services"]["worker"]
    assert remote["image"] == local["image"] and remote["command"][:2] == local["command"][:2]
    assert {"DATABASE_URL", "CELERY_BROKER_URL", "RLVR_DATA_DIR"} <= set(remote["environment"])
    assert remote["volumes"][0].endswith(":/data")
    assert remote["healthcheck"]["test"] == local["healthcheck"]["test"]


def test_check_overrides_only_settings(compose):
    """deploy/compose-check.yml changes environment only, of services that exist."""
    override = yaml.safe_load(CHECK_COMPOSE.read_text())["services"]
    assert set(override) <= set(compose["services"])
    assert all(set(service) == {"environment"} for service in override.values())


def test_dockerfile_runs_as_non_root_without_expose():
    lines = [line.split() for line in (ROOT / "Dockerfile").read_text().splitlines() if line and line[0].isupper()]
    assert not [line for line in lines if line[0] == "EXPOSE"]
    assert [line for line in lines if line[0] == "USER"][-1][1] != "root"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests"} <= set(ignored)


def test_commands_are_cli_entry_points(compose):
    cli_commands = set(get_command(app).commands)  # type: ignore[attr-defined]
    for name in ("migrate", "api", "worker"):
        command = compose["services"][name]["command"]
        assert command[0] == "rlvr-explorer"
        assert command[1] in cli_commands, command


def test_regular_install_ships_and_finds_the_migrations(tmp_path):
    """A wheel (what the image installs, not editable) carries the migrations as package
    data, and an installed copy finds and runs them through importlib.resources."""
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(ROOT)], check=True, cwd=tmp_path)
    (wheel,) = wheels.glob("rlvr_explorer-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "migrations/env.py",
        "migrations/script.py.mako",
        "migrations/versions/0001_initial_schema.py",
        "migrations/versions/0002_job_part_worker.py",
        "dashboard/assets/style.css",
    } <= names
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, cwd=tmp_path)
    probe = (
        "import pathlib, sys, backend.store.migrate as m\n"
        "from alembic.script import ScriptDirectory\n"
        "cfg = m.alembic_config()\n"
        "where = pathlib.Path(cfg.get_main_option('script_location'))\n"
        "assert pathlib.Path(m.__file__).is_relative_to(sys.argv[1]), m.__file__\n"
        "assert where.is_relative_to(sys.argv[1]), where\n"
        "assert (where / 'versions' / '0001_initial_schema.py').is_file()\n"
        "print(ScriptDirectory.from_config(cfg).get_current_head())\n"
        "m.upgrade('sqlite:///' + sys.argv[2])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target), "RLVR_DATA_DIR": str(tmp_path / "data")}
    env.pop("DATABASE_URL", None), env.pop("RLVR_DATABASE_URL", None)
    out = subprocess.run(
        [sys.executable, "-c", probe, str(target), str(tmp_path / "db.sqlite3")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    source_head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert out.stdout.split()[-1] == source_head
    tables = sqlite3.connect(tmp_path / "db.sqlite3").execute("select name from sqlite_master").fetchall()
    assert ("job_parts",) in tables


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose (Debian package) not installed")
@pytest.mark.parametrize(
    "files, env",
    [
        ([COMPOSE], {}),
        ([COMPOSE, CHECK_COMPOSE], {}),
        (
            [WORKER_COMPOSE],
            {
                "DATABASE_URL": "postgresql://u:p@db/rlvr",
                "CELERY_BROKER_URL": "redis://r:6379/0",
                "RLVR_DATA_PATH": "/mnt/rlvr",
            },
        ),
    ],
    ids=["compose", "with-check-overrides", "remote-worker"],
)
def test_docker_compose_config_validates(files, env):
    args = [arg for f in files for arg in ("-f", str(f))]
    result = subprocess.run(
        ["docker-compose", *args, "config", "-q"], capture_output=True, text=True, env={**os.environ, **env}, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
