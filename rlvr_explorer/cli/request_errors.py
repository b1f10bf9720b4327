"""A request's validation error (backend.jobs: "field: message", in the API's field
names) in the words of the command that filled the request: its options."""

from __future__ import annotations

import re

import typer

# `generate`: the workload request's fields -> its options
GENERATE_OPTIONS = {
    "trace_id": "--from-trace",
    "parameters": "--params",
    "task": "--task",
    "steps": "--steps",
    "groups": "--groups",
    "samples_per_group": "--n",
    "seed": "--seed",
    "formats": "--format",
    "dp_size": "--dp-size",
    "ingest": "--ingest",
    "name": "--name",
}


def option_error(exc: ValueError, options: dict[str, str]) -> typer.BadParameter:
    """The usage error for `exc`: the fields it names replaced by their options, and
    those options (the field at fault first) as what it is about."""
    text = str(exc)
    head, sep, rest = text.partition(":")
    field = head.split(".")[0].split("[")[0] if sep and " " not in head else None
    if field is not None:
        text = rest.strip()
    names = re.compile(
        r"(?<![\w.-])(" + "|".join(map(re.escape, sorted(options, key=len, reverse=True))) + r")(?![\w-])"
    )
    text = names.sub(lambda m: options[m.group(1)], text)
    named = [options[field]] if field in options else []
    named += [opt for opt in dict.fromkeys(re.findall(r"--[\w-]+", text)) if opt in options.values()]
    return typer.BadParameter(text, param_hint=" / ".join(dict.fromkeys(named)) or "options")
