"""A team's storage and its quota.

A team's storage is the sum of its traces' `stored_bytes`: what each upload (and each
file attached later) took as uploaded, or, once ingested, what it expanded to when that
is more (archives and .gz files). The quota is the team's own (`Team.quota_bytes`, set
with `rlvr-explorer quota`) or the deployment's `team_quota_bytes`; 0 means none.

An upload is refused (413, the message naming quota, usage and the upload's size) before
anything of it is kept: at once when the team is already at its quota, else as soon as
the bytes streamed in pass what is left; once stored, by what it declares it expands to
(archives, .gz) before its trace is created; and while it is ingested, as soon as the
bytes read from it pass what is left (a declaration may lie).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.ingest.uploads import StoredUpload, UploadTooLarge, declared_upload_size
from backend.settings import Settings
from backend.store.models import Team, Trace


class QuotaExceeded(UploadTooLarge):
    """The upload would take the team past its storage quota (a 413)."""


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB' (binary units, as the settings are written)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Usage:
    used_bytes: int
    quota_bytes: int | None  # None: no limit
    traces: int

    @property
    def remaining(self) -> int | None:
        return None if self.quota_bytes is None else max(0, self.quota_bytes - self.used_bytes)

    def refusal(self, incoming: int = 0, *, uploaded: int | None = None) -> QuotaExceeded:
        """The 413's reason: quota, usage and (when known) the upload's size — expanded,
        with `uploaded` its size as sent when that differs."""
        head = f"team storage quota of {human_bytes(self.quota_bytes or 0)} "
        used = f"{human_bytes(self.used_bytes)} used"
        if incoming and uploaded is not None and uploaded != incoming:
            sizes = f"{human_bytes(incoming)} ({human_bytes(uploaded)} as uploaded)"
            why = f"exceeded: {used}, and this upload expands to {sizes}"
        elif incoming:
            why = f"exceeded: {used}, and this upload needs at least {human_bytes(incoming)} more"
        else:
            why = f"reached: {used}"
        return QuotaExceeded(head + why + " (delete traces, or ask for a larger quota)")

    def check(self, incoming: int = 0, *, uploaded: int | None = None) -> None:
        """Raise QuotaExceeded when `incoming` more bytes do not fit (0: when full)."""
        remaining = self.remaining
        if remaining is not None and (incoming > remaining or remaining == 0):
            raise self.refusal(incoming, uploaded=uploaded)

    def without(self, stored_bytes: int) -> Usage:
        """The usage less one trace's bytes (the trace being ingested counts as it grows)."""
        return replace(self, used_bytes=max(0, self.used_bytes - stored_bytes))

    def check_stored(self, stored: StoredUpload, settings: Settings) -> None:
        """An upload now stored: refused when what it expands to does not fit. Its
        declared expanded size (archive directories, tar headers, gzip trailers) is read
        up to just past what is left; the ingest counts the bytes read again."""
        remaining = self.remaining
        if remaining is None:
            return
        expanded = max(stored.size_bytes, declared_upload_size(stored.files, settings, cap=remaining))
        self.check(expanded, uploaded=stored.size_bytes)


def team_usage(session: Session, team_id: int, settings: Settings) -> Usage:
    used, traces = session.execute(
        select(func.coalesce(func.sum(Trace.stored_bytes), 0), func.count(Trace.id)).where(Trace.team_id == team_id)
    ).one()
    own = session.scalar(select(Team.quota_bytes).where(Team.id == team_id))
    quota = own if own is not None else settings.team_quota_bytes
    return Usage(int(used), quota or None, int(traces))
