"""The `rlvr-explorer` command: serve, api, worker, migrate, ingest, watch, demo, create-team."""

from __future__ import annotations

import os
import signal
import socket
import sys
import tempfile
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated

import orjson
import typer
from sqlalchemy import select
from tqdm import tqdm

from rlvr_explorer.cli.help import ReadableCommand
from rlvr_explorer.cli.input_errors import ingest_error_lines
from rlvr_explorer.cli.output import CommandGroup, JsonFlag, emit, fail

# Commands whose module is imported only when one of them runs or the help lists them:
# the what-if commands import the simulator (scipy, every policy), a third of an
# `ingest`'s start-up. name -> module registering it (tests/rlvr_explorer/test_cli_lazy.py checks it).
LAZY_COMMANDS = {name: "rlvr_explorer.cli.whatif" for name in ("simulate", "advise", "policies", "generate")}
LAZY_COMMANDS |= {name: "rlvr_explorer.cli.engine" for name in ("calibrate-engine", "engine-replay")}


class _LazyGroup(CommandGroup):
    """CommandGroup with LAZY_COMMANDS loaded on first use."""

    def _load_lazy(self, names) -> None:
        import importlib

        from typer.main import get_command_from_info

        for module in dict.fromkeys(LAZY_COMMANDS[n] for n in names if n not in self.commands):
            importlib.import_module(module)  # its commands register on `app`
            for info in app.registered_commands:
                if info.callback is not None and info.callback.__module__ == module:
                    cmd = get_command_from_info(
                        info, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=app.rich_markup_mode
                    )
                    if cmd.name:
                        self.commands.setdefault(cmd.name, cmd)

    def get_command(self, ctx, cmd_name):
        if cmd_name in LAZY_COMMANDS:
            self._load_lazy([cmd_name])
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx):
        self._load_lazy(LAZY_COMMANDS)
        return super().list_commands(ctx)

    def format_help(self, ctx, formatter):
        self._load_lazy(LAZY_COMMANDS)
        return super().format_help(ctx, formatter)


app = typer.Typer(
    help="RLVR Explorer: explore RLVR training traces.",
    no_args_is_help=True,
    cls=_LazyGroup,
    pretty_exceptions_enable=False,
)

LOCAL_TEAM = "local"
# The database's INTEGER columns hold at most this; the API takes the same bounds.
INT_MAX = 2**31 - 1
# tqdm's monitor thread only re-checks stalled bars; without it the CLI stays one thread,
# so an ingest may read Kineto files in forked processes (backend/formats/kineto_ahead.py).
tqdm.monitor_interval = 0


def command(*args, **kwargs):
    """`app.command` with readable --help (rlvr_explorer.cli.help)."""
    return app.command(*args, cls=ReadableCommand, **kwargs)


def progress_bar(desc: str):
    """(bar, progress callback): a tqdm bar on a terminal; when the output is not a terminal
    (scripts, CI logs) nothing, so the log holds the summary once instead of bar redraws."""
    bar = tqdm(
        total=100, unit="%", desc=desc, bar_format="{l_bar}{bar}| {n:.0f}% {postfix}", disable=not sys.stderr.isatty()
    )

    def progress(fraction: float, message: str) -> None:
        bar.n = min(100, round(fraction * 100))
        bar.set_postfix_str(message[:60], refresh=False)
        bar.refresh()

    return bar, progress


def _settings():
    from backend.settings import get_settings

    return get_settings()


@command()
def migrate(as_json: JsonFlag = False) -> None:
    """Apply the database migrations (alembic upgrade head)."""
    from backend.store.migrate import upgrade

    upgrade(_settings().db_url)
    where = _redact(_settings().db_url)
    emit({"database": where, "at_head": True}, f"database at head: {where}", as_json)


def ensure_schema() -> None:
    """Commands that read or write the database first bring it to the schema's head
    (idempotent), so a fresh data folder needs no `migrate` first."""
    from backend.store.migrate import upgrade

    upgrade(_settings().db_url)


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


