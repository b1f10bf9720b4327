"""policy parameters nested: a stored simulation's policy keeps its own parameters under
"params" (finished_groups, over_provision, staleness were top-level fields of every policy)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 09:00:00
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# the parameters each policy owned when they were top-level fields
OWNED = {"partial": ("finished_groups", "over_provision"), "async": ("staleness",)}
FLAT = ("finished_groups", "over_provision", "staleness")

jobs = sa.table("jobs", sa.column("id", sa.Integer), sa.column("kind", sa.String), sa.column("params", sa.JSON))


def _nest(policy):
    if not isinstance(policy, dict) or "params" in policy:
        return policy
    out = {k: v for k, v in policy.items() if k not in FLAT}
    out["params"] = {k: policy[k] for k in OWNED.get(policy.get("kind"), ()) if k in policy}
    return out


def _flatten(policy):
    if not isinstance(policy, dict) or "params" not in policy:
        return policy
    out = {k: v for k, v in policy.items() if k != "params"}
    out.update({k: v for k, v in (policy["params"] or {}).items() if k in FLAT})
    return out


def _rewrite(fix) -> None:
    conn = op.get_bind()
    for job_id, params in conn.execute(sa.select(jobs.c.id, jobs.c.params).where(jobs.c.kind == "simulation")):
        if isinstance(params, str):
            params = json.loads(params)
        if not isinstance(params, dict):
            continue
        new = {**params, **{k: fix(params.get(k)) for k in ("policy", "compare_policy") if k in params}}
        if new != params:
            conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(params=new))


def upgrade() -> None:
    _rewrite(_nest)


def downgrade() -> None:
    _rewrite(_flatten)
