"""`rlvr-explorer rename TRACE_ID NAME`: the trace's new name (as PATCH /traces/{id})."""

from __future__ import annotations

from typing import Annotated

import typer

from rlvr_explorer.cli.main import INT_MAX, command, ensure_schema, team_id_of
from rlvr_explorer.cli.output import JsonFlag, emit, fail


@command()
def rename(
    trace_id: Annotated[int, typer.Argument(min=1, max=INT_MAX, metavar="TRACE_ID", help="The trace to rename")],
    name: Annotated[str, typer.Argument(metavar="NAME", help="Its new name (1-300 characters)")],
    as_json: JsonFlag = False,
    api_key: Annotated[
        str | None, typer.Option(envvar="RLVR_API_KEY", metavar="KEY", help="Team key (default: local team)")
    ] = None,
) -> None:
    """Rename a trace: the name lists and chart legends show."""
    from backend.ingest.naming import clean_trace_name
    from backend.store.db import session_scope
    from backend.store.models import Trace

    try:
        new = clean_trace_name(name)
    except ValueError as exc:
        fail(str(exc), 1)
    ensure_schema()
    team_id = team_id_of(api_key)
    with session_scope() as session:
        trace = session.get(Trace, trace_id)
        if trace is None or trace.team_id != team_id:
            fail(f"trace {trace_id} not found for this team", 1)
        old, trace.name = trace.name, new
    emit({"id": trace_id, "name": new, "previous_name": old}, f"trace {trace_id} renamed: {old!r} -> {new!r}", as_json)