@command("create-team")
def create_team(
    name: Annotated[str, typer.Argument(help="The team's name")],
    as_json: JsonFlag = False,
) -> None:
    """Create a team and print its API key (shown once)."""
    from backend.auth import create_team as _create
    from backend.store.db import session_scope

    ensure_schema()
    with session_scope() as session:
        team, key = _create(session, name)
        team_id = team.id
    text = (
        f"created team {name!r} (id {team_id}); its API key, shown only now (use it as --api-key or "
        f"RLVR_API_KEY, or sign in to the dashboard with it), is on the next line:\n{key}"
    )
    emit({"id": team_id, "name": name, "api_key": key}, text, as_json)


def local_team_key() -> tuple[int, str]:
    """The embedded team: created on first use, its key kept in the data folder. A
    revoked (or lost) key file gets a new key of the same team: its traces stay."""
    from backend.auth import add_key, team_for_key
    from backend.auth import create_team as _create
    from backend.store.db import session_scope
    from backend.store.models import Team

    key_file = _settings().data_dir / "local_team_key"
    with session_scope() as session:
        if key_file.exists():
            key = key_file.read_text().strip()
            team = team_for_key(session, key)
            if team is not None:
                return team.id, key
        team = session.scalars(select(Team).where(Team.name == LOCAL_TEAM)).first()
        if team is None:
            team, key = _create(session, LOCAL_TEAM)
        else:
            _row, key = add_key(session, team.id, "local (serve)")
        key_file.write_text(key)
        key_file.chmod(0o600)
        return team.id, key


def team_id_of(api_key: str | None) -> int:
    if api_key is None:
        return local_team_key()[0]
    from backend.auth import team_for_key
    from backend.store.db import session_scope

    with session_scope() as session:
        team = team_for_key(session, api_key)
        if team is None:
            raise typer.BadParameter("no team has this API key", param_hint="--api-key")
        return team.id


@command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(exists=True, help="Files, folders or archives")],
    name: Annotated[str | None, typer.Option(help="Trace name (default: the run folder's or archive's name)")] = None,
    format: Annotated[str | None, typer.Option(metavar="FORMAT", help="Force a format instead of detecting it")] = None,
    max_response_len: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=INT_MAX,
            metavar="TOKENS",
            help="The run's max response length (truncation is measured against it)",
        ),
    ] = None,
    as_json: JsonFlag = False,
    api_key: Annotated[
        str | None, typer.Option(envvar="RLVR_API_KEY", metavar="KEY", help="Team key (default: local team)")
    ] = None,
    into: Annotated[
        int | None, typer.Option(min=1, max=INT_MAX, metavar="TRACE_ID", help="Attach the files to this existing trace")
    ] = None,
    tokenizer: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            help="The run's tokenizer (a tokenizer.json, or a local Hugging Face model folder holding one): "
            "rollout dumps' lengths are then token counts, else characters",
        ),
    ] = None,
) -> None:
    """Ingest trace files into the database, then queue the default analyses."""
    from backend.formats import FORMATS
    from backend.formats.base import InputError
    from backend.ingest.naming import default_trace_name
    from backend.ingest.service import accept_upload, changed_options
    from backend.ingest.uploads import local_files
    from backend.store.db import session_scope

    if format is not None and format not in FORMATS:  # before reading anything
        raise typer.BadParameter(f"unknown format '{format}'; one of: {', '.join(FORMATS)}", param_hint="--format")
    settings = _settings()
    ensure_schema()
    team_id = team_id_of(api_key)
    stored = local_files(paths + _tokenizer_paths(tokenizer))
    if not stored.files:
        raise typer.BadParameter("no files found", param_hint="PATHS")
    if into is not None:
        _attach_into(into, team_id, stored, format, as_json)
        return
    bar, progress = progress_bar("ingest")
    try:
        with session_scope() as session:
            outcome = accept_upload(
                session,
                settings,
                team_id=team_id,
                stored=stored,
                name=name or default_trace_name(stored.files, paths),
                forced_format=format,
                max_response_len=max_response_len,
                inline=True,
                progress=progress,
            )
            session.commit()
            done_here = _analyse_if_small(outcome, settings)
            summary = ingest_summary(session, outcome.trace, already_uploaded=not outcome.created)
            summary["analysed_here"] = done_here
            summary["queued_analyses"] = [k for k in summary["queued_analyses"] if k not in done_here]
            if not outcome.created:
                changed = changed_options(
                    outcome.trace, name=name, forced_format=format, max_response_len=max_response_len
                )
                summary["changed_options"] = {"--" + k.replace("_", "-"): v for k, v in changed.items()}
    except InputError as exc:  # every error of the upload, one per line
        fail(ingest_error_lines(exc, stored.files, format, settings))
    finally:
        bar.close()
    emit(summary, ingest_text, as_json)
    if summary.get("changed_options"):
        raise typer.Exit(1)  # the options asked for were not applied


