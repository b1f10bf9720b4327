"""The `rlvr-explorer` command: serve, api, worker, migrate, ingest, watch, demo, create-team."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import orjson
import typer
from sqlalchemy import func, select
from tqdm import tqdm

app = typer.Typer(help="RLVR Explorer: explore RLVR training traces.", no_args_is_help=True)

LOCAL_TEAM = "local"


def _settings():
    from backend.settings import get_settings

    return get_settings()


@app.command()
def migrate() -> None:
    """Apply the database migrations (alembic upgrade head)."""
    from backend.store.migrate import upgrade

    upgrade(_settings().db_url)
    typer.echo(f"database at head: {_redact(_settings().db_url)}")


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


@app.command("create-team")
def create_team(name: str) -> None:
    """Create a team and print its API key (shown once)."""
    from backend.auth import create_team as _create
    from backend.store.db import session_scope

    with session_scope() as session:
        _team, key = _create(session, name)
    typer.echo(key)


def local_team_key() -> tuple[int, str]:
    """The embedded team: created on first use, its key kept in the data folder."""
    from backend.auth import create_team as _create
    from backend.auth import team_for_key
    from backend.store.db import session_scope

    key_file = _settings().data_dir / "local_team_key"
    with session_scope() as session:
        if key_file.exists():
            key = key_file.read_text().strip()
            team = team_for_key(session, key)
            if team is not None:
                return team.id, key
        from backend.store.models import Team

        stale = session.scalars(select(Team).where(Team.name == LOCAL_TEAM)).first()
        if stale is not None:
            session.delete(stale)
            session.flush()
        team, key = _create(session, LOCAL_TEAM)
        key_file.write_text(key)
        key_file.chmod(0o600)
        return team.id, key


def _team_id(api_key: str | None) -> int:
    if api_key is None:
        return local_team_key()[0]
    from backend.auth import team_for_key
    from backend.store.db import session_scope

    with session_scope() as session:
        team = team_for_key(session, api_key)
        if team is None:
            raise typer.BadParameter("no team has this API key", param_hint="--api-key")
        return team.id


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(exists=True, help="Files, folders or archives")],
    name: Annotated[str | None, typer.Option(help="Trace name")] = None,
    format: Annotated[str | None, typer.Option(help="Force a format")] = None,
    max_response_len: Annotated[int | None, typer.Option(help="Max response length")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="RLVR_API_KEY", help="Team key (default: local team)")] = None,
    into: Annotated[int | None, typer.Option(help="Attach the files to this existing trace")] = None,
) -> None:
    """Ingest trace files into the database, with a progress bar."""
    from backend.formats.base import InputError
    from backend.ingest.service import accept_upload
    from backend.ingest.uploads import local_files
    from backend.store.db import session_scope

    settings = _settings()
    team_id = _team_id(api_key)
    stored = local_files(paths)
    if not stored.files:
        raise typer.BadParameter("no files found", param_hint="PATHS")
    if into is not None:
        _attach_into(into, team_id, stored, format)
        return
    bar = tqdm(total=100, unit="%", desc="ingest", bar_format="{l_bar}{bar}| {n:.0f}% {postfix}")

    def progress(fraction: float, message: str) -> None:
        bar.n = round(fraction * 100)
        bar.set_postfix_str(message)
        bar.refresh()

    try:
        with session_scope() as session:
            outcome = accept_upload(
                session,
                settings,
                team_id=team_id,
                stored=stored,
                name=name or paths[0].name,
                forced_format=format,
                max_response_len=max_response_len,
                inline=True,
                progress=progress,
            )
            trace = outcome.trace
            summary = {
                "id": trace.id,
                "name": trace.name,
                "status": trace.status,
                "format": trace.source_format,
                "steps": trace.n_steps,
                "samples": trace.n_samples,
                "turns": trace.n_turns,
                "tool_calls": trace.n_tool_calls,
                "rank_timings": trace.n_rank_timings,
                "gpu_events": trace.n_gpu_events,
                "already_uploaded": not outcome.created,
            }
    except InputError as exc:
        bar.close()
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    bar.n = 100
    bar.close()
    typer.echo(orjson.dumps(summary).decode())


def _attach_into(trace_id: int, team_id: int, stored, format: str | None) -> None:
    from backend.formats.base import InputError
    from backend.ingest.attach import attach_stored
    from backend.store.db import session_scope
    from backend.store.models import Trace, TraceStatus

    with session_scope() as session:
        trace = session.get(Trace, trace_id)
        if trace is None or trace.team_id != team_id:
            raise typer.BadParameter(f"trace {trace_id} not found", param_hint="--into")
        if trace.status != TraceStatus.READY:
            raise typer.BadParameter(f"trace {trace_id} is {trace.status}, not ready", param_hint="--into")
        try:
            outcome = attach_stored(session, _settings(), trace_id, stored, format)
        except InputError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        session.expire_all()
        trace = session.get(Trace, trace_id)
        summary = {
            "id": trace.id,
            "attached": outcome.created,
            "tables": outcome.tables,
            "steps_touched": len(outcome.steps),
            "steps": trace.n_steps,
            "samples": trace.n_samples,
            "skipped": outcome.skipped,
        }
    typer.echo(orjson.dumps(summary).decode())


@app.command()
def watch(
    run_dir: Annotated[Path, typer.Argument(exists=True, file_okay=False, help="The run folder the trainer writes")],
    into: Annotated[int | None, typer.Option(help="Stream into this existing trace")] = None,
    name: Annotated[str | None, typer.Option(help="Name of a new live trace (default: the folder name)")] = None,
    server: Annotated[str, typer.Option(envvar="RLVR_API_URL", help="The server")] = "http://127.0.0.1:8000",
    api_key: Annotated[str | None, typer.Option(envvar="RLVR_API_KEY", help="Team key (default: local team)")] = None,
    interval: Annotated[float, typer.Option(help="Seconds between looks at the folder")] = 2.0,
    idle_exit: Annotated[float | None, typer.Option(help="Stop after this many seconds without news")] = None,
    close: Annotated[bool, typer.Option("--close/--keep-open", help="Close the trace on exit")] = True,
) -> None:
    """Follow a run folder as the trainer writes it and stream new steps to a trace."""
    from rlvr_explorer.cli.watch import run_watch

    key = api_key if api_key is not None else local_team_key()[1]
    code = run_watch(
        run_dir, server=server, api_key=key, into=into, name=name, interval=interval, idle_exit=idle_exit, close=close
    )
    raise typer.Exit(code)


@app.command()
def demo(
    steps: int = 60,
    groups: int = 128,
    n_sampling: int = 8,
    api_key: Annotated[str | None, typer.Option(envvar="RLVR_API_KEY")] = None,
) -> None:
    """Ingest a synthetic long-tailed trace made by the project's own generator."""
    with tempfile.TemporaryDirectory(prefix="rlvr-demo-") as tmp:
        path = write_demo_trace(Path(tmp), steps, groups, n_sampling)
        ingest([path], name="demo: synthetic long-tailed GRPO run", format=None, max_response_len=8192, api_key=api_key)


