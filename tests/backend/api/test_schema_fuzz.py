"""A bounded schemathesis run against the live API (the ASGI app, both deployment shapes):
every operation of the OpenAPI document gets generated requests — valid ones and, with
schemathesis' negative mode, invalid ones — sent with a team's key, half the time aimed
at the team's own trace and jobs, and judged by every check schemathesis has (its CLI's
`--checks all`): no answer is a 5xx, every answer conforms to the document (status code
declared, content type, headers, body schema: ErrorResponse for errors), invalid
requests are refused, valid ones accepted, a 405 says what is allowed.

Budget: EXAMPLES per operation and mode (44 operations: ~1,000 requests per
database), generation only (no shrinking): about a minute per database on a quiet machine
(the count of requests bounds it, not a clock)."""

from __future__ import annotations

import time
import uuid

import pytest
import schemathesis
import schemathesis.specs.openapi.checks
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import CHECKS as CHECK_REGISTRY

from tests.helpers import jsonl, synthetic_rows

EXAMPLES = 12
CHECKS = CHECK_REGISTRY.get_all()  # `--checks all`
# Operations whose valid-by-schema requests may still be refused (positive_data_acceptance,
# ST202) for what a schema cannot state: the content of uploaded files (a readable trace),
# and bodies whose fields depend on each other or on a registry (an analysis kind, a
# replay's source). Any other check failing on them, or ST202 anywhere else, fails.
SEMANTIC_REFUSALS = {
    "POST /api/v1/traces": "uploaded files must be a readable trace",
    "POST /api/v1/traces/{trace_id}/files": "uploaded files must be a readable trace",
    "POST /api/v1/traces/{trace_id}/analyses": "the kind must be a registered analysis; params depend on it",
    "POST /api/v1/simulations": "trace_id or workload; the policy's parameters depend on its kind",
    "POST /api/v1/advice": "the trace must be given; ranges depend on each other",
    "POST /api/v1/traces/{trace_id}/engine-replays": "a trace with samples; the policy's parameters depend on its kind",
    "POST /api/v1/workloads": "a trace or a parameter file; steps and groups depend on each other",
    "GET /api/v1/traces/{trace_id}/samples": "the truncated filter needs a trace whose truncation is known",
}
ST202 = "Schema-valid request rejected"
# JSON Schema's integers include 108.0, which the API refuses as an id by design (only
# decimal digits are an id: tests/backend/formats/test_bad_input_corpus.py); a schema cannot say so.
FLOAT_ID = "must be an integer id (decimal digits)"


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
            team, key = create_team(session, f"fuzz-{uuid.uuid4().hex[:8]}")
            team_id = team.id
        app = create_app()
        with TestClient(app) as client:
            client.headers["X-API-Key"] = key
            body = jsonl(synthetic_rows(steps=2, groups=3, n=2)[0])
            r = client.post("/api/v1/traces", files=[("files", ("packed_lengths_step_0.jsonl", body, "text/plain"))])
            assert r.status_code == 201, r.text
            trace_id = r.json()["id"]
            job = client.post(f"/api/v1/traces/{trace_id}/analyses", json={"kind": "lengths"}).json()["id"]
        yield app, key, trace_id, job, team_id
        reset_caches()


def test_schema_fuzz(live):
    from schemathesis import GenerationMode

    app, key, trace_id, job_id, team_id = live
    schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", app)
    operations = [op.ok() for op in schema.get_all_operations()]
    assert len(operations) >= 40, [o.label for o in operations]
    assert len(CHECKS) >= 14, [c.__name__ for c in CHECKS]
    failures: list[str] = []
    counts = {"requests": 0, "semantic refusals": 0}

    def spare_key() -> int:
        from backend.auth import add_key
        from backend.store.db import session_scope

        with session_scope() as s:
            return add_key(s, team_id, "fuzz spare")[0].id

    unsatisfiable: list[str] = []
    started = time.monotonic()

    def _fuzz(strategy, label, positive: bool):
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
            # aim valid requests at the team's own objects too (an invalid request keeps
            # its invalid ids: replaced, only an unknown query parameter might be left)
            if own and positive and case.path_parameters:
                if "trace_id" in case.path_parameters and case.method.upper() != "DELETE":
                    case.path_parameters["trace_id"] = trace_id
                if "job_id" in case.path_parameters:
                    case.path_parameters["job_id"] = job_id
            key_id = (case.path_parameters or {}).get("key_id")
            if isinstance(key_id, int) and (positive or key_id >= 1):
                # never the key the run is made with: a key of its own, or one nobody has
                case.path_parameters["key_id"] = spare_key() if own and positive else max(key_id, 10**6)
            counts["requests"] += 1
            try:
                case.call_and_validate(headers={"X-API-Key": key}, checks=CHECKS)
            except (Exception, BaseExceptionGroup) as exc:  # collect, so one run reports every operation at fault
                text = str(exc)
                semantic = ST202 in text and (case.operation.label in SEMANTIC_REFUSALS or FLOAT_ID in text)
                if semantic and text.count("\n - ") <= 1:  # that one failure, and no other
                    counts["semantic refusals"] += 1
                    return
                lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
                failures.append(f"{label}: {' | '.join(lines[:8])[:700]}")

        return run

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            run = _fuzz(
                operation.as_strategy(generation_mode=mode),
                f"{operation.label} [{mode.value}]",
                mode == GenerationMode.POSITIVE,
            )
            try:
                run()
            except Unsatisfiable:  # e.g. no invalid request exists for an operation without inputs
                unsatisfiable.append(f"{operation.label} [{mode.value}]")
            if len(failures) > 30:
                break
    elapsed = time.monotonic() - started
    print(
        f"schemathesis, {len(CHECKS)} checks: {counts['requests']} requests over {len(operations)} operations"
        f" in {elapsed:.1f} s; {len(failures)} failing ({sum('Server error' in f for f in failures)} server errors,"
        f" {sum('Response violates schema' in f for f in failures)} response-schema mismatches);"
        f" {counts['semantic refusals']} schema-valid requests refused for what the schema cannot state"
        f" (no case could be generated for: {', '.join(unsatisfiable) or 'none'})"
    )
    assert not failures, f"{len(failures)} failing cases:\n" + "\n".join(dict.fromkeys(failures))
    assert counts["requests"] >= 300
