"""The pager of a list shown a page at a time, newest first (Jobs, Traces): "← Newer", the
range shown, "Older →", and the offset of the page shown (a store the page keeps in its
URL). Ids (prefix "jobs"): jobs-prev, jobs-range, jobs-next, jobs-offset.

`pager` goes in the layout, `register_pager` once beside the page's callbacks; the page's
list callback writes `pager_outputs` with `pager_state`.
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, ctx, dcc, html, no_update


def pager(prefix: str, offset: int) -> list:
    """The buttons with the range between them, and the offset's store."""
    return [
        html.Div(
            className="pager",
            children=[
                html.Button("← Newer", id=f"{prefix}-prev", n_clicks=0, className="button small secondary"),
                html.Span(id=f"{prefix}-range", className="muted"),
                html.Button("Older →", id=f"{prefix}-next", n_clicks=0, className="button small secondary"),
            ],
        ),
        dcc.Store(id=f"{prefix}-offset", data=offset),
    ]


def register_pager(prefix: str, page_size: int, filters: tuple[str, ...]) -> None:
    """The callback that turns the pages: older / newer, back to the first page when one
    of the `filters` (ids of controls whose value narrows the list) changes."""

    def turn(*args):
        return turned(prefix, ctx.triggered_id, args[-1], page_size)

    dash.callback(
        Output(f"{prefix}-offset", "data"),
        Input(f"{prefix}-prev", "n_clicks"),
        Input(f"{prefix}-next", "n_clicks"),
        *(Input(f, "value") for f in filters),
        State(f"{prefix}-offset", "data"),
        prevent_initial_call=True,
    )(turn)


def turned(prefix: str, trigger, offset: int | None, page_size: int):
    """The offset after `trigger`: the next or previous page, the first one when a filter
    changed (no_update: nothing did)."""
    offset = offset or 0
    if trigger is None:
        return no_update
    if trigger == f"{prefix}-next":
        return offset + page_size
    if trigger == f"{prefix}-prev":
        return max(offset - page_size, 0)
    return 0


def pager_outputs(prefix: str) -> list[Output]:
    """The range's text and whether each button is disabled (see `pager_state`)."""
    return [
        Output(f"{prefix}-range", "children"),
        Output(f"{prefix}-prev", "disabled"),
        Output(f"{prefix}-next", "disabled"),
    ]


def pager_state(shown: str, offset: int, more: bool) -> tuple[str, bool, bool]:
    """(the range's text, Newer disabled, Older disabled) for a page at `offset`; `more`:
    whether older items follow."""
    return shown, offset <= 0, not more
