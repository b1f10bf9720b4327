"""Errors as lines for people: every error a refusal holds, one line each, whether it
came as an exception (the CLI's own ingest) or as an API error detail (the client). An
upload with several bad files is refused with all of them, not only the first."""

from __future__ import annotations


def error_items(error: object) -> list:
    """Every error `error` holds: itself, or each of several when it carries a list of
    them (`errors` of an exception or an API detail object, an exception group, a list)."""
    nested = None
    if isinstance(error, BaseException):
        nested = getattr(error, "exceptions", None) or getattr(error, "errors", None)
    elif isinstance(error, dict):
        nested = error.get("errors")
    elif isinstance(error, (list, tuple)):
        nested = error
    if isinstance(nested, (list, tuple)) and nested:
        return [item for e in nested for item in error_items(e)]
    return [error]


def error_lines(error: object) -> list[str]:
    """Every error `error` holds (`error_items`), one line each: an exception's message,
    an API error detail (text, a {"message"} or FastAPI {"loc", "msg"} object)."""
    lines = []
    for item in error_items(error):
        if isinstance(item, dict):
            loc = ".".join(str(x) for x in item.get("loc") or () if x != "body")
            text = item.get("message") or item.get("msg") or item
            item = f"{loc}: {text}" if loc else text
        lines += [line.strip() for line in str(item).splitlines() if line.strip()]
    return lines or ["an error without a message"]