def _analyse_if_small(outcome, settings) -> list[str]:
    """A new small GPU trace's analyses, run here (rlvr_explorer/cli/inline_analyses.py)."""
    from rlvr_explorer.cli.inline_analyses import is_small, run_queued_here

    trace = outcome.trace
    if not outcome.created or not is_small(trace.n_gpu_events or 0, trace.n_samples or 0, settings):
        return []
    return run_queued_here(trace.id, settings)


def ingest_summary(session, trace, *, already_uploaded: bool) -> dict:
    """What was ingested, which files were skipped and why, which analyses were queued and
    which do not apply (with the data they need)."""
    from backend.ingest.truncation import trace_truncation
    from backend.jobs.analyses import NotApplicable, check_applicable
    from backend.store.models import JobStatus
    from backend.store.queries.jobs import list_jobs
    from core.analysis.registry import ANALYSES

    analyses = list_jobs(session, team_id=trace.team_id, trace_id=trace.id, kinds=ANALYSES, include_result=False)
    queued = [j.kind for j in reversed(analyses) if j.status != JobStatus.FAILED]
    truncation = trace_truncation(trace)
    not_applicable = {}
    for kind in ANALYSES:
        try:
            check_applicable(kind, trace)
        except NotApplicable as exc:
            not_applicable[kind] = exc.needs
    return {
        "id": trace.id,
        "name": trace.name,
        "status": trace.status,
        "format": trace.source_format,
        "truncation": truncation.definition() if trace.n_samples else None,
        # with stop reasons recorded, the share at the cap is another figure (else the same)
        "at_cap": truncation.at_cap_definition() if trace.n_samples and truncation.stop_reason else None,
        "steps": trace.n_steps,
        "samples": trace.n_samples,
        "turns": trace.n_turns,
        "tool_calls": trace.n_tool_calls,
        "rank_timings": trace.n_rank_timings,
        "gpu_events": trace.n_gpu_events,
        "max_response_len": trace.max_response_len,
        "already_uploaded": already_uploaded,
        "skipped": list((trace.meta or {}).get("skipped") or []),
        "queued_analyses": list(dict.fromkeys(queued)),
        "workers_seen": _live_workers(),
        "not_applicable": not_applicable,
    }


def _live_workers() -> int:
    from backend.jobs.presence import live_workers

    return live_workers(_settings())


def _count(n) -> str:
    return f"{n or 0:,}"


def ingest_text(s: dict) -> str:
    """The human summary of `ingest_summary`."""
    if s["already_uploaded"]:
        head = f"already uploaded: trace {s['id']} ({s['name']}) has the same content; nothing was ingested"
    else:
        head = f"ingested trace {s['id']} ({s['name']}), format {s['format'] or '?'}"
    rows = [
        ("steps", s["steps"]),
        ("samples", s["samples"]),
        ("turns", s["turns"]),
        ("tool calls", s["tool_calls"]),
        ("rank timings", s["rank_timings"]),
        ("GPU events", s["gpu_events"]),
    ]
    lines = [head, *_changed_lines(s, s.get("changed_options")), *(f"  {lb:<14}{_count(n):>12}" for lb, n in rows)]
    if s.get("truncation"):
        lines.append(f"  {s['truncation']}")
        lines += [f"  {s['at_cap']}"] if s.get("at_cap") else []  # the second figure: whatever the stop reason
    if s["skipped"]:
        lines += ["", f"skipped {len(s['skipped'])} file(s) (not read):"]
        lines += [f"  {note.removeprefix('skipped ')}" for note in s["skipped"]]
    lines.append("")
    if s.get("analysed_here"):
        lines.append(f"analyses done (a small trace: in this process): {', '.join(s['analysed_here'])}")
    if s["queued_analyses"]:
        lines.append(f"queued analyses: {', '.join(s['queued_analyses'])}")
        lines.append(_worker_line(s.get("workers_seen", 0)))
    elif not s["already_uploaded"] and not s.get("analysed_here"):
        lines.append("no analyses queued")
    lines += _not_applicable_lines(s)
    lines.append(f"next: `rlvr-explorer simulate {s['id']}` replays it; the dashboard shows it at /traces/{s['id']}")
    return "\n".join(lines)


