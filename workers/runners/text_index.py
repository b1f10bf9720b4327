"""Build a trace's text-search index: read its sample texts a step at a time, index
each sample's distinct words (backend/store/text_search.py), and record in the trace's
metadata how many samples are indexed. Rebuilt whole (after an attach added texts, the
old rows are replaced). Searches use the index only once the count recorded equals the
trace's sample texts, so they never read half an index; each step is its own
transaction (SQLite has one writer: progress can be written between them)."""

from __future__ import annotations

from sqlalchemy import select, text, update
from sqlalchemy.engine import Engine

from backend.formats.rollout_text import unpack
from backend.store.models import Trace
from backend.store.text_search import delete_text_index, words, write_text_index


def _set_indexed(conn, trace_id: int, n: int) -> None:
    meta = dict(conn.scalar(select(Trace.meta).where(Trace.id == trace_id).with_for_update()) or {})
    meta["rollouts"] = {**(meta.get("rollouts") or {}), "indexed": n}
    conn.execute(update(Trace).where(Trace.id == trace_id).values(meta=meta))


def build_text_index(engine: Engine, trace_id: int, progress=None) -> int:
    """Index every sample text of the trace; returns the number indexed."""
    report = progress or (lambda f, m: None)
    with engine.begin() as conn:
        _set_indexed(conn, trace_id, 0)
        delete_text_index(conn, [trace_id])
        steps = list(
            conn.execute(
                text("SELECT DISTINCT step FROM sample_texts WHERE trace_id = :t ORDER BY step"), {"t": trace_id}
            ).scalars()
        )
    sql = text(
        "SELECT step, group_idx, sample_idx, prompt, response FROM sample_texts WHERE trace_id = :t AND step = :s"
    )
    n = 0
    for i, step in enumerate(steps):
        with engine.begin() as conn:
            keys, lists = [], []
            for row in conn.execute(sql, {"t": trace_id, "s": step}):
                keys.append((row[0], row[1], row[2]))
                lists.append(words(unpack(row[3]) + "\n" + unpack(row[4])))
            write_text_index(conn, trace_id, keys, lists)
        n += len(keys)
        report((i + 1) / max(len(steps), 1), f"indexed {n:,} samples")
    with engine.begin() as conn:
        _set_indexed(conn, trace_id, n)
    return n
