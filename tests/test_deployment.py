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
from typer.main import get_command

from backend.cli import app
from tests.conftest import ROOT

COMPOSE = ROOT / "docker-compose.yml"


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
    assert {"migrations/env.py", "migrations/script.py.mako", "migrations/versions/0001_initial_schema.py",
            "migrations/versions/0002_job_part_worker.py", "dashboard/assets/style.css"} <= names
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, cwd=tmp_path)
    probe = (
        "import pathlib, sys, backend.migrate as m\n"
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
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "0002"
    tables = sqlite3.connect(tmp_path / "db.sqlite3").execute("select name from sqlite_master").fetchall()
    assert ("job_parts",) in tables


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose (Debian package) not installed")
def test_docker_compose_config_validates():
    result = subprocess.run(["docker-compose", "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
