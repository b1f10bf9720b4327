"""From a chart's clicked mark to the samples behind it: `drill_params(graph_id,
click, figure)` turns Plotly's clickData into the sample table's filters and sort (a
step, a length bin, a DP rank, a turn count, the truncated samples), `drill_href` into
the samples page's URL, which highlights the sample that was clicked (``sample=``).

What was clicked travels: a length (a max, p99 or p50 marker, a CDF point) sorts the
step's samples longest first below that length, so the sample at that length is the
first row and is highlighted; a length bin keeps its bounds; a rank or a turn count is a
filter; a truncation bar opens that step's truncated samples. Which charts drill:

- x = step: dist-box, dist-percentiles, dist-tail, longtail-idle, longtail-finish,
  imb-ratio, imb-saving, mt-steps, lat-reward, lat-tools -> ``step`` (dist-box's
  markers and dist-tail's bars as above; a click on a unified hover, which names every
  curve at that step, -> the step, longest first);
- dist-cdf (one curve per step, named "step N"; x = length) -> that ``step`` and
  ``response_len_max`` = x + 1 (the samples at or below the clicked length);
- dist-heatmap (step x length bin) -> ``step`` and the bin's ``response_len_min`` /
  ``response_len_max`` (response lengths only: other fields drill to the step);
- imb-heatmap (step x DP rank) -> ``step`` and ``dp_rank``;
- mt-counts (turns per trajectory; its first trace) -> ``num_turns``;
- the max marker of dist-box / dist-percentiles (the curve named "max") -> that step
  sorted by the length, longest first, so the longest sample is the table's first row
  (a link to its text when the trace has it).
"""

from __future__ import annotations

from bisect import bisect_right
from urllib.parse import urlencode

from dashboard.views.components import href

STEP_X = {
    "dist-box",
    "dist-percentiles",
    "dist-tail",
    "longtail-idle",
    "longtail-finish",
    "imb-ratio",
    "imb-saving",
    "mt-steps",
    "lat-reward",
    "lat-tools",
}
# graphs whose figure the drill reads (curve names, bin edges)
READS_FIGURE = {"dist-box", "dist-percentiles", "dist-tail", "dist-heatmap", "dist-cdf"}
LONGEST_FIRST = {"sort": "response_len", "order": "desc"}
# the key a drill adds when the first row of its table is the sample that was clicked
FOCUS = "_focus"
DRILL_GRAPHS = {
    "distributions": (
        "dist-box",
        "dist-heatmap",
        "dist-percentiles",
        "dist-tail",
        "dist-cdf",
        "longtail-idle",
        "longtail-finish",
    ),
    "imbalance": ("imb-heatmap", "imb-ratio", "imb-saving"),
    "multiturn": ("mt-counts", "mt-steps", "lat-reward", "lat-tools"),
}


def _int(value) -> int | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return int(round(f)) if f == f else None


def _values(array) -> list[float]:
    """A figure array as floats: a list, or plotly's typed-array form {dtype, bdata}."""
    if isinstance(array, dict) and "bdata" in array:
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=np.dtype(array["dtype"])).astype(float).tolist()
    return [float(e) for e in array]


def _bin(y, figure: dict | None) -> tuple[int, int] | None:
    """The [lo, hi) length bin holding `y`, from the heatmap's y edges."""
    try:
        edges = _values(figure["data"][0]["y"])  # type: ignore[index]
        y = float(y)
    except (TypeError, ValueError, KeyError, IndexError):
        return None
    if len(edges) < 2 or not edges[0] <= y <= edges[-1]:
        return None
    j = min(bisect_right(edges, y) - 1, len(edges) - 2)
    return int(edges[j]), max(int(edges[j + 1]), int(edges[j]) + 1)


def _curve(point: dict, figure: dict | None) -> str:
    traces = (figure or {}).get("data") or []
    i = point.get("curveNumber", 0)
    return str(traces[i].get("name") or "") if isinstance(i, int) and 0 <= i < len(traces) else ""


def _step_click(graph_id: str, points: list, figure: dict | None, field: str) -> dict:
    """A click on a per-step chart: the step, and what the clicked mark says."""
    point = points[0]
    x = _int(point.get("x"))
    if x is None:
        return {}
    out: dict = {"step": x}
    if graph_id not in READS_FIGURE or field not in ("response", "prompt"):
        return out
    curve = _curve(point, figure)
    if field == "prompt":  # the longest prompts of the step first
        return {**out, "sort": "prompt_len", "order": "desc"} if curve == "max" else out
    if len(points) > 1 or graph_id == "dist-percentiles":  # a unified hover: every curve at once
        return {**out, **LONGEST_FIRST, FOCUS: True}
    if graph_id == "dist-tail":
        if curve.startswith("truncated"):
            return {**out, "truncated": "true", **LONGEST_FIRST, FOCUS: True}
        return {**out, **LONGEST_FIRST, FOCUS: True}
    y = point.get("y")
    if curve in ("p50", "p90", "p99", "median") and isinstance(y, (int, float)):
        return {**out, "response_len_max": int(y) + 1, **LONGEST_FIRST, FOCUS: True}
    if curve == "max":
        return {**out, **LONGEST_FIRST, FOCUS: True}
    return out


