"""Full-text search over a trace's sample texts (verl rollout dumps).

A search is for a phrase: a sample matches when its prompt or its response contains the
phrase, compared without case (`str.casefold`). The index only finds candidates fast:

- words: runs of letters and digits (`WORD`, Unicode; `_` and punctuation separate
  words, as SQLite's unicode61 tokenizer splits them), lowercased, at most `MAX_WORD`
  characters; each sample is indexed with its distinct words (at most `MAX_WORDS`);
- Postgres: ``sample_text_search(trace_id, step, group_idx, sample_idx, tokens
  tsvector)`` with a GIN index (the words are the lexemes, as given: no stemming);
  SQLite: the FTS5 table ``sample_text_fts`` (``detail=none``), both made by migration
  0010 and filled by the text-index job after ingest (`write_text_index`);
- a search asks the index for the samples holding every word of the phrase, then reads
  those samples' texts and keeps the ones containing the phrase itself. Before the
  index is built (or for a phrase without a word) every sample in scope is read.

Everything is scoped to one trace (and optionally one step): no query crosses traces.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.engine import Connection

from backend.formats.rollout_text import unpack

WORD = re.compile(r"[^\W_]+")
MAX_WORD = 64
MAX_WORDS = 60_000  # a tsvector holds at most 1 MB; no real response comes near
MAX_MATCHES = 5_000  # matches collected per search (the total is a lower bound beyond)
SNIPPET = 90  # characters of context either side of a match

Key = tuple[int, int, int]


def words(text_value: str) -> list[str]:
    """The distinct index words of a text, sorted."""
    found = {w for w in WORD.findall(text_value.lower()) if len(w) <= MAX_WORD}
    return sorted(found)[:MAX_WORDS]


def delete_text_index(conn, trace_ids: Iterable[int]) -> None:
    ids = [int(t) for t in trace_ids]
    if not ids:
        return
    dialect = conn.get_bind().dialect if hasattr(conn, "get_bind") else conn.dialect  # a Session or a Connection
    table = "sample_text_search" if dialect.name == "postgresql" else "sample_text_fts"
    conn.execute(text(f"DELETE FROM {table} WHERE trace_id IN ({', '.join(map(str, ids))})"))


def write_text_index(conn: Connection, trace_id: int, keys: list[Key], word_lists: list[list[str]]) -> None:
    """Index these samples (their distinct words)."""
    if conn.dialect.name == "postgresql":
        driver = conn.connection.driver_connection
        assert driver is not None  # a live connection (psycopg's)
        cursor = driver.cursor()
        sql = "COPY sample_text_search (trace_id, step, group_idx, sample_idx, tokens) FROM STDIN"
        with cursor.copy(sql) as cp:
            for (step, group, sample), ws in zip(keys, word_lists):
                # a tsvector literal: the words quoted ('' and \\ cannot occur in them)
                cp.write_row((trace_id, step, group, sample, " ".join(f"'{w}'" for w in ws)))
        return
    conn.exec_driver_sql(
        "INSERT INTO sample_text_fts (tokens, trace_id, step, group_idx, sample_idx) VALUES (?, ?, ?, ?, ?)",
        [(" ".join(ws), trace_id, *key) for key, ws in zip(keys, word_lists)],
    )


def index_candidates(conn: Connection, trace_id: int, phrase_words: list[str], step: int | None) -> set[Key]:
    """The samples of the trace (and step) whose indexed words include all of these."""
    where = " AND step = :step" if step is not None else ""
    params: dict[str, object] = {"trace_id": trace_id, "step": step}
    if conn.dialect.name == "postgresql":
        params["q"] = " & ".join(f"'{w}'" for w in phrase_words)
        sql = (
            "SELECT step, group_idx, sample_idx FROM sample_text_search "
            f"WHERE trace_id = :trace_id{where} AND tokens @@ CAST(:q AS tsquery)"
        )
    else:
        params["q"] = " AND ".join(f'"{w}"' for w in phrase_words)
        sql = (
            "SELECT step, group_idx, sample_idx FROM sample_text_fts "
            f"WHERE sample_text_fts MATCH :q AND trace_id = :trace_id{where}"
        )
    return {tuple(r) for r in conn.execute(text(sql), params)}


@dataclass
class Match:
    key: Key
    where: str  # "prompt" or "response"
    snippet: str


@dataclass
class SearchOutcome:
    matches: list[Match] = field(default_factory=list)
    scanned: int = 0  # samples whose text was read
    complete: bool = True  # False: stopped at MAX_MATCHES


def _snippet(text_value: str, at: int, length: int) -> str:
    lo, hi = max(0, at - SNIPPET), min(len(text_value), at + length + SNIPPET)
    return ("…" if lo else "") + text_value[lo:hi] + ("…" if hi < len(text_value) else "")


def find_phrase(prompt: str, response: str, needle: str) -> Match | None:
    """Where `needle` (already casefolded) first occurs: the response first."""
    for where, value in (("response", response), ("prompt", prompt)):
        folded = value.casefold()
        at = folded.find(needle)
        if at >= 0:
            # casefold can change lengths (ß -> ss): cut the snippet from the folded text then
            source = value if len(folded) == len(value) else folded
            return Match((0, 0, 0), where, _snippet(source, at, len(needle)))
    return None


def scan_texts(conn: Connection, trace_id: int, steps: list[int], allowed, phrase: str) -> SearchOutcome:
    """Read the texts of the allowed samples step by step and keep those holding the phrase.
    `allowed(key)` says whether a sample is a candidate (index and filters)."""
    needle = phrase.casefold()
    out = SearchOutcome()
    sql = text(
        "SELECT step, group_idx, sample_idx, prompt, response FROM sample_texts "
        "WHERE trace_id = :trace_id AND step = :step ORDER BY group_idx, sample_idx"
    )
    for step in steps:
        for row in conn.execute(sql, {"trace_id": trace_id, "step": step}):
            key = (row[0], row[1], row[2])
            if not allowed(key):
                continue
            out.scanned += 1
            found = find_phrase(unpack(row[3]), unpack(row[4]), needle)
            if found is not None:
                found.key = key
                out.matches.append(found)
                if len(out.matches) >= MAX_MATCHES:
                    out.complete = False
                    return out
    return out