GPU_ONLY_TABLES = ("samples", "turns", "tool_calls", "rank_timings")  # all empty: a profiler trace alone


def _not_applicable_lines(s: dict) -> list[str]:
    """The analyses the trace lacks data for: with the files that would bring it, or in
    one line for a GPU-only trace (none of them is about GPU timelines)."""
    kinds = s["not_applicable"]
    if not kinds:
        return []
    if s["gpu_events"] and not any(s[t] for t in GPU_ONLY_TABLES):
        return [
            f"not applicable to a GPU-only trace: {', '.join(kinds)} (they read the run's rollouts, rewards or "
            "timings: attach such files with --into, see docs/formats.md)"
        ]
    lines = ["not run, the trace lacks their data; files that would bring it (attach them with --into):"]
    return lines + [f"  {kind}: {needs}" for kind, needs in kinds.items()]


def _changed_lines(s: dict, changed: dict | None) -> list[str]:
    if not changed:
        return []
    lines = ["your options differ from that trace's; ingesting again with them would change:"]
    lines += [f"  {option}: {what}" for option, what in changed.items()]
    lines.append(
        f"they were not applied: delete trace {s['id']} first (Traces page, or DELETE /api/v1/traces/{s['id']})"
    )
    return lines


def _tokenizer_paths(tokenizer: Path | None) -> list[Path]:
    """The tokenizer.json to read with the files (it travels as one of them)."""
    from backend.formats.base import InputError
    from backend.formats.tokenizer import tokenizer_file

    if tokenizer is None:
        return []
    try:
        return [tokenizer_file(tokenizer)]
    except InputError as exc:
        raise typer.BadParameter(exc.reason, param_hint="--tokenizer") from None


# Set while `serve` ingests its demo trace: the worker it starts next runs the analyses.
SERVE_STARTS_WORKER: ContextVar[bool] = ContextVar("serve_starts_worker", default=False)


def _worker_line(workers: int) -> str:
    if workers:
        return f"  a worker is running ({workers} seen): they start now"
    if SERVE_STARTS_WORKER.get():
        return "  the worker `serve` starts next runs them"
    return (
        "  no worker seen running on this machine: they start when one runs "
        "(`rlvr-explorer worker`, or everything with `rlvr-explorer serve`)"
    )


def _attach_into(trace_id: int, team_id: int, stored, format: str | None, as_json: bool) -> None:
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
            fail(ingest_error_lines(exc, stored.files, format, _settings()))
        session.expire_all()
        trace = session.get_one(Trace, trace_id)
        summary = {
            "id": trace.id,
            "name": trace.name,
            "attached": outcome.created,
            "tables": outcome.tables,
            "steps_touched": len(outcome.steps),
            "steps": trace.n_steps,
            "samples": trace.n_samples,
            "skipped": outcome.skipped,
        }
    emit(summary, attach_text, as_json)


def attach_text(s: dict) -> str:
    """The human summary of an attach (`ingest --into`)."""
    if not s["attached"]:
        return f"already attached: trace {s['id']} ({s['name']}) has this content; nothing changed"
    lines = [
        f"attached to trace {s['id']} ({s['name']}): {', '.join(s['tables']) or 'nothing new'}",
        f"  {s['steps_touched']:,} steps touched; the trace now has {_count(s['steps'])} steps, "
        f"{_count(s['samples'])} samples",
    ]
    if s["skipped"]:
        lines += [f"  skipped {note.removeprefix('skipped ')}" for note in s["skipped"]]
    lines.append("its summaries are refreshed; the analyses that read the new data run again")
    return "\n".join(lines)


