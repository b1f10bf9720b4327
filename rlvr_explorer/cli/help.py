"""Readable `--help`: values named like `INTEGER`, `PATH`, `TEXT` (not `<int>`, `<str>`),
arguments in capitals (`PATHS...`, not `{paths}...`), and flags that take no value show
none (not `<bool>`).

Typer renders a parameter's type from its annotation; `ReadableCommand` and
`ReadableGroup` give each of their parameters (the help option too) the readable
rendering when the help is built. A `metavar=` given on an option still wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import get_args, get_origin

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

TYPE_NAMES = {int: "INTEGER", float: "NUMBER", str: "TEXT", Path: "PATH", bool: "BOOLEAN"}


def _type_name(annotation) -> str:
    if get_origin(annotation) is list:
        (annotation,) = get_args(annotation)
    return TYPE_NAMES.get(annotation, getattr(annotation, "__name__", "VALUE").upper())


class _ReadableOption(TyperOption):
    def display_type_rich(self, ctx) -> str | None:
        if self.is_flag or self.count:
            return None  # a flag takes no value
        if self.metavar is not None:
            return self.metavar
        desc = self.type_descriptor
        if desc.is_choice and desc.choices:
            return "|".join(str(getattr(c, "value", c)) for c in desc.choices)
        name = _type_name(desc.annotation)
        return f"{name} (repeatable)" if self.multiple else name


class _ReadableArgument(TyperArgument):
    @property
    def display_name_raw(self) -> str:
        return self.metavar if self.metavar is not None else (self.name or "").upper()

    def display_type_rich(self, ctx) -> str | None:
        return None  # the capitalised name already says what goes there

    def _usage_display_name(self) -> str:
        name = self.display_name_raw + ("..." if self.nargs != 1 else "")
        return name if self.required else f"[{name}]"


def _readable(params: list) -> list:
    for p in params:
        if type(p) is TyperOption:
            p.__class__ = _ReadableOption
        elif type(p) is TyperArgument:
            p.__class__ = _ReadableArgument
    return params


class ReadableCommand(TyperCommand):
    def get_params(self, ctx):
        return _readable(super().get_params(ctx))


class ReadableGroup(TyperGroup):
    def get_params(self, ctx):
        return _readable(super().get_params(ctx))