def write_demo_trace(folder: Path, steps: int, groups: int, n_sampling: int) -> Path:
    from core.workload.synthetic import packed_length_rows

    folder.mkdir(parents=True, exist_ok=True)
    for rows in packed_length_rows(steps, groups, n_sampling, max_response_len=8192):
        step = rows[0]["step"]
        with (folder / f"packed_lengths_step_{step}.jsonl").open("wb") as out:
            out.writelines(orjson.dumps(r) + b"\n" for r in rows)
    return folder


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option(help="Worker processes")] = 2,
    loglevel: str = "INFO",
) -> None:
    """Run a Celery worker (embedded transport, or the broker in CELERY_BROKER_URL)."""
    from workers.celery_app import celery_app

    celery_app.worker_main(
        ["worker", f"--loglevel={loglevel}", f"--concurrency={concurrency}", "--without-gossip", "--without-mingle"]
    )


@app.command()
def api(
    host: str = "127.0.0.1",
    port: int = 8000,
    dashboard: Annotated[bool, typer.Option(help="Also serve the dashboard at /")] = True,
) -> None:
    """Run the REST API (and the dashboard) with uvicorn."""
    import uvicorn

    os.environ.setdefault("RLVR_API_URL", f"http://127.0.0.1:{port}")
    from rlvr_explorer.server import create_server

    uvicorn.run(create_server(with_dashboard=dashboard), host=host, port=port, log_level="info")


@app.command()
def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    seed_demo: Annotated[bool, typer.Option("--demo/--no-demo", help="Ingest the demo trace when empty")] = True,
    concurrency: int = 2,
) -> None:
    """Everything on one machine: migrations, a worker process, API and dashboard."""
    from backend.store.db import session_scope
    from backend.store.models import Trace

    os.environ.setdefault("RLVR_API_URL", f"http://127.0.0.1:{port}")
    migrate()
    team_id, key = local_team_key()
    with session_scope() as session:
        empty = not session.scalar(select(func.count()).select_from(Trace).where(Trace.team_id == team_id))
    if seed_demo and empty:
        demo(api_key=key)
    worker_proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr_explorer", "worker", f"--concurrency={concurrency}"],
        env={**os.environ},
    )
    typer.echo(f"\n  RLVR Explorer: http://{host}:{port}/   (API docs: http://{host}:{port}/api/v1/docs)")
    typer.echo(f"  Team API key: {key}\n")
    try:
        api(host=host, port=port, dashboard=True)
    finally:
        worker_proc.send_signal(signal.SIGTERM)
        try:
            worker_proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker_proc.kill()