@command()
def watch(
    run_dir: Annotated[Path, typer.Argument(exists=True, file_okay=False, help="The run folder the trainer writes")],
    into: Annotated[int | None, typer.Option(help="Stream into this existing trace")] = None,
    name: Annotated[str | None, typer.Option(help="Name of a new live trace (default: the folder name)")] = None,
    server: Annotated[str, typer.Option(envvar="RLVR_API_URL", help="The server")] = "http://127.0.0.1:8000",
    api_key: Annotated[str | None, typer.Option(envvar="RLVR_API_KEY", help="Team key (default: local team)")] = None,
    interval: Annotated[float, typer.Option(help="Seconds between looks at the folder")] = 2.0,
    idle_exit: Annotated[float | None, typer.Option(help="Stop after this many seconds without news")] = None,
    close: Annotated[bool, typer.Option("--close/--keep-open", help="Close the trace on exit")] = True,
    as_json: JsonFlag = False,
) -> None:
    """Follow a run folder as the trainer writes it and stream new steps to a trace.

    Progress goes to stderr; when it stops, a summary (or one JSON object) on stdout."""
    from rlvr_explorer.cli.watch import run_watch

    key = api_key if api_key is not None else local_team_key()[1]
    report: dict = {}
    code = run_watch(
        run_dir,
        server=server,
        api_key=key,
        into=into,
        name=name or live_trace_name(run_dir),
        interval=interval,
        idle_exit=idle_exit,
        close=close,
        report=report,
    )
    if report:
        text = (
            f"watched trace {report['trace_id']}: {report['steps']} steps, {report['units']} files or log lines sent"
            + ("; closed" if report["closed"] else "; left open (live)")
        )
        emit({**report, "exit_code": code}, text, as_json)
    raise typer.Exit(code)


def live_trace_name(run_dir: Path) -> str:
    """A live trace's default name: the run folder's name and when the watch began, so
    several live runs of one folder name stay apart in the trace list."""
    from datetime import datetime

    return f"{run_dir.resolve().name} (live {datetime.now().strftime('%Y-%m-%d %H:%M')})"


@command()
def demo(
    steps: Annotated[int, typer.Option(min=1, max=100_000, help="Training steps")] = 60,
    groups: Annotated[int, typer.Option(min=1, max=100_000, help="Prompt groups per step")] = 128,
    n_sampling: Annotated[int, typer.Option(min=1, max=1024, help="Samples per prompt group")] = 8,
    as_json: JsonFlag = False,
    api_key: Annotated[
        str | None, typer.Option(envvar="RLVR_API_KEY", metavar="KEY", help="Team key (default: local team)")
    ] = None,
) -> None:
    """Ingest a synthetic long-tailed trace made by the project's own generator."""
    with tempfile.TemporaryDirectory(prefix="rlvr-demo-") as tmp:
        path = write_demo_trace(Path(tmp), steps, groups, n_sampling)
        ingest(
            [path],
            name="demo: synthetic long-tailed GRPO run",
            format=None,
            max_response_len=8192,
            as_json=as_json,
            api_key=api_key,
        )


def write_demo_trace(folder: Path, steps: int, groups: int, n_sampling: int) -> Path:
    from core.workload.synthetic import packed_length_rows

    folder.mkdir(parents=True, exist_ok=True)
    for rows in packed_length_rows(steps, groups, n_sampling, max_response_len=8192):
        step = rows[0]["step"]
        with (folder / f"packed_lengths_step_{step}.jsonl").open("wb") as out:
            out.writelines(orjson.dumps(r) + b"\n" for r in rows)
    return folder


