"""A page's state in its URL, so a link shows a colleague the same view.

`register_url_state(page, fields, zoom=...)`, called beside the page's callbacks, writes
the values of the page's controls (`fields`: query key -> (component id, property,
default)) and the zoom of its charts (`zoom`: graph ids; query ``z.<graph>=x0,x1[,y0,y1]``)
into the query string with history.replaceState whenever one changes: no reload, no
round trip, and other query keys are kept. The page's layout puts `url_sink(page)` in
its body and reads the state back from its query: `query_value` for a control,
`zoom_state` for the charts (applied to built figures with `apply_zoom`). A page keeps
its charts' zoom with `zoom_store(page, query)` in its body and, in its figure callbacks,
`State(zoom_id(page), "data")` and `zoomed(figures, graphs, zoom)`.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from dash import Input, Output, State, clientside_callback, dcc, html

ZOOM_PREFIX = "z."

_SYNC_JS = """
function(...args) {
    const keys = %(keys)s, defaults = %(defaults)s, graphs = %(graphs)s;
    const q = new URLSearchParams(window.location.search);
    keys.forEach((key, i) => {
        let v = args[i];
        if (Array.isArray(v)) { v = v.join(","); }
        if (v === null || v === undefined || v === "" || String(v) === defaults[i]) { q.delete(key); }
        else { q.set(key, String(v)); }
    });
    const fmt = (x) => String(Number(Number(x).toPrecision(6)));
    const range = (r, axis) => r[axis + ".range[0]"] !== undefined
        ? [r[axis + ".range[0]"], r[axis + ".range[1]"]] : r[axis + ".range"];
    // rows sharing one x axis (matches="x") report the row dragged: xaxis2, xaxis3, ...
    const xname = (r) => (Object.keys(r).find((k) => /^xaxis\\d*\\./.test(k)) || "xaxis").split(".")[0];
    graphs.forEach((graph, j) => {
        const r = args[keys.length + j];
        if (!r) { return; }
        const key = "%(prefix)s" + graph;
        const old = (q.get(key) || "").split(",");
        let x = [old[0] || "", old[1] || ""], y = [old[2] || "", old[3] || ""], touched = false;
        const xa = xname(r), rx = range(r, xa), ry = range(r, "yaxis");
        if (rx) { x = rx.map(fmt); touched = true; }
        if (ry) { y = ry.map(fmt); touched = true; }
        if (r[xa + ".autorange"]) { x = ["", ""]; touched = true; }
        if (r["yaxis.autorange"]) { y = ["", ""]; touched = true; }
        if (!touched) { return; }
        const parts = (y[0] === "" ? x : x.concat(y));
        if (parts.every((p) => p === "")) { q.delete(key); } else { q.set(key, parts.join(",")); }
    });
    const text = q.toString().replace(/%%2C/g, ",").replace(/%%3A/g, ":");
    const target = window.location.pathname + (text ? "?" + text : "");
    if (target !== window.location.pathname + window.location.search) {
        window.history.replaceState(window.history.state, "", target);
    }
    return window.dash_clientside.no_update;
}
"""


# The page's zoom store follows the user's zoom, so a figure redrawn later (a live trace
# grew, a control changed) keeps the view instead of going back to the URL's first zoom.
_FOLLOW_JS = """
function(...args) {
    const graphs = %(graphs)s, out = Object.assign({}, args[graphs.length] || {});
    graphs.forEach((graph, j) => {
        const r = args[j];
        if (!r) { return; }
        const entry = Object.assign({}, out[graph] || {});
        const xa = (Object.keys(r).find((k) => /^xaxis\\d*\\./.test(k)) || "xaxis").split(".")[0];
        ["x", "y"].forEach((axis) => {
            const key = axis === "x" ? xa : "yaxis";
            if (r[key + ".range[0]"] !== undefined) { entry[axis] = [r[key + ".range[0]"], r[key + ".range[1]"]]; }
            else if (r[key + ".range"]) { entry[axis] = r[key + ".range"]; }
            if (r[key + ".autorange"]) { delete entry[axis]; }
        });
        if (Object.keys(entry).length) { out[graph] = entry; } else { delete out[graph]; }
    });
    return out;
}
"""


def url_sink(page: str) -> html.Div:
    return html.Div(id=f"{page}-url-sink", hidden=True)


def register_url_state(page: str, fields: dict[str, tuple[str, str, object]], zoom: tuple[str, ...] = ()) -> None:
    """One clientside callback: any field or chart zoom of `page` changes -> the URL; with
    `zoom`, another keeps the page's zoom store (`zoom_store`) at the user's zoom."""
    import json

    keys = list(fields)
    defaults = [_text(default) for _cid, _prop, default in fields.values()]
    clientside_callback(
        _SYNC_JS
        % {
            "keys": json.dumps(keys),
            "defaults": json.dumps(defaults),
            "graphs": json.dumps(list(zoom)),
            "prefix": ZOOM_PREFIX,
        },  # fmt: skip
        Output(f"{page}-url-sink", "title"),
        *[Input(cid, prop) for cid, prop, _default in fields.values()],
        *[Input(g, "relayoutData") for g in zoom],
        prevent_initial_call=True,
    )
    if zoom:
        clientside_callback(
            _FOLLOW_JS % {"graphs": json.dumps(list(zoom))},
            Output(zoom_id(page), "data", allow_duplicate=True),
            *[Input(g, "relayoutData") for g in zoom],
            State(zoom_id(page), "data"),
            prevent_initial_call=True,
        )


def _text(value) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return "" if value is None else str(value)


def query_value(query: dict, key: str, default, *, choices=None, kind: type = str):
    """The control's value from the query (`default` when absent or not valid): a `kind`
    (str, int), a list of them when `default` is a list; `choices` bounds the values."""
    raw = query.get(key)
    if raw is None or raw == "":
        return default
    parts = str(raw).split(",") if isinstance(default, list) else [str(raw)]
    try:
        values = [kind(p) for p in parts if p != ""]
    except ValueError:
        return default
    if choices is not None and any(v not in choices for v in values):
        return default
    if isinstance(default, list):
        return values
    return values[0] if values else default


def zoom_state(query: dict) -> dict[str, dict[str, list[float]]]:
    """{graph id: {"x": [lo, hi], "y": [lo, hi]}} from the query's z.<graph> keys."""
    out: dict[str, dict[str, list[float]]] = {}
    for key, raw in query.items():
        if not key.startswith(ZOOM_PREFIX):
            continue
        nums = []
        for p in str(raw).split(","):
            try:
                nums.append(float(p) if p != "" else math.nan)
            except ValueError:
                nums.append(math.nan)
        ranges = {}
        for axis, pair in (("x", nums[0:2]), ("y", nums[2:4])):
            if len(pair) == 2 and all(math.isfinite(v) for v in pair):
                ranges[axis] = pair
        if ranges:
            out[key[len(ZOOM_PREFIX) :]] = ranges
    return out


def apply_zoom(fig: go.Figure, ranges: dict[str, list[float]] | None) -> go.Figure:
    """A copy of `fig` showing `ranges` (as the URL keeps them); `fig` itself when none."""
    if not ranges:
        return fig
    out = go.Figure(fig)
    if "x" in ranges:
        out.update_xaxes(range=ranges["x"], autorange=False)
    if "y" in ranges:
        out.update_yaxes(range=ranges["y"], autorange=False)
    return out


def zoom_id(page: str) -> str:
    return f"{page}-zoom"


def zoom_store(page: str, query: dict) -> dcc.Store:
    """The zoom the page's URL holds, read by its figure callbacks."""
    return dcc.Store(id=zoom_id(page), data=zoom_state(query))


def zoomed(figures, graphs, zoom: dict | None) -> tuple:
    """`figures` (one per graph id of `graphs`, in order) shown at the URL's zoom."""
    return tuple(apply_zoom(f, (zoom or {}).get(g)) for f, g in zip(figures, graphs, strict=True))
