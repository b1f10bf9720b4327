"""A bounded schemathesis run against the live API (the ASGI app, both deployment shapes):
every operation of the OpenAPI document gets generated requests — valid ones and, with
schemathesis' negative mode, invalid ones — sent with a team's key, half the time aimed
at the team's own trace and jobs. No answer is a 5xx, and every answer conforms to the
document (status code declared, content type, body schema: ErrorResponse for errors).

Budget: EXAMPLES per operation and mode (26 operations: ~400 requests per
database), generation only (no shrinking), well under 90 s."""

from __future__ import annotations

import time
import uuid

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.helpers import jsonl, synthetic_rows

EXAMPLES = 8
BUDGET_S = 75
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def live(backend_env):
    """The app with a team, a ready trace and one analysis job of that team."""
    from fastapi.testclient import TestClient

    from backend.api import create_app
    from backend.auth import create_team
    from backend.store.db import reset_caches, session_scope

    with pytest.MonkeyPatch.context() as mp:
        for key, value in backend_env.items():
            mp.setenv(key, value)
        mp.delenv("DATABASE_URL", raising=False)
        mp.delenv("CELERY_BROKER_URL", raising=False)
        reset_caches()
        with session_scope() as session:
            _team, key = create_team(session, f"fuzz-{uuid.uuid4().hex[:8]}")
        app = create_app()
        with TestClient(app) as client:
            client.headers["X-API-Key"] = key
            body = jsonl(synthetic_rows(steps=2, groups=3, n=2)[0])
            r = client.post("/api/v1/traces", files=[("files", ("packed_lengths_step_0.jsonl", body, "text/plain"))])
            assert r.status_code == 201, r.text
            trace_id = r.json()["id"]
            job = client.post(f"/api/v1/traces/{trace_id}/analyses", json={"kind": "lengths"}).json()["id"]
        yield app, key, trace_id, job
        reset_caches()


def test_schema_fuzz(live):
    from schemathesis import GenerationMode

    app, key, trace_id, job_id = live
    schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", app)
    operations = [op.ok() for op in schema.get_all_operations()]
    assert len(operations) >= 25, [o.label for o in operations]
    failures: list[str] = []
    counts = {"requests": 0}
    unsatisfiable: list[str] = []
    started = time.monotonic()

    def _fuzz(strategy, label):
        @settings(
            max_examples=EXAMPLES,
            phases=[Phase.explicit, Phase.generate],
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy, own=st.booleans())
        def run(case, own):
            if own and case.path_parameters:  # aim at the team's own objects too
                if "trace_id" in case.path_parameters and case.method.upper() != "DELETE":
                    case.path_parameters["trace_id"] = trace_id
                if "job_id" in case.path_parameters:
                    case.path_parameters["job_id"] = job_id
            counts["requests"] += 1
            try:
                case.call_and_validate(headers={"X-API-Key": key}, checks=CHECKS)
            except (Exception, BaseExceptionGroup) as exc:  # collect, so one run reports every operation at fault
                lines = [x.strip() for x in str(exc).strip().splitlines() if x.strip()]
                failures.append(f"{label}: {' | '.join(lines[:8])[:700]}")

        return run

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            run = _fuzz(operation.as_strategy(generation_mode=mode), f"{operation.label} [{mode.value}]")
            try:
                run()
            except Unsatisfiable:  # e.g. no invalid request exists for an operation without inputs
                unsatisfiable.append(f"{operation.label} [{mode.value}]")
            if len(failures) > 30:
                break
    elapsed = time.monotonic() - started
    print(
        f"schemathesis: {counts['requests']} requests over {len(operations)} operations in {elapsed:.1f} s"
        f" (no case could be generated for: {', '.join(unsatisfiable) or 'none'})"
    )
    assert not failures, f"{len(failures)} failing cases:\n" + "\n".join(dict.fromkeys(failures))
    assert counts["requests"] >= 300
    assert elapsed < BUDGET_S, elapsed
