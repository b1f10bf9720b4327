"""How every command prints its outcome, whoever reads it (a terminal, a pipe, a log):
a readable summary by default; with --json exactly one JSON object, on one line, and
nothing else on stdout (progress goes to stderr). Errors go to stderr as ``error: ...``
and never as a traceback (RLVR_DEBUG=1 shows the traceback of an unexpected one).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated, NoReturn

import orjson
import typer

from rlvr_explorer.cli.help import ReadableGroup
from rlvr_explorer.errors import error_lines

JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print one JSON object (on one line) for scripts instead of the summary")
]


def emit(record: dict, summary: str | Callable[[dict], str], as_json: bool) -> None:
    """The command's outcome: `record` as one JSON line with --json, else its summary."""
    if as_json:
        typer.echo(orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode())
    else:
        typer.echo(summary(record) if callable(summary) else summary)


def fail(message: str | list[str], code: int = 2) -> NoReturn:
    """Stop the command: the reason (or each of several, one per line) on stderr, exit
    `code` (2: bad input or arguments)."""
    for line in [message] if isinstance(message, str) else message:
        typer.echo(f"error: {line}", err=True)
    raise typer.Exit(code)


def describe(exc: BaseException) -> list[str]:
    """An error no command worded itself, in sentences: a refusal (a ValueError: bad
    input, a quota) as its own words, one line per error; anything else its first line
    marked unexpected; a database or network error names the service. Never a class name."""
    kind = type(exc).__name__
    text = (str(exc).strip().splitlines() or [""])[0]
    if "OperationalError" in kind or "ConnectError" in kind or "ConnectionError" in kind:
        return [
            f"cannot reach a service the command needs ({text or 'no answer'}); check RLVR_DATABASE_URL / the server"
        ]
    if isinstance(exc, ValueError) and text:
        return error_lines(exc)
    return [f"{text or 'the command failed'} (an unexpected error: RLVR_DEBUG=1 shows its traceback)"]


class CommandGroup(ReadableGroup):
    """The CLI's group: readable help (ReadableGroup) and no traceback for any error a
    command did not turn into a message itself."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except Exception as exc:
            # usage errors, Exit and Abort belong to the CLI framework (typer vendors click)
            if type(exc).__module__.startswith(("typer", "click")) or os.environ.get("RLVR_DEBUG"):
                raise
            for line in describe(exc):
                typer.echo(f"error: {line}", err=True)
            raise typer.Exit(1) from None
