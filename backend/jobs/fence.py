"""Who owns a running job: the exception that stops an ingestion another process took
over, and the fence a load calls inside its final transaction."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.engine import Connection


class Abandoned(Exception):
    """Raised by a progress callback or a fence to stop an ingestion that another process
    now owns (its job's lease was taken over): the trace and its rows are left to it."""


# Raises Abandoned unless this process still owns the ingestion. Called inside the final
# transaction, so a load commits only while it is owned, and before any clean-up.
Fence = Callable[[Connection], None]
