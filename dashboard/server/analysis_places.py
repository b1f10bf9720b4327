"""Where each analysis shows, as the API's analysis registry says (`shows` of
GET /jobs/kinds): "overview" (its panel on a trace's Overview, whose result feeds the
headline cards), "compare" (Compare many), or a trace page (its path under
/traces/<id>/). A new analysis declares its places there, not in the pages.

Read once per app (it changes only with the server's code); nothing while the API
cannot answer (then asked again on the next call).
"""

from __future__ import annotations

import flask

from dashboard.api import session
from dashboard.api.client import ApiError

_EXTENSION = "rlvr_analysis_places"


def analyses_shown(place: str) -> tuple[str, ...]:
    """The analysis kinds shown in `place`, in the registry's order."""
    return tuple(kind for kind, places in _places().items() if place in places)


def _places() -> dict[str, tuple[str, ...]]:
    app = flask.current_app
    known = app.extensions.get(_EXTENSION)
    if known is None:
        try:
            answer = session.api().job_kinds()
        except ApiError:
            return {}
        known = {a["kind"]: tuple(a.get("shows") or ()) for a in answer.get("analyses", [])}
        app.extensions[_EXTENSION] = known
    return known
