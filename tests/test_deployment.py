"""docker-compose.yml and Dockerfile: no Docker engine here, so check what can be checked:
the file parses, services are wired as documented, and every command is a real CLI entry
point the tests also run."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from typer.main import get_command

from rlvr_explorer.cli import app
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


def test_dockerfile_installs_the_project():
    text = (ROOT / "Dockerfile").read_text()
    for folder in ("backend", "workers", "dashboard", "migrations"):
        assert f"COPY {folder}" in text
    assert "pip install" in text and "rlvr-explorer" in text


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose (Debian package) not installed")
def test_docker_compose_config_validates():
    result = subprocess.run(["docker-compose", "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
