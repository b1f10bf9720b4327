"""A small client of the RLVR Explorer REST API (httpx), the dashboard's only data source.

Every method returns the decoded JSON payload of one endpoint under `/api/v1` or raises
`ApiError` with the server's message (and, for bad uploads, the file/line/field it
names). The client holds no state besides the base URL, the team key and a pooled
`httpx.Client`, so one per request is cheap.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

API_PREFIX = "/api/v1"
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
UPLOAD_TIMEOUT = httpx.Timeout(600.0, connect=5.0)
SESSION_ENDED = "Your session has ended: sign in again."


class ApiError(Exception):
    """A failed API call: HTTP status (0 when the server was unreachable) and message."""

    def __init__(
        self, status: int, message: str, *, file: str | None = None, line: int | None = None, field: str | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.file, self.line, self.field = status, message, file, line, field

    @property
    def unauthorized(self) -> bool:
        return self.status in (401, 403)

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @classmethod
    def from_response(cls, resp: httpx.Response) -> ApiError:
        """Read `{"detail": {"message", "file", "line", "field"}}`, FastAPI's default
        `{"detail": "..."}` or its validation list, or fall back to the status text."""
        try:
            body = resp.json()
        except ValueError:
            body = None
        detail = body.get("detail") if isinstance(body, dict) else None
        if isinstance(detail, dict):
            return cls(
                resp.status_code,
                str(detail.get("message") or resp.reason_phrase),
                file=detail.get("file"),
                line=detail.get("line"),
                field=detail.get("field"),
            )
        if isinstance(detail, list) and detail:
            parts = []
            for d in detail:
                loc = ".".join(str(x) for x in d.get("loc", []) if x != "body") if isinstance(d, dict) else ""
                msg = d.get("msg", str(d)) if isinstance(d, dict) else str(d)
                parts.append(f"{loc}: {msg}" if loc else msg)
            return cls(resp.status_code, "; ".join(parts))
        if isinstance(detail, str) and detail:
            return cls(resp.status_code, detail)
        text = (resp.text or "").strip()[:300]
        return cls(resp.status_code, text or f"HTTP {resp.status_code} {resp.reason_phrase}")

    def __str__(self) -> str:
        return self.message


@dataclass
class UploadResult:
    """What POST /traces answered: the trace, the ingest job when a worker ingests it
    (202), and whether the team had already uploaded the same content (200)."""

    trace: dict
    job: dict | None
    status_code: int

    @property
    def duplicate(self) -> bool:
        return self.status_code == 200


def api_root(base_url: str) -> str:
    """`http://host:port`, `.../` or `.../api/v1` all mean the same API root."""
    root = base_url.rstrip("/")
    return root if root.endswith(API_PREFIX) else root + API_PREFIX


_pools: dict[str, httpx.Client] = {}
_pools_lock = threading.Lock()


def pooled_http(base_url: str) -> httpx.Client:
    """One keep-alive connection pool per API root, shared by all requests (thread-safe)."""
    root = api_root(base_url)
    with _pools_lock:
        client = _pools.get(root)
        if client is None:
            client = _pools[root] = httpx.Client(base_url=root, timeout=DEFAULT_TIMEOUT)
        return client


class ApiClient:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        http: httpx.Client | None = None,
        on_unauthorized: Callable[[], None] | None = None,
    ):
        """`on_unauthorized`: called when the API refuses the key (401: revoked or
        unknown), before the ApiError is raised (the dashboard signs the session out)."""
        self.root = api_root(base_url)
        self.api_key = api_key
        self.http = http if http is not None else pooled_http(base_url)
        self.on_unauthorized = on_unauthorized

    def _refused(self, resp: httpx.Response) -> ApiError:
        err = ApiError.from_response(resp)
        if resp.status_code == 401 and self.api_key and self.on_unauthorized is not None:
            self.on_unauthorized()
            err.message = SESSION_ENDED  # what a page shows meanwhile, not the API's wording
        return err

    # -- plumbing -------------------------------------------------------------------
    def _url(self, path: str) -> str:
        return self.root + path

    def _request(self, method: str, path: str, *, params: dict | None = None, timeout=None, **kw) -> httpx.Response:
        headers = {"X-API-Key": self.api_key} if self.api_key else {}
        clean = {k: v for k, v in (params or {}).items() if v is not None and v != "" and v != []}
        try:
            resp = self.http.request(
                method, self._url(path), params=clean, headers=headers, timeout=timeout or DEFAULT_TIMEOUT, **kw
            )
        except httpx.TimeoutException as exc:
            raise ApiError(0, f"The API at {self.root} did not answer in time ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise ApiError(0, f"Cannot reach the API at {self.root}: {exc}") from exc
        if resp.status_code >= 400:
            raise self._refused(resp)
        return resp

    def _get(self, path: str, **params) -> Any:
        return self._json(self._request("GET", path, params=params), path)

    def _json(self, resp: httpx.Response, path: str) -> Any:
        try:
            # orjson: an analysis result can be 10 MB of JSON, several times faster to read
            return orjson.loads(resp.content)
        except ValueError as exc:
            # e.g. a route the API doesn't have, answered by whatever is mounted at "/"
            raise ApiError(
                502,
                f"The API answered {path} with something that is not JSON "
                f"(HTTP {resp.status_code}, {resp.headers.get('content-type', 'no content type')})",
            ) from exc

    # -- identity -------------------------------------------------------------------
    def me(self) -> dict:
        """`{"team": {"id", "name"}}`; raises ApiError(401) for a wrong key."""
        return self._get("/me")

    # -- the team: its API keys and storage -------------------------------------------
    def keys(self) -> list[dict]:
        """The team's keys (never the keys themselves): id, name, prefix, created_at,
        last_used_at, revoked_at, active, current (the key of this client)."""
        return self._get("/keys")["items"]

    def create_key(self, name: str) -> dict:
        """A new key: the key record with `key`, the only time the key is shown."""
        return self._json(self._request("POST", "/keys", json={"name": name}), "/keys")

    def revoke_key(self, key_id: str | int) -> None:
        self._request("DELETE", f"/keys/{key_id}")

    def storage(self) -> dict:
        """`{"used_bytes", "quota_bytes", "remaining_bytes", "traces"}` (quota null: none)."""
        return self._get("/storage")

    # -- traces ---------------------------------------------------------------------
    def list_traces(self, *, limit: int = 50, offset: int = 0, status: str | None = None, q: str | None = None) -> dict:
        return self._get("/traces", limit=limit, offset=offset, status=status, q=q)

    def get_trace(self, trace_id: str | int) -> dict:
        return self._get(f"/traces/{trace_id}")

    def delete_trace(self, trace_id: str | int) -> None:
        self._request("DELETE", f"/traces/{trace_id}")

    def rename_trace(self, trace_id: str | int, name: str) -> dict:
        """The renamed trace; ApiError(422) for an empty or too long name."""
        path = f"/traces/{trace_id}"
        return self._json(self._request("PATCH", path, json={"name": name}), path)

    def upload_trace(
        self,
        files: Iterable[tuple[str, bytes]],
        *,
        name: str | None = None,
        format: str | None = None,
        max_response_len: int | None = None,
    ) -> UploadResult:
        """POST one or more files (or one archive) as multipart `files`."""
        parts = [("files", (fname, content, "application/octet-stream")) for fname, content in files]
        if not parts:
            raise ApiError(400, "No files to upload")
        fields = (("name", name), ("format", format), ("max_response_len", max_response_len))
        data = {k: str(v) for k, v in fields if v not in (None, "")}
        resp = self._request("POST", "/traces", files=parts, data=data, timeout=UPLOAD_TIMEOUT)
        body = self._json(resp, "/traces")
        if resp.status_code == 202 and isinstance(body, dict) and "trace" in body:
            return UploadResult(trace=body["trace"], job=body.get("job"), status_code=202)
        return UploadResult(trace=body, job=None, status_code=resp.status_code)

    def attach_files(
        self, trace_id: str | int, files: Iterable[tuple[str, bytes]], *, format: str | None = None
    ) -> dict:
        """POST files to an existing trace: `{"trace", "created", "tables", "steps", "skipped"}`."""
        parts = [("files", (fname, content, "application/octet-stream")) for fname, content in files]
        if not parts:
            raise ApiError(400, "No files to upload")
        data = {"format": format} if format else {}
        path = f"/traces/{trace_id}/files"
        return self._json(self._request("POST", path, files=parts, data=data, timeout=UPLOAD_TIMEOUT), path)

    def series(self, trace_id: str | int, keys: list[str] | None = None, *, skip_missing: bool = False) -> dict:
        """Per-step series: `{"steps", "series": {key: values}, "keys", "live"}`
        (`skip_missing`: keys the trace lacks are left out instead of a 404)."""
        return self._get(
            f"/traces/{trace_id}/series",
            keys=",".join(keys) if keys else None,
            missing="skip" if skip_missing else None,
        )

    def steps(self, trace_id: str | int) -> list[dict]:
        return self._get(f"/traces/{trace_id}/steps")["items"]

    def summaries(self, trace_id: str | int, *, field: str = "response", task: str | None = None) -> dict:
        return self._get(f"/traces/{trace_id}/summaries", field=field, task=task)

    def samples(
        self, trace_id: str | int, *, step: int | None = None, limit: int = 100, offset: int = 0, **filters
    ) -> dict:
        """A page of samples; `filters`: step_min, step_max, response_len_min, response_len_max,
        dp_rank, num_turns, truncated, sort, order (see GET /traces/{id}/samples)."""
        return self._get(f"/traces/{trace_id}/samples", step=step, limit=limit, offset=offset, **filters)

    def sample_turns(self, trace_id: str | int, step: int, group_idx: int, sample_idx: int) -> dict:
        return self._get(f"/traces/{trace_id}/samples/{step}/{group_idx}/{sample_idx}/turns")

    def sample_text(self, trace_id: str | int, step: int, group_idx: int, sample_idx: int) -> dict:
        """A dumped sample's prompt, response, figures and its group's other samples."""
        return self._get(f"/traces/{trace_id}/samples/{step}/{group_idx}/{sample_idx}/text")

    def text_search(self, trace_id: str | int, q: str = "", **filters) -> dict:
        """Samples holding the phrase `q`; `filters`: step, reward_min, reward_max,
        response_len_min, response_len_max, repeating, limit, offset (GET .../text-search)."""
        return self._get(f"/traces/{trace_id}/text-search", q=q, **filters)

    def step_trajectories(self, trace_id: str | int, step: int) -> dict:
        return self._get(f"/traces/{trace_id}/steps/{step}/trajectories")

    def rank_timings(self, trace_id: str | int, *, step: int | None = None) -> list[dict]:
        return self._get(f"/traces/{trace_id}/rank-timings", step=step)["items"]

    def gpu_events(
        self,
        trace_id: str | int,
        *,
        rank: int | None = None,
        step: int | None = None,
        start_us: float | None = None,
        end_us: float | None = None,
        limit: int | None = None,
        name: str | None = None,
    ) -> dict:
        """`{"items": [event], "truncated": bool}`: events overlapping the window (whose
        kernel name contains `name`, case-insensitive, when given)."""
        return self._get(
            f"/traces/{trace_id}/gpu-events",
            rank=rank,
            step=step,
            start_us=start_us,
            end_us=end_us,
            limit=limit,
            name=name,
        )

    def search_events(self, trace_id: str | int, name: str, *, rank=None, limit: int = 200) -> dict:
        """Events of any kind (CPU ops, annotations, kernels...) whose name contains `name`."""
        return self._get(f"/traces/{trace_id}/gpu-events/search", name=name, rank=rank, limit=limit)

    def gpu_diff(self, trace_id: str | int, test_trace_id: str | int, **params) -> dict:
        """Ops and kernels added / removed / changed from `trace_id` to `test_trace_id`
        (control_rank, test_rank, control_step, test_step, device)."""
        return self._get(f"/traces/{trace_id}/gpu-diff", test_trace_id=test_trace_id, **params)

    def chrome_trace(
        self,
        trace_id: str | int,
        *,
        rank: int | list[int] | None = None,
        step: int | None = None,
        start_us: float | None = None,
        end_us: float | None = None,
    ) -> bytes:
        """The window as Chrome-trace JSON bytes (Perfetto / chrome://tracing open it);
        `rank` may list several ranks (sent as repeated query keys)."""
        params = dict(rank=rank, step=step, start_us=start_us, end_us=end_us)
        return self._request(
            "GET", f"/traces/{trace_id}/gpu-events/chrome-trace", params=params, timeout=UPLOAD_TIMEOUT
        ).content

    # -- analyses and jobs ----------------------------------------------------------
    # Lists carry no results unless `include_result` (a result can be megabytes): read
    # one job's result with `job(id)`.
    def analyses(self, trace_id: str | int, *, include_result: bool = False) -> list[dict]:
        return self._get(f"/traces/{trace_id}/analyses", include_result=_flag(include_result))["items"]

    def run_analysis(self, trace_id: str | int, kind: str, params: dict | None = None) -> dict:
        path = f"/traces/{trace_id}/analyses"
        return self._json(self._request("POST", path, json={"kind": kind, "params": params or {}}), path)

    def jobs(
        self,
        *,
        trace_id: str | int | None = None,
        status: str | None = None,
        kind: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        include_result: bool = False,
    ) -> list[dict]:
        return self._get(
            "/jobs",
            trace_id=trace_id,
            status=status,
            kind=kind,
            limit=limit,
            offset=offset or None,
            include_result=_flag(include_result),
        )["items"]

    def job(self, job_id: str | int, *, view: str | None = None, load: str | None = None) -> dict:
        """One job with its result (`view="page"`: a longtail or imbalance result as the
        pages draw it, with one `load` of an imbalance result)."""
        return self._get(f"/jobs/{job_id}", view=view, load=load)

    def job_kinds(self) -> dict:
        """{kinds: every job kind, analyses: [{kind, title, defaults, ...}]} (the registry's)."""
        return self._get("/jobs/kinds")

    # -- simulator replays and synthetic workloads ------------------------------------
    def simulation_presets(self, trace_id: int | str | None = None) -> dict:
        """GPU/model presets, policy kinds, balancing/dispatch modes and every default; with
        a trace, the model its name or metadata names (`proposed_model`) as the default."""
        return self._get("/simulations/presets", **({"trace_id": trace_id} if trace_id is not None else {}))

    def simulate(self, body: dict) -> dict:
        """Queue a replay (202, or 200 with the identical earlier replay): the job."""
        return self._json(self._request("POST", "/simulations", json=body), "/simulations")

    def simulations(self, *, trace_id: str | int | None = None, limit: int | None = None) -> list[dict]:
        """The team's replays (of one trace), newest first, without results."""
        return self._get("/simulations", trace_id=trace_id, limit=limit)["items"]

    def simulation(self, job_id: str | int) -> dict:
        return self._get(f"/simulations/{job_id}")

    def simulation_chrome_trace(self, job_id: str | int, policy: str = "a"):
        """The replay's GPU timeline as Chrome-trace JSON: a context manager yielding the
        streamed response (gzip-encoded when the API sends it so; `iter_raw` passes it on)."""
        return self.stream(f"/simulations/{job_id}/chrome-trace", params={"policy": policy})

    def engine_replays(self, trace_id: str | int, *, limit: int = 20) -> list[dict]:
        """The trace's replays on real inference engines, newest first: measured vs predicted."""
        return self._get(f"/traces/{trace_id}/engine-replays", limit=limit)["items"]

    def advise(self, body: dict) -> dict:
        """Queue the configuration advisor's sweep (202, or 200 with an identical one): the job."""
        return self._json(self._request("POST", "/advice", json=body), "/advice")

    def advice_list(self, *, trace_id: str | int | None = None, limit: int | None = None) -> list[dict]:
        return self._get("/advice", trace_id=trace_id, limit=limit)["items"]

    def advice(self, job_id: str | int) -> dict:
        return self._get(f"/advice/{job_id}")

    def create_workload(self, body: dict) -> dict:
        """Queue a fit (steps 0) and/or generation of a synthetic workload: the job."""
        return self._json(self._request("POST", "/workloads", json=body), "/workloads")

    def workload(self, job_id: str | int) -> dict:
        return self._get(f"/workloads/{job_id}")

    def workload_zip(self, job_id: str | int):
        """The generated files as a .zip: a context manager yielding the streamed response."""
        return self.stream(f"/workloads/{job_id}/download")

    @contextlib.contextmanager
    def stream(self, path: str, *, params: dict | None = None) -> Iterator[httpx.Response]:
        """GET a download without holding it in memory; ApiError when the API refuses."""
        headers = {"X-API-Key": self.api_key} if self.api_key else {}
        try:
            with self.http.stream(
                "GET", self._url(path), params=params, headers=headers, timeout=UPLOAD_TIMEOUT
            ) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise self._refused(resp)
                yield resp
        except httpx.TransportError as exc:
            raise ApiError(0, f"Cannot reach the API at {self.root}: {exc}") from exc


def _flag(value: bool) -> str | None:
    """A boolean query parameter, sent only when true (false is every list's default)."""
    return "true" if value else None
