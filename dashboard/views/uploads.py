"""The upload page's file list (pure): the files of one upload in the order the backend
reads them (natural order: step_2 before step_10), collapsed behind one summary line with
their count and size; opened when the upload failed, with the server's error next to the
file it names.
"""

from __future__ import annotations

import posixpath

from dash import html

from dashboard.views.formatting import human_bytes, natural_key

DOCS = "docs/formats.md"


def with_docs_link(message: str, docs_href: str = "/formats") -> list:
    """A server message with its mention of docs/formats.md as a link to the app's copy."""
    if DOCS not in (message or ""):
        return [message]
    before, after = message.split(DOCS, 1)
    return [before, html.A(DOCS, href=docs_href, target="_blank", className="docs-link"), after]


def skipped_note(trace: dict) -> str | None:
    """'Skipped 2 files: notes.txt (unknown file format); ...' from the trace's metadata."""
    skipped = (trace.get("metadata") or {}).get("skipped") or []
    if not skipped:
        return None
    parts = []
    for note in skipped:
        name, _, why = str(note).removeprefix("skipped ").partition(": ")
        parts.append(f"{name} ({why})" if why else name)
    return f"Skipped {len(skipped)} file{'' if len(skipped) == 1 else 's'}: " + "; ".join(parts)


STATUS_TEXT = {
    "uploading": "uploading…",
    "ingesting": "received, ingesting…",
    "done": "received",
    "duplicate": "received (already uploaded)",
    "failed": "not ingested",
}


def error_matches(error: dict, fname: str, n_files: int) -> bool:
    """Does the server's error name this uploaded file? Errors inside an archive name
    the member path, so a single upload takes any file-named error."""
    where = error.get("file")
    if not where:
        return False
    if where == fname or posixpath.basename(where) == posixpath.basename(fname) or where.startswith(fname + "/"):
        return True
    return n_files == 1


def file_list(state: dict, docs_href: str = "/formats") -> html.Details | None:
    """<details id=upload-files>: summary '12 files, 3.4 MB: received', then one
    <li data-file> per file (name, size, and the error on the file it names)."""
    files = sorted(state.get("files") or [], key=lambda f: natural_key(f["name"]))
    if not files:
        return None
    status: str = state.get("status") or ""
    error = state.get("error") or {}
    rows, placed = [], False
    for f in files:
        cell: str | html.Span = ""
        if status == "failed" and not placed and error_matches(error, f["name"], len(files)):
            cell, placed = html.Span(with_docs_link(error["message"], docs_href), className="file-error"), True
        rows.append(
            html.Li(
                [html.Span(f["name"]), html.Span(human_bytes(f["size"]), className="muted"), cell],
                **{"data-file": f["name"]},
            )
        )
    total = sum(int(f.get("size") or 0) for f in files)
    label = (
        f"{len(files)} file{'' if len(files) == 1 else 's'}, {human_bytes(total)}: {STATUS_TEXT.get(status, status)}"
    )
    return html.Details(
        [html.Summary(label, id="upload-files-summary"), html.Ul(rows, className="file-list")],
        id="upload-files",
        open=status == "failed",
    )