def drill_params(graph_id: str, click: dict | None, figure: dict | None = None, *, field: str = "response") -> dict:
    """The sample filters and sort for a click on `graph_id` ({} when the click says
    nothing); FOCUS when the first row is the clicked sample."""
    points = (click or {}).get("points") or []
    if not points:
        return {}
    point = points[0]
    x = _int(point.get("x"))
    if graph_id in STEP_X:
        return _step_click(graph_id, points, figure, field)
    if graph_id == "dist-heatmap":
        out: dict[str, object] = {"step": x} if x is not None else {}
        if field == "response":
            found = _bin(point.get("y"), figure)
            if found is not None:
                out["response_len_min"], out["response_len_max"] = found
                out.update(LONGEST_FIRST)
        return out
    if graph_id == "dist-cdf":
        name = _curve(point, figure)
        step = _int(name[5:]) if name.startswith("step ") else None
        out = {"step": step} if step is not None else {}
        if field == "response" and x is not None:
            out.update({"response_len_max": x + 1, **LONGEST_FIRST, FOCUS: True})
        return out
    if graph_id == "imb-heatmap":
        y = _int(point.get("y"))
        out = {"step": x} if x is not None else {}
        if y is not None:
            out.update({"dp_rank": y, **LONGEST_FIRST})
        return out
    if graph_id == "mt-counts":
        if point.get("curveNumber", 0) == 0 and x is not None:
            return {"num_turns": x}
        return {}
    return {}


def samples_href(trace_id, params: dict) -> str:
    """The samples page of `trace_id` with `params` (None / "" dropped) in its query."""
    clean = {k: v for k, v in params.items() if v is not None and v != ""}
    if clean.get("sort") == "step" and clean.get("order") == "asc":
        clean.pop("sort")
        clean.pop("order")
    if clean.get("page") == 0:
        clean.pop("page")
    query = urlencode(clean)
    return href(f"/traces/{trace_id}/samples" + (f"?{query}" if query else ""))


def focused(trace_id, params: dict, first_sample) -> dict:
    """`params` with ``sample`` = the first row of its table (`first_sample(trace_id,
    filters...)` -> "step.group.sample" or None) when the drill focuses a sample."""
    params = dict(params)
    if params.pop(FOCUS, False):
        key = first_sample(trace_id, dict(params))
        if key:
            params["sample"] = key
    return params


def drill_href(trace_id, params: dict) -> str:
    return samples_href(trace_id, params)


def drill_location(page: str):
    """The hidden Location a page's drill callback navigates with."""
    from dash import dcc

    return dcc.Location(id=f"{page}-drill", refresh=True)


def _first_sample(trace_id, params: dict) -> str | None:
    from dashboard.api import session
    from dashboard.api.client import ApiError

    filters = {k: v for k, v in params.items() if k not in ("sort", "order", "sample")}
    try:
        page = session.api().samples(
            trace_id, limit=1, sort=params.get("sort", "step"), order=params.get("order", "asc"), **filters
        )
    except ApiError:
        return None
    items = page.get("items") or []
    return f"{items[0]['step']}.{items[0]['group_idx']}.{items[0]['sample_idx']}" if items else None


def register_drill(page: str, field_id: str | None = None) -> None:
    """One callback per chart of DRILL_GRAPHS[page] (a page may lack some of them): its
    click opens the samples page filtered to the clicked mark, that sample highlighted."""
    import dash
    from dash import Input, Output, State

    from dashboard.views.components import PAGE_TRACE_ID

    for graph_id in DRILL_GRAPHS[page]:
        states = [State(PAGE_TRACE_ID, "data")]
        if graph_id in READS_FIGURE:
            states.append(State(graph_id, "figure"))
        if field_id:
            states.append(State(field_id, "value"))

        def _drill(click, trace_id, *rest, graph_id=graph_id):
            rest_list = list(rest)
            figure = rest_list.pop(0) if graph_id in READS_FIGURE else None
            field = (rest_list.pop(0) if field_id else None) or "response"
            params = drill_params(graph_id, click, figure, field=field)
            if not params or trace_id is None:
                return dash.no_update
            return drill_href(trace_id, focused(trace_id, params, _first_sample))

        dash.callback(
            Output(f"{page}-drill", "href", allow_duplicate=True),
            Input(graph_id, "clickData"),
            *states,
            prevent_initial_call=True,
        )(_drill)
