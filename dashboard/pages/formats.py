"""The accepted trace formats: docs/formats.md of this installation, rendered (the upload
page and the server's error messages point here). Needs no sign-in.

Ids: formats-doc.
"""

from __future__ import annotations

from pathlib import Path

import dash
from dash import dcc, html

dash.register_page(__name__, path="/formats", name="Trace formats", title="Trace formats · RLVR Explorer")

DOC = Path(__file__).resolve().parents[2] / "docs" / "formats.md"


def layout(**_):
    try:
        text = DOC.read_text(encoding="utf-8")
    except OSError:
        text = (
            "# Accepted trace formats\n\nThis installation has no copy of `docs/formats.md` "
            "(it ships with the project's source, in the `docs` folder)."
        )
    return html.Div(dcc.Markdown(text, id="formats-doc", link_target="_blank"), className="page")
