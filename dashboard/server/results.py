"""Analysis results, fetched server-side by job id and cached.

The browser only holds which job an analysis panel shows (`{"job_id", "note"}`); the
result itself (megabytes for 500 steps x 256 ranks) stays on the server: a figure
callback asks for it here. A finished job's result never changes, so a small LRU keyed
by (API root, team key, job id, view) serves page reloads and filter changes without
asking the API again; the key is part of the cache key, so a team only ever reads its own.

Views: the long-tail and imbalance results are megabytes per 1,000 steps of 256 ranks
(15 and 5 MB) and grow with steps x ranks; their pages, the overview and Compare many ask
for their page view (`GET /jobs/{id}?view=page`, `page_query`): what they draw, with the
step x rank heatmap capped (core.analysis.page_views), a few hundred KB whatever the trace.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

from dashboard.api import session
from dashboard.api.client import ApiClient, ApiError

CACHE_SIZE = 32
_cache: OrderedDict[tuple, dict] = OrderedDict()
_inflight: dict[tuple, threading.Event] = {}
_lock = threading.Lock()


# The kinds whose result the dashboard reads in its page view (core.analysis.page_views).
PAGE_VIEW_KINDS = ("longtail", "imbalance")


def page_query(kind: str, load: str = "tokens") -> dict | None:
    """The query of the page view of a `kind` result, None for kinds read whole; `load`:
    the imbalance load the page draws."""
    if kind not in PAGE_VIEW_KINDS:
        return None
    return {"view": "page", "load": load} if kind == "imbalance" else {"view": "page"}


def _cache_key(root: str, api_key: str | None, job_id, view: dict | None = None) -> tuple:
    digest = hashlib.sha256((api_key or "").encode()).hexdigest()
    return root, digest, str(job_id), tuple(sorted((view or {}).items()))


def job(job_id, view: dict | None = None) -> dict:
    """A job of the signed-in team with its result (in the `view` asked for, see
    `page_query`): from the cache once it has succeeded (a finished job never changes),
    else asked of the API."""
    return _job(session.api(), job_id, view)


def _job(api: ApiClient, job_id, view: dict | None = None) -> dict:
    key = _cache_key(api.root, api.api_key, job_id, view)
    while True:
        with _lock:
            if key in _cache:
                _cache.move_to_end(key)
                return _cache[key]
            pending = _inflight.get(key)
            if pending is None:
                pending = _inflight[key] = threading.Event()
                break
        pending.wait(60)  # another request is fetching it: use its answer (or fetch after all)
    try:
        found = api.job(job_id, **(view or {}))
        if found.get("status") == "succeeded" and found.get("result") is not None:
            with _lock:
                _cache[key] = found
                while len(_cache) > CACHE_SIZE:
                    _cache.popitem(last=False)
        return found
    finally:
        with _lock:
            _inflight.pop(key, None)
        pending.set()


def prefetch(job_id, view: dict | None = None) -> None:
    """Start fetching a job's result (in `view`) in the background: a page's layout
    knows which result its figures will ask for while the browser is still loading it."""
    api = session.api()
    key = _cache_key(api.root, api.api_key, job_id, view)
    with _lock:
        if key in _cache or key in _inflight:
            return

    def fetch() -> None:
        try:
            _job(api, job_id, view)
        except ApiError:
            pass  # the figure callback asks again and shows the error

    threading.Thread(target=fetch, name=f"prefetch-job-{job_id}", daemon=True).start()


def job_result(job_id, view: dict | None = None) -> dict | None:
    """The result (in `view`) of a succeeded job of the signed-in team (None if it has none)."""
    found = job(job_id, view)
    return found.get("result") if found.get("status") == "succeeded" else None


def analysis_result(data: dict | None, what: str, view: dict | None = None) -> tuple[dict | None, str]:
    """(result in `view`, message for empty figures) for an analysis panel's store
    (`dashboard.views.panels`)."""
    data = data or {}
    waiting = data.get("note") or f"Waiting for the {what} analysis…"
    if data.get("job_id") is None:
        return None, waiting
    try:
        return job_result(data["job_id"], view), waiting
    except ApiError as exc:
        return None, f"The {what} analysis could not be read: {exc.message}"
