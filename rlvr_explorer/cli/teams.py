"""Team administration on the server (direct database access, like `create-team`): the
`keys` command group (list, create, revoke a team's API keys) and `quota` (a team's
storage against its quota; set its own). Registered on the main CLI app by
rlvr_explorer.cli."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated

import orjson
import typer

from rlvr_explorer.cli.help import ReadableCommand, ReadableGroup
from rlvr_explorer.cli.main import INT_MAX, app, ensure_schema
from rlvr_explorer.cli.output import JsonFlag

keys_app = typer.Typer(help="A team's API keys: list, create, revoke.", no_args_is_help=True, cls=ReadableGroup)
app.add_typer(keys_app, name="keys")

TeamArg = Annotated[str, typer.Argument(metavar="TEAM", help="The team's name")]


def _team(session, name: str):
    from sqlalchemy import select

    from backend.store.models import Team

    team = session.scalars(select(Team).where(Team.name == name)).first()
    if team is None:
        raise typer.BadParameter(f"no team named {name!r}", param_hint="TEAM")
    return team


def _when(value) -> str | None:
    return value.isoformat(timespec="seconds") if value is not None else None


def key_record(row) -> dict:
    return {
        "id": row.id,
        "name": row.name,
        "prefix": row.prefix,
        "created_at": _when(row.created_at),
        "last_used_at": _when(row.last_used_at),
        "revoked_at": _when(row.revoked_at),
        "active": row.revoked_at is None,
    }


def keys_text(team: str, keys: list[dict]) -> str:
    lines = [f"team {team!r}: {sum(k['active'] for k in keys)} active key(s) of {len(keys)}"]
    for k in keys:
        state = "active" if k["active"] else f"revoked {k['revoked_at']}"
        used = f"last used {k['last_used_at']}" if k["last_used_at"] else "never used"
        lines.append(f"  {k['id']:>6}  {k['name'][:30]:<30} {(k['prefix'] or '?') + '…':<14} {state}, {used}")
    return "\n".join(lines)


@keys_app.command("list", cls=ReadableCommand)
def list_keys(team: TeamArg, as_json: JsonFlag = False) -> None:
    """List a team's keys (never the keys themselves): id, name, prefix, when used."""
    from backend.auth import team_keys
    from backend.store.db import session_scope

    ensure_schema()
    with session_scope() as session:
        keys = [key_record(k) for k in team_keys(session, _team(session, team).id)]
    typer.echo(orjson.dumps({"team": team, "keys": keys}).decode() if as_json else keys_text(team, keys))


@keys_app.command("create", cls=ReadableCommand)
def create_key(
    team: TeamArg,
    name: Annotated[str, typer.Option(metavar="NAME", help="What the key is for")] = "cli",
    as_json: JsonFlag = False,
) -> None:
    """Make a new key for a team and print it (shown once)."""
    from backend.auth import add_key
    from backend.store.db import session_scope

    ensure_schema()
    with session_scope() as session:
        row, key = add_key(session, _team(session, team).id, name)
        record = key_record(row)
    if as_json:
        typer.echo(orjson.dumps({**record, "team": team, "api_key": key}).decode())
        return
    typer.echo(
        f"created key {record['id']} ({name!r}) for team {team!r}; the key, shown only now, is on the next line:"
    )
    typer.echo(key)


@keys_app.command("revoke", cls=ReadableCommand)
def revoke(
    team: TeamArg,
    key_id: Annotated[int, typer.Argument(min=1, max=INT_MAX, metavar="KEY_ID", help="The key's id (`keys list`)")],
    as_json: JsonFlag = False,
) -> None:
    """Revoke a key: every API process refuses it within RLVR_KEY_CACHE_S (even the
    team's last key: make a new one with `keys create`)."""
    from backend.auth import revoke_key
    from backend.store.db import session_scope

    ensure_schema()
    with session_scope() as session:
        row = revoke_key(session, _team(session, team).id, key_id, allow_last=True)
        if row is None:
            raise typer.BadParameter(f"team {team!r} has no key {key_id}", param_hint="KEY_ID")
        record = key_record(row)
    if as_json:
        typer.echo(orjson.dumps({**record, "team": team}).decode())
        return
    from backend.settings import get_settings

    wait = get_settings().key_cache_s
    typer.echo(f"revoked key {key_id} ({record['name']!r}) of team {team!r}; refused everywhere within {wait:g} s")


# Sizes as GNU coreutils read them: K, M, G, T and KiB, MiB, ... are powers of 1024 (as
# the quota is shown), KB, MB, ... powers of 1000.
SIZE_HELP = (
    "bytes, or a number with a unit: K, M, G, T or KiB, MiB, GiB, TiB (powers of 1024), "
    "KB, MB, GB, TB (powers of 1000), e.g. 500M or 1.5GiB; 0: no limit"
)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgt])(i?b)?|(b))?\s*$", re.IGNORECASE)
SIZE_MAX = 2**63 - 1  # the database's BIGINT


def parse_size(text: str) -> int:
    """'1.5G' -> 1610612736 bytes (SIZE_HELP); a usage error naming --set otherwise."""
    match = _SIZE.match(text)
    if match is None:
        raise typer.BadParameter(f"{text!r} is not a size; give {SIZE_HELP}", param_hint="--set")
    number, prefix, suffix = match.group(1), match.group(2), match.group(3)
    base = 1000 if suffix is not None and suffix.lower() == "b" else 1024
    power = "kmgt".index(prefix.lower()) + 1 if prefix else 0
    size = int(Decimal(number) * base**power)
    if size > SIZE_MAX:
        raise typer.BadParameter(f"{text!r} is more than the largest quota ({SIZE_MAX:,} bytes)", param_hint="--set")
    return size


@app.command(cls=ReadableCommand)
def quota(
    team: TeamArg,
    set_bytes: Annotated[
        int | None, typer.Option("--set", parser=parse_size, metavar="SIZE", help=f"The team's own quota: {SIZE_HELP}")
    ] = None,
    default: Annotated[bool, typer.Option("--default", help="Back to the deployment's RLVR_TEAM_QUOTA_BYTES")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Show a team's storage against its quota, or set the team's own quota."""
    from backend.ingest.quota import human_bytes, team_usage
    from backend.settings import get_settings
    from backend.store.db import session_scope

    if set_bytes is not None and default:
        raise typer.BadParameter("give --set or --default, not both", param_hint="--set")
    ensure_schema()
    with session_scope() as session:
        row = _team(session, team)
        if set_bytes is not None or default:
            row.quota_bytes = set_bytes
            session.flush()
        usage = team_usage(session, row.id, get_settings())
        own = row.quota_bytes is not None
    record = {"team": team, "used_bytes": usage.used_bytes, "quota_bytes": usage.quota_bytes, "own_quota": own}
    if as_json:
        typer.echo(orjson.dumps({**record, "traces": usage.traces}).decode())
        return
    limit = human_bytes(usage.quota_bytes) if usage.quota_bytes else "no limit"
    source = "its own" if own else "the deployment's default"
    typer.echo(
        f"team {team!r}: {human_bytes(usage.used_bytes)} used by {usage.traces} trace(s); quota {limit} ({source})"
    )
