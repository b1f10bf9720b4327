"""The README's REST API table against the OpenAPI schema: every documented method and
path exists, and every documented parameter — query parameters after `?`, JSON body
fields in `{...}`, multipart fields in `(multipart ...)` — is one the endpoint takes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[3] / "README.md"
PREFIX = "/api/v1"
METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE"}
_CELL = re.compile(r"(?<!\\)\|")
_SPAN = re.compile(r"`([^`]+)`")


@dataclass
class Documented:
    method: str
    path: str  # with {} for every path parameter
    query: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    form: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def _api_table_cells() -> list[str]:
    """The first cell of each row of the README's API table."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| method and path |"))
    cells = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells.append(_CELL.split(line)[1].strip())
    return cells


def _norm(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def _expand_optional(path: str) -> list[str]:
    """`/analyses[/{kind}]` -> both paths."""
    m = re.search(r"\[([^\]]*)\]", path)
    if not m:
        return [path]
    return _expand_optional(path[: m.start()] + path[m.end() :]) + _expand_optional(
        path[: m.start()] + m.group(1) + path[m.end() :]
    )


def _endpoints(span: str, previous: Documented | None) -> list[Documented]:
    """`GET/DELETE /jobs/{id}?a&b {x, y}` (or `…/suffix`, relative to the previous path)."""
    body = []
    braces = re.search(r"\s\{([^}]*)\}\s*$", span)
    if braces:
        body = [f.strip() for f in braces.group(1).split(",") if f.strip() and f.strip() != "..."]
        span = span[: braces.start()]
    if span.startswith("…"):
        assert previous is not None, span
        tail = span[1:]
        head = previous.path[: previous.path.index("/" + tail.strip("/").split("/")[0])]
        methods, target = [previous.method], head + tail
    else:
        verb, target = span.split(" ", 1)
        methods = verb.split("/")
    path, _, query = target.partition("?")
    names = [q.split("=")[0] for q in query.replace("\\|", "|").split("&") if q]
    return [
        Documented(m, _norm(p), query=names, body=body)
        for m in methods
        for p in _expand_optional(path.strip())
        if m in METHODS
    ]


def documented() -> list[Documented]:
    out: list[Documented] = []
    for cell in _api_table_cells():
        multipart = re.search(r"\(multipart ([^)]*)\)", cell)
        owner = None
        for span in _SPAN.findall(cell):
            if multipart and f"`{span}`" in multipart.group(1) and owner is not None:
                owner.form.append(span)
                continue
            found = _endpoints(span, out[-1] if out else None)
            assert found, f"README API table: cannot read {span!r}"
            out.extend(found)
            owner = found[-1]
    return out


@pytest.fixture(scope="module")
def schema() -> dict:
    from backend.api import create_app

    return create_app().openapi()


def _operation(schema: dict, doc: Documented) -> dict:
    paths = {_norm(p.removeprefix(PREFIX)): ops for p, ops in schema["paths"].items()}
    assert doc.path in paths, f"README documents {doc}, the API has no such path"
    ops = paths[doc.path]
    assert doc.method.lower() in ops, f"README documents {doc}, the API answers it with {sorted(ops)}"
    return ops[doc.method.lower()]


def _body_fields(schema: dict, op: dict, content_type: str) -> set[str]:
    body = ((op.get("requestBody") or {}).get("content") or {}).get(content_type)
    assert body is not None, f"no {content_type} request body"
    ref = body["schema"]
    while "$ref" in ref:
        ref = schema["components"]["schemas"][ref["$ref"].rsplit("/", 1)[1]]
    return set(ref.get("properties") or ())


def test_the_table_is_read_whole():
    docs = documented()
    assert len(docs) >= 40  # every row, each method of each path
    assert any(d.path == "/traces/{}/gpu-events/chrome-trace" and d.method == "GET" for d in docs)
    assert any(d.body == ["kind", "params"] for d in docs)
    assert any("max_response_len" in d.form for d in docs)


@pytest.mark.parametrize("doc", documented(), ids=str)
def test_documented_endpoint_matches_the_api(schema, doc):
    op = _operation(schema, doc)
    taken = {p["name"] for p in op.get("parameters", ()) if p["in"] == "query"}
    for name in doc.query:
        assert name in taken, f"{doc}: README documents ?{name}, the API takes {sorted(taken)}"
    if doc.body:
        fields = _body_fields(schema, op, "application/json")
        missing = set(doc.body) - fields
        assert not missing, f"{doc}: README documents body fields {sorted(missing)}, the API takes {sorted(fields)}"
    if doc.form:
        fields = _body_fields(schema, op, "multipart/form-data")
        missing = set(doc.form) - fields
        assert not missing, f"{doc}: README documents form fields {sorted(missing)}, the API takes {sorted(fields)}"
