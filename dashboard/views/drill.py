"""From a chart's clicked mark to the samples behind it: `drill_params(graph_id,
click, figure)` turns Plotly's clickData into the sample table's filters (a step, a
length bin, a DP rank, a turn count), `drill_href` into the samples page's URL.

Which charts drill, and to what:

- x = step: dist-box, dist-percentiles, dist-tail, longtail-idle, longtail-finish,
  imb-ratio, imb-saving, mt-steps, lat-reward, lat-tools -> ``step``;
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


# charts whose clicked curve matters (the drill reads the figure for its curve names)
FIGURE_STATE = ("dist-heatmap", "dist-cdf", "dist-box", "dist-percentiles")
SORT_COLUMN = {"response": "response_len", "prompt": "prompt_len"}


def _curve_name(point: dict, figure: dict | None) -> str:
    traces = (figure or {}).get("data") or []
    curve = point.get("curveNumber", 0)
    return str(traces[curve].get("name", "")) if isinstance(curve, int) and 0 <= curve < len(traces) else ""


def drill_params(graph_id: str, click: dict | None, figure: dict | None = None, *, field: str = "response") -> dict:
    """The sample filters for a click on `graph_id` ({} when the click says nothing)."""
    points = (click or {}).get("points") or []
    if not points:
        return {}
    point = points[0]
    x = _int(point.get("x"))
    if graph_id in STEP_X:
        out = {"step": x} if x is not None else {}
        if out and graph_id in FIGURE_STATE and _curve_name(point, figure) == "max" and field in SORT_COLUMN:
            out.update(sort=SORT_COLUMN[field], order="desc")
        return out
    if graph_id == "dist-heatmap":
        out = {"step": x} if x is not None else {}
        if field == "response":
            found = _bin(point.get("y"), figure)
            if found is not None:
                out["response_len_min"], out["response_len_max"] = found
        return out
    if graph_id == "dist-cdf":
        curve = point.get("curveNumber", 0)
        traces = (figure or {}).get("data") or []
        name = str(traces[curve].get("name", "")) if 0 <= curve < len(traces) else ""
        step = _int(name[5:]) if name.startswith("step ") else None
        out = {"step": step} if step is not None else {}
        if field == "response" and x is not None:
            out["response_len_max"] = x + 1
        return out
    if graph_id == "imb-heatmap":
        y = _int(point.get("y"))
        out = {"step": x} if x is not None else {}
        if y is not None:
            out["dp_rank"] = y
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


def drill_href(trace_id, params: dict) -> str:
    return samples_href(trace_id, params)


def drill_location(page: str):
    """The hidden Location a page's drill callback navigates with."""
    from dash import dcc

    return dcc.Location(id=f"{page}-drill", refresh=True)


def register_drill(page: str, field_id: str | None = None) -> None:
    """One callback per chart of DRILL_GRAPHS[page] (a page may lack some of them): its
    click opens the samples page filtered to the clicked mark."""
    import dash
    from dash import Input, Output, State

    from dashboard.views.components import PAGE_TRACE_ID

    for graph_id in DRILL_GRAPHS[page]:
        states = [State(PAGE_TRACE_ID, "data")]
        if graph_id in FIGURE_STATE:
            states.append(State(graph_id, "figure"))
        if field_id:
            states.append(State(field_id, "value"))

        def _drill(click, trace_id, *rest, graph_id=graph_id):
            rest_list = list(rest)
            figure = rest_list.pop(0) if graph_id in FIGURE_STATE else None
            field = (rest_list.pop(0) if field_id else None) or "response"
            params = drill_params(graph_id, click, figure, field=field)
            if not params or trace_id is None:
                return dash.no_update
            return drill_href(trace_id, params)

        dash.callback(
            Output(f"{page}-drill", "href", allow_duplicate=True),
            Input(graph_id, "clickData"),
            *states,
            prevent_initial_call=True,
        )(_drill)
