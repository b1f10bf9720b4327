"""The FastAPI application: the REST API under /api/v1 (the composition root,
`rlvr_explorer.server`, mounts the dashboard beside it)."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, HTTPException, Request
from starlette.routing import Match, Mount

from backend.api.errors import ERROR_RESPONSES, install_error_handlers
from backend.api.limits import ConcurrencyLimit, request_limit
from backend.api.routes import (
    advice,
    analyses,
    engine_replays,
    jobs,
    keys,
    live,
    me,
    sample_texts,
    simulations,
    storage,
    trace_data,
    traces,
    workloads,
)
from backend.api.security import SecurityHeaders, install_docs
from backend.settings import get_settings
from core.analysis.registry import ANALYSES

API_PREFIX = "/api/v1"


def create_app() -> FastAPI:
    app = FastAPI(
        title="RLVR Explorer",
        version="0.1.0",
        description="Explore RLVR training traces: length distributions and truncation, the rollout long tail, "
        "DP load imbalance, reward and tool latency, multi-turn rollouts, DAPO data efficiency, the GPU "
        f"timeline, and what-if replays. Analyses: {', '.join(ANALYSES)}.",
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=None,  # served by install_docs with the app's own assets
        redoc_url=None,
    )
    app.add_middleware(SecurityHeaders)
    install_docs(app, API_PREFIX)
    # every route documents the ErrorResponse shape (FastAPI's own 422s follow it too)
    api = APIRouter(prefix=API_PREFIX, responses=ERROR_RESPONSES)
    for module in (me, keys, storage, traces, live, trace_data, sample_texts, analyses, engine_replays, jobs):
        api.include_router(module.router)
    # the replay routes' request bodies are typed from the policy registry as it is now
    for replay in (simulations, workloads, advice):
        api.include_router(replay.make_router())
    app.include_router(api)
    install_error_handlers(app)
    settings = get_settings()
    app.add_middleware(
        ConcurrencyLimit,
        limit=request_limit(settings.db_pool_size, settings.db_max_overflow, settings.api_max_concurrent_requests),
        reads=settings.api_max_concurrent_reads,
        prefix=API_PREFIX + "/",
    )

    @app.get(f"{API_PREFIX}/health", tags=["health"])
    def health() -> dict:
        return {"status": "ok"}

    _api_not_found(app)
    return app


_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _api_not_found(app: FastAPI) -> None:
    """Any other /api/... path is a 404 JSON answer, not the dashboard's HTML page
    (registered after every API route and before the dashboard mount)."""

    @app.api_route(
        "/api/{path:path}",
        # every method (TRACE and CONNECT too): none may fall through to the dashboard
        methods=[*_METHODS, "HEAD", "OPTIONS", "TRACE", "CONNECT"],
        include_in_schema=False,
    )
    def api_not_found(path: str, request: Request) -> None:
        # a known path asked with another method stays a 405, saying which methods it has
        # (asked of the routes themselves: FastAPI nests included routers; mounts, such
        # as the dashboard's at /, match every method and path, so they are not asked)
        others = [
            r
            for r in app.router.routes
            if not isinstance(r, Mount) and getattr(r, "endpoint", None) is not api_not_found
        ]
        allowed = [
            m for m in _METHODS if any(r.matches({**request.scope, "method": m})[0] == Match.FULL for r in others)
        ]
        if allowed:
            raise HTTPException(
                405,
                detail={"message": f"{request.method} is not allowed on /api/{path} (allowed: {', '.join(allowed)})"},
                headers={"Allow": ", ".join(allowed)},
            )
        raise HTTPException(404, detail={"message": f"no API route /api/{path} (see {API_PREFIX}/docs)"})