@command()
def worker(
    concurrency: Annotated[int, typer.Option(min=1, max=256, help="Worker processes")] = 2,
    loglevel: Annotated[str, typer.Option(metavar="LEVEL", help="DEBUG, INFO, WARNING or ERROR")] = "INFO",
    nice: Annotated[
        int, typer.Option(min=0, max=19, help="Lower the worker's CPU priority by this much (beside an API)")
    ] = 0,
    queues: Annotated[
        str | None, typer.Option(metavar="NAMES", help="Read only these queues (comma-separated), e.g. engine")
    ] = None,
) -> None:
    """Run a Celery worker (embedded transport, or the broker in CELERY_BROKER_URL)."""
    from rlvr_explorer.cli.lifecycle import watch_parent
    from workers.celery_app import celery_app

    if nice > 0:
        os.nice(nice)
    watch_parent()
    argv = ["worker", f"--loglevel={loglevel}", f"--concurrency={concurrency}", "--without-gossip", "--without-mingle"]
    celery_app.worker_main(argv + ([f"--queues={queues}"] if queues else []))


@command()
def api(
    host: Annotated[str, typer.Option(metavar="HOST", help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on")] = 8000,
    dashboard: Annotated[bool, typer.Option(help="Also serve the dashboard at /")] = True,
    workers: Annotated[int, typer.Option(help="Server processes (uvicorn workers)")] = 1,
) -> None:
    """Run the REST API (and the dashboard) with uvicorn."""
    if workers > 1:
        from rlvr_explorer.cli.api_processes import run_api_processes
        from rlvr_explorer.cli.lifecycle import PortInUse

        os.environ.setdefault("RLVR_API_URL", f"http://127.0.0.1:{port}")
        factory = "create_server" if dashboard else "create_api_server"
        try:
            code = run_api_processes(host, port, workers, f"rlvr_explorer.server:{factory}")
        except PortInUse as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
        raise typer.Exit(code)
    _run_api(host, port, dashboard)


def _run_api(host: str, port: int, dashboard: bool, sock: socket.socket | None = None) -> None:
    import uvicorn

    os.environ.setdefault("RLVR_API_URL", f"http://127.0.0.1:{port}")
    from rlvr_explorer.server import create_server

    config = uvicorn.Config(create_server(with_dashboard=dashboard), host=host, port=port, log_level="info")
    uvicorn.Server(config).run(sockets=[sock] if sock is not None else None)


@command()
def serve(
    host: Annotated[str, typer.Option(metavar="HOST", help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on")] = 8000,
    seed_demo: Annotated[bool, typer.Option("--demo/--no-demo", help="Ingest the demo trace when empty")] = True,
    concurrency: Annotated[int, typer.Option(min=1, max=256, help="Worker processes")] = 2,
) -> None:
    """Everything on one machine: migrations, a worker process, API and dashboard (and an
    engine worker, when an engine is installed: RLVR_ENGINE_PYTHON).

    The port is bound first (a busy port fails at once, exit 1); SIGTERM or SIGINT stop
    the worker with the server."""
    from backend.store.db import session_scope
    from backend.store.queries.traces import count_traces
    from rlvr_explorer.cli.lifecycle import (
        PortInUse,
        bind_listener,
        exit_on_signal,
        start_engine_worker,
        start_worker,
        stop_worker,
        warm_replay_loop,
    )

    try:
        sock = bind_listener(host, port)
    except PortInUse as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    signal.signal(signal.SIGTERM, exit_on_signal)
    with sock:
        os.environ.setdefault("RLVR_API_URL", f"http://127.0.0.1:{port}")
        migrate()
        team_id, key = local_team_key()
        with session_scope() as session:
            empty = not count_traces(session, team_id=team_id)
        if seed_demo and empty:
            token = SERVE_STARTS_WORKER.set(True)
            demo(api_key=key)
            SERVE_STARTS_WORKER.reset(token)
        worker_proc = start_worker(concurrency)
        engine_proc = start_engine_worker()
        warming = warm_replay_loop()
        try:
            typer.echo(f"\n  RLVR Explorer: http://{host}:{port}/   (API docs: http://{host}:{port}/api/v1/docs)")
            typer.echo(f"  Team API key: {key}\n")
            _run_api(host, port, True, sock)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):  # cleanup is bounded: let it finish
                signal.signal(sig, signal.SIG_IGN)
            stop_worker(worker_proc)
            if engine_proc is not None:
                stop_worker(engine_proc)
            stop_worker(warming, grace_s=0.0)
