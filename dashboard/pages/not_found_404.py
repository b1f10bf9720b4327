"""Unknown paths."""

import dash
from dash import dcc, html

from dashboard.views.components import href

dash.register_page(__name__, path="/404", name="Not found")


def layout(**_):
    return html.Div(
        className="page narrow",
        children=[
            html.H2("Page not found"),
            dcc.Link("Back to the traces", href=href("/traces")),
        ],
    )
